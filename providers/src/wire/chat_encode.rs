//! OpenAI Chat Completions request encoder: `POST {base_url}/chat/completions` with
//! `stream: true` and `stream_options.include_usage` (usage arrives in a last chunk).
//! See <https://platform.openai.com/docs/api-reference/chat/create>.

use super::EncodedRequest;
use super::common::{
    TOOL_ERROR_PREFIX, arguments_text, data_url, images, interrupted_reasoning, user_text,
    wire_tool_name,
};
use super::ids::WireIds;
use crate::ModelRequest;
use foya_protocol::{AssistantMessage, AttachmentRef, Input, Message};
use serde_json::{Value, json};

/// Encodes `request` as a streaming Chat Completions body.
///
/// Reasoning is not sent back, except DeepSeek-style `reasoning_content` on assistant
/// turns that carry tool calls (those servers require it) and the reasoning of an
/// interrupted message, sent once as marked text. Failed tool results are prefixed with
/// `Error: ` (the protocol has no error flag). `ToolCall::extra` fields are merged into
/// the call object unchanged (e.g. Gemini `extra_content.google.thought_signature`).
/// A call whose tool name the API would refuse (empty, or not `^[a-zA-Z0-9_-]{1,64}$`) is
/// sent as `invalid_tool_name` (`common::wire_tool_name`); the log keeps the original.
/// Tool-call ids are sent as `ids::WireIds` maps them (valid and unique in the request).
///
/// A `tool` message carries text only, so the images of tool results travel in one
/// `user` message right after the run of `tool` messages they belong to (the API wants
/// every result of a step right after its calls): for each result with images, a text
/// part `[images of tool call ID]` (the call id as sent) and then its `image_url` parts.
#[must_use]
pub(crate) fn encode(request: &ModelRequest) -> EncodedRequest {
    let mut ids = WireIds::new(request);
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    // Image parts of the tool results since the last non-tool message.
    let mut tool_images: Vec<Value> = Vec::new();
    for message in &request.messages {
        if !matches!(message, Message::Tool(_)) {
            flush_tool_images(&mut tool_images, &mut messages);
        }
        match message {
            Message::System { text } => messages.push(json!({"role": "system", "content": text})),
            Message::User(input) => messages.push(user(input, request)),
            Message::Assistant(msg) => messages.push(assistant(msg, &mut ids)),
            Message::Tool(t) => {
                let content = if t.is_error {
                    format!("{TOOL_ERROR_PREFIX}{}", t.content)
                } else {
                    t.content.clone()
                };
                let id = ids.result(t.tool_call_id.as_str());
                if !t.images.is_empty() {
                    let label = format!("[images of tool call {id}]");
                    tool_images.push(json!({"type": "text", "text": label}));
                    tool_images.extend(image_parts(&t.images, request));
                }
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
        }
    }
    flush_tool_images(&mut tool_images, &mut messages);
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
    }
    if let Some(max) = request.max_output_tokens {
        body["max_completion_tokens"] = json!(max);
    }
    EncodedRequest {
        path: "/chat/completions",
        headers: vec![("content-type", "application/json".into())],
        body,
    }
}

/// Sends the collected image parts of tool results as one `user` message.
fn flush_tool_images(parts: &mut Vec<Value>, messages: &mut Vec<Value>) {
    if !parts.is_empty() {
        messages.push(json!({"role": "user", "content": std::mem::take(parts)}));
    }
}

fn user(input: &Input, request: &ModelRequest) -> Value {
    let text = user_text(input);
    if input.images.is_empty() {
        return json!({"role": "user", "content": text});
    }
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(json!({"type": "text", "text": text}));
    }
    parts.extend(image_parts(&input.images, request));
    json!({"role": "user", "content": parts})
}

/// `image_url` content parts of `refs` (a text part for one that is unavailable).
fn image_parts(refs: &[AttachmentRef], request: &ModelRequest) -> Vec<Value> {
    images(refs, request)
        .into_iter()
        .map(|image| match image {
            Ok(img) => json!({"type": "image_url", "image_url": {"url": data_url(img)}}),
            Err(missing) => json!({"type": "text", "text": missing}),
        })
        .collect()
}

fn assistant<'a>(msg: &'a AssistantMessage, ids: &mut WireIds<'a>) -> Value {
    let mut text = String::new();
    if let Some(r) = interrupted_reasoning(msg) {
        text.push_str(&r);
    }
    if !msg.text.is_empty() {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&msg.text);
    }
    let mut out = json!({"role": "assistant", "content": if text.is_empty() && !msg.tool_calls.is_empty() { Value::Null } else { Value::String(text) }});
    let wire_ids = ids.calls(&msg.tool_calls);
    if !msg.tool_calls.is_empty() {
        out["tool_calls"] = msg
            .tool_calls
            .iter()
            .zip(wire_ids)
            .map(|(c, id)| {
                let mut call = json!({"id": id, "type": "function",
                    "function": {"name": wire_tool_name(&c.name), "arguments": arguments_text(&c.arguments)}});
                if let (Some(Value::Object(extra)), Some(obj)) = (&c.extra, call.as_object_mut()) {
                    for (k, v) in extra {
                        obj.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                call
            })
            .collect();
        if !msg.interrupted && !msg.reasoning.is_empty() {
            out["reasoning_content"] = json!(msg.reasoning);
        }
    }
    out
}

//! Anthropic Messages request encoder: `POST {base_url}/v1/messages` with
//! `anthropic-version: 2023-06-01`, `stream: true` and a `max_tokens` (required; 8192 when
//! unset). See <https://docs.anthropic.com/en/api/messages>.

use super::EncodedRequest;
use super::common::{images, interrupted_reasoning, user_text, wire_tool_name};
use super::ids::WireIds;
use crate::ModelRequest;
use foya_protocol::{AssistantMessage, AttachmentRef, Message, ReasoningPart};
use serde_json::{Value, json};

/// `max_tokens` sent when the request sets none.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Encodes `request` as a streaming Messages body.
///
/// Consecutive messages of one role are merged (the API wants alternation; tool results
/// travel as `tool_result` blocks of a user message, a result with images as a
/// `tool_result` whose content is its text block then its `image` blocks). Thinking blocks with their
/// signature and redacted thinking go back verbatim on assistant turns, as the API
/// requires; other reasoning is not sent, except an interrupted message's, once as text.
/// A call whose tool name the API would refuse is sent as `invalid_tool_name`
/// (`common::wire_tool_name`). `tool_use` / `tool_result` ids are sent as
/// `ids::WireIds` maps them (matching `^[a-zA-Z0-9_-]+$` and unique in the request, as
/// the API requires).
#[must_use]
pub(crate) fn encode(request: &ModelRequest) -> EncodedRequest {
    let mut ids = WireIds::new(request);
    let mut system = request.system.clone();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    };
    for message in &request.messages {
        match message {
            Message::System { text } => {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(text);
            }
            Message::User(input) => {
                let mut blocks = Vec::new();
                let text = user_text(input);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                blocks.extend(image_blocks(&input.images, request));
                push("user", blocks);
            }
            Message::Assistant(msg) => push("assistant", assistant(msg, &mut ids)),
            Message::Tool(t) => {
                let id = ids.result(t.tool_call_id.as_str());
                let content = if t.images.is_empty() {
                    json!(t.content)
                } else {
                    let mut blocks = vec![json!({"type": "text", "text": t.content})];
                    blocks.extend(image_blocks(&t.images, request));
                    Value::Array(blocks)
                };
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": id, "content": content});
                if t.is_error {
                    block["is_error"] = json!(true);
                }
                push("user", vec![block]);
            }
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    EncodedRequest {
        path: "/v1/messages",
        headers: vec![
            ("content-type", "application/json".into()),
            ("anthropic-version", "2023-06-01".into()),
        ],
        body,
    }
}

/// `image` blocks of `refs` (a text block for one that is unavailable).
fn image_blocks(refs: &[AttachmentRef], request: &ModelRequest) -> Vec<Value> {
    images(refs, request)
        .into_iter()
        .map(|image| match image {
            Ok(img) => json!({"type": "image", "source": {
                "type": "base64", "media_type": img.media_type, "data": img.base64}}),
            Err(missing) => json!({"type": "text", "text": missing}),
        })
        .collect()
}

fn assistant<'a>(msg: &'a AssistantMessage, ids: &mut WireIds<'a>) -> Vec<Value> {
    let mut blocks = Vec::new();
    if !msg.interrupted {
        for part in &msg.reasoning_parts {
            match part {
                ReasoningPart::Thinking {
                    text,
                    signature: Some(sig),
                } if !sig.is_empty() => {
                    blocks.push(json!({"type": "thinking", "thinking": text, "signature": sig}));
                }
                ReasoningPart::Thinking { .. } => {}
                ReasoningPart::Redacted { data } => {
                    blocks.push(json!({"type": "redacted_thinking", "data": data}))
                }
            }
        }
    }
    if let Some(r) = interrupted_reasoning(msg) {
        blocks.push(json!({"type": "text", "text": r}));
    }
    if !msg.text.is_empty() {
        blocks.push(json!({"type": "text", "text": msg.text}));
    }
    let wire_ids = ids.calls(&msg.tool_calls);
    for (call, id) in msg.tool_calls.iter().zip(wire_ids) {
        let input = if call.arguments.is_object() {
            call.arguments.clone()
        } else {
            json!({})
        };
        blocks.push(
            json!({"type": "tool_use", "id": id, "name": wire_tool_name(&call.name), "input": input}),
        );
    }
    blocks
}

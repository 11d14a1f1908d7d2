//! OpenAI Responses request encoder: `POST {base_url}/responses` with `stream: true` and
//! `store: false` (stateless: the whole history is sent as input items).
//! See <https://platform.openai.com/docs/api-reference/responses/create>.

use super::EncodedRequest;
use super::common::{
    TOOL_ERROR_PREFIX, arguments_text, data_url, images, interrupted_reasoning, user_text,
    wire_tool_name,
};
use super::ids::WireIds;
use crate::ModelRequest;
use foya_protocol::{AttachmentRef, Message};
use serde_json::{Value, json};

/// Encodes `request` as a streaming Responses body. Assistant text becomes an
/// `output_text` message item, tool calls `function_call` items, tool results
/// `function_call_output` items (failed ones prefixed `Error: `; a result with images
/// has an `output` array: its `input_text` then its `input_image` items), images
/// `input_image`.
/// A call whose tool name the API would refuse is sent as `invalid_tool_name`
/// (`common::wire_tool_name`). `call_id`s are sent as `ids::WireIds` maps them.
#[must_use]
pub(crate) fn encode(request: &ModelRequest) -> EncodedRequest {
    let mut ids = WireIds::new(request);
    let mut input: Vec<Value> = Vec::new();
    let mut instructions = request.system.clone();
    for message in &request.messages {
        match message {
            Message::System { text } => {
                if !instructions.is_empty() {
                    instructions.push_str("\n\n");
                }
                instructions.push_str(text);
            }
            Message::User(user) => {
                let mut content = Vec::new();
                let text = user_text(user);
                if !text.is_empty() {
                    content.push(json!({"type": "input_text", "text": text}));
                }
                content.extend(image_items(&user.images, request));
                input.push(json!({"type": "message", "role": "user", "content": content}));
            }
            Message::Assistant(msg) => {
                let mut text = interrupted_reasoning(msg).unwrap_or_default();
                if !msg.text.is_empty() {
                    if !text.is_empty() {
                        text.push_str("\n\n");
                    }
                    text.push_str(&msg.text);
                }
                if !text.is_empty() {
                    input.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}));
                }
                let wire_ids = ids.calls(&msg.tool_calls);
                for (call, id) in msg.tool_calls.iter().zip(wire_ids) {
                    input.push(json!({"type": "function_call", "call_id": id,
                        "name": wire_tool_name(&call.name), "arguments": arguments_text(&call.arguments)}));
                }
            }
            Message::Tool(t) => {
                let output = if t.is_error {
                    format!("{TOOL_ERROR_PREFIX}{}", t.content)
                } else {
                    t.content.clone()
                };
                let id = ids.result(t.tool_call_id.as_str());
                let output = if t.images.is_empty() {
                    json!(output)
                } else {
                    let mut items = vec![json!({"type": "input_text", "text": output})];
                    items.extend(image_items(&t.images, request));
                    Value::Array(items)
                };
                input
                    .push(json!({"type": "function_call_output", "call_id": id, "output": output}));
            }
        }
    }
    let mut body = json!({"model": request.model, "input": input, "stream": true, "store": false});
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}))
            .collect();
    }
    if let Some(max) = request.max_output_tokens {
        body["max_output_tokens"] = json!(max);
    }
    EncodedRequest {
        path: "/responses",
        headers: vec![("content-type", "application/json".into())],
        body,
    }
}

/// `input_image` content items of `refs` (an `input_text` for one that is unavailable).
fn image_items(refs: &[AttachmentRef], request: &ModelRequest) -> Vec<Value> {
    images(refs, request)
        .into_iter()
        .map(|image| match image {
            Ok(img) => json!({"type": "input_image", "image_url": data_url(img)}),
            Err(missing) => json!({"type": "input_text", "text": missing}),
        })
        .collect()
}

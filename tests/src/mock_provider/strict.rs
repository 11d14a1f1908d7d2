//! The request validation real providers do that the mock reproduces: tool names (of
//! the offered tools and of the calls replayed in the history) must match
//! `^[a-zA-Z0-9_-]{1,64}$`, as OpenAI and Anthropic document and enforce; a request that
//! breaks it gets the vendor's 400 `invalid_request_error`, so a client that replays an
//! invalid name fails here as it would against the real API. Anthropic's tool-call id
//! rules too (`tool_ids.rs`): `tool_use.id` and `tool_result.tool_use_id` match
//! `^[a-zA-Z0-9_-]+$`, `tool_use` ids are unique in the request, and each `tool_result`
//! answers a `tool_use` of the previous message.

use super::MockResponse;
use serde_json::{Value, json};

/// Whether `name` is a tool name the APIs accept.
fn valid(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The JSON path (vendor notation) of the first invalid tool name in `body`.
fn first_invalid(path: &str, body: &Value) -> Option<String> {
    let items = |key: &str| {
        body.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().enumerate().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let mut names: Vec<(String, Option<&str>)> = Vec::new();
    if path.ends_with("/chat/completions") {
        for (i, tool) in items("tools") {
            names.push((
                format!("tools[{i}].function.name"),
                tool.pointer("/function/name").and_then(Value::as_str),
            ));
        }
        for (i, msg) in items("messages") {
            for (j, call) in msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                names.push((
                    format!("messages[{i}].tool_calls[{j}].function.name"),
                    call.pointer("/function/name").and_then(Value::as_str),
                ));
            }
        }
    } else if path.ends_with("/messages") {
        for (i, tool) in items("tools") {
            names.push((
                format!("tools.{i}.name"),
                tool.get("name").and_then(Value::as_str),
            ));
        }
        for (i, msg) in items("messages") {
            for (j, block) in msg
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if block.get("type").and_then(Value::as_str) == Some("tool_use") {
                    names.push((
                        format!("messages.{i}.content.{j}.tool_use.name"),
                        block.get("name").and_then(Value::as_str),
                    ));
                }
            }
        }
    } else {
        for (i, tool) in items("tools") {
            names.push((
                format!("tools[{i}].name"),
                tool.get("name").and_then(Value::as_str),
            ));
        }
        for (i, item) in items("input") {
            if item.get("type").and_then(Value::as_str) == Some("function_call") {
                names.push((
                    format!("input[{i}].name"),
                    item.get("name").and_then(Value::as_str),
                ));
            }
        }
    }
    names
        .into_iter()
        .find(|(_, name)| !name.is_some_and(valid))
        .map(|(at, _)| at)
}

/// The 400 a real provider answers `body` (sent to `path`) with, if it breaks a rule.
pub(super) fn check(path: &str, body: &Value) -> Option<MockResponse> {
    if path.ends_with("/messages")
        && let Some(message) = super::tool_ids::anthropic_violation(body)
    {
        let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
        return Some(MockResponse::json(400, &error));
    }
    let at = first_invalid(path, body)?;
    let error = if path.ends_with("/messages") {
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": format!("{at}: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")}})
    } else {
        json!({"error": {"message": format!("Invalid '{at}': string does not match pattern. \
            Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."),
            "type": "invalid_request_error", "param": at, "code": "invalid_value"}})
    };
    Some(MockResponse::json(400, &error))
}

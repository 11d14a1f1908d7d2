//! Anthropic's rules on tool-call ids, as the Messages API enforces them (the messages
//! are the API's own): every `tool_use.id` and `tool_result.tool_use_id` matches
//! `^[a-zA-Z0-9_-]+$` ("messages.1.content.1.tool_use.id: String should match pattern
//! …"), `tool_use` ids are unique within the request ("messages.3.content.0: `tool_use`
//! ids must be unique"), and every `tool_result` answers a `tool_use` of the previous
//! message ("unexpected `tool_use_id` found in `tool_result` blocks").

use serde_json::Value;
use std::collections::HashSet;

const PATTERN: &str = "^[a-zA-Z0-9_-]+$";

fn valid(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The error message of the first rule `body` breaks, if any.
pub(super) fn anthropic_violation(body: &Value) -> Option<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut previous_uses: HashSet<&str> = HashSet::new();
    for (i, msg) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut uses: HashSet<&str> = HashSet::new();
        for (j, block) in msg
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                    if !valid(id) {
                        return Some(format!(
                            "messages.{i}.content.{j}.tool_use.id: String should match pattern '{PATTERN}'"
                        ));
                    }
                    if !seen.insert(id) {
                        return Some(format!(
                            "messages.{i}.content.{j}: `tool_use` ids must be unique"
                        ));
                    }
                    uses.insert(id);
                }
                Some("tool_result") => {
                    let id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if !valid(id) {
                        return Some(format!(
                            "messages.{i}.content.{j}.tool_result.tool_use_id: String should match pattern '{PATTERN}'"
                        ));
                    }
                    if !previous_uses.contains(id) {
                        return Some(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in \
                             `tool_result` blocks: {id}. Each `tool_result` block must have a \
                             corresponding `tool_use` block in the previous message."
                        ));
                    }
                }
                _ => {}
            }
        }
        previous_uses = uses;
    }
    None
}

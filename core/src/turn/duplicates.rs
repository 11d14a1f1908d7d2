//! Repeated tool-call ids within one model response.
//!
//! Behaviour: the first call with an id runs as usual; every later call of the same
//! response with that id is renamed to a fresh id (`<id>_dup<n>`, n = 2, 3, …, skipping
//! ids the response already uses, at most `MAX_ID_CHARS` characters) in the persisted
//! `assistant_message`, and answered with an `is_error` result without running.
//! Renaming keeps the history valid for every wire format: Anthropic rejects repeated
//! `tool_use` ids, and OpenAI Chat / Responses pair each result with exactly one call by
//! id, so a repeated id could not be sent back. Not running the repeat avoids running a
//! side effect twice when a provider or proxy echoed a call; the model can call again.

use super::protection::CallVerdict;
use foya_protocol::{ToolCall, ToolCallId};
use std::collections::HashSet;

/// Longest id a renamed call gets (OpenAI Chat rejects tool-call ids over 40 characters).
pub(crate) const MAX_ID_CHARS: usize = 40;

/// A call whose id repeated an earlier call's id, and the id it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// Index of the call in the response.
    pub index: usize,
    /// The repeated id the model sent.
    pub original: ToolCallId,
}

/// Renames repeated ids in `calls` (in place) and returns the renamed calls in order.
pub(crate) fn rename_repeated_ids(calls: &mut [ToolCall]) -> Vec<Renamed> {
    let mut taken: HashSet<String> = calls.iter().map(|c| c.id.0.clone()).collect();
    let mut seen = HashSet::new();
    let mut renamed = Vec::new();
    for (index, call) in calls.iter_mut().enumerate() {
        if seen.insert(call.id.0.clone()) {
            continue;
        }
        let fresh = (2u32..)
            .map(|n| fresh_id(&call.id.0, n))
            .find(|candidate| !taken.contains(candidate))
            .unwrap_or_default();
        taken.insert(fresh.clone());
        let original = std::mem::replace(&mut call.id, ToolCallId(fresh));
        renamed.push(Renamed { index, original });
    }
    renamed
}

/// `<id>_dup<n>`, the id cut so the whole stays within [`MAX_ID_CHARS`].
fn fresh_id(id: &str, n: u32) -> String {
    let suffix = format!("_dup{n}");
    let keep = MAX_ID_CHARS.saturating_sub(suffix.chars().count());
    let base: String = id.chars().take(keep).collect();
    format!("{base}{suffix}")
}

/// The verdict for call `index`: a renamed repeat is blocked ("not run"), others keep
/// `verdict`.
pub(crate) fn verdict_for(renamed: &[Renamed], index: usize, verdict: CallVerdict) -> CallVerdict {
    match renamed.iter().find(|r| r.index == index) {
        Some(r) => CallVerdict::Block(format!(
            "not run: this response already has a tool call with id {:?}; call the tool \
             again if this call is needed",
            r.original.0
        )),
        None => verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: ToolCallId::new(id),
            name: "echo".into(),
            arguments: serde_json::json!({}),
            extra: None,
        }
    }

    fn ids(calls: &[ToolCall]) -> Vec<&str> {
        calls.iter().map(|c| c.id.0.as_str()).collect()
    }

    #[test]
    fn repeats_get_fresh_ids_that_collide_with_nothing() {
        let mut calls = vec![call("a"), call("a"), call("a_dup2"), call("b"), call("a")];
        let renamed = rename_repeated_ids(&mut calls);
        assert_eq!(ids(&calls), vec!["a", "a_dup3", "a_dup2", "b", "a_dup4"]);
        assert_eq!(
            renamed,
            vec![
                Renamed {
                    index: 1,
                    original: ToolCallId::new("a")
                },
                Renamed {
                    index: 4,
                    original: ToolCallId::new("a")
                },
            ]
        );
    }

    #[test]
    fn unique_ids_are_untouched_and_long_ids_stay_within_the_limit() {
        let mut calls = vec![call("a"), call("b")];
        assert_eq!(rename_repeated_ids(&mut calls), Vec::new());
        assert_eq!(ids(&calls), vec!["a", "b"]);
        let long = "x".repeat(40);
        let mut calls = vec![call(&long), call(&long)];
        rename_repeated_ids(&mut calls);
        assert_eq!(calls[1].id.0, format!("{}_dup2", "x".repeat(35)));
    }
}

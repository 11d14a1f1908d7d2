//! Owns the pure halves of compaction: the summarisation request's messages and what a
//! compaction checkpoint keeps verbatim. When and how to run them is the turn's job.

use super::compile::message_tokens;
use super::{FILE_TOOLS, history};
use foya_protocol::{AssistantMessage, Event, Input, Message};
use std::collections::BTreeSet;

/// System prompt for the summarisation request.
pub const COMPACTION_SYSTEM_PROMPT: &str = "You summarise a coding agent's conversation so the \
agent can continue the task from the summary alone. Be factual and specific; keep exact file \
paths, names, commands and error messages. Do not call tools.";

/// The final user instruction of a summarisation request.
pub const COMPACTION_INSTRUCTION: &str = "Write a checkpoint summary of the conversation above \
so the work can continue without it. Use these headings:\n\
## Task\nWhat the user asked for, including constraints and preferences.\n\
## Decisions\nWhat was decided and why.\n\
## Files touched\nEach file read, created or changed, with what was done to it.\n\
## Open items\nWhat remains to do, next steps, and unresolved errors or questions.";

/// Marker placed first when older messages were left out of a summarisation request.
pub const OMITTED_NOTE: &str = "[Earlier messages were omitted to fit the summarisation request.]";

/// Messages of a summarisation request: the effective history (see [`history`]),
/// shrunk oldest-first — whole units, a user message or an assistant message with its
/// tool results, so the result stays well-formed — until it and the final
/// [`COMPACTION_INSTRUCTION`] user message fit `budget_tokens` (estimated). When
/// messages were dropped, or the first kept one is not a user message, an
/// [`OMITTED_NOTE`] user message opens the list. The instruction is always last.
#[must_use]
pub fn compaction_request(history_events: &[Event], budget_tokens: u64) -> Vec<Message> {
    let messages = history(history_events);
    let instruction = Message::User(Input::text(COMPACTION_INSTRUCTION));
    let note = Message::User(Input::text(OMITTED_NOTE));
    let fixed = message_tokens(&instruction) + message_tokens(&note);
    let units = units(&messages);
    let mut total: u64 = messages.iter().map(message_tokens).sum::<u64>() + fixed;
    let mut first = 0;
    while first < units.len() && total > budget_tokens {
        total -= units[first]
            .iter()
            .map(|&i| message_tokens(&messages[i]))
            .sum::<u64>();
        first += 1;
    }
    let start = units
        .get(first)
        .and_then(|u| u.first().copied())
        .unwrap_or(messages.len());
    let mut out = Vec::new();
    if start > 0 || !matches!(messages.get(start), Some(Message::User(_)) | None) {
        out.push(note);
    }
    out.extend(messages[start..].iter().cloned());
    out.push(instruction);
    out
}

/// Whether summarising the history can make a request meaningfully smaller: the history
/// (the part a checkpoint replaces) must hold at least `min_saving_pct` % of the
/// request's estimated `total_tokens`. When the fixed part (system prompt, tools)
/// dominates, no summary saves enough, and a compaction would only spend a request.
#[must_use]
pub fn can_shrink(total_tokens: u64, history_tokens: u64, min_saving_pct: u64) -> bool {
    history_tokens.saturating_mul(100) >= total_tokens.saturating_mul(min_saving_pct)
}

/// Indices of `messages` grouped into droppable units: an assistant message with the
/// tool results after it, or any other single message.
fn units(messages: &[Message]) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match (m, units.last_mut()) {
            (Message::Tool(_), Some(unit)) => unit.push(i),
            _ => units.push(vec![i]),
        }
    }
    units
}

/// What a compaction checkpoint keeps verbatim after its summary, chosen from the
/// effective history newest first within `keep_budget_tokens` (estimated):
/// - the most recent user messages, contiguous from the newest (the first that does not
///   fit stops the run);
/// - for each path touched by [`FILE_TOOLS`], the latest call's result (successful
///   ones only), kept as an assistant message holding just that call followed by its
///   result — so there is never a dangling tool call nor an orphan result.
///
/// Kept messages are returned in their original order. Reasoning and answer text of the
/// kept assistant calls are not kept.
#[must_use]
pub fn checkpoint_kept(history_events: &[Event], keep_budget_tokens: u64) -> Vec<Message> {
    let messages = history(history_events);
    let mut picked: Vec<(usize, Vec<Message>)> = Vec::new();
    let mut used = 0u64;
    let mut users_open = true;
    let mut seen_paths = BTreeSet::new();
    for (i, m) in messages.iter().enumerate().rev() {
        let candidate = match m {
            Message::User(_) if users_open => vec![m.clone()],
            Message::Tool(result) if !result.is_error => {
                let Some(call) = messages[..i].iter().rev().find_map(|m| match m {
                    Message::Assistant(a) => {
                        a.tool_calls.iter().find(|c| c.id == result.tool_call_id)
                    }
                    _ => None,
                }) else {
                    continue;
                };
                let Some(path) = call.arguments.get("path").and_then(|p| p.as_str()) else {
                    continue;
                };
                if !FILE_TOOLS.contains(&call.name.as_str()) || !seen_paths.insert(path.to_owned())
                {
                    continue;
                }
                let assistant = AssistantMessage {
                    tool_calls: vec![call.clone()],
                    finish_reason: Some(foya_protocol::FinishReason::ToolCalls),
                    ..AssistantMessage::default()
                };
                vec![Message::Assistant(assistant), m.clone()]
            }
            _ => continue,
        };
        let cost: u64 = candidate.iter().map(message_tokens).sum();
        if used + cost <= keep_budget_tokens {
            used += cost;
            picked.push((i, candidate));
        } else if matches!(m, Message::User(_)) {
            users_open = false;
        }
    }
    picked.sort_by_key(|(i, _)| *i);
    picked.into_iter().flat_map(|(_, m)| m).collect()
}

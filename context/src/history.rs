//! Owns the history fold: session events → the well-formed message list sent to the
//! model, and the set of paths the session's file tools touched.

use super::FILE_TOOLS;
use foya_protocol::{
    AssistantMessage, Event, EventKind, HookDecision, Input, Message, PageElement, ToolCallId,
    ToolMessage,
};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Text that opens the user message carrying a compaction checkpoint's summary.
pub const CHECKPOINT_PREFIX: &str =
    "[Compaction checkpoint] The earlier conversation was summarised to save context:";

/// Text that opens the user message carrying a hook's additional context
/// (`[hook context: SessionStart]`).
pub const HOOK_CONTEXT_PREFIX: &str = "[hook context:";

/// Content of the synthetic result for a tool call that has none in the log.
pub const MISSING_RESULT: &str = "no result was recorded for this call";

/// The effective history of a session's events (in seq order), as model messages:
///
/// 1. Start after the latest `compaction_checkpoint`: a user message
///    `"{CHECKPOINT_PREFIX}\n\n{summary}"`, then the checkpoint's `kept` messages.
/// 2. `user_message` → [`Message::User`]: selected page elements are appended to the
///    text as a `<selected_elements>` block (url, selector, text) and cleared; image refs
///    stay attachment refs; `command` is cleared (the stored text is the expanded prompt);
///    a user message left with no text and no image is skipped.
/// 3. `assistant_message` → [`Message::Assistant`] with `reasoning` emptied. For an
///    `interrupted` message that is the last assistant message, the reasoning is kept
///    once, as text every wire format can carry: its `text` becomes
///    [`interrupted_context_text`] followed by the partial answer (`interrupted` stays
///    set). A later assistant message makes it go. `reasoning_parts` are kept (the
///    protocol needs them back). An assistant message left empty is skipped.
/// 4. `tool_message` → [`Message::Tool`].
/// 5. `hook_ran`: a `UserPromptSubmit` block removes the prompt; context of a
///    `SessionStart` or `UserPromptSubmit` hook is a user message ([`HOOK_CONTEXT_PREFIX`]).
///
/// Then it is made well-formed: each assistant tool call is followed, in call order and
/// directly, by exactly one result from the tool messages before the next user or
/// assistant message; a missing result becomes `is_error` [`MISSING_RESULT`]; duplicate
/// and orphan results are dropped.
#[must_use]
pub fn history(events: &[Event]) -> Vec<Message> {
    let start = events
        .iter()
        .rposition(|e| matches!(e.kind, EventKind::CompactionCheckpoint { .. }))
        .unwrap_or(0);
    let mut raw = Vec::new();
    for event in &events[start..] {
        match raw_message(&event.kind) {
            Raw::Checkpoint(messages) => raw = messages,
            Raw::Message(m) => raw.push(m),
            Raw::RetractPrompt => retract_prompt(&mut raw),
            Raw::None => {}
        }
    }
    let last_assistant = raw.iter().rposition(|m| matches!(m, Message::Assistant(_)));
    fold_raw(raw, last_assistant)
}

/// What one event adds to the raw (unfolded) message list.
pub(super) enum Raw {
    /// A compaction checkpoint: the list starts over with these messages.
    Checkpoint(Vec<Message>),
    /// One more message.
    Message(Message),
    /// A hook blocked the prompt: take it back out ([`retract_prompt`]).
    RetractPrompt,
    /// Nothing.
    None,
}

/// The raw message an event contributes (rules 1–4 of [`history`], before folding).
pub(super) fn raw_message(kind: &EventKind) -> Raw {
    match kind {
        EventKind::CompactionCheckpoint { summary, kept, .. } => {
            let mut messages = Vec::with_capacity(kept.len() + 1);
            messages.push(Message::User(Input::text(format!(
                "{CHECKPOINT_PREFIX}\n\n{summary}"
            ))));
            messages.extend(kept.iter().cloned());
            Raw::Checkpoint(messages)
        }
        EventKind::UserMessage { input, .. } => Raw::Message(Message::User(input.clone())),
        // A stop hook's continuation is the next instruction, as a user message.
        EventKind::HookContinued { reason, .. } => {
            Raw::Message(Message::User(Input::text(reason.clone())))
        }
        EventKind::AssistantMessage(m) => Raw::Message(Message::Assistant(m.clone())),
        EventKind::ToolMessage(m) => Raw::Message(Message::Tool(m.clone())),
        EventKind::HookRan {
            hook_event,
            decision,
            additional_context,
            ..
        } => hook_message(hook_event, *decision, additional_context.as_deref()),
        _ => Raw::None,
    }
}

/// What a `hook_ran` adds: a `UserPromptSubmit` block takes the prompt back out of the
/// context (it stays in the log); context from a `SessionStart` or `UserPromptSubmit`
/// hook is a user message opening with [`HOOK_CONTEXT_PREFIX`]. (Tool hooks' context is
/// in the call's result; other points add nothing.)
fn hook_message(event: &str, decision: HookDecision, context: Option<&str>) -> Raw {
    let prompt_hook = event == "UserPromptSubmit";
    if prompt_hook && matches!(decision, HookDecision::Block | HookDecision::Stop) {
        return Raw::RetractPrompt;
    }
    match context {
        Some(text) if prompt_hook || event == "SessionStart" => Raw::Message(Message::User(
            Input::text(format!("{HOOK_CONTEXT_PREFIX} {event}]\n{text}")),
        )),
        _ => Raw::None,
    }
}

/// Removes the last user message of `raw` that is not a hook's context (the prompt a
/// `UserPromptSubmit` hook blocked), looking back no further than the last assistant
/// message that survives folding (so [`HistoryFold`](super::HistoryFold), which keeps
/// only the messages after it unsettled, folds the same).
pub(super) fn retract_prompt(raw: &mut Vec<Message>) {
    for index in (0..raw.len()).rev() {
        match &raw[index] {
            Message::Assistant(a) if kept_anywhere(a) => return,
            Message::User(input) if !input.text.starts_with(HOOK_CONTEXT_PREFIX) => {
                raw.remove(index);
                return;
            }
            _ => {}
        }
    }
}

/// Folds raw messages (cleaning, then [`well_formed`]); `last_assistant` is the index
/// of the assistant message that counts as the conversation's last one, if it is among
/// them.
pub(super) fn fold_raw(raw: Vec<Message>, last_assistant: Option<usize>) -> Vec<Message> {
    let cleaned = raw.into_iter().enumerate().filter_map(|(i, m)| match m {
        Message::User(input) => fold_input(input).map(Message::User),
        Message::Assistant(a) => {
            fold_assistant(a, Some(i) == last_assistant).map(Message::Assistant)
        }
        other => Some(other),
    });
    well_formed(cleaned.collect())
}

/// True when an assistant message survives the fold whether or not it is the last one
/// (it has text or tool calls): a message like that starts a new group of the fold, so
/// nothing after it changes how the messages before it fold.
pub(super) fn kept_anywhere(a: &AssistantMessage) -> bool {
    !(a.text.trim().is_empty() && a.tool_calls.is_empty())
}

fn fold_input(mut input: Input) -> Option<Input> {
    if !input.selected_elements.is_empty() {
        let block = elements_block(&input.selected_elements);
        input.text = if input.text.trim().is_empty() {
            block
        } else {
            format!("{}\n\n{block}", input.text)
        };
        input.selected_elements.clear();
    }
    input.command = None;
    (!input.text.trim().is_empty() || !input.images.is_empty()).then_some(input)
}

fn elements_block(elements: &[PageElement]) -> String {
    let mut block = String::from("<selected_elements>");
    for e in elements {
        block.push_str(&format!(
            "\n<element>\nurl: {}\nselector: {}\ntext: {}\n</element>",
            e.url, e.selector, e.text
        ));
    }
    block.push_str("\n</selected_elements>");
    block
}

fn fold_assistant(mut a: AssistantMessage, is_last: bool) -> Option<AssistantMessage> {
    if is_last && let Some(block) = interrupted_context_text(&a) {
        a.text = if a.text.trim().is_empty() {
            block
        } else {
            format!("{block}\n\n{}", a.text)
        };
    }
    a.reasoning.clear();
    let empty = a.text.trim().is_empty() && a.tool_calls.is_empty();
    (!empty).then_some(a)
}

fn well_formed(raw: Vec<Message>) -> Vec<Message> {
    let mut out = Vec::with_capacity(raw.len());
    let mut raw = raw.into_iter().peekable();
    while let Some(message) = raw.next() {
        match message {
            Message::Assistant(a) => {
                // The tool results that follow this message, up to the next user or
                // assistant message; each is taken by the first call with its id.
                let mut results: Vec<Option<ToolMessage>> = Vec::new();
                while let Some(Message::Tool(_)) = raw.peek() {
                    if let Some(Message::Tool(t)) = raw.next() {
                        results.push(Some(t));
                    }
                }
                let answers: Vec<ToolMessage> = a
                    .tool_calls
                    .iter()
                    .map(|call| {
                        results
                            .iter_mut()
                            .find(|r| r.as_ref().is_some_and(|t| t.tool_call_id == call.id))
                            .and_then(Option::take)
                            .unwrap_or_else(|| missing(&call.id))
                    })
                    .collect();
                out.push(Message::Assistant(a));
                out.extend(answers.into_iter().map(Message::Tool));
            }
            Message::Tool(_) => {} // orphan: no assistant call right before it
            other => out.push(other),
        }
    }
    out
}

fn missing(id: &ToolCallId) -> ToolMessage {
    ToolMessage {
        tool_call_id: id.clone(),
        content: MISSING_RESULT.to_owned(),
        is_error: true,
        images: Vec::new(),
    }
}

/// The block that carries an interrupted message's reasoning to the model:
/// `<interrupted_context>\nThe user interrupted this response. Reasoning so far:\n{reasoning}\n</interrupted_context>`.
/// `None` unless `interrupted` is set and the reasoning is non-empty.
#[must_use]
pub fn interrupted_context_text(message: &AssistantMessage) -> Option<String> {
    (message.interrupted && !message.reasoning.trim().is_empty()).then(|| {
        format!(
            "<interrupted_context>\nThe user interrupted this response. Reasoning so far:\n{}\n</interrupted_context>",
            message.reasoning.trim()
        )
    })
}

/// Paths the session's file tools were asked to read or write: the string `path`
/// argument of every [`FILE_TOOLS`] call in assistant messages and compaction
/// checkpoints' kept messages, as given (relative paths are relative to the session's
/// working directory).
#[must_use]
pub fn touched_paths(events: &[Event]) -> BTreeSet<PathBuf> {
    let mut paths = BTreeSet::new();
    for event in events {
        add_touched_paths(&event.kind, &mut paths);
    }
    paths
}

/// Adds the paths one event's file tool calls touched (see [`touched_paths`]).
pub(super) fn add_touched_paths(kind: &EventKind, paths: &mut BTreeSet<PathBuf>) {
    let mut add = |a: &AssistantMessage| {
        for call in &a.tool_calls {
            if FILE_TOOLS.contains(&call.name.as_str())
                && let Some(path) = call.arguments.get("path").and_then(|p| p.as_str())
                && !path.is_empty()
            {
                paths.insert(PathBuf::from(path));
            }
        }
    };
    match kind {
        EventKind::AssistantMessage(a) => add(a),
        EventKind::CompactionCheckpoint { kept, .. } => {
            kept.iter()
                .filter_map(|m| {
                    if let Message::Assistant(a) = m {
                        Some(a)
                    } else {
                        None
                    }
                })
                .for_each(&mut add);
        }
        _ => {}
    }
}

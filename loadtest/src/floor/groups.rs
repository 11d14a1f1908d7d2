//! A session's log cut into the appends the session made of it.
//!
//! The log does not keep append boundaries, so they are found again from what the
//! runtime commits together: `session_created` alone; `input_queued` alone (an input
//! that arrives while a turn runs); `user_message` with `turn_started`; each step's
//! `step_started` with its `context_diagnostics` (committed before the model request
//! is sent); its `assistant_message` with `usage` and the `tool_started` of the calls it
//! starts (and `turn_complete` after a step that called no tool); each
//! `tool_finished` with the `tool_message`s that became committable with it; a
//! `provider_retry` ends the append it is in (the request is retried after it is
//! committed). Where the runtime's turn actor found two calls' results ready at once it
//! committed them together: the floor then makes more appends than the runtime (the
//! report shows both counts), never fewer.

use foya_protocol::{Event, EventKind};

/// Whether `kind` opens a new append.
fn opens(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::SessionCreated { .. }
            | EventKind::InputQueued { .. }
            | EventKind::UserMessage { .. }
            | EventKind::StepStarted { .. }
            | EventKind::AssistantMessage(_)
            | EventKind::ToolFinished { .. }
    )
}

/// Whether `kind` closes the append it is in.
fn closes(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::SessionCreated { .. }
            | EventKind::InputQueued { .. }
            | EventKind::ProviderRetry { .. }
    )
}

/// `log` cut into its appends, in order (each non-empty; together they are `log`).
pub(crate) fn groups(log: &[Event]) -> Vec<&[Event]> {
    let mut groups = Vec::new();
    let mut start = 0;
    for (i, event) in log.iter().enumerate() {
        if i > start && opens(&event.kind) {
            groups.push(&log[start..i]);
            start = i;
        }
        if closes(&event.kind) {
            groups.push(&log[start..=i]);
            start = i + 1;
        }
    }
    if start < log.len() {
        groups.push(&log[start..]);
    }
    groups
}

//! Live relay of a step's model stream, run by the ProviderActor's stream task.
//!
//! For a step's request (not for summarisation requests, which are never shown), the
//! stream task folds every [`StreamEvent`] into the step's [`StreamAggregate`] and sends
//! the live [`Delta`]s straight to the session (`SessionMsg::PublishDeltas`), one
//! message per batch of ready events. The TurnActor hears only the stream's terminal
//! event and then takes the aggregate ([`Relay::close`]). So a streamed chunk costs one
//! actor message (to the session) instead of two (turn, then session).
//!
//! Ordering: the task publishes a batch before it reports the terminal event to the
//! turn, and the turn appends the assistant message only after that report, so the
//! session's FIFO mailbox puts every delta of a step before the step's
//! `assistant_message`. Closing is atomic with publishing (one lock): after
//! [`Relay::close`] nothing more is folded or published, and the aggregate returned holds
//! exactly the events whose deltas were published — a cancelled step's `interrupted`
//! message is what subscribers saw.

use crate::session::SessionMsg;
use foya_protocol::event::Delta;
use foya_protocol::{RunId, StreamAggregate, StreamEvent};
use ractor::ActorRef;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The relay of one model request: shared by its stream task (which folds and
/// publishes) and its TurnActor (which closes it). Cloning shares it.
#[derive(Debug, Clone)]
pub(crate) struct Relay {
    session: ActorRef<SessionMsg>,
    run_id: RunId,
    state: Arc<Mutex<RelayState>>,
}

#[derive(Debug, Default)]
struct RelayState {
    aggregate: StreamAggregate,
    /// Tool-call indexes already announced with `tool_call_queued`.
    queued: HashSet<u32>,
    closed: bool,
}

impl Relay {
    /// A fresh relay publishing the deltas of turn `run_id` to `session`.
    pub(crate) fn new(session: ActorRef<SessionMsg>, run_id: RunId) -> Self {
        Self {
            session,
            run_id,
            state: Arc::new(Mutex::new(RelayState::default())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RelayState> {
        // A panic while folding leaves a usable (if partial) aggregate.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Folds `events` (in order) into the aggregate and publishes their deltas as one
    /// message. Returns `false`, folding and publishing nothing, once the relay is
    /// closed: the stream task then stops.
    pub(crate) fn apply(&self, events: &[StreamEvent]) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        let mut deltas = Vec::with_capacity(events.len());
        for event in events {
            deltas_of(event, &mut state.queued, &mut deltas);
            state.aggregate.apply(event);
        }
        if !deltas.is_empty() {
            // The session gone means the turn is going too; nothing to tell.
            let _ = self.session.cast(SessionMsg::PublishDeltas {
                run_id: self.run_id,
                deltas,
            });
        }
        true
    }

    /// Closes the relay and returns the aggregate of every event folded so far. Later
    /// [`Relay::apply`] calls fold and publish nothing; a second close returns an empty
    /// aggregate.
    pub(crate) fn close(&self) -> StreamAggregate {
        let mut state = self.lock();
        state.closed = true;
        std::mem::take(&mut state.aggregate)
    }
}

/// The live deltas of one stream event, appended to `out`: text, reasoning and
/// tool-call fragments as they come, and `tool_call_queued` once per call (`index`),
/// as soon as both its id and its name are known.
fn deltas_of(event: &StreamEvent, queued: &mut HashSet<u32>, out: &mut Vec<Delta>) {
    match event {
        StreamEvent::TextDelta { text } => out.push(Delta::TextDelta { text: text.clone() }),
        StreamEvent::ReasoningDelta { text } => {
            out.push(Delta::ReasoningDelta { text: text.clone() });
        }
        StreamEvent::ToolCallDelta {
            index,
            id,
            name,
            arguments,
            ..
        } => {
            out.push(Delta::ToolCallDelta {
                index: *index,
                id: id.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
            });
            if let (Some(id), Some(name)) = (id, name)
                && queued.insert(*index)
            {
                out.push(Delta::ToolCallQueued {
                    tool_call_id: id.clone(),
                    name: name.clone(),
                });
            }
        }
        StreamEvent::ReasoningPart { .. }
        | StreamEvent::Usage { .. }
        | StreamEvent::Done { .. }
        | StreamEvent::Error { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use foya_protocol::{FinishReason, ToolCallId};

    fn call_delta(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> StreamEvent {
        StreamEvent::ToolCallDelta {
            index,
            id: id.map(ToolCallId::new),
            name: name.map(Into::into),
            arguments: args.into(),
            extra: None,
        }
    }

    #[test]
    fn a_call_is_queued_once_when_its_id_and_name_are_both_known() {
        let mut queued = HashSet::new();
        let mut out = Vec::new();
        for event in [
            call_delta(0, None, Some("read_file"), ""),
            call_delta(0, Some("c1"), Some("read_file"), "{\"pa"),
            call_delta(0, Some("c1"), Some("read_file"), "th\":1}"),
            StreamEvent::TextDelta { text: "hi".into() },
            StreamEvent::Done {
                finish_reason: Some(FinishReason::ToolCalls),
            },
        ] {
            deltas_of(&event, &mut queued, &mut out);
        }
        let queued: Vec<_> = out
            .iter()
            .filter_map(|d| match d {
                Delta::ToolCallQueued { tool_call_id, name } => {
                    Some((tool_call_id.to_string(), name.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(queued, vec![("c1".to_owned(), "read_file".to_owned())]);
        assert_eq!(
            out.len(),
            5,
            "three fragments, one queued, one text: {out:?}"
        );
        assert_eq!(out[4], Delta::TextDelta { text: "hi".into() });
    }
}

//! The pure fold of a session's log: `apply(&mut SessionState, &Event)`.
//!
//! Used for both live events (after each commit) and replay on load, so a restarted
//! session and a live one share one path. No I/O, no actors.

use foya_protocol::{
    Event, EventKind, Input, InputId, RunId, SessionConfig, SessionId, TitleSource, ToolCall,
    ToolCallId, ToolMessage,
};
use std::collections::{HashSet, VecDeque};

/// Result text of a call of an interrupted turn that never started (no `tool_started`):
/// nothing ran, so there is no outcome to doubt.
pub const NOT_STARTED: &str =
    "not run: the turn stopped before this call started; nothing was executed";

/// The turn in progress, as far as the log knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenTurn {
    /// Its run id.
    pub run_id: RunId,
    /// The input it processes.
    pub input_id: InputId,
    /// Tool calls of the latest assistant message of the turn.
    pub last_calls: Vec<ToolCall>,
    /// Calls among `last_calls` that have a `tool_message`.
    pub answered: HashSet<ToolCallId>,
    /// Calls among `last_calls` that have a `tool_started` (they began to run).
    pub started: HashSet<ToolCallId>,
}

/// Everything the log says about a session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionState {
    /// The session.
    pub id: SessionId,
    /// Its configuration (from `session_created`).
    pub config: SessionConfig,
    /// Current title and where it came from.
    pub title: Option<(String, TitleSource)>,
    /// Seq of the last event applied (0 before any).
    pub last_seq: u64,
    /// Latest `at_ms` among the events applied (0 before any): the session stamps new
    /// events no earlier, so its event times never go backwards when the clock does.
    pub last_at_ms: u64,
    /// Inputs queued and not started, in FIFO order.
    pub queue: VecDeque<(InputId, Input)>,
    /// Every input id ever accepted (queued or started): a resubmit is a no-op.
    pub seen_inputs: HashSet<InputId>,
    /// The turn with `turn_started` and no `turn_complete`.
    pub open_turn: Option<OpenTurn>,
    /// "Allow for this session" grant keys.
    pub grants: HashSet<String>,
    /// Whether `session_deleted` was written.
    pub deleted: bool,
    /// Whether a `user_message` with text was written (`/title` has text to go on).
    pub has_user_text: bool,
}

impl SessionState {
    /// The state right after `session_created`.
    pub fn new(id: SessionId, config: SessionConfig) -> Self {
        let title = config.title.clone().map(|t| (t, TitleSource::User));
        Self {
            id,
            config,
            title,
            last_seq: 0,
            last_at_ms: 0,
            queue: VecDeque::new(),
            seen_inputs: HashSet::new(),
            open_turn: None,
            grants: HashSet::new(),
            deleted: false,
            has_user_text: false,
        }
    }

    /// Folds a whole log; `None` when it does not start with `session_created`.
    pub fn from_log(events: &[Event]) -> Option<Self> {
        let first = events.first()?;
        let EventKind::SessionCreated { config } = &first.kind else {
            return None;
        };
        let mut state = Self::new(first.session_id, config.clone());
        for event in events {
            apply(&mut state, event);
        }
        Some(state)
    }

    /// Results that close the open turn's unanswered calls (is_error): `content` for a
    /// call that started (its outcome is unknown), [`NOT_STARTED`] for one without
    /// `tool_started` (it never ran).
    pub(crate) fn unanswered_results(&self, content: &str) -> Vec<ToolMessage> {
        let Some(turn) = &self.open_turn else {
            return Vec::new();
        };
        turn.last_calls
            .iter()
            .filter(|c| !turn.answered.contains(&c.id))
            .map(|c| ToolMessage {
                tool_call_id: c.id.clone(),
                content: if turn.started.contains(&c.id) {
                    content.to_owned()
                } else {
                    NOT_STARTED.to_owned()
                },
                is_error: true,
                images: Vec::new(),
            })
            .collect()
    }
}

/// Applies one committed event.
pub fn apply(state: &mut SessionState, event: &Event) {
    state.last_seq = event.seq.0;
    state.last_at_ms = state.last_at_ms.max(event.at_ms);
    match &event.kind {
        EventKind::SessionCreated { config } => state.config = config.clone(),
        EventKind::InputQueued { input_id, input } => {
            state.seen_inputs.insert(*input_id);
            state.queue.push_back((*input_id, input.clone()));
        }
        EventKind::InputDropped { input_id, .. } => state.queue.retain(|(id, _)| id != input_id),
        EventKind::UserMessage { input_id, input } => {
            state.seen_inputs.insert(*input_id);
            state.has_user_text |= !input.text.trim().is_empty();
        }
        EventKind::TurnStarted { input_id } => {
            state.queue.retain(|(id, _)| id != input_id);
            state.open_turn = Some(OpenTurn {
                run_id: event.run_id.unwrap_or_default(),
                input_id: *input_id,
                last_calls: Vec::new(),
                answered: HashSet::new(),
                started: HashSet::new(),
            });
        }
        EventKind::AssistantMessage(message) => {
            if let Some(turn) = &mut state.open_turn {
                turn.last_calls.clone_from(&message.tool_calls);
                turn.answered.clear();
                turn.started.clear();
            }
        }
        EventKind::ToolStarted { tool_call_id, .. } => {
            if let Some(turn) = &mut state.open_turn {
                turn.started.insert(tool_call_id.clone());
            }
        }
        EventKind::ToolMessage(message) => {
            if let Some(turn) = &mut state.open_turn {
                turn.answered.insert(message.tool_call_id.clone());
            }
        }
        EventKind::ApprovalDecided {
            grant: Some(grant), ..
        } => {
            state.grants.insert(grant.clone());
        }
        EventKind::TurnComplete { .. } => state.open_turn = None,
        EventKind::TitleSet { title, source } => state.title = Some((title.clone(), *source)),
        EventKind::SessionDeleted {} => state.deleted = true,
        EventKind::ConfigChanged { provider, model } => {
            state.config.provider.clone_from(provider);
            state.config.model.clone_from(model);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foya_protocol::{ApprovalDecision, ApprovalRequestId, AssistantMessage, Seq, TurnStatus};

    #[test]
    fn the_fold_tracks_queue_open_turn_grants_and_deletion() {
        let id = SessionId::new();
        let run = RunId::new();
        let (a, b, c) = (InputId::new(), InputId::new(), InputId::new());
        let call = ToolCall {
            id: ToolCallId::new("c1"),
            name: "t".into(),
            arguments: serde_json::json!({}),
            extra: None,
        };
        let kinds = vec![
            (
                None,
                EventKind::SessionCreated {
                    config: SessionConfig::new("/w"),
                },
            ),
            (
                Some(run),
                EventKind::UserMessage {
                    input_id: a,
                    input: Input::text("a"),
                },
            ),
            (Some(run), EventKind::TurnStarted { input_id: a }),
            (
                None,
                EventKind::InputQueued {
                    input_id: b,
                    input: Input::text("b"),
                },
            ),
            (
                None,
                EventKind::InputQueued {
                    input_id: c,
                    input: Input::text("c"),
                },
            ),
            (
                None,
                EventKind::InputDropped {
                    input_id: b,
                    reason: "x".into(),
                },
            ),
            (
                Some(run),
                EventKind::AssistantMessage(AssistantMessage {
                    tool_calls: vec![call],
                    ..AssistantMessage::default()
                }),
            ),
            (
                Some(run),
                EventKind::ApprovalDecided {
                    request_id: ApprovalRequestId::new(),
                    tool_call_id: ToolCallId::new("c1"),
                    decision: ApprovalDecision::AllowForSession,
                    message: None,
                    grant: Some("t".into()),
                },
            ),
        ];
        let events: Vec<Event> = kinds
            .into_iter()
            .enumerate()
            .map(|(i, (run_id, kind))| Event {
                session_id: id,
                seq: Seq(i as u64 + 1),
                run_id,
                at_ms: 0,
                kind,
            })
            .collect();
        let mut state = SessionState::from_log(&events).unwrap();
        assert_eq!(state.last_seq, 8);
        assert_eq!(state.queue, VecDeque::from(vec![(c, Input::text("c"))]));
        assert_eq!(state.seen_inputs, HashSet::from([a, b, c]));
        assert_eq!(state.grants, HashSet::from(["t".to_owned()]));
        assert_eq!(
            state.unanswered_results("gone"),
            // No `tool_started` for c1: it never ran.
            vec![ToolMessage {
                tool_call_id: ToolCallId::new("c1"),
                content: NOT_STARTED.into(),
                is_error: true,
                images: Vec::new(),
            }]
        );
        let done = Event {
            session_id: id,
            seq: Seq(9),
            run_id: Some(run),
            at_ms: 0,
            kind: EventKind::TurnComplete {
                status: TurnStatus::Failed,
                reason: None,
                error: None,
            },
        };
        apply(&mut state, &done);
        assert_eq!(state.open_turn, None);
        assert_eq!(state.unanswered_results("gone"), vec![]);
        let deleted = Event {
            seq: Seq(10),
            kind: EventKind::SessionDeleted {},
            ..done
        };
        apply(&mut state, &deleted);
        assert!(state.deleted);
        assert_eq!(SessionState::from_log(&events[1..]), None);
    }
}

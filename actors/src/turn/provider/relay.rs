//! Live relay of a step's model stream, run by the model request's stream task (`stream.rs`).
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

use crate::turn::port::Port;
use foya_protocol::event::Delta;
use foya_protocol::{RunId, StreamAggregate, StreamEvent, ToolCallId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The relay of one model request: shared by its stream task (which folds and
/// publishes) and its TurnActor (which closes it). Cloning shares it.
#[derive(Debug, Clone)]
pub(crate) struct Relay {
    session: Port,
    run_id: RunId,
    state: Arc<Mutex<RelayState>>,
}

#[derive(Debug, Default)]
struct RelayState {
    aggregate: StreamAggregate,
    /// What is known so far of each tool call (by index), to announce it with
    /// `tool_call_queued` once its id and name are both known.
    calls: HashMap<u32, CallSeen>,
    closed: bool,
}

impl Relay {
    /// A fresh relay publishing the deltas of turn `run_id` to `session`.
    pub(crate) fn new(session: Port, run_id: RunId) -> Self {
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
            deltas_of(event, &mut state.calls, &mut deltas);
            state.aggregate.apply(event);
        }
        if !deltas.is_empty() {
            // The session gone means the turn is going too; nothing to tell.
            self.session.publish(self.run_id, deltas);
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

/// What the fragments of one tool call told so far: the first id and the first name
/// given (as the aggregate keeps them), until the call is queued.
#[derive(Debug, Default)]
struct CallSeen {
    id: Option<ToolCallId>,
    name: Option<String>,
    /// `tool_call_queued` was published (id and name are then taken out).
    queued: bool,
}

impl CallSeen {
    /// Takes in a fragment's `id` and `name`; returns both the first time they are
    /// known together, and never again for this call.
    fn learn(
        &mut self,
        id: Option<&ToolCallId>,
        name: Option<&String>,
    ) -> Option<(ToolCallId, String)> {
        if self.queued {
            return None;
        }
        if self.id.is_none() {
            self.id = id.cloned();
        }
        if self.name.is_none() {
            self.name = name.cloned();
        }
        if self.id.is_none() || self.name.is_none() {
            return None;
        }
        self.queued = true;
        self.id.take().zip(self.name.take())
    }
}

/// The live deltas of one stream event, appended to `out`: text, reasoning and
/// tool-call fragments as they come, and `tool_call_queued` once per call (`index`),
/// as soon as both its id and its name are known, from one fragment or several (an id
/// generated for a call streamed without one, `wire/sse.rs`, arrives on its own
/// fragment just before `Done`).
fn deltas_of(event: &StreamEvent, calls: &mut HashMap<u32, CallSeen>, out: &mut Vec<Delta>) {
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
            if let Some((tool_call_id, name)) = calls
                .entry(*index)
                .or_default()
                .learn(id.as_ref(), name.as_ref())
            {
                out.push(Delta::ToolCallQueued { tool_call_id, name });
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
        let mut queued = HashMap::new();
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

    /// The `tool_call_queued` deltas (id, name) of `events` folded in order.
    fn queued_of(events: &[StreamEvent]) -> Vec<(String, String)> {
        let mut calls = HashMap::new();
        let mut out = Vec::new();
        for event in events {
            deltas_of(event, &mut calls, &mut out);
        }
        out.iter()
            .filter_map(|d| match d {
                Delta::ToolCallQueued { tool_call_id, name } => {
                    Some((tool_call_id.to_string(), name.clone()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_call_whose_id_and_name_come_in_different_fragments_is_queued_once() {
        let queued = queued_of(&[
            call_delta(0, Some("c1"), None, ""),
            call_delta(1, None, Some("shell"), ""),
            call_delta(0, None, Some("read_file"), "{}"),
            call_delta(0, Some("c9"), Some("other"), ""),
            call_delta(1, Some("c2"), None, "{}"),
            call_delta(1, Some("c2"), Some("shell"), ""),
        ]);
        assert_eq!(
            queued,
            vec![
                ("c1".to_owned(), "read_file".to_owned()),
                ("c2".to_owned(), "shell".to_owned())
            ]
        );
    }

    /// The events a Chat stream decodes to, ids completed as for every protocol.
    fn decoded_chat(chunks: &[serde_json::Value]) -> Vec<StreamEvent> {
        use crate::provider::wire::ProviderKind;
        use crate::provider::wire::sse::{SseLimits, decode_sse};
        use futures::StreamExt;
        let mut body = String::new();
        for chunk in chunks {
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        let bytes = futures::stream::iter([Ok(bytes::Bytes::from(body))]);
        let decoded = decode_sse(
            bytes,
            ProviderKind::OpenaiChat.decoder(),
            SseLimits::default(),
        );
        futures::executor::block_on(decoded.collect())
    }

    fn chat_call(call: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[call]}}]})
    }

    #[test]
    fn a_chat_call_with_its_id_and_name_in_separate_chunks_is_queued() {
        let events = decoded_chat(&[
            chat_call(
                serde_json::json!({"index":0,"id":"call_a","type":"function",
                "function":{"arguments":""}}),
            ),
            chat_call(serde_json::json!({"index":0,"function":{"name":"read_file"}})),
            chat_call(serde_json::json!({"index":0,"function":{"arguments":"{}"}})),
            serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        ]);
        assert_eq!(
            queued_of(&events),
            vec![("call_a".to_owned(), "read_file".to_owned())],
            "{events:?}"
        );
    }

    #[test]
    fn a_call_streamed_without_an_id_is_queued_with_its_generated_id() {
        let events = decoded_chat(&[
            chat_call(serde_json::json!({"index":0,"id":"","type":"function",
                "function":{"name":"shell","arguments":"{}"}})),
            chat_call(serde_json::json!({"index":1,"type":"function",
                "function":{"name":"read_file","arguments":"{}"}})),
            serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        ]);
        let mut aggregate = StreamAggregate::new();
        for event in &events {
            aggregate.apply(event);
        }
        let persisted: Vec<_> = aggregate
            .tool_calls()
            .into_iter()
            .map(|c| (c.id.to_string(), c.name))
            .collect();
        assert!(
            persisted.iter().all(|(id, _)| id.starts_with("call_")),
            "{persisted:?}"
        );
        assert_eq!(queued_of(&events), persisted, "{events:?}");
    }
}

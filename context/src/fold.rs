//! Owns [`HistoryFold`]: [`history`](super::history) and
//! [`touched_paths`](super::touched_paths) kept up to date as a session log grows, so a
//! step folds only the events appended since the last step instead of the whole log.

use super::estimate::message_tokens;
use super::history::{
    Raw, add_touched_paths, fold_raw, kept_anywhere, raw_message, retract_prompt,
};
use foya_core::request::Messages;
use foya_protocol::{Event, Message};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

/// The history fold of a growing session log.
///
/// The fold of a log splits at every assistant message that survives whether or not it
/// is the last one (it has text or tool calls): its tool results follow it, and no
/// message after it changes how the messages before it fold (none of them is the last
/// assistant message any more, and no later tool result can attach to them). So the fold
/// keeps the messages before the latest such split **settled** (folded once, shared by
/// every request built from them, with their token estimate summed once) and the raw
/// messages from the split on as a short **tail** it folds at each step.
///
/// [`HistoryFold::messages`] equals [`history`](super::history) of the same log and
/// [`HistoryFold::touched_paths`] equals [`touched_paths`](super::touched_paths) (a
/// property test checks both on random logs).
#[derive(Debug, Clone, Default)]
pub struct HistoryFold {
    /// Events folded so far (a prefix length of the log).
    seen: usize,
    /// The folded messages before the tail.
    settled: Arc<Vec<Message>>,
    /// The summed token estimate of `settled` (as in `CompiledContext::sections`).
    settled_tokens: u64,
    /// Raw messages from the latest split (or the start, or the latest checkpoint) on.
    tail: Vec<Message>,
    touched: BTreeSet<PathBuf>,
}

impl HistoryFold {
    /// An empty fold (of an empty log).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds the events of `log` this fold has not seen. `log` must be the log the fold
    /// has seen so far, extended (a session log only grows); a log shorter than that is
    /// folded from scratch.
    pub fn update(&mut self, log: &[Event]) {
        if log.len() < self.seen {
            *self = Self::default();
        }
        for event in &log[self.seen..] {
            add_touched_paths(&event.kind, &mut self.touched);
            match raw_message(&event.kind) {
                Raw::Checkpoint(messages) => {
                    self.settled = Arc::default();
                    self.settled_tokens = 0;
                    self.tail.clear();
                    messages.into_iter().for_each(|m| self.push(m));
                }
                Raw::Message(m) => self.push(m),
                Raw::RetractPrompt => retract_prompt(&mut self.tail),
                Raw::None => {}
            }
        }
        self.seen = log.len();
    }

    /// Number of events folded (the length of the log last given to [`Self::update`]).
    #[must_use]
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// The folded history and its token estimate (the sum of each message's).
    #[must_use]
    pub fn messages(&self) -> (Messages, u64) {
        let last = self
            .tail
            .iter()
            .rposition(|m| matches!(m, Message::Assistant(_)));
        let tail = fold_raw(self.tail.clone(), last);
        let tokens = self.settled_tokens + tail.iter().map(message_tokens).sum::<u64>();
        (Messages::new(Arc::clone(&self.settled), tail), tokens)
    }

    /// The paths the log's file tool calls touched.
    #[must_use]
    pub fn touched_paths(&self) -> &BTreeSet<PathBuf> {
        &self.touched
    }

    fn push(&mut self, message: Message) {
        if let Message::Assistant(a) = &message
            && kept_anywhere(a)
        {
            // None of the tail's assistant messages is the last one any more.
            let closed = fold_raw(std::mem::take(&mut self.tail), None);
            self.settled_tokens += closed.iter().map(message_tokens).sum::<u64>();
            Arc::make_mut(&mut self.settled).extend(closed);
        }
        self.tail.push(message);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{history, touched_paths};
    use foya_protocol::{
        AssistantMessage, EventKind, HookDecision, Input, InputId, Seq, SessionId, ToolCall,
        ToolCallId, ToolMessage,
    };
    use proptest::prelude::*;

    /// One random event of a log: the kinds the fold reads, in shapes that hit its edge
    /// cases (empty and interrupted assistant messages, duplicate, orphan and missing
    /// tool results, checkpoints keeping calls).
    fn event_kind() -> impl Strategy<Value = EventKind> {
        let id = (0u8..4).prop_map(|i| ToolCallId(format!("c{i}")));
        let assistant = (
            prop_oneof![Just(String::new()), Just(" ".to_owned()), "[a-z]{1,6}"],
            prop_oneof![Just(String::new()), "[a-z]{1,6}"],
            any::<bool>(),
            prop::collection::vec((id.clone(), any::<bool>()), 0..3),
        )
            .prop_map(|(text, reasoning, interrupted, calls)| AssistantMessage {
                text,
                reasoning,
                interrupted,
                tool_calls: calls
                    .into_iter()
                    .map(|(id, file)| ToolCall {
                        id,
                        name: if file { "read_file" } else { "shell" }.into(),
                        arguments: serde_json::json!({ "path": "a.txt" }),
                        extra: None,
                    })
                    .collect(),
                ..AssistantMessage::default()
            });
        let tool = (id, "[a-z]{0,3}").prop_map(|(tool_call_id, content)| ToolMessage {
            tool_call_id,
            content,
            is_error: false,
            images: Vec::new(),
        });
        let message = prop_oneof![
            "[a-z ]{0,4}".prop_map(|t| Message::User(Input::text(t))),
            assistant.clone().prop_map(Message::Assistant),
            tool.clone().prop_map(Message::Tool),
        ];
        prop_oneof![
            4 => "[a-z ]{0,4}".prop_map(|t| EventKind::UserMessage {
                input_id: InputId::new(),
                input: Input::text(t),
            }),
            6 => assistant.prop_map(EventKind::AssistantMessage),
            6 => tool.prop_map(EventKind::ToolMessage),
            1 => "[a-z]{1,4}".prop_map(|reason| EventKind::HookContinued { reason, count: 1 }),
            1 => (
                prop_oneof![Just("UserPromptSubmit"), Just("SessionStart"), Just("PreToolUse")],
                prop_oneof![Just(HookDecision::Block), Just(HookDecision::None)],
                prop::option::of("[a-z]{1,4}"),
            )
                .prop_map(|(point, decision, context)| EventKind::HookRan {
                    hook_event: point.into(),
                    matcher: None,
                    hook: "h".into(),
                    tool_call_id: None,
                    duration_ms: 0,
                    decision,
                    reason: None,
                    additional_context: context,
                }),
            1 => ("[a-z]{1,4}", prop::collection::vec(message, 0..4)).prop_map(
                |(summary, kept)| EventKind::CompactionCheckpoint {
                    summary,
                    covers_up_to: Seq(0),
                    tokens_before: 0,
                    tokens_after: 0,
                    kept,
                }
            ),
            2 => Just(EventKind::StepStarted { step: 1 }),
        ]
    }

    fn log(kinds: Vec<EventKind>) -> Vec<Event> {
        let session = SessionId::new();
        kinds
            .into_iter()
            .enumerate()
            .map(|(i, kind)| Event {
                session_id: session,
                seq: Seq(i as u64 + 1),
                run_id: None,
                at_ms: 0,
                kind,
            })
            .collect()
    }

    proptest! {
        /// Folding a log in random slices gives, after every slice, what the whole fold
        /// of that prefix gives.
        #[test]
        fn the_incremental_fold_equals_the_whole_fold(
            kinds in prop::collection::vec(event_kind(), 0..40),
            cuts in prop::collection::vec(0usize..40, 0..8),
        ) {
            let events = log(kinds);
            let mut ends: Vec<usize> = cuts.into_iter().map(|c| c.min(events.len())).collect();
            ends.push(events.len());
            ends.sort_unstable();
            let mut fold = HistoryFold::new();
            for end in ends {
                let prefix = &events[..end];
                fold.update(prefix);
                let whole = history(prefix);
                let (messages, tokens) = fold.messages();
                prop_assert_eq!(&messages, &whole);
                prop_assert_eq!(tokens, whole.iter().map(message_tokens).sum::<u64>());
                prop_assert_eq!(fold.touched_paths(), &touched_paths(prefix));
                prop_assert_eq!(fold.seen(), end);
            }
        }
    }

    #[test]
    fn a_shorter_log_is_folded_from_scratch() {
        let events = log(vec![
            EventKind::UserMessage {
                input_id: InputId::new(),
                input: Input::text("one"),
            },
            EventKind::AssistantMessage(AssistantMessage {
                text: "two".into(),
                ..AssistantMessage::default()
            }),
        ]);
        let mut fold = HistoryFold::new();
        fold.update(&events);
        fold.update(&events[..1]);
        assert_eq!(fold.messages().0, history(&events[..1]));
        assert_eq!(fold.seen(), 1);
    }
}

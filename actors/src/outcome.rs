//! Owns following one turn from its input to its `turn_complete`: [`TurnStream`] (typed
//! events of that turn only) and [`TurnOutcome`] (what [`SessionHandle::run`](crate::SessionHandle::run) returns).
//!
//! A turn is found by its input id: the `user_message` of that input names the turn's
//! run id, and every later event with that run id belongs to it, up to `turn_complete`.
//! The stream reads a [`Subscription`]; when the session cuts it off (`Lagged`) it
//! resubscribes from the last seq it saw, so nothing is missed however slowly it is read.

pub use crate::kernel::ApprovalRequest;
use crate::kernel::RuntimeError;
use foya_protocol::event::{LiveDelta, Notice};
use foya_protocol::{
    ApprovalRequestId, Delta, ErrorInfo, Event, EventKind, InputId, RunId, Seq, SessionUpdate,
    ToolCall, ToolCallId, ToolMessage, TurnStatus, Usage,
};
use std::collections::VecDeque;
use std::ops::RangeInclusive;

/// How one turn ended, gathered from its events.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TurnOutcome {
    /// The input the turn answered.
    pub input_id: InputId,
    /// The turn's run id.
    pub run_id: RunId,
    /// How it ended.
    pub status: TurnStatus,
    /// `turn_complete`'s short reason (`max_steps`, `user`, …), if any.
    pub reason: Option<String>,
    /// The error, when `status` is `failed`.
    pub error: Option<ErrorInfo>,
    /// The final answer: the text of the turn's last assistant message (empty when the
    /// turn ended before the model answered).
    pub text: String,
    /// Token usage of every model request of the turn, summed.
    pub usage: Usage,
    /// The tool calls of the turn, in the order the model made them, with their results.
    pub tool_calls: Vec<ToolCallRecord>,
    /// The seqs of the turn's events: its `user_message` to its `turn_complete`.
    pub seqs: RangeInclusive<Seq>,
}

/// One tool call of a turn and its result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolCallRecord {
    /// The call as the model made it.
    pub call: ToolCall,
    /// Its result (`None` only when the turn ended before one was written).
    pub result: Option<ToolMessage>,
}

/// What a [`TurnStream`] yields: the parts of one turn an application usually shows.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TurnEvent {
    /// A fragment of the answer text (live; not replayed after a resubscription).
    Text(String),
    /// A fragment of reasoning text (live, as `Text`).
    Reasoning(String),
    /// The model asked for this call (committed).
    ToolCall(ToolCall),
    /// A call's result (committed).
    ToolResult(ToolMessage),
    /// A call waits for a decision ([`SessionHandle::decide_approval`](crate::SessionHandle::decide_approval)).
    ApprovalRequested {
        /// Answer it with this id.
        request_id: ApprovalRequestId,
        /// The call.
        tool_call_id: ToolCallId,
        /// Tool name.
        tool_name: String,
        /// The exact command or path.
        action: String,
    },
    /// The turn ended; the stream yields nothing after this.
    Done(TurnOutcome),
}

/// The events of one turn, typed, ending with [`TurnEvent::Done`]. Made by
/// [`SessionHandle::run_streamed`](crate::SessionHandle::run_streamed).
///
/// # Cancel safety
/// [`Self::next`] is cancel safe: dropping its future loses no event (the next call
/// yields it). Dropping the stream does not cancel the turn; it runs on, and
/// [`SessionHandle::run_with_id`](crate::SessionHandle::run_with_id) with the same input id follows it again.
#[derive(Debug)]
pub struct TurnStream {
    source: Box<dyn UpdateSource>,
    /// Set after `Lagged`: the seq to resubscribe from before reading on.
    resubscribe_from: Option<Seq>,
    turn: Collector,
    /// Events folded but not yielded yet (the calls of one assistant message).
    pending: VecDeque<TurnEvent>,
    done: bool,
}

impl TurnStream {
    /// A stream of the turn of `input_id`, read from `source` (a local or a remote
    /// session's updates).
    pub(crate) fn from_source(source: Box<dyn UpdateSource>, input_id: InputId) -> Self {
        Self {
            source,
            resubscribe_from: None,
            turn: Collector::new(input_id),
            pending: VecDeque::new(),
            done: false,
        }
    }

    /// The input this stream follows.
    #[must_use]
    pub fn input_id(&self) -> InputId {
        self.turn.input_id
    }

    /// The next event of the turn; `None` after [`TurnEvent::Done`].
    ///
    /// # Errors
    /// [`RuntimeError::InputDropped`] when the input was dropped before it ran (queue
    /// cleared); [`RuntimeError::SessionDeleted`]; [`RuntimeError::ShuttingDown`] when the
    /// runtime stopped; session and storage errors of a resubscription.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    pub async fn next(&mut self) -> Option<Result<TurnEvent, RuntimeError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            if let Some(from) = self.resubscribe_from {
                if let Err(e) = self.source.resubscribe(from).await {
                    return Some(self.fail(e));
                }
                self.resubscribe_from = None;
            }
            let Some(update) = self.source.recv().await else {
                return Some(self.fail(RuntimeError::ShuttingDown));
            };
            match self.apply(update) {
                Ok(events) => {
                    self.done = events.iter().any(|e| matches!(e, TurnEvent::Done(_)));
                    self.pending.extend(events);
                }
                Err(e) => return Some(self.fail(e)),
            }
        }
    }

    /// Reads the rest of the turn and returns how it ended.
    ///
    /// # Errors
    /// As [`Self::next`].
    ///
    /// # Cancel safety
    /// Cancel safe: call it again to go on.
    pub async fn outcome(&mut self) -> Result<TurnOutcome, RuntimeError> {
        while let Some(event) = self.next().await {
            if let TurnEvent::Done(outcome) = event? {
                return Ok(outcome);
            }
        }
        Err(RuntimeError::TurnStreamEnded)
    }

    /// The stream as a `futures::Stream`.
    pub fn into_stream(
        self,
    ) -> impl futures::Stream<Item = Result<TurnEvent, RuntimeError>> + Send + Unpin {
        Box::pin(futures::stream::unfold(self, |mut turn| async move {
            turn.next().await.map(|event| (event, turn))
        }))
    }

    fn fail(&mut self, error: RuntimeError) -> Result<TurnEvent, RuntimeError> {
        self.done = true;
        Err(error)
    }

    fn apply(&mut self, update: SessionUpdate) -> Result<Vec<TurnEvent>, RuntimeError> {
        match update {
            SessionUpdate::Event(event) => self.turn.apply(event),
            SessionUpdate::Delta(delta) => Ok(self.turn.live(delta).into_iter().collect()),
            // Resubscribed from the next seq: after `Moved` this runtime answers
            // `NotOwner` (the session goes on where its shard went).
            SessionUpdate::Notice(
                Notice::Lagged { last_seq, .. } | Notice::Moved { last_seq, .. },
            ) => {
                self.resubscribe_from = Some(Seq(last_seq.0 + 1));
                Ok(Vec::new())
            }
            SessionUpdate::Notice(Notice::Closed { .. }) => Err(RuntimeError::ShuttingDown),
        }
    }
}

/// Where a [`TurnStream`] reads its session's updates, and how it resubscribes after
/// `Lagged`.
#[async_trait::async_trait]
pub(crate) trait UpdateSource: Send + std::fmt::Debug {
    /// The next update; `None` when the subscription ended.
    async fn recv(&mut self) -> Option<SessionUpdate>;
    /// Replaces the subscription by one from `from`.
    async fn resubscribe(&mut self, from: Seq) -> Result<(), RuntimeError>;
}

/// The turn of one input, folded from its events.
#[derive(Debug)]
struct Collector {
    input_id: InputId,
    /// Its run id and the seq of its `user_message`, once seen.
    started: Option<(RunId, Seq)>,
    text: String,
    usage: Usage,
    tool_calls: Vec<ToolCallRecord>,
}

impl Collector {
    fn new(input_id: InputId) -> Self {
        Self {
            input_id,
            started: None,
            text: String::new(),
            usage: Usage::default(),
            tool_calls: Vec::new(),
        }
    }

    /// A live delta of this turn, typed.
    fn live(&self, delta: LiveDelta) -> Option<TurnEvent> {
        let (run_id, _) = self.started?;
        if delta.run_id != run_id {
            return None;
        }
        match delta.delta {
            Delta::TextDelta { text } => Some(TurnEvent::Text(text)),
            Delta::ReasoningDelta { text } => Some(TurnEvent::Reasoning(text)),
            _ => None,
        }
    }

    /// Folds a committed event; what it means for this turn, if anything.
    fn apply(&mut self, event: Event) -> Result<Vec<TurnEvent>, RuntimeError> {
        match (event.kind, self.started) {
            (EventKind::UserMessage { input_id, .. }, None) if input_id == self.input_id => {
                self.started = event.run_id.map(|run_id| (run_id, event.seq));
                Ok(Vec::new())
            }
            (EventKind::InputDropped { input_id, reason }, None) if input_id == self.input_id => {
                Err(RuntimeError::InputDropped { input_id, reason })
            }
            (EventKind::SessionDeleted {}, _) => {
                Err(RuntimeError::SessionDeleted(event.session_id))
            }
            (kind, Some((run_id, first))) if event.run_id == Some(run_id) => {
                Ok(self.turn_event(kind, run_id, first..=event.seq))
            }
            _ => Ok(Vec::new()),
        }
    }

    fn turn_event(
        &mut self,
        kind: EventKind,
        run_id: RunId,
        seqs: RangeInclusive<Seq>,
    ) -> Vec<TurnEvent> {
        let event = match kind {
            EventKind::AssistantMessage(message) => {
                self.text = message.text;
                let calls = message.tool_calls;
                self.tool_calls
                    .extend(calls.iter().map(|call| ToolCallRecord {
                        call: call.clone(),
                        result: None,
                    }));
                return calls.into_iter().map(TurnEvent::ToolCall).collect();
            }
            EventKind::ToolMessage(result) => {
                if let Some(record) = self
                    .tool_calls
                    .iter_mut()
                    .find(|r| r.call.id == result.tool_call_id)
                {
                    record.result = Some(result.clone());
                }
                Some(TurnEvent::ToolResult(result))
            }
            EventKind::Usage(usage) => {
                add_usage(&mut self.usage, &usage);
                None
            }
            EventKind::ApprovalRequested {
                request_id,
                tool_call_id,
                tool_name,
                action,
                ..
            } => Some(TurnEvent::ApprovalRequested {
                request_id,
                tool_call_id,
                tool_name,
                action,
            }),
            EventKind::TurnComplete {
                status,
                reason,
                error,
            } => Some(TurnEvent::Done(TurnOutcome {
                input_id: self.input_id,
                run_id,
                status,
                reason,
                error,
                text: std::mem::take(&mut self.text),
                usage: self.usage,
                tool_calls: std::mem::take(&mut self.tool_calls),
                seqs,
            })),
            _ => None,
        };
        event.into_iter().collect()
    }
}

fn add_usage(total: &mut Usage, more: &Usage) {
    let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    total.input_tokens += more.input_tokens;
    total.output_tokens += more.output_tokens;
    total.cached_input_tokens = sum(total.cached_input_tokens, more.cached_input_tokens);
    total.reasoning_tokens = sum(total.reasoning_tokens, more.reasoning_tokens);
}

//! [`Probe`]: a [`ModelClient`] wrapper that timestamps what the runtime does with the
//! model, per load-test session, without changing any event.
//!
//! Per session (found from the `[ls:N]` tag the load test puts in every user message) it
//! records: the model-request latency (from `stream()` to the response's `Done`/`Error`),
//! the gap between the end of a response that asked for tools and the next `stream()`
//! call (tool time is subtracted later, from `tool_finished.duration_ms`), and the
//! instant each text chunk left the client (matched in order with the `TextDelta`s a
//! subscriber receives, for the relay latency).
//!
//! It also measures the CPU time spent inside the wrapped client (its `stream()` call
//! and every poll of its stream, see [`super::cpu`]) and keeps a copy of every request
//! session 0 sent, turn by turn ([`Captured`]), which `--compare-bare` replays with a
//! bare HTTP client: its turn k sends what the runtime sent in session 0's turn k.

use super::cpu::{CpuMeter, Metered};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{FinishReason, Message, StreamEvent};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The tag that starts every load-test user message: `[ls:<session index>] …`.
pub(crate) const TAG: &str = "[ls:";

/// What the probe recorded for one session.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// End of the last response when it asked for tools (the next request is the same
    /// turn's next step); `None` otherwise.
    last_end: Option<Instant>,
    /// Gaps between a tool-calling response's end and the next request, in order.
    pub(crate) gaps: Vec<Duration>,
    /// Request latencies (from `stream()` to `Done`/`Error`).
    pub(crate) latencies: Vec<Duration>,
    /// Emit instants of text chunks not yet matched by a subscriber.
    pub(crate) emits: VecDeque<Instant>,
    /// Requests started.
    pub(crate) requests: u64,
}

impl Slot {
    /// Forgets the emit instants not matched (a turn ended) and the queue's memory: a
    /// cleared queue kept its capacity, about 1 KiB a session for the rest of the run.
    pub(crate) fn forget_emits(&mut self) {
        self.emits = VecDeque::new();
    }
}

/// Per-session slots, indexed by session number.
pub(crate) type Slots = Arc<Vec<Mutex<Slot>>>;

/// Session 0's requests by turn: entry k holds every request the runtime sent in
/// session 0's turn k (0-based, from the `turn K:` of the turn's user message), in the
/// order sent — each step's request, retries included. At most one entry per turn of
/// the run (a request naming a later turn is not kept), so its memory is bounded by one
/// session's requests (which share their history prefix, see `provider::Messages`). A
/// turn that sent nothing (its submit failed) is an empty entry; turns after the last
/// one that sent a request have no entry.
pub(crate) type Captured = Arc<Mutex<Vec<Vec<ModelRequest>>>>;

/// Locks a slot, ignoring poisoning (a panicked holder left plain numbers behind).
pub(crate) fn lock(slot: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The wrapping client.
#[derive(Debug)]
pub(crate) struct Probe {
    inner: Arc<dyn ModelClient>,
    slots: Slots,
    /// CPU time spent inside the wrapped client.
    cpu: Arc<CpuMeter>,
    /// Session 0's requests, by turn.
    captured: Captured,
    /// Turns per session: the most turns [`Self::captured`] keeps.
    turns: usize,
}

impl Probe {
    /// Wraps `inner` with `sessions` empty slots; keeps session 0's requests of its first
    /// `turns` turns.
    pub(crate) fn new(inner: Arc<dyn ModelClient>, sessions: usize, turns: u32) -> Self {
        let slots = (0..sessions).map(|_| Mutex::default()).collect();
        Self {
            inner,
            slots: Arc::new(slots),
            cpu: Arc::default(),
            captured: Arc::default(),
            turns: usize::try_from(turns).unwrap_or(usize::MAX),
        }
    }

    /// The CPU meter of the wrapped client.
    pub(crate) fn cpu(&self) -> Arc<CpuMeter> {
        Arc::clone(&self.cpu)
    }

    /// Session 0's requests by turn (filled as the run goes).
    pub(crate) fn captured(&self) -> Captured {
        Arc::clone(&self.captured)
    }

    /// Keeps `request` of session 0 under its turn.
    fn capture(&self, request: &ModelRequest) {
        let Some(turn) = turn_index(request).filter(|t| *t < self.turns) else {
            return;
        };
        let mut captured = self.captured.lock().unwrap_or_else(PoisonError::into_inner);
        if captured.len() <= turn {
            captured.resize_with(turn + 1, Vec::new);
        }
        captured[turn].push(request.clone());
    }

    /// The slots (shared with the session drivers).
    pub(crate) fn slots(&self) -> Slots {
        Arc::clone(&self.slots)
    }
}

/// The text of a load-test user message: session `index`'s turn `turn` (0-based), in the
/// form [`session_index`] and [`turn_index`] read back.
pub(crate) fn user_text(index: usize, turn: u32) -> String {
    format!("{TAG}{index}] turn {turn}: read README.md and summarise it")
}

/// The texts of a request's user messages, oldest first.
fn user_texts(request: &ModelRequest) -> impl DoubleEndedIterator<Item = &str> {
    request.messages.iter().filter_map(|m| match m {
        Message::User(input) => Some(input.text.as_str()),
        _ => None,
    })
}

/// A tagged text's session index and what follows the tag.
fn tagged(text: &str) -> Option<(usize, &str)> {
    let rest = text.strip_prefix(TAG)?;
    let end = rest.find(']')?;
    Some((rest[..end].parse().ok()?, &rest[end + 1..]))
}

/// The session index in the first user message's `[ls:N]` tag.
fn session_index(request: &ModelRequest) -> Option<usize> {
    tagged(user_texts(request).next()?).map(|(index, _)| index)
}

/// The turn (0-based) of a request: the `K` of the driver's `[ls:N] turn K: …` in the
/// last user message (the input of the turn the request belongs to).
fn turn_index(request: &ModelRequest) -> Option<usize> {
    let (_, rest) = tagged(user_texts(request).next_back()?)?;
    let rest = rest.strip_prefix(" turn ")?;
    rest[..rest.find(':')?].parse().ok()
}

/// The probe does not forward the inner client's [`ModelClient::retry_policy`]: a load
/// test's retry policy is the runtime's default with `--max-attempts`, whatever profile
/// it drives.
impl ModelClient for Probe {
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let start = Instant::now();
        let index = session_index(&request).filter(|i| *i < self.slots.len());
        if let Some(i) = index {
            let mut slot = lock(&self.slots[i]);
            if let Some(end) = slot.last_end.take() {
                slot.gaps.push(start.saturating_duration_since(end));
            }
            slot.requests += 1;
        }
        if index == Some(0) {
            self.capture(&request);
        }
        let inner = self.cpu.measure(|| self.inner.stream(request, cancel));
        let inner = Metered {
            inner,
            meter: Arc::clone(&self.cpu),
        }
        .boxed();
        let Some(i) = index else { return inner };
        let slots = Arc::clone(&self.slots);
        inner
            .map(move |event| {
                match &event {
                    StreamEvent::TextDelta { .. } => {
                        lock(&slots[i]).emits.push_back(Instant::now());
                    }
                    StreamEvent::Done { finish_reason } => {
                        let now = Instant::now();
                        let mut slot = lock(&slots[i]);
                        slot.latencies.push(now.saturating_duration_since(start));
                        if *finish_reason == Some(FinishReason::ToolCalls) {
                            slot.last_end = Some(now);
                        }
                    }
                    StreamEvent::Error { .. } => {
                        let mut slot = lock(&slots[i]);
                        slot.latencies.push(start.elapsed());
                    }
                    _ => {}
                }
                event
            })
            .boxed()
    }

    fn context_window(&self) -> u64 {
        self.inner.context_window()
    }

    fn supports_images(&self) -> bool {
        self.inner.supports_images()
    }

    fn image_budget(&self) -> foya_actors::context::ImageBudget {
        self.inner.image_budget()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foya_protocol::Input;

    #[test]
    fn the_session_index_comes_from_the_first_user_message() {
        let request = |text: &str| ModelRequest {
            messages: vec![Message::User(Input::text(text))].into(),
            ..ModelRequest::default()
        };
        assert_eq!(session_index(&request("[ls:42] turn 1")), Some(42));
        assert_eq!(session_index(&request("hello")), None);
        assert_eq!(session_index(&request("[ls:x] turn")), None);
        assert_eq!(session_index(&ModelRequest::default()), None);
    }

    /// A request of session `session`'s turn `turn` with the history of its earlier
    /// turns (one user message and one answer each).
    fn turn_request(session: usize, turn: usize) -> ModelRequest {
        let mut messages = Vec::new();
        for t in 0..=turn {
            messages.push(Message::User(Input::text(format!(
                "{TAG}{session}] turn {t}: read README.md"
            ))));
            if t < turn {
                messages.push(Message::Assistant(foya_protocol::AssistantMessage {
                    text: format!("answer {t}"),
                    ..foya_protocol::AssistantMessage::default()
                }));
            }
        }
        ModelRequest {
            messages: messages.into(),
            ..ModelRequest::default()
        }
    }

    #[test]
    fn the_turn_index_comes_from_the_last_user_message() {
        assert_eq!(turn_index(&turn_request(0, 0)), Some(0));
        assert_eq!(turn_index(&turn_request(3, 12)), Some(12));
        let request = |text: &str| ModelRequest {
            messages: vec![Message::User(Input::text(text))].into(),
            ..ModelRequest::default()
        };
        assert_eq!(turn_index(&request("[ls:0] turn x: hi")), None);
        assert_eq!(turn_index(&request("[ls:0] hello")), None);
        assert_eq!(turn_index(&request("hello")), None);
        assert_eq!(turn_index(&ModelRequest::default()), None);
        // What the driver sends reads back.
        let sent = request(&user_text(7, 5));
        assert_eq!(
            (session_index(&sent), turn_index(&sent)),
            (Some(7), Some(5))
        );
    }

    #[tokio::test]
    async fn session_zeros_requests_are_kept_by_turn_up_to_the_runs_turns() {
        let sim = foya_actors::provider::sim::SimClient::new(Default::default());
        let probe = Probe::new(Arc::new(sim), 2, 2);
        let sent = [
            turn_request(0, 0),
            turn_request(1, 0),
            turn_request(0, 0),
            turn_request(0, 1),
            turn_request(1, 1),
            // Beyond the run's 2 turns: not kept.
            turn_request(0, 2),
        ];
        for request in sent {
            drop(probe.stream(request, CancellationToken::new()));
        }
        let captured = probe.captured().lock().unwrap().clone();
        assert_eq!(
            captured,
            vec![
                vec![turn_request(0, 0), turn_request(0, 0)],
                vec![turn_request(0, 1)],
            ]
        );
    }
}

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
//! and every poll of its stream, see [`super::cpu`]) and keeps a copy of session 0's
//! first-turn requests, which `--compare-bare` replays with a bare HTTP client.

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

/// Per-session slots, indexed by session number.
pub(crate) type Slots = Arc<Vec<Mutex<Slot>>>;

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
    /// Session 0's first-turn requests, in order.
    captured: Arc<Mutex<Vec<ModelRequest>>>,
}

impl Probe {
    /// Wraps `inner` with `sessions` empty slots.
    pub(crate) fn new(inner: Arc<dyn ModelClient>, sessions: usize) -> Self {
        let slots = (0..sessions).map(|_| Mutex::default()).collect();
        Self {
            inner,
            slots: Arc::new(slots),
            cpu: Arc::default(),
            captured: Arc::default(),
        }
    }

    /// The CPU meter of the wrapped client.
    pub(crate) fn cpu(&self) -> Arc<CpuMeter> {
        Arc::clone(&self.cpu)
    }

    /// Session 0's first-turn requests (filled as the run goes).
    pub(crate) fn captured(&self) -> Arc<Mutex<Vec<ModelRequest>>> {
        Arc::clone(&self.captured)
    }

    /// The slots (shared with the session drivers).
    pub(crate) fn slots(&self) -> Slots {
        Arc::clone(&self.slots)
    }
}

/// The session index in the first user message's `[ls:N]` tag.
fn session_index(request: &ModelRequest) -> Option<usize> {
    let text = request.messages.iter().find_map(|m| match m {
        Message::User(input) => Some(input.text.as_str()),
        _ => None,
    })?;
    let rest = text.strip_prefix(TAG)?;
    rest[..rest.find(']')?].parse().ok()
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
        let first_turn = || {
            request
                .messages
                .iter()
                .filter(|m| matches!(m, Message::User(_)))
                .count()
                == 1
        };
        if index == Some(0) && first_turn() {
            self.captured
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(request.clone());
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
}

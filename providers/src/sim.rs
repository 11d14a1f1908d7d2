//! The simulated model in process (feature `sim`): [`SimClient`], the simulator of
//! `foya-sim` as a [`ModelClient`], paced with tokio time (so it runs instantly under
//! paused time in tests).
//!
//! The simulator itself (configuration, planner, wire encoders) is the `foya-sim` crate,
//! re-exported here so an embedder needs one path; its HTTP server is `foya-sim`'s
//! `server` feature (re-exported here with this crate's `sim-server`, not default), so
//! by default this crate pulls no HTTP server.

pub use foya_sim::{
    CALL_PLACEHOLDER, ErrorRates, HistorySummary, STEP_PLACEHOLDER, SimConfig, SimModel,
    SimOutcome, SimRejection, SimResponse, TimedEvent, wire,
};
/// The simulator's HTTP server (feature `sim-server`, not default): `foya_sim`'s.
#[cfg(feature = "sim-server")]
pub use foya_sim::{serve_sim, serve_sim_with_shutdown, sim_router};

use crate::{ModelClient, ModelRequest};
use foya_protocol::StreamEvent;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The simulated model, in process: no sockets, no serialisation.
///
/// Cheap to clone (shares one [`SimModel`], attempt counter included).
#[derive(Debug, Clone)]
pub struct SimClient {
    model: Arc<SimModel>,
}

impl SimClient {
    /// A client simulating `config`.
    #[must_use]
    pub fn new(config: SimConfig) -> Self {
        Self {
            model: Arc::new(SimModel::new(config)),
        }
    }

    /// The shared planner (to inspect what a request would get).
    #[must_use]
    pub fn model(&self) -> &Arc<SimModel> {
        &self.model
    }
}

impl ModelClient for SimClient {
    /// Plans the response at once, then replays it on tokio time: the first content
    /// event after `ttft_ms`, the rest at `tokens_per_s`. A rejection is a single
    /// `Error` event, immediately; a cut stream ends without `Done`.
    ///
    /// # Cancel safety
    /// Dropping the stream or cancelling `cancel` ends it at once (no further events).
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let response = self.model.respond(&history_of(&request));
        match response.outcome {
            SimOutcome::Rejected(rejection) => stream::iter([StreamEvent::Error {
                error: rejection.to_error(),
            }])
            .boxed(),
            SimOutcome::Streamed { events, .. } => paced(events, cancel),
        }
    }

    fn context_window(&self) -> u64 {
        self.model.config().context_window_tokens
    }
}

/// What the simulator reads from a neutral request ([`HistorySummary::from_messages`]).
#[must_use]
pub fn history_of(request: &ModelRequest) -> HistorySummary {
    HistorySummary::from_messages(
        &request.system,
        request.messages.iter(),
        &request.model,
        !request.tools.is_empty(),
    )
}

/// Replays `events` at their offsets from the first poll; ends early on `cancel`.
fn paced(events: Vec<TimedEvent>, cancel: CancellationToken) -> BoxStream<'static, StreamEvent> {
    struct State {
        events: std::vec::IntoIter<TimedEvent>,
        start: Option<Instant>,
        elapsed: Duration,
        cancel: CancellationToken,
    }
    let state = State {
        events: events.into_iter(),
        start: None,
        elapsed: Duration::ZERO,
        cancel,
    };
    stream::unfold(state, |mut s| async move {
        let start = *s.start.get_or_insert_with(Instant::now);
        let next = s.events.next()?;
        if next.at > s.elapsed {
            tokio::select! {
                biased;
                // Cancelled while waiting: the rest of the response is never produced.
                () = s.cancel.cancelled() => return None,
                () = tokio::time::sleep_until(start + next.at) => s.elapsed = next.at,
            }
        } else if s.cancel.is_cancelled() {
            return None;
        }
        Some((next.event, s))
    })
    .boxed()
}

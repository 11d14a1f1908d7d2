//! Which step a model request belongs to, for a [`super::ModelClient`] that wraps another
//! (telemetry measures each request's time to first token and attaches it to the step):
//! [`current_step`] answers inside [`super::ModelClient::stream`] when the runtime calls
//! it for a turn's step (not for a title or a compaction summary).

use foya_protocol::{RunId, SessionId};

/// The step a model request is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOf {
    /// The session.
    pub session: SessionId,
    /// Its turn.
    pub run: RunId,
}

tokio::task_local! {
    static STEP: StepOf;
}

/// The step whose request is being made, when called inside
/// [`super::ModelClient::stream`] for a turn's step; `None` elsewhere.
#[must_use]
pub fn current_step() -> Option<StepOf> {
    STEP.try_with(|s| *s).ok()
}

/// Runs `f` (the call of `stream`) with [`current_step`] answering `step` (the runtime's
/// stream task calls it).
pub fn in_step<T>(step: Option<StepOf>, f: impl FnOnce() -> T) -> T {
    match step {
        Some(step) => STEP.sync_scope(step, f),
        None => f(),
    }
}

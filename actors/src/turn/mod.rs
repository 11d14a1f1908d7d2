//! TurnActor: one per turn, spawned linked by its SessionActor; runs the step loop.
//!
//! A step: `step_started` (written together with the step's next event); compile the
//! context from the committed log
//! (`context::compile`, see `context.rs`; `context_diagnostics`; compaction first when
//! over the threshold, see `compaction.rs`); spawn a ProviderActor; relay its deltas
//! live (text, reasoning, tool-call fragments, `tool_call_queued` as soon as a call's id
//! and name are known); on `Done` persist `assistant_message` (+ `usage`) — committed
//! before any tool runs; if the model asked for tools, run them through ToolActors and
//! persist their results in call order, then loop; otherwise the stop hooks run
//! (`control.rs`) and the turn ends `turn_complete{completed}` (or continues).
//!
//! Run protection (`protection.rs`, a pure state machine, driven from `control.rs`):
//! duplicate calls are answered "not run" at the threshold, repeated identical failures
//! of a tool stop it being run, a step cycle (A-B-A-B) or insisting on a blocked call ends
//! the turn `failed/loop_detected`.
//!
//! Failures: transient provider classes retry with `RetryPolicy::delay_for` (a
//! `provider_retry` event first; the wait is a task that reports by message, so it is
//! cancellable; a retry re-sends the request only, never re-runs a tool); other classes
//! end the turn `failed` with the class. At `max_steps` one final request without tools
//! lets the model summarise, then the turn ends `failed/max_steps`.
//! `context_overflow` compacts once per turn (trigger `overflow`, when automatic
//! compaction is on) and re-runs the step; a second one fails the turn.
//!
//! Cancellation: the session owns the turn's `CancellationToken`; provider and tools get
//! child tokens. The mailbox never waits on a stream, a tool, a backoff or an approval
//! (those are children or tasks that report by message), so `Cancel` is handled at once:
//! stop the stream and tools, persist the partial assistant message (`interrupted`) if
//! anything arrived, a "cancelled" result for every call of the step without one, then
//! `turn_cancelled` and `turn_complete{cancelled}`.
//!
//! Tool scheduling: `tools::schedule::plan_batches` — consecutive `parallel_safe` calls
//! form a batch that runs concurrently (at most `tools::schedule::MAX_PARALLEL` ToolActors
//! alive); a call that is not parallel-safe is a batch of its own; batches run in order,
//! each after the previous one finished. A ToolActor that panics becomes an `is_error`
//! "tool crashed" result.

pub(crate) mod actor;
mod compaction;
mod context;
mod control;
mod duplicates;
mod failure;
mod hooks;
mod mcp;
pub(crate) mod protection;
mod tools;

pub(crate) use actor::{TurnActor, TurnArgs};
pub(crate) use tools::CANCELLED;

use foya_protocol::{StreamEvent, ToolMessage};

/// What a turn does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnMode {
    /// The step loop (model requests and tools).
    Model,
    /// `/compact`: compact the context now, then end the turn.
    Compact,
}

/// Messages of the TurnActor.
#[derive(Debug)]
pub(crate) enum TurnMsg {
    /// Start the first step (sent to itself once started).
    Begin,
    /// Stream events of model request number `request`, in order (one or more; a
    /// terminal `Done`/`Error` is always last). Only for requests without a relay
    /// (summarisation).
    Stream {
        request: u64,
        events: Vec<StreamEvent>,
    },
    /// The relayed stream of model request number `request` (a step's request) ended
    /// with `event` (`Done` or `Error`); every event before it is folded into the relay
    /// (`provider::relay`), whose deltas are published.
    StreamEnded { request: u64, event: StreamEvent },
    /// The backoff before retrying model request number `request` elapsed.
    RetryElapsed { request: u64 },
    /// A ToolActor finished call `index` of the current step. `duration_ms` is set when
    /// the tool ran (its `tool_started` is committed): the turn then appends the call's
    /// `tool_finished` with the results that became committable (one append, not two).
    ToolDone {
        index: usize,
        result: ToolMessage,
        duration_ms: Option<u64>,
    },
    /// Cancel the turn.
    Cancel { reason: String },
    /// The stop hooks of the current stop answered.
    HookDone { run: crate::hooks::runner::HookRun },
    /// A tool hook answered `continue: false`: the turn ends once the step's results
    /// are in.
    HookStopped { reason: Option<String> },
    /// Test hook: panic in the handler.
    #[cfg(test)]
    Panic,
}

impl ractor::Message for TurnMsg {}

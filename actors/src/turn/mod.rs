//! The turn: one per turn, spawned linked by its SessionActor; runs the step loop.
//!
//! Its rules live in a pure state machine, [`machine::TurnMachine`] (`machine/`: the
//! step loop, tool batching and call order, run protection, retries, overflow recovery,
//! compaction, stop hooks, cancellation — read it top to bottom there). The
//! [`TurnActor`] (`actor.rs`) is its driver: it carries out the machine's effects —
//! session appends (merged into one commit where they are back to back), context
//! compilation (`context.rs`), a stream task per model request and its live relay, a tool call's
//! checks, hooks, approval question and ToolActor (`tools.rs`), hook tasks (`hooks.rs`),
//! MCP tool listings (`mcp.rs`), the backoff timer — and feeds their results back as
//! inputs.
//!
//! Run protection (`protection.rs`) and repeated call ids (`duplicates.rs`) are pure
//! helpers the machine drives.

pub(crate) mod actor;
mod context;
mod env;
mod hooks;
pub(crate) use foya_core::turn::machine;
#[cfg(feature = "mcp")]
mod mcp;
pub(crate) use foya_core::turn::protection;
pub(crate) mod port;
pub(crate) mod provider;
mod tool;
mod tools;

pub(crate) use actor::{TurnActor, TurnArgs};
pub(crate) use foya_core::turn::TurnMode;

use foya_protocol::{StreamEvent, ToolMessage};

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
    /// (`turn::provider::relay`), whose deltas are published.
    StreamEnded { request: u64, event: StreamEvent },
    /// The stream task of model request number `request` panicked (`why`: the panic's
    /// text): a `stream_interrupted` failure of the request.
    StreamPanicked { request: u64, why: String },
    /// The backoff before retrying model request number `request` elapsed.
    RetryElapsed { request: u64 },
    /// A ToolActor ran call `index` of the current step for `duration_ms`.
    ToolDone {
        index: usize,
        result: ToolMessage,
        duration_ms: u64,
    },
    /// The `PreToolUse`/`PostToolUse` hooks of call `index` answered (`None`: a hook
    /// panicked, the call crashed).
    ToolHookDone {
        index: usize,
        run: Option<crate::hooks::HookRun>,
    },
    /// The approval question of call `index` was answered.
    ApprovalDone {
        index: usize,
        answer: foya_core::approval::ApprovalAnswer,
    },
    /// Cancel the turn.
    Cancel { reason: String },
    /// The hooks of the current hook point answered.
    HookDone { run: crate::hooks::HookRun },
    /// Test hook: panic in the handler.
    #[cfg(test)]
    Panic,
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for TurnMsg {}

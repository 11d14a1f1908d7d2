//! The session's rules: the pure state machine ([`machine::SessionMachine`]), the fold of
//! its log ([`state::apply`]), and the values the machine shares with its driver.

pub mod machine;
pub mod state;

use foya_protocol::{ApprovalRequestId, RunId, SessionId, ToolCallId};

/// What recovery does with inputs that were queued (persisted `input_queued`, never
/// started) when a session is loaded after the runtime stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueuedOnRestart {
    /// They stay queued, in order, and run one after another (default).
    #[default]
    Run,
    /// Each gets `input_dropped{reason: "dropped on restart"}`, in order.
    Drop,
}

/// What happens to a call that needs a person's approval while no approver
/// (`SubscribeOptions::approver`) is attached to its session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WithoutApprover {
    /// The request waits, like one an approver sees: `approval_requested` is committed,
    /// `SessionHandle::pending_approvals` lists it and `SessionHandle::decide_approval`
    /// answers it (an approver attaching later can too); the turn waits meanwhile
    /// (cancel ends it). Default.
    #[default]
    Wait,
    /// The call is denied at once (`approval_requested` then `approval_decided{deny}`
    /// with a message saying no approver is attached), as `foya run` does.
    Deny,
}

/// Why a runtime (not a person) stops a session's running turn: the reason its
/// `turn_cancelled` records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StopCause {
    /// The runtime shuts down (`runtime shutdown`).
    #[default]
    Shutdown,
    /// A cluster node hands the session's shard to another node (placement moved it:
    /// a node joined); the turn outlived the handoff's drain.
    HandedOff,
    /// A cluster node stops (SIGTERM) and hands its shards to the others; the turn
    /// outlived the drain.
    NodeStopping,
}

impl StopCause {
    /// The `turn_cancelled` reason.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::Shutdown => machine::SHUTDOWN_REASON,
            Self::HandedOff => "shard handed off to another node",
            Self::NodeStopping => "node stopping: shard handed off to another node",
        }
    }
}

/// A tool call waiting for a decision (`SessionHandle::pending_approvals`,
/// answered with `SessionHandle::decide_approval`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// Answer it with this id.
    pub request_id: ApprovalRequestId,
    /// The call.
    pub tool_call_id: ToolCallId,
    /// Tool name.
    pub tool_name: String,
    /// The exact command or path.
    pub action: String,
    /// Why approval is needed.
    pub reason: String,
}

pub use crate::approval::ApprovalAnswer;

/// What a started input turns into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Run the step loop.
    Model,
    /// Compact now.
    Compact,
    /// Set this title by hand.
    SetTitle(String),
    /// Generate a title.
    GenerateTitle,
    /// Fail the turn with this message (`invalid_request`).
    Unknown(String),
}

/// Why the session machine refused a request; the runtime turns it into its own error
/// type (`RuntimeError`) variant for variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The session was deleted.
    #[error("session {0} was deleted")]
    SessionDeleted(SessionId),
    /// The input carries nothing.
    #[error("the input is empty")]
    EmptyInput,
    /// No pending approval request has this id.
    #[error("no pending approval request {0}")]
    UnknownApproval(ApprovalRequestId),
    /// The event store refused a write the request needed (nothing was written).
    #[error("storage: {0}")]
    Storage(String),
    /// The input carries images but the session's model does not accept them.
    #[error(
        "model {model:?} does not accept images (its provider profile has no vision); send the input without images"
    )]
    ImagesNotSupported {
        /// The session's model name.
        model: String,
    },
    /// The runtime is shutting down: it takes no new inputs.
    #[error("the runtime is shutting down")]
    ShuttingDown,
}

/// Why the session refused a turn's append (nothing of it was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendRefused {
    /// A cancel was asked: tool activity is no longer recorded.
    #[error("the turn is being cancelled")]
    Cancelling,
    /// An earlier append of the turn failed in the store.
    #[error("the turn failed on a storage error: {0}")]
    TurnStorageFailed(String),
    /// The run is not the session's open turn (it ended, or never started).
    #[error("run {0} is not the session's open turn")]
    NotOpen(RunId),
    /// The store refused the write.
    #[error("storage: {0}")]
    Storage(String),
}

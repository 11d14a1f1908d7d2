//! The turn's port to its session: what a TurnActor, its ToolActors and its stream relay
//! ask of the session that runs them. The session implements it (`session/port.rs`); the
//! turn names no session message, so `turn` does not import `session` (the session
//! starts turns, never the other way round).

use foya_core::session::ApprovalAnswer;
use foya_protocol::{Delta, EventKind, RunId, ToolCallId};
use ractor::ActorProcessingErr;
use std::sync::Arc;

/// A turn's session, as the turn sees it.
pub(crate) type Port = Arc<dyn SessionPort>;

/// An approval question of a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalQuestion {
    pub run_id: RunId,
    pub tool_call_id: ToolCallId,
    pub tool_name: String,
    /// The exact command, path or URL.
    pub action: String,
    /// Why approval is needed.
    pub reason: String,
    /// What an "allow for this session" decision grants (empty: none offered).
    pub grant_key: String,
}

/// What a turn asks of its session.
#[async_trait::async_trait]
pub(crate) trait SessionPort: Send + Sync + std::fmt::Debug {
    /// Persists `kinds` of `run_id`, in order, and waits until they are committed.
    ///
    /// # Errors
    /// The session refused them (the turn is over, the store failed) or did not answer.
    async fn append(&self, run_id: RunId, kinds: Vec<EventKind>) -> Result<(), ActorProcessingErr>;

    /// Persists `kinds` of `run_id` without waiting (in order with the caller's other
    /// appends: the session's mailbox keeps their order).
    fn append_later(&self, run_id: RunId, kinds: Vec<EventKind>);

    /// Broadcasts live deltas of `run_id` to the session's subscribers, in order.
    fn publish(&self, run_id: RunId, deltas: Vec<Delta>);

    /// Asks the session for a decision (a grant, an approver, or a denial when none is
    /// attached); `None` when the request was dropped unanswered.
    async fn ask_approval(&self, question: ApprovalQuestion) -> Option<ApprovalAnswer>;
}

//! SessionActor: one per live session; the only writer of its session's events.
//!
//! Split as a pure machine and a thin driver:
//! - `machine/` holds every rule: the phase (idle | turn — running, compacting,
//!   cancelling or failed on storage — | shutting down | deleting | deleted), the FIFO
//!   queue, dense seqs, late appends refused, approvals, titles, recovery on load,
//!   hibernation; see its module docs for the invariants;
//! - `actor.rs` and `effects.rs` drive it: every message becomes a machine input, and
//!   the machine's effects are carried out — store appends (awaited inside the
//!   handler: short group commits; a Cancel waits behind at most one), subscriber
//!   channels, the TurnActor and TitleActor (`title/`), replies, hooks.
//!
//! Every event of the session — its own and those its TurnActor and ToolActors produce —
//! goes through [`SessionMsg::Append`]: committed, folded into [`state::SessionState`]
//! and only then broadcast to subscribers. The session also keeps the committed log in
//! memory ([`crate::log::SharedLog`], started from what the supervisor read or wrote): its
//! TurnActor compiles every step from it, never from the store. Idle, it keeps the log
//! only within the runtime's idle budget ([`crate::log::IdleLogs`]); without it, the next
//! turn's start reads the log from the store once.
//!
//! Hibernation: idle and unwatched for `RuntimeConfig::hibernate_after`, the actor stops
//! and holds nothing; the next call loads it from the log (`hibernate.rs`). Commands:
//! `commands.rs`.

pub(crate) mod actor;
mod commands;
mod effects;
mod hibernate;
mod port;
pub(crate) use foya_core::session::machine;
pub(crate) use foya_core::session::state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_approval;
#[cfg(test)]
mod tests_durability;
#[cfg(test)]
mod tests_hibernate;
#[cfg(test)]
mod tests_lifecycle;
#[cfg(test)]
mod tests_not_started;
#[cfg(test)]
mod tests_relay;
#[cfg(test)]
mod tests_subscribe_prop;
mod title;

pub(crate) use crate::kernel::Reply;
use foya_protocol::event::Delta;
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, EventKind, Input, InputId, RunId, Seq, SessionUpdate,
    ToolCallId,
};
use ractor::RpcReplyPort;
use tokio::sync::mpsc;

pub(crate) use foya_core::session::ApprovalAnswer;

/// What a new subscriber gets: its live channel and the last seq committed when it was
/// registered (replay covers up to it; the channel carries everything after).
/// One subscriber's channel item. Boxed so the channel's slots stay one pointer wide:
/// tokio allocates a channel's slots in blocks of 32, and 32 inline updates (about
/// 8 KiB) per block per subscriber was a large part of the memory of many concurrent
/// sessions.
pub(crate) type UpdateItem = Box<SessionUpdate>;

pub(crate) type Subscribed = (mpsc::Receiver<UpdateItem>, Seq, WatchGuard);

/// Held by a subscription beside its channel's receiver; dropped after it, it tells the
/// session ([`SessionMsg::Unwatched`]), which then finds the channel closed: a session
/// whose last subscriber went away can hibernate at once instead of noticing at its next
/// hibernation check.
#[derive(Debug)]
pub(crate) struct WatchGuard(pub(crate) ractor::ActorRef<SessionMsg>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        // The session may be gone already: nothing to tell then.
        let _ = self.0.cast(SessionMsg::Unwatched);
    }
}

/// Messages of the SessionActor.
#[derive(Debug)]
pub(crate) enum SessionMsg {
    /// Submit an input (applied once per input id).
    SubmitInput {
        input_id: InputId,
        input: Input,
        reply: Reply<InputId>,
    },
    /// Register a subscriber.
    Subscribe {
        approver: bool,
        reply: Reply<Subscribed>,
    },
    /// Cancel the active turn (no-op when idle).
    Cancel { reply: Reply<()> },
    /// Drop all queued inputs.
    ClearQueue { reply: Reply<()> },
    /// The approval requests waiting for a decision.
    GetPendingApprovals {
        reply: Reply<Vec<crate::outcome::ApprovalRequest>>,
    },
    /// Answer an approval request.
    DecideApproval {
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
        reply: Reply<()>,
    },
    /// Set the title by hand.
    SetTitle { title: String, reply: Reply<()> },
    /// Use this provider and model from the next turn on (`config_changed` when they
    /// differ from the session's).
    SetModel {
        provider: String,
        model: String,
        reply: Reply<()>,
    },
    /// Delete the session (cancels the turn first).
    Delete { reply: Reply<()> },
    /// From a child: persist these events of `run_id`, in order.
    Append {
        run_id: RunId,
        kinds: Vec<EventKind>,
        reply: Option<RpcReplyPort<Result<(), foya_core::session::AppendRefused>>>,
    },
    /// From a child: broadcast live deltas, in order.
    PublishDeltas { run_id: RunId, deltas: Vec<Delta> },
    /// From a ToolActor: ask the approver (or deny when none is attached).
    RequestApproval {
        run_id: RunId,
        tool_call_id: ToolCallId,
        tool_name: String,
        action: String,
        reason: String,
        grant_key: String,
        reply: RpcReplyPort<ApprovalAnswer>,
    },
    /// From the TitleActor: a generated title, applied only if the session's title is
    /// still `expected` (what it was when generation started).
    TitleGenerated {
        title: String,
        expected: Option<(String, foya_protocol::TitleSource)>,
        /// Answered with whether the title was applied.
        reply: Option<RpcReplyPort<bool>>,
    },
    /// The hibernation check (`hibernate.rs`): stop if idle and unwatched for the
    /// runtime's `hibernate_after`.
    Hibernate,
    /// A subscription was dropped ([`WatchGuard`]): hibernate at once if nothing watches
    /// the session any more and the runtime hibernates at once
    /// (`RuntimeConfig::hibernate_at_once_above`).
    Unwatched,
    /// Runtime shutdown (or a handoff's end): take no more inputs, start nothing from
    /// the queue, cancel the active turn (reason: `cause`'s, `runtime shutdown` for
    /// [`StopCause::Shutdown`](foya_core::session::StopCause)); answered once no turn
    /// runs (at once when idle).
    Shutdown {
        cause: foya_core::session::StopCause,
        reply: RpcReplyPort<()>,
    },
    /// A handoff's drain: start nothing more from the queue (inputs taken meanwhile are
    /// queued in the log for the next owner), let the running turn finish; answered once
    /// no turn runs (at once when idle).
    Drain { reply: RpcReplyPort<()> },
    /// A handoff's end: this runtime stops serving the session (its shard goes to
    /// another node). Tells every subscriber `Notice::Moved{reason}`, then stops without
    /// writing; answered before it stops.
    Release {
        reason: &'static str,
        reply: RpcReplyPort<()>,
    },
    /// Test hook: make the active TurnActor panic.
    #[cfg(test)]
    CrashTurn,
    /// Test hook: make the SessionActor itself panic.
    #[cfg(test)]
    Crash,
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for SessionMsg {}

/// Whether an actor in `status` still takes messages (starting, running, upgrading): a
/// registry entry that is stopping or stopped is replaced by a fresh load.
pub(crate) fn is_alive(status: ractor::ActorStatus) -> bool {
    use ractor::ActorStatus::{Running, Starting, Upgrading};
    matches!(status, Starting | Running | Upgrading)
}

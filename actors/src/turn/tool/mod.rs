//! ToolActor: one per tool call, spawned linked by the TurnActor (at most
//! `tools::schedule::MAX_PARALLEL` alive).
//!
//! Runs one call: `ToolRegistry::prepare` (unknown tool, invalid JSON, arguments that are
//! not an object or violate the tool's schema → `is_error` result with the registry's
//! message, nothing run), the Approval Gateway (`tools::approval::evaluate`: `Allow`
//! runs under its sandbox, `Deny` is an `is_error` result with the reason — after the
//! `PreToolUse` hooks, which may only tighten it (`hooks.rs`) —, `Ask` persists
//! `approval_requested` through the session and waits for `decide_approval` — the session
//! answers at once from its live "allow for this session" grants, and denies at once
//! with no approver attached — then runs under `sandbox_if_allowed`), `tool_started`, the
//! tool itself with the verdict's sandbox in `ToolContext::sandbox`, a cancellation token
//! and a backstop timeout, progress as `tool_update` events and live `tool_output`
//! deltas, the `PostToolUse` hooks, then `tool_finished`. The result goes back to the TurnActor
//! (`TurnMsg::ToolDone`), which commits `tool_message`s in call order.
//!
//! The call runs inside the actor's handler: nothing else is ever sent to a ToolActor
//! (cancel is its token; a hard stop is `kill`, which drops the tool future), so the
//! turn's mailbox stays free. A panicking tool panics the handler: the TurnActor gets
//! `ActorFailed` and records "tool crashed". Once the turn's token is cancelled the actor
//! stops without reporting (even if its tool returned): the turn writes the "cancelled"
//! result — after the output the call had streamed so far, which the actor records in
//! `ToolArgs::partial` — so a cancel always ends in the same events.

pub(crate) mod actor;
mod hooks;

pub(crate) use actor::{ToolActor, ToolArgs};

/// Messages of the ToolActor.
#[derive(Debug)]
pub(crate) enum ToolMsg {
    /// Run the call (sent to itself once started).
    Run,
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for ToolMsg {}

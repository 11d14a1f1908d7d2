//! ToolActor: the turn's pool of them (at most `tools::schedule::MAX_PARALLEL` calls
//! run at once), spawned linked by the TurnActor on demand and reused for the turn's
//! later calls, in this step and the next.
//!
//! Runs one call at a time that the turn's machine checked and allowed
//! (`machine/call.rs`: validation, `PreToolUse` hooks, approval and `PostToolUse` hooks
//! are states of the turn's call lifecycle, carried out by the TurnActor,
//! `turn/tools.rs`): the prepared call under the sandbox it was given in
//! `ToolContext::sandbox`, with the call's own cancellation token (a child of the
//! turn's) and a backstop timeout, progress as `tool_update` events and live
//! `tool_output` deltas. The result and the run's duration go back to the TurnActor
//! (`TurnMsg::ToolDone`), whose machine adds what the hooks said and commits the
//! `tool_message`s in call order; the actor then waits, idle in the turn's pool, for its
//! next call. Everything that is a call's own travels in the call's [`ToolJob`], so a
//! reused actor carries nothing from one call to the next.
//!
//! The call runs inside the actor's handler: nothing but the next call is ever sent to a
//! ToolActor (cancel is its token; a hard stop is `kill`, which drops the tool future and
//! takes the actor out of the pool), so the turn's mailbox stays free. A panicking tool
//! panics the handler: the TurnActor gets `ActorFailed`, records "tool crashed" and
//! never reuses that actor. Once the turn's token is cancelled the actor stops without
//! reporting (even if its tool returned): the turn writes the "cancelled" result — after
//! the output the call had streamed so far, which the actor records in
//! `ToolJob::partial` — so a cancel always ends in the same events. The pool's actors
//! are the turn's linked children: they die with it.

pub(crate) mod actor;

pub(crate) use actor::{ToolActor, ToolEnv, ToolJob};

/// Messages of the ToolActor.
#[derive(Debug)]
pub(crate) enum ToolMsg {
    /// Run this call and report it to the turn.
    Run(Box<ToolJob>),
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for ToolMsg {}

//! ToolActor: one per tool call, spawned linked by the TurnActor (at most
//! `tools::schedule::MAX_PARALLEL` alive).
//!
//! Runs one call the turn's machine checked and allowed (`machine/call.rs`: validation,
//! `PreToolUse` hooks, approval and `PostToolUse` hooks are states of the turn's call
//! lifecycle, carried out by the TurnActor, `turn/tools.rs`): the prepared call under the
//! sandbox it was given in `ToolContext::sandbox`, with a cancellation token and a
//! backstop timeout, progress as `tool_update` events and live `tool_output` deltas.
//! The result and the run's duration go back to the TurnActor (`TurnMsg::ToolDone`),
//! whose machine adds what the hooks said and commits the `tool_message`s in call order.
//!
//! The call runs inside the actor's handler: nothing else is ever sent to a ToolActor
//! (cancel is its token; a hard stop is `kill`, which drops the tool future), so the
//! turn's mailbox stays free. A panicking tool panics the handler: the TurnActor gets
//! `ActorFailed` and records "tool crashed". Once the turn's token is cancelled the actor
//! stops without reporting (even if its tool returned): the turn writes the "cancelled"
//! result — after the output the call had streamed so far, which the actor records in
//! `ToolArgs::partial` — so a cancel always ends in the same events.

pub(crate) mod actor;

pub(crate) use actor::{ToolActor, ToolArgs};

/// Messages of the ToolActor.
#[derive(Debug)]
pub(crate) enum ToolMsg {
    /// Run the call (sent to itself once started).
    Run,
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for ToolMsg {}

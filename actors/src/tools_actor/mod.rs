//! ToolActor: one per tool call, spawned linked by the TurnActor (at most five alive).
//!
//! Runs one call: [`prepare_call`] (unknown tool, arguments that are not a JSON object →
//! `is_error` result, nothing run), the approval gate (see [`approval`]: asking persists
//! `approval_requested` through the session and waits for `decide_approval`; with no
//! approver attached the call is denied at once), `tool_started`, the tool itself with a
//! cancellation token and its `default_timeout_ms`, progress as `tool_update` events and
//! live `tool_output` deltas, then `tool_finished`. The result goes back to the TurnActor
//! (`TurnMsg::ToolDone`), which commits `tool_message`s in call order.
//!
//! The call runs inside the actor's handler: nothing else is ever sent to a ToolActor
//! (cancel is its token; a hard stop is `kill`, which drops the tool future), so the
//! turn's mailbox stays free. A panicking tool panics the handler: the TurnActor gets
//! `ActorFailed` and records "tool crashed".

pub(crate) mod actor;
pub(crate) mod approval;

pub(crate) use actor::{ToolActor, ToolArgs};

/// Messages of the ToolActor.
#[derive(Debug)]
pub(crate) enum ToolMsg {
    /// Run the call (sent to itself once started).
    Run,
}

impl ractor::Message for ToolMsg {}

use crate::tools::Tool;
use foya_protocol::ToolCall;
use std::sync::Arc;

/// Checks a call before anything runs: the tool exists and its arguments are a JSON
/// object. The error text goes to the model as an `is_error` result.
///
/// # Errors
/// The message for the model when the call cannot run.
pub(crate) fn prepare_call(
    tool: Option<&Arc<dyn Tool>>,
    call: &ToolCall,
) -> Result<Arc<dyn Tool>, String> {
    let Some(tool) = tool else {
        return Err(format!("unknown tool {:?}", call.name));
    };
    if !call.arguments.is_object() {
        return Err(format!(
            "the arguments of {} must be a JSON object, got: {}",
            call.name, call.arguments
        ));
    }
    Ok(Arc::clone(tool))
}

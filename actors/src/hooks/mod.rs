//! Stop hooks: code that runs when the model stops without tool calls and may ask the
//! turn to continue. In-process hooks implement [`StopHook`]; command hooks
//! ([`command::CommandStopHook`]) speak the contract of Claude Code's `Stop` hook so
//! existing hook scripts work (JSON on stdin; exit 2 or `{"decision":"block"}` continues
//! the turn; `{"continue": false}` ends it).
//!
//! A hook can only choose between "stop", "continue with this instruction" and "end":
//! it cannot change the approval mode, the sandbox policy or the tool set (any such field
//! in a hook's output is ignored). Hooks do not run on cancel or on provider failure.

pub mod command;

use async_trait::async_trait;
use foya_protocol::{ApprovalMode, RunId, SessionId};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// What a stop hook receives (the JSON written to a command hook's stdin).
///
/// Field names follow Claude Code's `Stop` hook input; `turn_id` is Foya's run id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StopHookInput {
    /// The session.
    pub session_id: SessionId,
    /// The run id of the turn.
    pub turn_id: RunId,
    /// The session's working directory.
    pub cwd: PathBuf,
    /// The session's approval mode, in Claude Code's vocabulary (`plan` for read-only,
    /// `default` for ask, `acceptEdits` for auto-edit, `auto`, `bypassPermissions`).
    pub permission_mode: String,
    /// Always `"Stop"`.
    pub hook_event_name: String,
    /// Whether this stop follows a continuation a hook forced.
    pub stop_hook_active: bool,
    /// The text of the model's last answer.
    pub last_assistant_message: String,
}

/// Claude Code's name of an approval mode.
#[must_use]
pub fn permission_mode(mode: ApprovalMode) -> &'static str {
    match mode {
        ApprovalMode::ReadOnly => "plan",
        ApprovalMode::Ask => "default",
        ApprovalMode::AutoEdit => "acceptEdits",
        ApprovalMode::Auto => "auto",
        ApprovalMode::Bypass => "bypassPermissions",
    }
}

/// A hook's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopDecision {
    /// Let the turn end.
    Proceed,
    /// Continue the turn; `reason` becomes the next (user-role) instruction.
    Block {
        /// The instruction for the model.
        reason: String,
    },
    /// End the turn now (`{"continue": false}`), with an optional reason.
    End {
        /// `stopReason` of the hook's output.
        stop_reason: Option<String>,
    },
    /// The hook failed (crash, timeout, bad output); reported, and the stop proceeds.
    Failed {
        /// What went wrong (no hook output is logged).
        message: String,
    },
}

/// An in-process stop hook (registered in `RuntimeConfig::stop_hooks`).
#[async_trait]
pub trait StopHook: Send + Sync + std::fmt::Debug {
    /// Decides what happens when the model stops.
    ///
    /// # Cancel safety
    /// The future is dropped when the turn is cancelled; it must not leave work behind.
    async fn on_stop(&self, input: &StopHookInput) -> StopDecision;
}

/// The combined outcome of every hook: any `End` wins, else the `Block` reasons joined
/// (one per line), else `Proceed`; failures are returned for reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopOutcome {
    /// The decision.
    pub decision: StopDecision,
    /// Messages of hooks that failed.
    pub failures: Vec<String>,
}

/// Runs `hooks` in order and combines their decisions.
///
/// # Cancel safety
/// Dropping the future drops the running hook (a command hook's process group is killed).
pub async fn run_stop_hooks(hooks: &[Arc<dyn StopHook>], input: &StopHookInput) -> StopOutcome {
    let mut blocks = Vec::new();
    let mut failures = Vec::new();
    let mut end = None;
    for hook in hooks {
        match hook.on_stop(input).await {
            StopDecision::Proceed => {}
            StopDecision::Block { reason } => blocks.push(reason),
            StopDecision::End { stop_reason } => {
                end.get_or_insert(stop_reason);
            }
            StopDecision::Failed { message } => failures.push(message),
        }
    }
    let decision = if let Some(stop_reason) = end {
        StopDecision::End { stop_reason }
    } else if blocks.is_empty() {
        StopDecision::Proceed
    } else {
        StopDecision::Block {
            reason: blocks.join("\n"),
        }
    };
    StopOutcome { decision, failures }
}

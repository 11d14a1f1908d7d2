//! The older in-process stop-hook API ([`StopHook`], `RuntimeConfig::stop_hooks`), kept
//! for embedders: each one runs as a [`Hook`] of the `Stop` and `SubagentStop` points.

use super::{Hook, HookEvent, HookInput, HookResponse};
use async_trait::async_trait;
use foya_protocol::{HookDecision, RunId, SessionId};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// What a stop hook receives. Field names follow Claude Code's `Stop` hook input;
/// `turn_id` is Foya's run id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StopHookInput {
    /// The session.
    pub session_id: SessionId,
    /// The run id of the turn.
    pub turn_id: RunId,
    /// The session's working directory.
    pub cwd: PathBuf,
    /// The session's approval mode, in Claude Code's vocabulary.
    pub permission_mode: String,
    /// `"Stop"` or `"SubagentStop"`.
    pub hook_event_name: String,
    /// Whether this stop follows a continuation a hook forced.
    pub stop_hook_active: bool,
    /// The text of the model's last answer.
    pub last_assistant_message: String,
}

/// A stop hook's answer.
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
    /// The hook failed; reported, and the stop proceeds.
    Failed {
        /// What went wrong.
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

/// A [`StopHook`] run as a [`Hook`].
#[derive(Debug)]
pub(crate) struct StopAdapter(pub Arc<dyn StopHook>);

#[async_trait]
impl Hook for StopAdapter {
    fn name(&self) -> &'static str {
        "stop_hook"
    }

    fn applies(&self, event: HookEvent, _subject: Option<&str>) -> bool {
        matches!(event, HookEvent::Stop | HookEvent::SubagentStop)
    }

    async fn run(&self, input: &HookInput) -> HookResponse {
        let Some(turn_id) = input.turn_id else {
            return HookResponse::none();
        };
        let stop = StopHookInput {
            session_id: input.session_id,
            turn_id,
            cwd: input.cwd.clone(),
            permission_mode: input.permission_mode.into(),
            hook_event_name: input.hook_event_name.into(),
            stop_hook_active: input.stop_hook_active.unwrap_or(false),
            last_assistant_message: input.last_assistant_message.clone().unwrap_or_default(),
        };
        match self.0.on_stop(&stop).await {
            StopDecision::Proceed => HookResponse::none(),
            StopDecision::Block { reason } => {
                HookResponse::decided(HookDecision::Block, Some(reason))
            }
            StopDecision::End { stop_reason } => {
                HookResponse::decided(HookDecision::Stop, stop_reason)
            }
            StopDecision::Failed { message } => HookResponse::failed(message),
        }
    }
}

//! Hook answers and how they combine (pure): one hook's [`HookResponse`], the merged
//! answer of a hook point ([`decision::Merged`]) and what the hooks of one point did
//! ([`HookRun`]). Running hooks (commands, in-process hooks) is the runtime's.

pub mod decision;

use decision::Merged;
use foya_protocol::{EventKind, HookDecision};

/// One hook run's answer (a command hook's output, interpreted; or an in-process hook's
/// value). Only these fields exist: nothing a hook says can widen a permission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResponse {
    /// What it decided ([`HookDecision::Failed`] when it failed).
    pub decision: HookDecision,
    /// Why: the reason of a decision, `stopReason` for [`HookDecision::Stop`], or what
    /// went wrong for [`HookDecision::Failed`].
    pub reason: Option<String>,
    /// Text for the model (`additionalContext`; plain stdout of `SessionStart` and
    /// `UserPromptSubmit` hooks).
    pub additional_context: Option<String>,
}

impl HookResponse {
    /// No decision, no context.
    #[must_use]
    pub fn none() -> Self {
        Self::decided(HookDecision::None, None)
    }

    /// `decision` with `reason`, no context.
    #[must_use]
    pub fn decided(decision: HookDecision, reason: Option<String>) -> Self {
        Self {
            decision,
            reason,
            additional_context: None,
        }
    }

    /// The hook failed: `message` says how (never the hook's output).
    #[must_use]
    pub fn failed(message: impl Into<String>) -> Self {
        Self::decided(HookDecision::Failed, Some(message.into()))
    }
}

/// What the hooks of one point did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HookRun {
    /// Their combined answer.
    pub merged: Merged,
    /// One `hook_ran` per hook that ran, in order (to persist).
    pub events: Vec<EventKind>,
}

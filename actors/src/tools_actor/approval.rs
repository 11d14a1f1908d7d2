//! The approval hook point: does this call need a person's decision?
//!
//! Placeholder rule until the tools engineer's pure Approval Gateway policy replaces
//! [`approval_needed`] (same signature): `bypass` and `auto` never ask; `read-only`
//! denies any tool with a side effect; `ask` asks for every side effect; `auto-edit` asks
//! for exec and network. The grant key of an "allow for this session" decision is the
//! tool name, so the same kind of call is not asked again (the grant survives restarts as
//! `approval_decided.grant`).

use crate::tools::{SandboxPolicy, SideEffect, ToolSpec};
use foya_protocol::ApprovalMode;

/// What the gateway decided before running a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Run it.
    Allow,
    /// Refuse it without asking; the text goes to the model as an `is_error` result.
    Deny(String),
    /// Ask a person.
    Ask {
        /// The exact command or path.
        action: String,
        /// Why approval is needed.
        reason: String,
        /// Key of an "allow for this session" grant covering this call.
        grant_key: String,
    },
}

/// The gate for one call of `spec` with `args` in `mode`.
pub(crate) fn approval_needed(
    mode: ApprovalMode,
    spec: &ToolSpec,
    args: &serde_json::Value,
) -> Gate {
    let side = spec.side_effect;
    let ask = match mode {
        ApprovalMode::Bypass | ApprovalMode::Auto => false,
        ApprovalMode::ReadOnly if side != SideEffect::None => {
            return Gate::Deny(format!(
                "denied: tool {} has side effects and the session is read-only",
                spec.name
            ));
        }
        ApprovalMode::ReadOnly => false,
        ApprovalMode::Ask => side != SideEffect::None,
        ApprovalMode::AutoEdit => matches!(side, SideEffect::Exec | SideEffect::Network),
    };
    if !ask {
        return Gate::Allow;
    }
    Gate::Ask {
        action: format!("{} {}", spec.name, args),
        reason: format!("{} has side effect {side:?}", spec.name).to_lowercase(),
        grant_key: spec.name.clone(),
    }
}

/// The sandbox a call runs in for `mode`.
pub(crate) fn sandbox_for(mode: ApprovalMode) -> SandboxPolicy {
    match mode {
        ApprovalMode::Bypass => SandboxPolicy::None,
        _ => SandboxPolicy::WorkspaceWrite { network: false },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(side_effect: SideEffect) -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            description: String::new(),
            parameters: serde_json::json!({}),
            parallel_safe: false,
            side_effect,
            cancellable: true,
            default_timeout_ms: 1_000,
        }
    }

    #[test]
    fn modes_map_to_gates() {
        let args = serde_json::json!({"a": 1});
        let ask = Gate::Ask {
            action: "t {\"a\":1}".into(),
            reason: "t has side effect exec".into(),
            grant_key: "t".into(),
        };
        assert_eq!(
            approval_needed(ApprovalMode::Bypass, &spec(SideEffect::Exec), &args),
            Gate::Allow
        );
        assert_eq!(
            approval_needed(ApprovalMode::Ask, &spec(SideEffect::None), &args),
            Gate::Allow
        );
        assert_eq!(
            approval_needed(ApprovalMode::Ask, &spec(SideEffect::Exec), &args),
            ask
        );
        assert_eq!(
            approval_needed(ApprovalMode::AutoEdit, &spec(SideEffect::Write), &args),
            Gate::Allow
        );
        assert_eq!(
            approval_needed(ApprovalMode::AutoEdit, &spec(SideEffect::Exec), &args),
            ask
        );
        assert!(matches!(
            approval_needed(ApprovalMode::ReadOnly, &spec(SideEffect::Write), &args),
            Gate::Deny(_)
        ));
        assert_eq!(sandbox_for(ApprovalMode::Bypass), SandboxPolicy::None);
        assert_eq!(
            sandbox_for(ApprovalMode::Ask),
            SandboxPolicy::WorkspaceWrite { network: false }
        );
    }
}

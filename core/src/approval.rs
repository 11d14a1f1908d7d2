//! What the Approval Gateway decides for a tool call ([`Verdict`]) and the sandbox a call
//! runs under ([`SandboxPolicy`]): plain data; the gateway's rules are the tools'.

use serde::{Deserialize, Serialize};

/// How an exec tool's child process is confined (Linux Landlock, applied before exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxPolicy {
    /// No sandbox (approval mode `bypass`, or a call approved to leave the sandbox).
    None,
    /// Read everywhere, write nowhere; no network.
    ReadOnly,
    /// Read everywhere, write only the working directory (but not its protected paths:
    /// `.foya`, `.git`, instruction files, hook scripts) and a private temp dir; network
    /// only when `network` is true.
    WorkspaceWrite {
        /// Whether TCP connect/bind is allowed.
        network: bool,
    },
    /// As `WorkspaceWrite`, with the protected paths inside the working directory
    /// writable too: a person approved this exact action.
    WorkspaceAndProtected {
        /// Whether TCP connect/bind is allowed.
        network: bool,
    },
}

/// The gateway's decision for one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it now under `sandbox`.
    Allow {
        /// Sandbox to put into `ToolContext::sandbox`.
        sandbox: SandboxPolicy,
    },
    /// A person decides (an `approval_requested` event).
    Ask {
        /// The exact command (exec) or absolute path (write) or URL (network).
        action: String,
        /// Why approval is needed, for the person.
        reason: String,
        /// Key an "allow for this session" decision grants: `shell:<argv prefix>`
        /// (`shell:git status`) or `shell:=<exact argv>`, `shell:network:<same>`,
        /// `write_file:*` (inside the working directory), `write_file:<abs dir>` (outside),
        /// `<tool>:<host>` (network tools); empty when no grant is offered (protected
        /// paths, commands that run other code): the action is asked every time.
        grant_key: String,
        /// Sandbox to run under when allowed.
        sandbox_if_allowed: SandboxPolicy,
        /// Sandbox to run under when no person can answer (no approver attached and the
        /// runtime denies such questions): set only when the policy would have run the
        /// call unasked and asks because the sandbox cannot shield the protected paths
        /// here (see the gateway's `evaluate`); `None`: denied as usual.
        if_no_approver: Option<SandboxPolicy>,
    },
    /// Refused; the model gets an `is_error` result with `reason`.
    Deny {
        /// Why, for the model.
        reason: String,
    },
}

/// The answer to a call's approval question (a person, a grant, or the session's
/// fallback when nobody can answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAnswer {
    /// Whether the call may run.
    pub allowed: bool,
    /// Message for the model when denied.
    pub message: Option<String>,
}

/// Message when an approval is needed and nobody can answer.
pub const NO_APPROVER: &str =
    "denied: this call needs approval and no approver is attached to the session";

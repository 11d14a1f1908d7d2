//! Approval Gateway policy (pure): may a tool call run as is, must a person decide, or is
//! it refused — and under which sandbox does it run.
//!
//! Owns: the decision table below. Must not: do I/O (paths are compared lexically; the
//! file tools re-check symlinks when they run) or persist anything (the ToolActor records
//! `approval_requested` / decisions / grants as events).
//!
//! | side effect | read-only | ask | auto-edit | auto | bypass |
//! |---|---|---|---|---|---|
//! | none | Allow(ReadOnly) | Allow(ReadOnly) | Allow(ReadOnly) | Allow(ReadOnly) | Allow(None) |
//! | write inside cwd | Deny | Ask(WW) | Allow(WW) | Allow(WW) | Allow(None) |
//! | write outside cwd | Deny | Ask(None) | Ask(None) | Ask(None) | Allow(None) |
//! | exec | Deny | Ask(WW) | Ask(WW) | Allow(WW) | Allow(None) |
//! | exec with `network: true` | Deny | Ask(WW+net) | Ask(WW+net) | Ask(WW+net) | Allow(None) |
//! | network | Deny | Ask(None) | Ask(None) | Ask(None) | Allow(None) |
//! | external (MCP) | Deny | Ask(None) | Ask(None) | Ask(None) | Allow(None) |
//!
//! WW = `WorkspaceWrite { network: false }`, WW+net = `WorkspaceWrite { network: true }`.
//! Exec tools declare that they need the network with a boolean `network` argument. A call whose grant key is in the session's
//! grants gets `Allow` with the sandbox it would have had if asked. File tools treat
//! `SandboxPolicy::None` as "may leave the working directory", so the ToolActor must put
//! the verdict's sandbox into `ToolContext::sandbox` for every call.

use super::{SandboxPolicy, SideEffect, ToolSpec, paths::normalize};
use foya_protocol::ApprovalMode;
use std::collections::BTreeSet;
use std::path::Path;

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
        /// Key an "allow for this session" decision grants: `shell:<first word>` (or
        /// `shell:<whole command>` when it has shell operators), `shell:network:<same>`,
        /// `write_file:*` (inside the working directory), `write_file:<abs dir>` (outside),
        /// `<tool>:<host>` (network tools).
        grant_key: String,
        /// Sandbox to run under when allowed.
        sandbox_if_allowed: SandboxPolicy,
    },
    /// Refused; the model gets an `is_error` result with `reason`.
    Deny {
        /// Why, for the model.
        reason: String,
    },
}

const SANDBOXED: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

/// Characters that make a shell command compound (its first word says little about it).
const SHELL_META: &[char] = &[';', '&', '|', '`', '$', '>', '<', '\n', '(', ')', '{', '}'];

/// Decides one call. `args` are the validated arguments; `cwd` the session's working
/// directory (absolute); `grants` the session's "allow for this session" keys.
#[must_use]
pub fn evaluate(
    mode: ApprovalMode,
    spec: &ToolSpec,
    args: &serde_json::Value,
    cwd: &Path,
    grants: &BTreeSet<String>,
) -> Verdict {
    if mode == ApprovalMode::Bypass {
        return Verdict::Allow {
            sandbox: SandboxPolicy::None,
        };
    }
    if spec.side_effect == SideEffect::None {
        return Verdict::Allow {
            sandbox: SandboxPolicy::ReadOnly,
        };
    }
    if mode == ApprovalMode::ReadOnly {
        return Verdict::Deny {
            reason: format!(
                "`{}` has side effects ({}) and the session's approval mode is read-only; \
                 only side-effect-free tools run",
                spec.name,
                side_effect_name(spec.side_effect)
            ),
        };
    }
    let request = request_for(spec, args, cwd);
    let needs_asking = !matches!(
        (request.class, mode),
        (
            Class::WriteInside,
            ApprovalMode::AutoEdit | ApprovalMode::Auto
        ) | (Class::Exec, ApprovalMode::Auto)
    );
    if !needs_asking || grants.contains(&request.grant_key) {
        return Verdict::Allow {
            sandbox: request.sandbox,
        };
    }
    Verdict::Ask {
        action: request.action,
        reason: request.reason,
        grant_key: request.grant_key,
        sandbox_if_allowed: request.sandbox,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    WriteInside,
    WriteOutside,
    Exec,
    Network,
}

#[derive(Debug)]
struct Request {
    class: Class,
    action: String,
    reason: String,
    grant_key: String,
    sandbox: SandboxPolicy,
}

fn request_for(spec: &ToolSpec, args: &serde_json::Value, cwd: &Path) -> Request {
    let name = &spec.name;
    let arg = |key: &str| args.get(key).and_then(serde_json::Value::as_str);
    match spec.side_effect {
        SideEffect::External => {
            let shown = args.to_string();
            let action = match shown.char_indices().nth(500) {
                Some((at, _)) => format!("{name} {}…", &shown[..at]),
                None => format!("{name} {shown}"),
            };
            Request {
                class: Class::Network,
                reason: format!(
                    "`{name}` is a tool of an MCP server: its effects are not known to Foya"
                ),
                grant_key: name.clone(),
                action,
                sandbox: SandboxPolicy::None,
            }
        }
        SideEffect::Exec => {
            let command = arg("command").unwrap_or_default().to_owned();
            let words = if command.contains(SHELL_META) {
                command.trim()
            } else {
                command.split_whitespace().next().unwrap_or_default()
            };
            let network = args.get("network").and_then(serde_json::Value::as_bool) == Some(true);
            if network {
                return Request {
                    class: Class::Network,
                    reason: format!(
                        "`{name}` wants to run a command with network access (sandboxed: writes \
                         only in the working directory)"
                    ),
                    action: command.clone(),
                    grant_key: format!("{name}:network:{words}"),
                    sandbox: SandboxPolicy::WorkspaceWrite { network: true },
                };
            }
            Request {
                class: Class::Exec,
                reason: format!(
                    "`{name}` wants to run a command (sandboxed: writes only in the working directory, no network)"
                ),
                grant_key: format!("{name}:{words}"),
                action: command,
                sandbox: SANDBOXED,
            }
        }
        SideEffect::Network => {
            let url = arg("url").unwrap_or_default().to_owned();
            let host = url_host(&url).unwrap_or("*");
            Request {
                class: Class::Network,
                reason: format!("`{name}` wants to access the network"),
                grant_key: format!("{name}:{host}"),
                action: url,
                sandbox: SandboxPolicy::None,
            }
        }
        SideEffect::Write | SideEffect::None => {
            let cwd = normalize(Path::new("/"), cwd);
            let target = normalize(&cwd, Path::new(arg("path").unwrap_or(".")));
            let action = target.display().to_string();
            if target.starts_with(&cwd) {
                Request {
                    class: Class::WriteInside,
                    reason: format!("`{name}` wants to write a file in the working directory"),
                    action,
                    grant_key: format!("{name}:*"),
                    sandbox: SANDBOXED,
                }
            } else {
                let dir = target.parent().unwrap_or(&target).display().to_string();
                Request {
                    class: Class::WriteOutside,
                    reason: format!(
                        "`{name}` wants to write outside the working directory {}",
                        cwd.display()
                    ),
                    action,
                    grant_key: format!("{name}:{dir}"),
                    sandbox: SandboxPolicy::None,
                }
            }
        }
    }
}

fn side_effect_name(side_effect: SideEffect) -> &'static str {
    match side_effect {
        SideEffect::None => "none",
        SideEffect::Write => "write",
        SideEffect::Exec => "exec",
        SideEffect::Network => "network",
        SideEffect::External => "external",
    }
}

/// `host` of `scheme://host[:port]/...`.
fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = host.split(':').next()?;
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
#[path = "approval_tests.rs"]
mod tests;

//! Approval Gateway policy (pure): may a tool call run as is, must a person decide, or is
//! it refused — and under which sandbox does it run.
//!
//! Owns: the decision table below. Must not: do I/O beyond following symlinks (paths
//! are compared lexically, then `Protected::reached_as` and `Protected::named_in` follow
//! the symlinks of the path and of the protected names, so a protected file reached
//! under another name is protected; the file tools re-check when they run) or persist
//! anything (the ToolActor records `approval_requested` / decisions / grants as events).
//!
//! | side effect | read-only | ask | auto-edit | auto | bypass |
//! |---|---|---|---|---|---|
//! | none | Allow(ReadOnly) | Allow(ReadOnly) | Allow(ReadOnly) | Allow(ReadOnly) | Allow(None) |
//! | write inside cwd | Deny | Ask(WW) | Allow(WW) | Allow(WW) | Allow(None) |
//! | write outside cwd | Deny | Ask(None) | Ask(None) | Ask(None) | Allow(None) |
//! | write to a protected path (also through a symlink) | Deny | Ask(WW+P)¹ | Ask(WW+P)¹ | Ask(WW+P)¹ | Allow(None) |
//! | exec | Deny | Ask(WW) | Ask(WW) | Allow(WW) | Allow(None) |
//! | exec naming a protected path, or git writing `.git` | Deny | Ask(WW+P)¹ | Ask(WW+P)¹ | Ask(WW+P)¹ | Allow(None) |
//! | exec with `network: true` | Deny | Ask(WW+net) | Ask(WW+net) | Ask(WW+net) | Allow(None) |
//! | network | Deny | Ask(None) | Ask(None) | Ask(None) | Allow(None) |
//! | external (MCP) | Deny | Ask(None) | Ask(None) | Ask(None) | Allow(None) |
//!
//! WW = `WorkspaceWrite { network: false }` (the protected paths inside the working
//! directory stay read-only, see `protected.rs`), WW+net = `WorkspaceWrite { network:
//! true }`, WW+P = `WorkspaceAndProtected` (a person approved this exact action; outside
//! the working directory: `None`). ¹ Asked every time: no "allow for this session" grant
//! is offered, and the verdict is the same whichever tool attempts the write.
//! Exec tools declare that they need the network with a boolean `network` argument. A
//! call whose grant key is in the session's grants gets `Allow` with the sandbox it
//! would have had if asked. An exec grant covers the command's normalised argv prefix
//! (`shell:git status`) or exactly the command (`shell:=ls -la`), and commands that run
//! other code or are given an option that writes a file they name (`--output`, `-o`) get
//! none (`grants.rs`); the reason shown to the person says which. File
//! tools treat `SandboxPolicy::None` as "may leave the working directory", so the
//! ToolActor must put the verdict's sandbox into `ToolContext::sandbox` for every call.

use super::grants::{CommandGrant, grant_for};
use super::protected::Protected;
use super::{SandboxPolicy, SideEffect, ToolSpec, paths::normalize};
use foya_protocol::ApprovalMode;
use std::collections::BTreeSet;
use std::path::Path;

pub use foya_core::approval::Verdict;

const SANDBOXED: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

/// Decides one call. `args` are the validated arguments; `cwd` the session's working
/// directory (absolute); `protected` its protected paths; `grants` the session's "allow
/// for this session" keys; `shield_available` whether the sandbox can keep the protected
/// paths read-only while the working directory stays writable (the kernel gives the
/// helper a namespace: `SandboxRunner::shield_available`, probed by the caller).
///
/// Without the shield, an exec call that would run under `WorkspaceWrite` is asked
/// (in `auto` too), every time (no grant), saying why ([`NO_SHIELD`]); allowed, it runs
/// under `WorkspaceAndProtected` (the whole working directory writable, as the
/// person was told); when no person can answer, a call the policy would have run
/// unasked still runs under `WorkspaceWrite` (Landlock alone: protected paths shut, no
/// new entries at the working directory's top level).
#[must_use]
pub fn evaluate(
    mode: ApprovalMode,
    spec: &ToolSpec,
    args: &serde_json::Value,
    cwd: &Path,
    protected: &Protected,
    grants: &BTreeSet<String>,
    shield_available: bool,
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
    let request = request_for(spec, args, cwd, protected);
    let needs_asking = request.class == Class::Protected
        || !matches!(
            (request.class, mode),
            (
                Class::WriteInside,
                ApprovalMode::AutoEdit | ApprovalMode::Auto
            ) | (Class::Exec, ApprovalMode::Auto)
        );
    if let (false, SideEffect::Exec, SandboxPolicy::WorkspaceWrite { network }) =
        (shield_available, spec.side_effect, request.sandbox)
    {
        return Verdict::Ask {
            action: request.action,
            reason: format!("{}; {NO_SHIELD}", request.reason),
            grant_key: String::new(),
            sandbox_if_allowed: SandboxPolicy::WorkspaceAndProtected { network },
            if_no_approver: (!needs_asking).then_some(request.sandbox),
        };
    }
    let granted = !request.grant_key.is_empty() && grants.contains(&request.grant_key);
    if !needs_asking || granted {
        return Verdict::Allow {
            sandbox: request.sandbox,
        };
    }
    Verdict::Ask {
        action: request.action,
        reason: request.reason,
        grant_key: request.grant_key,
        sandbox_if_allowed: request.sandbox,
        if_no_approver: None,
    }
}

/// Why an exec call is asked when the sandbox cannot shield the protected paths.
pub const NO_SHIELD: &str = "on this machine the sandbox cannot keep the protected paths \
     (.git, .foya, AGENTS.md, ...) read-only while the working directory stays writable \
     (the kernel gives no namespace): allowed, this command runs with the whole working \
     directory writable and the protected paths NOT shielded; asked every time";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    WriteInside,
    WriteOutside,
    Exec,
    Network,
    /// Changes a protected path: asked in every mode but bypass, never granted.
    Protected,
}

#[derive(Debug)]
struct Request {
    class: Class,
    action: String,
    reason: String,
    grant_key: String,
    sandbox: SandboxPolicy,
}

fn request_for(
    spec: &ToolSpec,
    args: &serde_json::Value,
    cwd: &Path,
    protected: &Protected,
) -> Request {
    let name = &spec.name;
    let arg = |key: &str| args.get(key).and_then(serde_json::Value::as_str);
    match spec.side_effect {
        SideEffect::External => {
            let action = format!("{name} {}", shown_arguments(args));
            // What a server does with its arguments is not known: a value naming a
            // protected path is asked every time, as any tool's write to one is.
            if let Some(what) = string_values(args).find_map(|v| protected.named_in(v)) {
                return Request {
                    class: Class::Protected,
                    reason: format!(
                        "`{name}` is a tool of an MCP server and its arguments name the \
                         protected path {what} (the runtime's config, hooks, instructions or \
                         git metadata); \"allow for this session\" is not offered: it is \
                         asked every time"
                    ),
                    grant_key: String::new(),
                    action,
                    sandbox: SandboxPolicy::None,
                };
            }
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
            let network = args.get("network").and_then(serde_json::Value::as_bool) == Some(true);
            if let Some(what) = protected
                .named_in(&command)
                .or_else(|| super::protected::git_write_in(&command))
            {
                return Request {
                    class: Class::Protected,
                    reason: format!(
                        "`{name}` wants to run a command that may change the protected path \
                         {what} (the runtime's config, hooks, instructions or git metadata); \
                         \"allow for this session\" is not offered: it is asked every time"
                    ),
                    action: command,
                    grant_key: String::new(),
                    sandbox: SandboxPolicy::WorkspaceAndProtected { network },
                };
            }
            // An exec tool without a `command` argument (its arguments are structured,
            // the tool decides what runs) is granted as a whole.
            let has_command = arg("command").is_some();
            let grant = grant_for(&command);
            let covers = if has_command {
                grant.describe()
            } else {
                format!("\"allow for this session\" allows `{name}` with any arguments")
            };
            let key = |prefix: &str| match &grant {
                _ if !has_command => prefix.to_owned(),
                CommandGrant::None(_) => String::new(),
                other => format!("{prefix}{}", other.key().unwrap_or_default()),
            };
            if network {
                return Request {
                    class: Class::Network,
                    reason: format!(
                        "`{name}` wants to run a command with network access (sandboxed: writes \
                         only in the working directory); {covers}"
                    ),
                    action: command.clone(),
                    grant_key: key(&format!("{name}:network:")),
                    sandbox: SandboxPolicy::WorkspaceWrite { network: true },
                };
            }
            Request {
                class: Class::Exec,
                reason: format!(
                    "`{name}` wants to run a command (sandboxed: writes only in the working \
                     directory, no network); {covers}"
                ),
                grant_key: key(&format!("{name}:")),
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
            let inside = target.starts_with(&cwd);
            let lexical = protected.is_protected(&target);
            // A path that is a protected one under another name (a symlink either way).
            let reached = if lexical {
                None
            } else {
                protected.reached_as(&target)
            };
            if lexical || reached.is_some() {
                let through = reached.map_or_else(String::new, |other| {
                    format!(" ({} through a symlink)", other.display())
                });
                Request {
                    class: Class::Protected,
                    reason: format!(
                        "`{name}` wants to write a protected path{through} (the runtime's \
                         config, hooks, instructions or git metadata); \"allow for this \
                         session\" is not offered: it is asked every time"
                    ),
                    action,
                    grant_key: String::new(),
                    sandbox: if inside {
                        SandboxPolicy::WorkspaceAndProtected { network: false }
                    } else {
                        SandboxPolicy::None
                    },
                }
            } else if inside {
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

/// Every string of `value` (object values and array items, at any depth).
fn string_values(value: &serde_json::Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match value {
        serde_json::Value::String(s) => Box::new(std::iter::once(s.as_str())),
        serde_json::Value::Array(items) => Box::new(items.iter().flat_map(string_values)),
        serde_json::Value::Object(map) => Box::new(map.values().flat_map(string_values)),
        _ => Box::new(std::iter::empty()),
    }
}

/// The arguments as a person reads them in an approval question: every key shown, each
/// string value cut to its first [`SHOWN_VALUE_CHARS`] characters with the count of the
/// rest, so a long value cannot push another key out of sight.
fn shown_arguments(args: &serde_json::Value) -> String {
    fn cut(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::String(s) => match s.char_indices().nth(SHOWN_VALUE_CHARS) {
                Some((at, _)) => serde_json::Value::String(format!(
                    "{}… ({} more characters)",
                    &s[..at],
                    s[at..].chars().count()
                )),
                None => value.clone(),
            },
            serde_json::Value::Array(items) => items.iter().map(cut).collect(),
            serde_json::Value::Object(map) => map
                .iter()
                .map(|(k, v)| (k.clone(), cut(v)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            other => other.clone(),
        }
    }
    cut(args).to_string()
}

/// How much of each string argument of an MCP tool an approval question shows.
const SHOWN_VALUE_CHARS: usize = 200;

#[cfg(test)]
mod tests;

//! Command stop hooks: a `bash -c` command run in the session's working directory, in its
//! own process group, with a timeout — Claude Code's `Stop` hook contract.
//!
//! Input: [`StopHookInput`] as JSON on stdin. Output (from Claude Code's hooks docs):
//! - exit 2: block; stderr is the reason (the next instruction for the model);
//! - exit 0 with stdout JSON `{"continue": false, "stopReason": "..."}`: end the turn;
//! - exit 0 with stdout JSON `{"decision": "block", "reason": "..."}`: block;
//! - exit 0 otherwise (no/other JSON): proceed;
//! - any other exit, a timeout or a spawn failure: the hook failed; the stop proceeds.
//!
//! Every other field of the output is ignored — in particular anything that looks like
//! an approval mode, a sandbox policy or a tool list: a hook cannot widen permissions.

use super::{StopDecision, StopHook, StopHookInput};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Default timeout of a command hook.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A command stop hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandStopHook {
    /// The command, run with `bash -c` in the session's working directory.
    pub command: String,
    /// How long it may run; then its process group is killed and the hook fails.
    pub timeout: Duration,
}

impl CommandStopHook {
    /// A hook running `command` with [`DEFAULT_TIMEOUT`].
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// The fields of a hook's stdout JSON that are honoured (all others are ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HookOutput {
    #[serde(rename = "continue")]
    cont: Option<bool>,
    #[serde(rename = "stopReason")]
    stop_reason: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
}

/// Kills the process group on drop (timeout, cancel).
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Interprets a finished hook's exit code, stdout and stderr.
#[must_use]
pub fn decide(code: Option<i32>, stdout: &str, stderr: &str) -> StopDecision {
    match code {
        Some(2) => StopDecision::Block {
            reason: non_empty(stderr.trim())
                .unwrap_or("a stop hook asked to continue")
                .to_owned(),
        },
        Some(0) => {
            let output: HookOutput = serde_json::from_str(stdout.trim()).unwrap_or_default();
            if output.cont == Some(false) {
                StopDecision::End {
                    stop_reason: output.stop_reason,
                }
            } else if output.decision.as_deref() == Some("block") {
                StopDecision::Block {
                    reason: output
                        .reason
                        .filter(|r| !r.trim().is_empty())
                        .unwrap_or_else(|| "a stop hook asked to continue".into()),
                }
            } else {
                StopDecision::Proceed
            }
        }
        Some(code) => StopDecision::Failed {
            message: format!("the stop hook exited with code {code}"),
        },
        None => StopDecision::Failed {
            message: "the stop hook was killed by a signal".into(),
        },
    }
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

#[async_trait]
impl StopHook for CommandStopHook {
    async fn on_stop(&self, input: &StopHookInput) -> StopDecision {
        let stdin = match serde_json::to_vec(input) {
            Ok(json) => json,
            Err(e) => {
                return StopDecision::Failed {
                    message: format!("cannot encode the hook input: {e}"),
                };
            }
        };
        let mut command = tokio::process::Command::new("bash");
        command
            .arg("-c")
            .arg(&self.command)
            .current_dir(&input.cwd)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                return StopDecision::Failed {
                    message: format!("cannot start the stop hook: {e}"),
                };
            }
        };
        let mut guard = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
        if let Some(mut pipe) = child.stdin.take() {
            // A hook that does not read stdin closes it; that is not a failure.
            let _ = pipe.write_all(&stdin).await;
        }
        let output = tokio::time::timeout(self.timeout, child.wait_with_output()).await;
        match output {
            Err(_) => StopDecision::Failed {
                message: format!(
                    "the stop hook timed out after {} ms; its process group was killed",
                    self.timeout.as_millis()
                ),
            },
            Ok(Err(e)) => StopDecision::Failed {
                message: format!("waiting for the stop hook failed: {e}"),
            },
            Ok(Ok(output)) => {
                // The leader exited; stragglers in its group are killed by the guard.
                let decision = decide(
                    output.status.code(),
                    &String::from_utf8_lossy(&output.stdout),
                    &String::from_utf8_lossy(&output.stderr),
                );
                if let Some(pid) = guard.0.take() {
                    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                }
                decision
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_like_claude_code() {
        let block = |r: &str| StopDecision::Block { reason: r.into() };
        let table = [
            (Some(2), "", "run the tests\n", block("run the tests")),
            (Some(2), "", "", block("a stop hook asked to continue")),
            (
                Some(0),
                r#"{"decision":"block","reason":"fix lint"}"#,
                "",
                block("fix lint"),
            ),
            (
                Some(0),
                r#"{"continue":false,"stopReason":"done","decision":"block","reason":"x"}"#,
                "",
                StopDecision::End {
                    stop_reason: Some("done".into()),
                },
            ),
            (Some(0), "", "", StopDecision::Proceed),
            (Some(0), "not json", "", StopDecision::Proceed),
            (
                Some(0),
                r#"{"decision":"approve","permission_mode":"bypassPermissions","approval_mode":"bypass","sandbox":"none","tools":["shell"]}"#,
                "",
                StopDecision::Proceed,
            ),
            (
                Some(1),
                "",
                "boom",
                StopDecision::Failed {
                    message: "the stop hook exited with code 1".into(),
                },
            ),
        ];
        for (code, stdout, stderr, expected) in table {
            assert_eq!(decide(code, stdout, stderr), expected, "{stdout} {stderr}");
        }
    }
}

//! Running one command hook: `bash -c COMMAND` in the session's working directory, in its
//! own process group (killed when the run ends, times out or is cancelled), the
//! [`HookInput`] as JSON on stdin, `FOYA_PROJECT_DIR` and Claude Code's
//! `CLAUDE_PROJECT_DIR` set to the project root, with the environment a tool's processes
//! get (`tools::env_policy`: no credential-shaped variable); then its exit code and
//! output read as Claude Code does (`interpret`).
//!
//! Output contract (Claude Code's):
//! - exit 0: stdout may be JSON — `continue: false` (+ `stopReason`) stops the turn;
//!   `decision: "block"` + `reason`; for `PreToolUse`
//!   `hookSpecificOutput.permissionDecision` `allow`/`deny`/`ask` +
//!   `permissionDecisionReason` (the older `decision: approve|block` too);
//!   `hookSpecificOutput.additionalContext`. Plain (non-JSON) stdout is context for
//!   `SessionStart` and `UserPromptSubmit`, and ignored for the other points.
//! - exit 2: a block with stderr as the reason — the call is denied (`PreToolUse`), the
//!   model gets it (`PostToolUse`), the prompt is refused (`UserPromptSubmit`), the turn
//!   continues (`Stop`, `SubagentStop`); for the other points it is only logged.
//! - another exit, a signal, a timeout, stdout that starts like JSON but is not, or more
//!   than [`OUTPUT_CAP`] bytes of output: the run failed (no decision).
//!
//! Every other field is ignored — in particular anything naming an approval mode, a
//! sandbox or a tool list: a hook cannot widen permissions.

use super::{CommandHook, HookEvent, HookInput, HookResponse};
use crate::tools::SandboxPolicy;
use crate::tools::sandbox::{ProcessGroupGuard, SandboxRunner};
use foya_protocol::HookDecision;
use serde::Deserialize;
use std::process::Stdio;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Most bytes read from a hook's stdout or stderr; more is a flood and fails the run.
pub(crate) const OUTPUT_CAP: usize = 1024 * 1024;

/// Most characters of a reason or a context kept (Claude Code caps context at 10 000).
pub(crate) const TEXT_CAP: usize = 10_000;

/// The honoured fields of a hook's stdout JSON.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Output {
    #[serde(rename = "continue")]
    cont: Option<bool>,
    stop_reason: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
    hook_specific_output: Specific,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Specific {
    permission_decision: Option<String>,
    permission_decision_reason: Option<String>,
    additional_context: Option<String>,
}

/// Runs `hook` with `input` and interprets what it did. With a `supervisor` (the
/// sandbox helper, as `foya` gives it), the hook runs under it with policy `none`, so
/// the shell tool's rules hold: its processes die with the runtime (parent-death
/// signal), and when the hook's shell ends, every process it left (a `setsid` one too:
/// the helper is a subreaper) is killed. Without one, only its process group is killed.
///
/// # Cancel safety
/// Dropping the future kills the hook's processes.
pub(crate) async fn run(
    hook: &CommandHook,
    input: &HookInput,
    supervisor: Option<&SandboxRunner>,
) -> HookResponse {
    let Some(event) = input.event() else {
        return HookResponse::failed("unknown hook point");
    };
    let stdin = match serde_json::to_vec(input) {
        Ok(json) => json,
        Err(e) => return HookResponse::failed(format!("cannot encode the hook input: {e}")),
    };
    let mut command = match hook_command(hook, &input.cwd, supervisor) {
        Ok(command) => command,
        Err(e) => return HookResponse::failed(format!("cannot prepare the hook: {e}")),
    };
    let project = crate::context::project_root(&input.cwd);
    command
        .env("FOYA_PROJECT_DIR", &project)
        .env("CLAUDE_PROJECT_DIR", &project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return HookResponse::failed(format!("cannot start the hook: {e}")),
    };
    let mut guard = ProcessGroupGuard::new(child.id());
    let (Some(mut pipe), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return HookResponse::failed("the hook's pipes are missing");
    };
    let finished = async {
        // A hook that does not read stdin closes it; that is not a failure.
        let write = async {
            let _ = pipe.write_all(&stdin).await;
            drop(pipe);
        };
        let ((), out, err) = tokio::join!(write, read_capped(stdout), read_capped(stderr));
        (child.wait().await, out, err)
    };
    let result = tokio::time::timeout(hook.timeout, finished).await;
    if matches!(result, Ok((Ok(_), _, _))) {
        guard.leader_reaped();
    }
    match result {
        Err(_) => HookResponse::failed(format!(
            "timed out after {} s; its process group was killed",
            hook.timeout.as_secs()
        )),
        Ok((Err(e), _, _)) => HookResponse::failed(format!("waiting for the hook failed: {e}")),
        Ok((_, None, _) | (_, _, None)) => HookResponse::failed(format!(
            "printed more than {OUTPUT_CAP} bytes; its process group was killed"
        )),
        Ok((Ok(status), Some(out), Some(err))) => interpret(
            event,
            status.code(),
            &String::from_utf8_lossy(&out),
            &String::from_utf8_lossy(&err),
        ),
    }
}

/// `bash -c COMMAND` in `cwd`, in its own process group, with the environment of
/// `supervisor`'s policy (policy `none`) when there is one, else of the default
/// [`EnvPolicy`](crate::tools::env_policy::EnvPolicy).
fn hook_command(
    hook: &CommandHook,
    cwd: &std::path::Path,
    supervisor: Option<&SandboxRunner>,
) -> std::io::Result<tokio::process::Command> {
    if let Some(runner) = supervisor {
        let args = ["-c".into(), hook.command.clone().into()];
        return Ok(runner
            .spawn(SandboxPolicy::None, cwd, &[], "bash", &args)?
            .command);
    }
    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-c")
        .arg(&hook.command)
        .current_dir(cwd)
        .process_group(0)
        .kill_on_drop(true);
    // Like a tool's processes, a hook does not see the runtime's credentials
    // (`tools::env_policy`): a project's hook cannot send a user's key anywhere.
    crate::tools::env_policy::EnvPolicy::default().apply(&mut command);
    Ok(command)
}

/// Reads `pipe` to its end; `None` once it gave more than [`OUTPUT_CAP`] bytes (then it
/// stops reading: the hook gets `SIGPIPE` or is killed with its group).
async fn read_capped(mut pipe: impl AsyncRead + Unpin) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return Some(buf),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > OUTPUT_CAP {
                    return None;
                }
            }
        }
    }
}

/// Interprets a finished hook of point `event` (see the module docs).
#[must_use]
pub(crate) fn interpret(
    event: HookEvent,
    code: Option<i32>,
    stdout: &str,
    stderr: &str,
) -> HookResponse {
    match code {
        Some(0) => interpret_stdout(event, stdout.trim()),
        Some(2) => {
            let reason = capped(stderr.trim()).or_else(|| Some("blocked by a hook".into()));
            let decision = match event {
                HookEvent::PreToolUse => HookDecision::Deny,
                HookEvent::PostToolUse
                | HookEvent::UserPromptSubmit
                | HookEvent::Stop
                | HookEvent::SubagentStop => HookDecision::Block,
                HookEvent::SessionStart | HookEvent::PreCompact | HookEvent::SessionEnd => {
                    HookDecision::None
                }
            };
            HookResponse::decided(decision, reason)
        }
        Some(code) => HookResponse::failed(format!("exited with code {code}")),
        None => HookResponse::failed("killed by a signal"),
    }
}

fn interpret_stdout(event: HookEvent, stdout: &str) -> HookResponse {
    let plain_is_context = matches!(event, HookEvent::SessionStart | HookEvent::UserPromptSubmit);
    if !stdout.starts_with('{') {
        let mut response = HookResponse::none();
        if plain_is_context {
            response.additional_context = capped(stdout);
        }
        return response;
    }
    let Ok(output) = serde_json::from_str::<Output>(stdout) else {
        return HookResponse::failed("its stdout is not valid JSON");
    };
    let specific = output.hook_specific_output;
    let context = specific.additional_context.as_deref().and_then(capped);
    let (decision, reason) = if output.cont == Some(false) {
        (HookDecision::Stop, output.stop_reason)
    } else if event == HookEvent::PreToolUse {
        pre_tool_decision(
            specific.permission_decision.as_deref(),
            output.decision.as_deref(),
        )
        .map_or((HookDecision::None, None), |d| {
            (d, specific.permission_decision_reason.or(output.reason))
        })
    } else if output.decision.as_deref() == Some("block") && blocks(event) {
        (HookDecision::Block, output.reason)
    } else {
        (HookDecision::None, None)
    };
    HookResponse {
        decision,
        reason: reason.as_deref().and_then(|r| capped(r.trim())),
        additional_context: context,
    }
}

/// `permissionDecision` wins over the older `decision` (`approve` / `block`).
fn pre_tool_decision(permission: Option<&str>, decision: Option<&str>) -> Option<HookDecision> {
    match permission.or(decision)? {
        "allow" | "approve" => Some(HookDecision::Allow),
        "deny" | "block" => Some(HookDecision::Deny),
        "ask" => Some(HookDecision::Ask),
        _ => None,
    }
}

/// Points where `decision: "block"` means something.
fn blocks(event: HookEvent) -> bool {
    matches!(
        event,
        HookEvent::PostToolUse
            | HookEvent::UserPromptSubmit
            | HookEvent::Stop
            | HookEvent::SubagentStop
    )
}

/// `text` cut to [`TEXT_CAP`] characters; `None` when empty.
fn capped(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    Some(match text.char_indices().nth(TEXT_CAP) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use HookDecision::{Allow, Ask, Block, Deny, Failed, None as NoDecision, Stop};
    use HookEvent::{PostToolUse, PreCompact, PreToolUse, SessionStart, UserPromptSubmit};

    fn r(decision: HookDecision, reason: Option<&str>, context: Option<&str>) -> HookResponse {
        HookResponse {
            decision,
            reason: reason.map(Into::into),
            additional_context: context.map(Into::into),
        }
    }

    #[test]
    fn interprets_like_claude_code() {
        let table = [
            (
                PreToolUse,
                Some(2),
                "",
                "no rm -rf\n",
                r(Deny, Some("no rm -rf"), None),
            ),
            (
                PostToolUse,
                Some(2),
                "",
                "lint: x",
                r(Block, Some("lint: x"), None),
            ),
            (
                UserPromptSubmit,
                Some(2),
                "",
                "",
                r(Block, Some("blocked by a hook"), None),
            ),
            (
                PreCompact,
                Some(2),
                "",
                "no",
                r(NoDecision, Some("no"), None),
            ),
            (
                PreToolUse,
                Some(0),
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"why"}}"#,
                "",
                r(Ask, Some("why"), None),
            ),
            (
                PreToolUse,
                Some(0),
                r#"{"decision":"approve","reason":"ok"}"#,
                "",
                r(Allow, Some("ok"), None),
            ),
            (
                PreToolUse,
                Some(0),
                r#"{"decision":"block","reason":"no"}"#,
                "",
                r(Deny, Some("no"), None),
            ),
            (
                PostToolUse,
                Some(0),
                r#"{"decision":"block","reason":"fix","hookSpecificOutput":{"additionalContext":"ctx"}}"#,
                "",
                r(Block, Some("fix"), Some("ctx")),
            ),
            (
                PreToolUse,
                Some(0),
                r#"{"continue":false,"stopReason":"halt","hookSpecificOutput":{"permissionDecision":"allow"}}"#,
                "",
                r(Stop, Some("halt"), None),
            ),
            (
                UserPromptSubmit,
                Some(0),
                "plain context\n",
                "",
                r(NoDecision, None, Some("plain context")),
            ),
            (
                SessionStart,
                Some(0),
                "welcome",
                "",
                r(NoDecision, None, Some("welcome")),
            ),
            (
                PostToolUse,
                Some(0),
                "plain text",
                "",
                r(NoDecision, None, None),
            ),
            (
                PostToolUse,
                Some(0),
                "{not json",
                "",
                r(Failed, Some("its stdout is not valid JSON"), None),
            ),
            (
                PreToolUse,
                Some(1),
                "",
                "boom",
                r(Failed, Some("exited with code 1"), None),
            ),
            (
                PreToolUse,
                None,
                "",
                "",
                r(Failed, Some("killed by a signal"), None),
            ),
            // Fields that would widen anything are not read.
            (
                PreToolUse,
                Some(0),
                r#"{"permission_mode":"bypassPermissions","approval_mode":"bypass","sandbox":"none","tools":["shell"]}"#,
                "",
                r(NoDecision, None, None),
            ),
        ];
        for (event, code, stdout, stderr, expected) in table {
            assert_eq!(
                interpret(event, code, stdout, stderr),
                expected,
                "{event:?} {stdout} {stderr}"
            );
        }
    }

    #[test]
    fn long_text_is_capped() {
        let long = "x".repeat(TEXT_CAP + 5);
        let got = interpret(PostToolUse, Some(2), "", &long);
        assert_eq!(got.reason.map(|r| r.chars().count()), Some(TEXT_CAP + 1));
    }
}

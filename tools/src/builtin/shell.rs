//! `shell`: runs `bash -c <command>` through the Sandbox Runner, in its own process
//! group, with a timeout, cancellation and capped output streamed live.

use super::arguments;
use super::output::CappedOutput;
use crate::sandbox::{EXIT_SANDBOX_UNAVAILABLE, ProcessGroupGuard, SandboxRunner};
use crate::typed::builtin_parameters_of;
use crate::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec};
use async_trait::async_trait;
use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

/// Timeout when the call gives none, in milliseconds.
pub const SHELL_DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Largest timeout a call may ask for, in milliseconds.
pub(crate) const SHELL_MAX_TIMEOUT_MS: u64 = 600_000;
/// After the command ends (or is killed), output still in the pipes is read for at most
/// this long (a process that left the group may keep a pipe open).
const DRAIN_LIMIT: Duration = Duration::from_millis(500);

// The arguments of `shell` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    /// The bash command (run with bash -c).
    #[schemars(length(min = 1))]
    command: String,
    /// Set true only when the command needs network access (e.g. downloading dependencies); it then needs approval.
    // Read by the Approval Gateway from the raw arguments (`tools::approval`).
    #[expect(dead_code, reason = "the Approval Gateway reads it before the call")]
    network: Option<bool>,
    /// Timeout in milliseconds (default 120000).
    #[schemars(range(min = 1, max = SHELL_MAX_TIMEOUT_MS))]
    timeout_ms: Option<u64>,
}

/// Runs a shell command: `{command, network?, timeout_ms?}`. `network` is read by the
/// Approval Gateway (the sandbox in `ToolContext::sandbox` is what is enforced).
///
/// The result is stdout and stderr interleaved as written (head and tail kept, the middle cut),
/// then `[exit code: N]`; a non-zero exit, a timeout or a cancel is `is_error`.
#[derive(Debug)]
pub struct Shell {
    spec: ToolSpec,
    runner: SandboxRunner,
}

impl Shell {
    /// The tool; sandboxed commands start through `runner`.
    #[must_use]
    pub fn new(runner: SandboxRunner) -> Self {
        let spec = ToolSpec {
            name: "shell".to_owned(),
            description: "Run a bash command in the working directory and return its combined \
                          stdout and stderr and exit code. Unless the session bypasses the \
                          sandbox, the command may write only inside the working directory \
                          and $TMPDIR and has no network access. Long output is cut in the \
                          middle."
                .to_owned(),
            parameters: builtin_parameters_of::<ShellArgs>(),
            parallel_safe: false,
            side_effect: SideEffect::Exec,
            cancellable: true,
            default_timeout_ms: SHELL_DEFAULT_TIMEOUT_MS,
        };
        Self { spec, runner }
    }
}

#[derive(Debug)]
enum Outcome {
    Exited(std::process::ExitStatus),
    WaitFailed(std::io::Error),
    TimedOut,
    Cancelled,
}

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let args = match arguments::<ShellArgs>(&self.spec, args) {
            Ok(args) => args,
            Err(invalid) => return invalid,
        };
        let command = args.command;
        let timeout_ms = args
            .timeout_ms
            .unwrap_or(self.spec.default_timeout_ms)
            .clamp(1, SHELL_MAX_TIMEOUT_MS);
        let bash_args = ["-c".into(), command.into()];
        let protect = ctx.protected.in_workspace();
        // stdout and stderr share one pipe, so the model sees them interleaved exactly as
        // written (like `2>&1`).
        let (reader, writer) = match shared_pipe() {
            Ok(pipe) => pipe,
            Err(e) => return ToolOutput::error(format!("cannot create the output pipe: {e}")),
        };
        let stderr = match writer.try_clone() {
            Ok(stderr) => stderr,
            Err(e) => return ToolOutput::error(format!("cannot create the output pipe: {e}")),
        };
        let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
        tokio::pin!(deadline);
        // The runner drops its copies of the pipe's write end, so EOF arrives when the
        // process group is gone. A call dropped here (cancel, timeout) is killed.
        let started = tokio::select! {
            biased;
            () = cancel.cancelled() => Err(Outcome::Cancelled),
            () = &mut deadline => Err(Outcome::TimedOut),
            started = self.runner.start(
                ctx.sandbox, &ctx.cwd, &protect, "bash", &bash_args, (writer, stderr),
            ) => Ok(started),
        };
        let started = match started {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => return ToolOutput::error(format!("cannot start the command: {e}")),
            Err(outcome) => return render(&outcome, &CappedOutput::default(), timeout_ms),
        };
        // Dropped after the guard below (declared later, dropped first): the temp dir and
        // the placeholders a killed helper left go once the process group is dead.
        let (mut child, _tmp_dir, _sweep) = (started.process, started.tmp_dir, started.sweep);
        let mut guard = ProcessGroupGuard::new(child.id());
        let mut streams = Streams {
            reader: Some(reader),
            output: CappedOutput::default(),
        };
        let outcome = loop {
            tokio::select! {
                biased;
                // Cancel wins over everything: the group is killed below, output so far kept.
                () = cancel.cancelled() => break Outcome::Cancelled,
                () = &mut deadline => break Outcome::TimedOut,
                // Output is read while the command runs so the pipes never fill up.
                () = streams.next_chunk(progress), if streams.is_open() => {}
                // The leader exited; stragglers in its group are killed below.
                status = child.wait() => break match status {
                    Ok(status) => Outcome::Exited(status),
                    Err(e) => Outcome::WaitFailed(e),
                },
            }
        };
        if matches!(outcome, Outcome::Exited(_) | Outcome::WaitFailed(_)) {
            guard.leader_reaped();
        }
        guard.kill();
        if matches!(outcome, Outcome::Cancelled | Outcome::TimedOut) {
            // SIGKILL was sent to the tree and the group; reap the leader (the guard's
            // drop then has no tree left to walk).
            let _ = child.wait().await;
            guard.leader_reaped();
        }
        let _ = tokio::time::timeout(DRAIN_LIMIT, async {
            while streams.is_open() {
                streams.next_chunk(progress).await;
            }
        })
        .await;
        render(&outcome, &streams.output, timeout_ms)
    }
}

fn render(outcome: &Outcome, output: &CappedOutput, timeout_ms: u64) -> ToolOutput {
    let mut text = output.render();
    if text.is_empty() {
        text.push_str("(no output)");
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let is_error = match outcome {
        Outcome::Exited(status) => {
            if let Some(code) = status.code() {
                let _ = write!(text, "[exit code: {code}]");
                if code == EXIT_SANDBOX_UNAVAILABLE && text.contains("foya-sandbox:") {
                    text.push_str(
                        "\n[the sandbox could not be set up, so the command did not run]",
                    );
                }
                code != 0
            } else {
                let signal = status.signal().unwrap_or_default();
                let _ = write!(text, "[killed by signal {signal}]");
                true
            }
        }
        Outcome::WaitFailed(e) => {
            let _ = write!(text, "[could not wait for the command: {e}]");
            true
        }
        Outcome::TimedOut => {
            let _ = write!(
                text,
                "[timed out after {timeout_ms} ms; the command's process group was killed]"
            );
            true
        }
        Outcome::Cancelled => {
            text.push_str("[cancelled; the command's process group was killed]");
            true
        }
    };
    ToolOutput::text(text, is_error)
}

/// A new pipe for the command's stdout and stderr: its read end, its write end.
fn shared_pipe() -> std::io::Result<(pipe::Receiver, OwnedFd)> {
    let (reader, writer) = std::io::pipe()?;
    let reader = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))?;
    Ok((reader, OwnedFd::from(writer)))
}

/// The command's output pipe, read into a capped buffer.
#[derive(Debug)]
struct Streams {
    reader: Option<pipe::Receiver>,
    output: CappedOutput,
}

impl Streams {
    fn is_open(&self) -> bool {
        self.reader.is_some()
    }

    /// Reads one chunk, records it and streams it to `progress`; at EOF or on a read
    /// error the pipe is closed.
    ///
    /// # Cancel safety
    /// Cancel safe: a read that did not complete consumed nothing.
    async fn next_chunk(&mut self, progress: &dyn ProgressSink) {
        let mut buf = [0_u8; 8192];
        let read = match self.reader.as_mut() {
            Some(reader) => reader.read(&mut buf).await,
            None => std::future::pending().await,
        };
        match read {
            Ok(n) if n > 0 => {
                self.output.push(&buf[..n]);
                progress.output(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            _ => self.reader = None,
        }
    }
}

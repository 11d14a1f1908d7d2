//! The floor's tool work: each tool call the runtime ran, done again with nothing around
//! it. `read_file` reads the same file; `shell` runs the same command through the same
//! sandbox helper invocation (the specification requires the sandbox: the helper under
//! the policy the approval gateway gives the call, `SandboxPolicy::None` under
//! `bypass`), started as the runtime starts it (forked by the runner's persistent
//! helper, or a helper of its own when none can run), reading its output to the end and
//! reaping it. Other tools are not replayed (counted in [`ToolWork::skipped`]).

use foya_actors::tools::approval::{Verdict, evaluate};
use foya_actors::tools::protected::Protected;
use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::tools::{SandboxPolicy, ToolRegistry, ToolSpec};
use foya_protocol::{ApprovalMode, ToolCall};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt as _;
use tokio::net::unix::pipe;

/// What the floor needs to run tool calls as the sessions did.
#[derive(Debug)]
pub(crate) struct FloorTools {
    cwd: PathBuf,
    approval: ApprovalMode,
    runner: SandboxRunner,
    protected: Protected,
    /// The `shell` tool's declaration (for the approval gateway's verdict).
    shell: Option<ToolSpec>,
}

/// Tool work done by one replayed call.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToolWork {
    /// Files read to the end.
    pub(crate) files_read: u64,
    /// Processes started through the sandbox helper and reaped.
    pub(crate) processes: u64,
    /// Calls that failed (unreadable file, command that could not start or was refused).
    pub(crate) failed: u64,
    /// Calls of tools the floor does not replay.
    pub(crate) skipped: u64,
}

impl ToolWork {
    pub(crate) fn add(&mut self, other: Self) {
        self.files_read += other.files_read;
        self.processes += other.processes;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
}

impl FloorTools {
    /// Tools of sessions working in `cwd` under `approval`, with the load test's sandbox
    /// helper.
    pub(crate) fn new(cwd: &Path, approval: ApprovalMode) -> Self {
        let shell = ToolRegistry::builtin()
            .get("shell")
            .map(|tool| tool.spec().clone());
        Self {
            cwd: cwd.to_owned(),
            approval,
            runner: SandboxRunner::this_binary(),
            protected: Protected::new(cwd, &[]),
            shell,
        }
    }

    /// Does `call`'s work.
    pub(crate) async fn run(&self, call: &ToolCall) -> ToolWork {
        let arg = |key: &str| call.arguments.get(key).and_then(serde_json::Value::as_str);
        match (call.name.as_str(), arg("path"), arg("command")) {
            ("read_file", Some(path), _) => self.read(path).await,
            ("shell", _, Some(command)) => self.shell(call, command).await,
            _ => ToolWork {
                skipped: 1,
                ..ToolWork::default()
            },
        }
    }

    async fn read(&self, path: &str) -> ToolWork {
        let read = tokio::fs::read(self.cwd.join(path)).await;
        ToolWork {
            files_read: u64::from(read.is_ok()),
            failed: u64::from(read.is_err()),
            ..ToolWork::default()
        }
    }

    /// The sandbox the gateway gives this call (as the session's would), `None` when it
    /// would not run it at once.
    fn policy(&self, call: &ToolCall) -> Option<SandboxPolicy> {
        let spec = self.shell.as_ref()?;
        let grants = BTreeSet::new();
        match evaluate(
            self.approval,
            spec,
            &call.arguments,
            &self.cwd,
            &self.protected,
            &grants,
            // The floor measures the shielded sandbox (a kernel with namespaces).
            true,
        ) {
            Verdict::Allow { sandbox } => Some(sandbox),
            Verdict::Ask { .. } | Verdict::Deny { .. } => None,
        }
    }

    async fn shell(&self, call: &ToolCall, command: &str) -> ToolWork {
        let failed = ToolWork {
            failed: 1,
            ..ToolWork::default()
        };
        let Some(policy) = self.policy(call) else {
            return failed;
        };
        let args: [OsString; 2] = ["-c".into(), command.into()];
        let protect = self.protected.in_workspace();
        // One pipe for stdout and stderr, read to the end, as the `shell` tool does.
        let Ok((reader, writer)) = std::io::pipe() else {
            return failed;
        };
        let Ok(stderr) = writer.try_clone() else {
            return failed;
        };
        let Ok(call) = self
            .runner
            .start(
                policy,
                &self.cwd,
                &protect,
                "bash",
                &args,
                (OwnedFd::from(writer), OwnedFd::from(stderr)),
            )
            .await
        else {
            return failed;
        };
        let (mut process, _tmp_dir) = (call.process, call.tmp_dir);
        let Ok(mut reader) = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)) else {
            return failed;
        };
        let mut output = Vec::new();
        let read = reader.read_to_end(&mut output).await;
        match (read, process.wait().await) {
            (Ok(_), Ok(status)) if status.success() => ToolWork {
                processes: 1,
                ..ToolWork::default()
            },
            _ => ToolWork {
                processes: 1,
                failed: 1,
                ..ToolWork::default()
            },
        }
    }
}

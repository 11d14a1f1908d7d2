//! Shared helpers of the `tools_*` integration tests: contexts, a recording progress sink,
//! and waiting on a predicate with one global timeout.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::tools::{ProgressSink, SandboxPolicy, Tool, ToolContext, ToolOutput};
use foya_protocol::{ApprovalMode, RunId, SessionId, ToolCallId};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Global bound of every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn ctx(cwd: &Path, approval_mode: ApprovalMode, sandbox: SandboxPolicy) -> ToolContext {
    ToolContext {
        cwd: cwd.to_path_buf(),
        project_id: None,
        approval_mode,
        session_id: SessionId::new(),
        run_id: RunId::new(),
        step: 1,
        tool_call_id: ToolCallId::new("call_1"),
        sandbox,
        protected: foya_actors::tools::protected::Protected::new(cwd, &[]),
        shared: foya_actors::tools::ToolState::new(),
    }
}

/// A confined context (approval mode `auto`, sandbox `WorkspaceWrite{network:false}`).
pub fn confined(cwd: &Path) -> ToolContext {
    ctx(
        cwd,
        ApprovalMode::Auto,
        SandboxPolicy::WorkspaceWrite { network: false },
    )
}

pub fn runner() -> SandboxRunner {
    SandboxRunner::new(env!("CARGO_BIN_EXE_foya-sandbox"))
}

/// Records what a tool reports.
#[derive(Debug, Default)]
pub struct Recorder {
    pub updates: Mutex<Vec<String>>,
    pub output: Mutex<String>,
}

impl ProgressSink for Recorder {
    fn update(&self, message: String) {
        self.updates.lock().unwrap().push(message);
    }
    fn output(&self, chunk: String) {
        self.output.lock().unwrap().push_str(&chunk);
    }
}

/// Calls `tool` with a fresh token and a throwaway recorder.
pub async fn call(tool: &dyn Tool, ctx: &ToolContext, args: serde_json::Value) -> ToolOutput {
    tool.call(ctx, args, CancellationToken::new(), &Recorder::default())
        .await
}

/// Polls `predicate` until it holds, panicking after [`WAIT`].
pub async fn wait_until(what: &str, mut predicate: impl FnMut() -> bool) {
    let result = tokio::time::timeout(WAIT, async {
        while !predicate() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(result.is_ok(), "timed out waiting for {what}");
}

/// Whether `pid` is gone (no such process, or a zombie awaiting its reaper).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            state == Some(Some('Z'))
        }
    }
}

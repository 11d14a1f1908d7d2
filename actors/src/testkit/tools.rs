//! Test tools (echo, wait-for-cancel, panic, exec) and the fixtures of a direct tool
//! call: a context, a progress recorder, a call with a fresh token.

use crate::tools::protected::Protected;
use crate::tools::sandbox::SandboxRunner;
use crate::tools::{
    ProgressSink, SandboxPolicy, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
    ToolState,
};
use async_trait::async_trait;
use foya_protocol::{ApprovalMode, RunId, SessionId, ToolCallId};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// What a test tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Returns `echo: <args>` after one progress update.
    Echo,
    /// Waits until cancelled, then returns "stopped".
    WaitForCancel,
    /// Panics.
    Panic,
}

/// A test tool of a [`Behaviour`], parallel-safe when it echoes.
#[derive(Debug)]
pub struct TestTool {
    spec: ToolSpec,
    behaviour: Behaviour,
}

impl TestTool {
    /// The tool `name`, shared.
    pub fn shared(name: &str, behaviour: Behaviour, side_effect: SideEffect) -> Arc<dyn Tool> {
        Arc::new(Self {
            spec: ToolSpec {
                name: name.into(),
                description: format!("test tool {name}"),
                parameters: serde_json::json!({"type": "object"}),
                parallel_safe: behaviour == Behaviour::Echo,
                side_effect,
                cancellable: true,
                default_timeout_ms: 3_600_000,
            },
            behaviour,
        })
    }
}

#[async_trait]
impl Tool for TestTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        _ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput {
        match self.behaviour {
            Behaviour::Echo => {
                progress.output(format!("out {args}"));
                ToolOutput::ok(format!("echo: {args}"))
            }
            Behaviour::WaitForCancel => {
                cancel.cancelled().await;
                ToolOutput::error("stopped")
            }
            Behaviour::Panic => panic!("test tool panicked"),
        }
    }
}

/// The built-ins plus the test tools: `echo` (read-only, parallel-safe), `wait` (waits
/// for cancel), `boom` (panics), `exec` (echo with an exec side effect).
pub fn tools() -> Arc<ToolRegistry> {
    let mut registry = ToolRegistry::builtin();
    let test_tools = [
        ("echo", Behaviour::Echo, SideEffect::None),
        ("wait", Behaviour::WaitForCancel, SideEffect::None),
        ("boom", Behaviour::Panic, SideEffect::None),
        ("exec", Behaviour::Echo, SideEffect::Exec),
    ];
    for (name, behaviour, side_effect) in test_tools {
        registry
            .register(TestTool::shared(name, behaviour, side_effect))
            .unwrap();
    }
    Arc::new(registry)
}

/// The context of a direct call (call `call_1`, step 1) in `cwd`, with no project
/// hooks and no tool state.
pub fn tool_context(
    cwd: &Path,
    approval_mode: ApprovalMode,
    sandbox: SandboxPolicy,
) -> ToolContext {
    ToolContext {
        cwd: cwd.to_path_buf(),
        project_id: None,
        approval_mode,
        session_id: SessionId::new(),
        run_id: RunId::new(),
        step: 1,
        tool_call_id: ToolCallId::new("call_1"),
        sandbox,
        protected: Protected::new(cwd, &[]),
        shared: ToolState::new(),
        cancel: tokio_util::sync::CancellationToken::new(),
    }
}

/// A confined context: approval mode `auto`, sandbox `WorkspaceWrite{network:false}`.
pub fn confined(cwd: &Path) -> ToolContext {
    tool_context(
        cwd,
        ApprovalMode::Auto,
        SandboxPolicy::WorkspaceWrite { network: false },
    )
}

/// Records what a tool reports while it runs.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Status updates, in order.
    pub updates: Mutex<Vec<String>>,
    /// Live output, concatenated.
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

/// Calls `tool` with `args`, a fresh token and a throwaway [`Recorder`].
pub async fn call_tool(tool: &dyn Tool, ctx: &ToolContext, args: serde_json::Value) -> ToolOutput {
    tool.call(ctx, args, CancellationToken::new(), &Recorder::default())
        .await
}

/// A Sandbox Runner starting commands through the real `foya-sandbox` helper
/// ([`sandbox_helper`]).
pub fn sandbox_runner() -> SandboxRunner {
    SandboxRunner::new(sandbox_helper())
}

/// The `foya-sandbox` helper binary (a binary of the `foya` package, beside `foya`),
/// built once per test process with `cargo build -p foya --bin foya-sandbox` (escargot,
/// the same profile and target folder as the tests). A build that takes longer than 10 s
/// says so on the standard error.
///
/// # Panics
/// When the build fails (the test cannot run without the helper).
pub fn sandbox_helper() -> std::path::PathBuf {
    static HELPER: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    HELPER
        .get_or_init(|| {
            let mut build = escargot::CargoBuild::new()
                .package("foya")
                .bin("foya-sandbox");
            // The variables cargo sets for a test process would reach build scripts that
            // watch them (`rerun-if-env-changed`) and make this build and the next
            // `cargo test` rebuild each other's dependencies.
            for (key, _) in std::env::vars_os() {
                let Some(key) = key.to_str() else { continue };
                if key.starts_with("CARGO_PKG_")
                    || [
                        "CARGO_MANIFEST_DIR",
                        "CARGO_MANIFEST_PATH",
                        "CARGO_MANIFEST_LINKS",
                        "CARGO_CRATE_NAME",
                        "CARGO_PRIMARY_PACKAGE",
                        "CARGO_TARGET_TMPDIR",
                        "OUT_DIR",
                    ]
                    .contains(&key)
                {
                    build = build.env_remove(key);
                }
            }
            let slow = slow_build_note();
            let path = build
                .run()
                .expect("build foya-sandbox")
                .path()
                .to_path_buf();
            drop(slow);
            path
        })
        .clone()
}

/// How long the helper's build may take before [`slow_build_note`] says why a test waits.
const SLOW_BUILD: std::time::Duration = std::time::Duration::from_secs(10);

/// Says on the real standard error (past the test harness's capture, which would hold
/// it until the test ends) that the test waits for the helper's build, unless the
/// returned sender is dropped within [`SLOW_BUILD`]. The build waits while another cargo
/// command holds the target folder's lock, and recompiles `foya` after a change: a test
/// waiting there looks hung otherwise.
fn slow_build_note() -> std::sync::mpsc::Sender<()> {
    let (done, built) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if built.recv_timeout(SLOW_BUILD) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "foya testkit: still building the sandbox helper (`cargo build -p foya --bin \
                 foya-sandbox`, the tests' profile and target folder) after {}s: it recompiles \
                 `foya` after a change and waits while another cargo command holds the target \
                 folder's lock",
                SLOW_BUILD.as_secs()
            );
        }
    });
    done
}

/// The real built-ins with `shell` sandboxed through [`sandbox_runner`].
pub fn sandboxed_builtins() -> ToolRegistry {
    ToolRegistry::builtin_with_sandbox(sandbox_runner())
}

//! Shared pieces of the turn-control tests: a request-capturing model client around the
//! scripted one, test tools spawning real `sleep` processes in their own process group;
//! waiting, stores, subscriptions and log reading come from the test kit.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    dead_code,
    unreachable_pub
)]

use async_trait::async_trait;
use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::provider::{ModelClient, ModelRequest};
pub use foya_actors::testkit::procs::wait_gone;
pub use foya_actors::testkit::{
    assert_well_formed, events_until as until, is_turn_complete as is_complete,
    memory_store as store, subscribe, types, until_closed,
};
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
use foya_actors::{Runtime, RuntimeConfig, SessionHandle};
use foya_protocol::{ApprovalMode, Event, EventKind, SessionConfig, StreamEvent, TurnStatus};
use futures::stream::BoxStream;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The one global timeout of a test's waiting.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A scripted client that records every request it gets.
#[derive(Debug, Clone)]
pub struct Capture {
    inner: ScriptedClient,
    pub requests: Arc<Mutex<Vec<ModelRequest>>>,
}

impl Capture {
    pub fn new(script: serde_json::Value) -> Self {
        let script: Script = serde_json::from_value(script).unwrap();
        Self {
            inner: ScriptedClient::from_script(script),
            requests: Arc::default(),
        }
    }
}

impl ModelClient for Capture {
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request, cancel)
    }
}

/// What a test tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Spawns `sleep 30` in its own process group; killed on cancel or drop.
    Sleep,
    /// Returns `ok <args>`.
    Probe,
    /// Fails with `boom` (the same error every time).
    Fail,
}

#[derive(Debug)]
pub struct TestTool {
    spec: ToolSpec,
    kind: Kind,
    /// Pids of the `sleep` processes started so far; tests wait on it with
    /// [`TestTool::wait_pids`].
    pub pids: Arc<tokio::sync::watch::Sender<Vec<i32>>>,
}

impl TestTool {
    /// Waits until at least `n` processes were started; returns their pids.
    pub async fn wait_pids(&self, n: usize) -> Vec<i32> {
        let mut rx = self.pids.subscribe();
        let pids = within(rx.wait_for(|p| p.len() >= n)).await;
        pids.unwrap().clone()
    }
}

/// Kills a process group when dropped (the ToolActor is killed on cancel).
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0), Signal::SIGKILL);
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
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        match self.kind {
            Kind::Probe => ToolOutput::ok(format!("ok {args}")),
            Kind::Fail => ToolOutput::error("boom"),
            Kind::Sleep => {
                let mut child = tokio::process::Command::new("sleep")
                    .arg("30")
                    .process_group(0)
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap();
                let pid = i32::try_from(child.id().unwrap()).unwrap();
                let _group = Group(pid);
                self.pids.send_modify(|p| p.push(pid));
                tokio::select! {
                    () = cancel.cancelled() => ToolOutput::error("stopped"),
                    _ = child.wait() => ToolOutput::ok("slept"),
                }
            }
        }
    }
}

pub fn tool(name: &str, kind: Kind, side_effect: SideEffect) -> Arc<TestTool> {
    Arc::new(TestTool {
        spec: ToolSpec {
            name: name.into(),
            description: format!("test tool {name}"),
            parameters: serde_json::json!({"type": "object"}),
            parallel_safe: true,
            side_effect,
            cancellable: true,
            default_timeout_ms: 3_600_000,
        },
        kind,
        pids: Arc::new(tokio::sync::watch::Sender::new(Vec::new())),
    })
}

/// The test tools: `sleeper` (parallel-safe `sleep 30`), `probe`, `peek` (read-only
/// answers), `runner` (an exec tool needing approval in `ask`) and `breaker` (always
/// fails with the same error).
pub struct Tools {
    pub registry: Arc<ToolRegistry>,
    pub sleeper: Arc<TestTool>,
}

pub fn tools() -> Tools {
    let sleeper = tool("sleeper", Kind::Sleep, SideEffect::None);
    let mut registry = ToolRegistry::builtin();
    registry.register(sleeper.clone()).unwrap();
    registry
        .register(tool("probe", Kind::Probe, SideEffect::None))
        .unwrap();
    registry
        .register(tool("peek", Kind::Probe, SideEffect::None))
        .unwrap();
    registry
        .register(tool("runner", Kind::Probe, SideEffect::Exec))
        .unwrap();
    registry
        .register(tool("breaker", Kind::Fail, SideEffect::None))
        .unwrap();
    Tools {
        registry: Arc::new(registry),
        sleeper,
    }
}

pub fn config(store: foya_storage::Store, client: Capture, tools: &Tools) -> RuntimeConfig {
    RuntimeConfig {
        tools: Arc::clone(&tools.registry),
        ..RuntimeConfig::new(store, Arc::new(client))
    }
}

pub async fn start(config: RuntimeConfig, mode: ApprovalMode) -> (Runtime, SessionHandle) {
    let rt = Runtime::start(config).await.unwrap();
    let session = rt
        .create_session(SessionConfig {
            approval_mode: mode,
            ..SessionConfig::new(std::env::temp_dir())
        })
        .await
        .unwrap();
    (rt, session)
}

/// Runs `fut` under [`TIMEOUT`].
pub async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, fut).await.expect("timed out")
}

pub fn status(event: &Event) -> Option<TurnStatus> {
    match &event.kind {
        EventKind::TurnComplete { status, .. } => Some(*status),
        _ => None,
    }
}

//! Shared helpers of `turn_tools.rs`: a runtime with the real built-in tools (sandboxed
//! through the `foya-sandbox` helper) plus test tools, a scripted model that records the
//! requests it gets, and "receive until predicate" under one global timeout.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use async_trait::async_trait;
use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
use foya_actors::{Runtime, RuntimeConfig, SessionHandle, SubscribeOptions, Subscription};
use foya_protocol::{
    ApprovalMode, Event, EventKind, Seq, SessionConfig, SessionUpdate, StreamEvent, ToolCallId,
    ToolMessage,
};
use futures::stream::BoxStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The single global timeout of one test's waiting.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `fut` under `limit` (real time).
pub async fn within<T>(limit: Duration, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?}"))
}

/// A [`ScriptedClient`] that keeps every request it is sent.
#[derive(Debug, Clone)]
pub struct RecordingClient {
    inner: ScriptedClient,
    pub requests: Arc<Mutex<Vec<ModelRequest>>>,
}

impl ModelClient for RecordingClient {
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request, cancel)
    }
}

/// The real built-ins with `shell` sandboxed through the `foya-sandbox` helper.
pub fn builtin() -> ToolRegistry {
    ToolRegistry::builtin_with_sandbox(SandboxRunner::new(env!("CARGO_BIN_EXE_foya-sandbox")))
}

/// A runtime on `store` answering with `script` and calling `tools`; also the requests
/// the model gets.
pub async fn start(
    store: foya_storage::Store,
    script: serde_json::Value,
    tools: ToolRegistry,
) -> (Runtime, Arc<Mutex<Vec<ModelRequest>>>) {
    let script: Script = serde_json::from_value(script).unwrap();
    let client = RecordingClient {
        inner: ScriptedClient::from_script(script),
        requests: Arc::default(),
    };
    let requests = Arc::clone(&client.requests);
    let config = RuntimeConfig {
        tools: Arc::new(tools),
        subscriber_buffer: 4096,
        // Title requests would show up among the recorded model requests.
        context: foya_actors::ContextOptions {
            generate_titles: false,
            ..foya_actors::ContextOptions::default()
        },
        ..RuntimeConfig::new(store, Arc::new(client))
    };
    (Runtime::start(config).await.unwrap(), requests)
}

pub fn memory_store() -> foya_storage::Store {
    foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap()
}

/// A fresh working directory (canonical path) and its guard.
pub fn workdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

pub fn session_config(cwd: &Path, mode: ApprovalMode) -> SessionConfig {
    SessionConfig {
        approval_mode: mode,
        ..SessionConfig::new(cwd)
    }
}

pub async fn subscribe(session: &SessionHandle, approver: bool) -> Subscription {
    session
        .subscribe(Seq(1), SubscribeOptions { approver })
        .await
        .unwrap()
}

/// Receives until `done` holds for a persisted event; returns every one seen.
pub async fn events_until(
    sub: &mut Subscription,
    mut done: impl FnMut(&Event) -> bool,
) -> Vec<Event> {
    let mut seen = Vec::new();
    loop {
        match sub.recv().await {
            Some(SessionUpdate::Event(event)) => {
                let stop = done(&event);
                seen.push(event);
                if stop {
                    return seen;
                }
            }
            Some(_) => {}
            None => panic!("subscription ended; saw {seen:?}"),
        }
    }
}

pub fn is_turn_complete(event: &Event) -> bool {
    matches!(event.kind, EventKind::TurnComplete { .. })
}

/// The `type` names of `events`.
pub fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

/// The `tool_message`s of `events`, in order.
pub fn tool_messages(events: &[Event]) -> Vec<ToolMessage> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolMessage(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

pub fn tool_message(id: &str, content: &str, is_error: bool) -> ToolMessage {
    ToolMessage {
        tool_call_id: ToolCallId::new(id),
        content: content.into(),
        is_error,
        images: Vec::new(),
    }
}

/// A read-only, parallel-safe test tool with `{"i": n}` arguments: counts how many of
/// its calls run at once (high-water mark), reports each start to the test with a
/// release handle and finishes only when the test releases it.
#[derive(Debug)]
pub struct Probe {
    spec: ToolSpec,
    pub active: std::sync::atomic::AtomicUsize,
    pub high_water: std::sync::atomic::AtomicUsize,
    starts: tokio::sync::mpsc::UnboundedSender<(u64, tokio::sync::oneshot::Sender<()>)>,
}

impl Probe {
    /// The tool and the receiver of its starts.
    pub fn new() -> (
        Arc<Self>,
        tokio::sync::mpsc::UnboundedReceiver<(u64, tokio::sync::oneshot::Sender<()>)>,
    ) {
        let (starts, rx) = tokio::sync::mpsc::unbounded_channel();
        let spec = ToolSpec {
            name: "probe".into(),
            description: "test probe".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"i": {"type": "integer"}},
                "required": ["i"]
            }),
            parallel_safe: true,
            side_effect: SideEffect::None,
            cancellable: true,
            default_timeout_ms: 60_000,
        };
        let probe = Self {
            spec,
            active: Default::default(),
            high_water: Default::default(),
            starts,
        };
        (Arc::new(probe), rx)
    }
}

#[async_trait]
impl Tool for Probe {
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
        use std::sync::atomic::Ordering::SeqCst;
        let i = args["i"].as_u64().unwrap();
        let now = self.active.fetch_add(1, SeqCst) + 1;
        self.high_water.fetch_max(now, SeqCst);
        let (release, released) = tokio::sync::oneshot::channel();
        self.starts.send((i, release)).unwrap();
        tokio::select! {
            () = cancel.cancelled() => {}
            _ = released => {}
        }
        self.active.fetch_sub(1, SeqCst);
        ToolOutput::ok(format!("probe {i}"))
    }
}

/// A tool that panics.
#[derive(Debug)]
pub struct Boom(pub ToolSpec);

impl Boom {
    pub fn new() -> Arc<Self> {
        Arc::new(Self(ToolSpec {
            name: "boom".into(),
            description: "panics".into(),
            parameters: serde_json::json!({"type": "object"}),
            parallel_safe: false,
            side_effect: SideEffect::None,
            cancellable: true,
            default_timeout_ms: 60_000,
        }))
    }
}

#[async_trait]
impl Tool for Boom {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn call(
        &self,
        _ctx: &ToolContext,
        _args: serde_json::Value,
        _cancel: CancellationToken,
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        panic!("boom: test tool panicked")
    }
}

/// The live (non-zombie) processes of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    foya_actors::tools::sandbox::tree::processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid)
        .map(|p| p.pid)
        .collect()
}

//! Shared helpers of `turn_tools.rs`: a runtime with the real built-in tools (sandboxed
//! through the `foya-sandbox` helper) plus test tools (a probe counting concurrent calls,
//! a panicking tool); waiting, stores, sessions and log reading come from the test kit.
#![allow(
    dead_code,
    // Each test binary including this module uses a different part of the kit.
    unused_imports,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use async_trait::async_trait;
use foya_actors::Runtime;
use foya_actors::provider::ModelRequest;
use foya_actors::testkit::recorded_runtime;
pub use foya_actors::testkit::{
    events_until, is_turn_complete, memory_store, sandboxed_builtins as builtin,
    session_config_in as session_config, subscribe, tool_message, tool_messages, types, workdir,
};
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
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

/// A runtime on `store` answering with `script` and calling `tools`; also the requests
/// the model gets.
pub async fn start(
    store: foya_storage::Store,
    script: serde_json::Value,
    tools: ToolRegistry,
) -> (Runtime, Arc<Mutex<Vec<ModelRequest>>>) {
    let (rt, client) = recorded_runtime(store, script, tools).await;
    (rt, client.request_log())
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
    foya_actors::tools::sandbox::processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid)
        .map(|p| p.pid)
        .collect()
}

//! Test helpers: test tools, a runtime on an in-memory store with a scripted model, and
//! "receive until predicate" waiting under one global timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::provider::retry::RetryPolicy;
use crate::provider::scripted::{Script, ScriptedClient};
use crate::runtime::{Runtime, RuntimeConfig, SessionHandle};
use crate::subscription::{SubscribeOptions, Subscription};
use crate::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
use async_trait::async_trait;
use foya_protocol::{ApprovalMode, Event, Seq, SessionConfig, SessionUpdate};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a test tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// Returns "echo: <args>" after one progress update.
    Echo,
    /// Waits until cancelled, then returns "stopped".
    WaitForCancel,
    /// Panics.
    Panic,
}

#[derive(Debug)]
pub(crate) struct TestTool {
    spec: ToolSpec,
    behaviour: Behaviour,
}

impl TestTool {
    pub(crate) fn shared(
        name: &str,
        behaviour: Behaviour,
        side_effect: SideEffect,
    ) -> Arc<dyn Tool> {
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

/// The registry of test tools: `echo` (read-only, parallel-safe), `wait` (waits for
/// cancel), `boom` (panics), `exec` (echo with an exec side effect).
pub(crate) fn tools() -> Arc<ToolRegistry> {
    let mut registry = ToolRegistry::builtin();
    registry
        .register(TestTool::shared("echo", Behaviour::Echo, SideEffect::None))
        .unwrap();
    registry
        .register(TestTool::shared(
            "wait",
            Behaviour::WaitForCancel,
            SideEffect::None,
        ))
        .unwrap();
    registry
        .register(TestTool::shared("boom", Behaviour::Panic, SideEffect::None))
        .unwrap();
    registry
        .register(TestTool::shared("exec", Behaviour::Echo, SideEffect::Exec))
        .unwrap();
    Arc::new(registry)
}

pub(crate) fn script(value: serde_json::Value) -> Script {
    serde_json::from_value(value).unwrap()
}

pub(crate) fn config_for(store: foya_storage::Store, script: Script) -> RuntimeConfig {
    RuntimeConfig {
        models: HashMap::new(),
        tools: tools(),
        retry: RetryPolicy::default(),
        subscriber_buffer: 1024,
        context: crate::ContextOptions {
            user_dir: Some(std::env::temp_dir().join("foya-tests-no-user-dir")),
            project_files: true,
            generate_titles: false,
            ..crate::ContextOptions::default()
        },
        // The session tests pin the deny of a call nobody can approve.
        without_approver: crate::WithoutApprover::Deny,
        ..RuntimeConfig::new(store, Arc::new(ScriptedClient::from_script(script)))
    }
}

pub(crate) async fn runtime(script: Script) -> Runtime {
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    Runtime::start(config_for(store, script)).await.unwrap()
}

/// A runtime on an in-memory store whose model is `model` (for failure cases a script
/// cannot express).
pub(crate) async fn runtime_with_model(model: Arc<dyn crate::provider::ModelClient>) -> Runtime {
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut config = config_for(store, script(serde_json::json!({"responses": []})));
    config.model = model;
    Runtime::start(config).await.unwrap()
}

/// Creates a `Bypass` session on `rt`, submits `text` and returns every persisted event up
/// to the turn's `turn_complete`.
pub(crate) async fn one_turn(rt: &Runtime, text: &str) -> Vec<Event> {
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session
        .submit(foya_protocol::Input::text(text))
        .await
        .unwrap();
    within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap()
}

pub(crate) fn session_config(mode: ApprovalMode) -> SessionConfig {
    SessionConfig {
        approval_mode: mode,
        ..SessionConfig::new("/tmp")
    }
}

pub(crate) async fn subscribe(session: &SessionHandle, approver: bool) -> Subscription {
    session
        .subscribe(Seq(1), SubscribeOptions { approver })
        .await
        .unwrap()
}

/// The global timeout of one test's waiting, in real time.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `fut` under the global [`TIMEOUT`], measured by a real-time watchdog thread (not
/// a tokio timer: with paused time, a tokio timeout would fire as soon as the runtime
/// idles while the store's writer thread commits).
pub(crate) async fn within<T>(fut: impl std::future::Future<Output = T>) -> Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(TIMEOUT);
        let _ = tx.send(());
    });
    tokio::select! {
        out = fut => Ok(out),
        _ = rx => Err(format!("timed out after {TIMEOUT:?}")),
    }
}

/// Receives until `done` holds for an event; returns every persisted event seen.
pub(crate) async fn events_until(
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

/// The `type` names of `events`.
pub(crate) fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

pub(crate) fn is_turn_complete(event: &Event) -> bool {
    matches!(event.kind, foya_protocol::EventKind::TurnComplete { .. })
}

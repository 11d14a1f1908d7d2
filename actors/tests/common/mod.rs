//! Shared helpers of the context/compaction runtime tests: a runtime on a scripted or
//! custom model client, a recording client, and waiting under one real-time timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_actors::tools::ToolRegistry;
use foya_actors::{ContextOptions, Runtime, RuntimeConfig, SubscribeOptions, Subscription};
use foya_protocol::{
    ApprovalMode, Event, EventKind, FinishReason, Seq, SessionConfig, SessionUpdate, StreamEvent,
};
use foya_storage::{Store, StoreOptions};
use futures::stream::BoxStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The global timeout of one test's waiting, in real time.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) fn script(value: serde_json::Value) -> ScriptedClient {
    let script: Script = serde_json::from_value(value).unwrap();
    ScriptedClient::from_script(script)
}

/// Options with a user dir that holds nothing and no title generation.
pub(crate) fn options(user_dir: &Path) -> ContextOptions {
    ContextOptions {
        user_dir: Some(user_dir.to_path_buf()),
        project_files: true,
        generate_titles: false,
        ..ContextOptions::default()
    }
}

pub(crate) fn config(
    store: Store,
    model: Arc<dyn ModelClient>,
    context: ContextOptions,
) -> RuntimeConfig {
    RuntimeConfig {
        tools: Arc::new(ToolRegistry::new()),
        subscriber_buffer: 4096,
        context,
        ..RuntimeConfig::new(store, model)
    }
}

pub(crate) async fn runtime(model: Arc<dyn ModelClient>, context: ContextOptions) -> Runtime {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    Runtime::start(config(store, model, context)).await.unwrap()
}

pub(crate) fn session_config(cwd: &Path) -> SessionConfig {
    SessionConfig {
        approval_mode: ApprovalMode::Bypass,
        ..SessionConfig::new(cwd)
    }
}

pub(crate) async fn subscribe(session: &foya_actors::SessionHandle) -> Subscription {
    session
        .subscribe(Seq(1), SubscribeOptions::default())
        .await
        .unwrap()
}

/// Runs `fut` under [`TIMEOUT`], measured by a real-time thread (works with paused time).
pub(crate) async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(TIMEOUT);
        let _ = tx.send(());
    });
    tokio::select! {
        out = fut => out,
        _ = rx => panic!("timed out after {TIMEOUT:?}"),
    }
}

/// Receives until `done` holds for an event; returns every persisted event seen.
pub(crate) async fn events_until(
    sub: &mut Subscription,
    mut done: impl FnMut(&Event) -> bool,
) -> Vec<Event> {
    within(async {
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
    })
    .await
}

pub(crate) fn is_turn_complete(event: &Event) -> bool {
    matches!(event.kind, EventKind::TurnComplete { .. })
}

pub(crate) fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

/// `count` words of filler (2 estimated tokens each).
pub(crate) fn filler(word: &str, count: usize) -> String {
    vec![word; count].join(" ")
}

/// A model client answering main requests in order with `answer(n)` (n = 1, 2, …),
/// recording every request; its window is configurable.
#[derive(Debug)]
pub(crate) struct RecordingClient {
    pub(crate) requests: Mutex<Vec<ModelRequest>>,
    pub(crate) window: u64,
    pub(crate) answer: fn(usize) -> String,
}

impl ModelClient for RecordingClient {
    fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let mut requests = self.requests.lock().unwrap();
        requests.push(request);
        let text = (self.answer)(requests.len());
        Box::pin(futures::stream::iter(vec![
            StreamEvent::TextDelta { text },
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Stop),
            },
        ]))
    }

    fn context_window(&self) -> u64 {
        self.window
    }
}

/// Runs one input on a fresh session; returns every event up to its `turn_complete`.
pub(crate) async fn one_turn(rt: &Runtime, cwd: &Path, input: foya_protocol::Input) -> Vec<Event> {
    let session = rt.create_session(session_config(cwd)).await.unwrap();
    let mut sub = subscribe(&session).await;
    session.submit(input).await.unwrap();
    events_until(&mut sub, is_turn_complete).await
}

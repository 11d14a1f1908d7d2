//! Shared fixtures of the context/compaction runtime tests: a runtime without tools on a
//! scripted or custom model client, a client with a chosen context window that records
//! its requests, filler text. Waiting and reading logs come from the test kit.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

// The kit's waiting and log reading, for the tests that glob-import this module.
use foya_actors::provider::scripted::ScriptedClient;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_actors::testkit;
#[allow(unused_imports)]
pub(crate) use foya_actors::testkit::{events_until, is_turn_complete, types, within};
use foya_actors::tools::ToolRegistry;
use foya_actors::{ContextOptions, Runtime, RuntimeConfig, Subscription};
use foya_protocol::{ApprovalMode, Event, FinishReason, SessionConfig, StreamEvent};
use foya_storage::Store;
use futures::stream::BoxStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A scripted model answering with the script `value`.
pub(crate) fn script(value: serde_json::Value) -> ScriptedClient {
    ScriptedClient::from_script(testkit::script(value))
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
    Runtime::start(config(testkit::memory_store(), model, context))
        .await
        .unwrap()
}

/// A `bypass` session working in `cwd`.
pub(crate) fn session_config(cwd: &Path) -> SessionConfig {
    testkit::session_config_in(cwd, ApprovalMode::Bypass)
}

/// Subscribes from the first event, not as an approver.
pub(crate) async fn subscribe(session: &foya_actors::SessionHandle) -> Subscription {
    testkit::subscribe(session, false).await
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

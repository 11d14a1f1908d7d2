//! A runtime on an in-memory store with a scripted model (a [`Script`] or any
//! [`ModelClient`]), a scripted model that records the requests it gets, and the stores,
//! working directories, sessions and subscriptions the tests start from.

use super::events::{events_until, is_turn_complete};
use super::tools::tools;
use crate::provider::retry::RetryPolicy;
use crate::provider::scripted::{Script, ScriptedClient};
use crate::provider::{ModelClient, ModelRequest};
use crate::runtime::{Runtime, RuntimeConfig, SessionHandle};
use crate::subscription::{SubscribeOptions, Subscription};
use foya_protocol::{ApprovalMode, Event, Seq, SessionConfig, StreamEvent};
use futures::stream::BoxStream;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The script `value` (`{"responses": [...]}`, see [`Script`]).
pub fn script(value: serde_json::Value) -> Script {
    serde_json::from_value(value).unwrap()
}

/// A fresh in-memory store.
pub fn memory_store() -> foya_storage::Store {
    foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap()
}

/// A fresh working directory (its canonical path) and the guard that removes it.
pub fn workdir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

/// A runtime's configuration on `store` answering with `script`: the test [`tools`],
/// no user instruction files, no titles, and calls nobody can approve denied.
pub fn config_for(store: foya_storage::Store, script: Script) -> RuntimeConfig {
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

/// A runtime of [`config_for`] on an in-memory store.
pub async fn runtime(script: Script) -> Runtime {
    Runtime::start(config_for(memory_store(), script))
        .await
        .unwrap()
}

/// A runtime on an in-memory store whose model is `model` (for failure cases a script
/// cannot express).
pub async fn runtime_with_model(model: Arc<dyn ModelClient>) -> Runtime {
    let mut config = config_for(memory_store(), Script::default());
    config.model = model;
    Runtime::start(config).await.unwrap()
}

/// A runtime on `store` answering with the script `value` through a [`RecordingClient`]
/// (returned too, to read the requests the model got) and calling `tools`; no titles
/// (their requests would show up among the recorded ones).
pub async fn recorded_runtime(
    store: foya_storage::Store,
    value: serde_json::Value,
    tools: crate::tools::ToolRegistry,
) -> (Runtime, RecordingClient) {
    let client = RecordingClient::new(value);
    let config = RuntimeConfig {
        tools: Arc::new(tools),
        subscriber_buffer: 4096,
        context: crate::ContextOptions {
            generate_titles: false,
            ..crate::ContextOptions::default()
        },
        ..RuntimeConfig::new(store, Arc::new(client.clone()))
    };
    (Runtime::start(config).await.unwrap(), client)
}

/// Creates a `Bypass` session on `rt`, submits `text` and returns every persisted event up
/// to the turn's `turn_complete`.
pub async fn one_turn(rt: &Runtime, text: &str) -> Vec<Event> {
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session
        .submit(foya_protocol::Input::text(text))
        .await
        .unwrap();
    events_until(&mut sub, is_turn_complete).await
}

/// A session in `mode` working in `/tmp`.
pub fn session_config(mode: ApprovalMode) -> SessionConfig {
    SessionConfig {
        approval_mode: mode,
        ..SessionConfig::new("/tmp")
    }
}

/// A session in `mode` working in `cwd`.
pub fn session_config_in(cwd: &Path, mode: ApprovalMode) -> SessionConfig {
    SessionConfig {
        approval_mode: mode,
        ..SessionConfig::new(cwd)
    }
}

/// Subscribes to `session` from its first event, as an approver or not.
pub async fn subscribe(session: &SessionHandle, approver: bool) -> Subscription {
    session
        .subscribe(Seq(1), SubscribeOptions { approver })
        .await
        .unwrap()
}

/// A [`ScriptedClient`] that keeps every request it is sent.
#[derive(Debug, Clone)]
pub struct RecordingClient {
    inner: ScriptedClient,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
}

impl RecordingClient {
    /// A client answering with the script `value`.
    pub fn new(value: serde_json::Value) -> Self {
        Self {
            inner: ScriptedClient::from_script(script(value)),
            requests: Arc::default(),
        }
    }

    /// The requests sent so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// The shared list of requests (it keeps filling after the client moved into a
    /// runtime).
    pub fn request_log(&self) -> Arc<Mutex<Vec<ModelRequest>>> {
        Arc::clone(&self.requests)
    }
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

//! The session driver against a real runtime and store: a run stopped while a model
//! request is in flight cancels the turn and counts it to its end, so the steps agree
//! with the model requests the probe saw (the runtime starts none after the driver left).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Shared, drive};
use crate::probe::{self, Probe};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_actors::{Runtime, RuntimeConfig, SubscribeOptions};
use foya_protocol::{EventKind, FinishReason, Seq, SessionUpdate, StreamEvent, ToolCallId};
use foya_storage::{Store, StoreOptions};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use indicatif::ProgressBar;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// One global bound for every wait of a test.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A model whose first request stops the load run as soon as it is polled, then
/// answers (a `read_file` call) only once `released` fires — or ends when the request is
/// cancelled; every later request answers text.
#[derive(Debug)]
struct StopsTheRunInItsFirstRequest {
    requests: AtomicU32,
    stop: CancellationToken,
    released: CancellationToken,
}

impl ModelClient for StopsTheRunInItsFirstRequest {
    fn stream(
        &self,
        _request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        if self.requests.fetch_add(1, Ordering::SeqCst) > 0 {
            return futures::stream::iter([
                StreamEvent::TextDelta {
                    text: "Done.".into(),
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                },
            ])
            .boxed();
        }
        let stop = self.stop.clone();
        let released = self.released.clone();
        futures::stream::once(async move {
            stop.cancel();
            tokio::select! {
                () = cancel.cancelled() => Vec::new(),
                () = released.cancelled() => vec![
                    StreamEvent::ToolCallDelta {
                        index: 0,
                        id: Some(ToolCallId::new("c1")),
                        name: Some("read_file".into()),
                        arguments: r#"{"path":"README.md"}"#.into(),
                        extra: None,
                    },
                    StreamEvent::Done {
                        finish_reason: Some(FinishReason::ToolCalls),
                    },
                ],
            }
        })
        .flat_map(futures::stream::iter)
        .boxed()
    }
}

/// A store in `dir` (with a `README.md` workspace), a runtime on `client` behind the load
/// test's probe, and the shared state of a one-session, one-turn run stopped by `stop`.
async fn setup(
    dir: &std::path::Path,
    client: impl ModelClient + 'static,
    stop: CancellationToken,
) -> (Store, Arc<Shared>) {
    std::fs::write(dir.join("README.md"), "# Workspace\n").unwrap();
    let store = Store::open(&dir.join("foya.redb"), StoreOptions::default()).unwrap();
    let probe = Probe::new(Arc::new(client), 1, 1);
    let slots = probe.slots();
    let runtime = Runtime::start(RuntimeConfig::new(store.clone(), Arc::new(probe)))
        .await
        .unwrap();
    let shared = Arc::new(Shared {
        runtime,
        slots,
        turns: 1,
        cwd: std::fs::canonicalize(dir).unwrap(),
        model: "m".into(),
        permits: Semaphore::new(1),
        stop,
        progress: ProgressBar::hidden(),
        driver_cpu: Arc::default(),
        started: std::time::Instant::now(),
        mcp_servers: None,
        approval: foya_protocol::ApprovalMode::ReadOnly,
    });
    (store, shared)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_cancels_its_turn_and_counts_the_step_of_every_request_started() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let released = CancellationToken::new();
    let client = StopsTheRunInItsFirstRequest {
        requests: AtomicU32::new(0),
        stop: stop.clone(),
        released: released.clone(),
    };
    let (store, shared) = setup(dir.path(), client, stop).await;

    let out = tokio::time::timeout(TIMEOUT, drive(0, Arc::clone(&shared)))
        .await
        .unwrap();
    // Whatever the driver left running may go on now: wait for the turn's end.
    released.cancel();
    let summaries = shared.runtime.list_sessions().await.unwrap();
    assert_eq!(summaries.len(), 1);
    let session = shared.runtime.session(summaries[0].id).await.unwrap();
    let mut updates = session
        .subscribe(Seq::FIRST, SubscribeOptions::default())
        .await
        .unwrap();
    let status = tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Some(SessionUpdate::Event(event)) = updates.recv().await
                && let EventKind::TurnComplete { status, .. } = event.kind
            {
                return status;
            }
        }
    })
    .await
    .unwrap();
    let requests = probe::lock(&shared.slots[0]).requests;
    assert_eq!(
        (
            out.steps,
            requests,
            out.tool_calls,
            out.tool_calls_run,
            out.completed,
            out.failed,
            out.interrupted,
            out.errors.clone(),
        ),
        (1, 1, 0, 0, 0, 0, 1, std::collections::BTreeMap::new())
    );
    // The driver cancelled the turn: nothing ran after it left.
    assert_eq!(status, foya_protocol::TurnStatus::Cancelled);
    drop(updates);
    drop(session);
    if let Ok(shared) = Arc::try_unwrap(shared) {
        shared.runtime.shutdown().await;
    }
    store.close().await;
}

#[tokio::test]
async fn a_tool_result_the_drivers_own_cancel_ends_is_not_a_tool_error() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let client = StopsTheRunInItsFirstRequest {
        requests: AtomicU32::new(0),
        stop: stop.clone(),
        released: CancellationToken::new(),
    };
    let (store, shared) = setup(dir.path(), client, stop).await;
    let result = |content: &str| {
        SessionUpdate::Event(foya_protocol::Event {
            session_id: foya_protocol::SessionId::new(),
            seq: Seq(9),
            run_id: None,
            at_ms: 0,
            kind: EventKind::ToolMessage(foya_protocol::ToolMessage {
                tool_call_id: ToolCallId::new("c1"),
                content: content.into(),
                is_error: true,
                images: Vec::new(),
            }),
        })
    };
    let mut out = super::Outcome::default();
    let mut tool_ms = 0;
    // Before the stop, an error result is the load test's tool work going wrong…
    super::handle(
        0,
        &shared,
        result("no such file"),
        &mut tool_ms,
        false,
        &mut out,
    );
    // …after it, the call the driver's cancel ended.
    super::handle(
        0,
        &shared,
        result("cancelled"),
        &mut tool_ms,
        true,
        &mut out,
    );
    assert_eq!(
        (out.errors.clone(), out.error_examples.clone()),
        (
            [("tool_error".to_owned(), 1)].into(),
            [("tool_error".to_owned(), "no such file".to_owned())].into()
        )
    );
    if let Ok(shared) = Arc::try_unwrap(shared) {
        shared.runtime.shutdown().await;
    }
    store.close().await;
}

/// Every driver task is spawned at the start of a run and most wait a long while for
/// their session (100 000 at once in docs/benchmarks.md), so the driver's own future
/// stays small: creating, subscribing, submitting and each turn are boxed while they
/// run (a debug build: 1 008 bytes, from 2 504 unboxed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drive_holds_little_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let client = StopsTheRunInItsFirstRequest {
        requests: AtomicU32::new(0),
        stop: CancellationToken::new(),
        released: CancellationToken::new(),
    };
    let (_store, shared) = setup(dir.path(), client, CancellationToken::new()).await;
    let driver = drive(0, Arc::clone(&shared));
    let size = std::mem::size_of_val(&driver);
    println!("the driver's future: {size} bytes");
    assert!(size <= 1200, "the driver's future grew to {size} bytes");
}

//! `Runtime::shutdown` on a multi-threaded tokio runtime returns only when every actor
//! (sessions, turns, tools) has stopped and dropped its store handle, so the same redb
//! file opens again at once (no `AlreadyOpen`) with the whole log intact — also when a
//! turn was still running a tool at shutdown: `Runtime::drain` (the first half of
//! `shutdown`) cancels every running turn through the normal cancel path and waits for
//! its `turn_complete{cancelled}`, leaves queued inputs queued, and refuses new inputs
//! and sessions with `ShuttingDown`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::RuntimeError;
use foya_actors::testkit::{
    TIMEOUT, events_until, is_turn_complete, recorded_runtime, sandboxed_builtins,
    session_config_in, subscribe, tool_message, within, workdir,
};
use foya_protocol::{ApprovalMode, Event, EventKind, Input, Seq, SessionId, TurnStatus};
use foya_storage::{Store, StoreOptions};
use serde_json::json;

/// Sessions, each with a finished turn and a running one.
const SESSIONS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_reopens_right_after_shutdown_with_the_log_intact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let (_work, cwd) = workdir();
    // Response 1 (a session's first request): a call; response 2: the answer. The
    // running session's tool waits until the runtime stops.
    let script = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}}]},
        {"text": "done"},
        {"tool_calls": [{"id": "c2", "name": "shell", "arguments": {"command": "sleep 300"}}]}
    ]});
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let (rt, _) = recorded_runtime(store, script, sandboxed_builtins()).await;
    let mut logs: Vec<(SessionId, Vec<Event>)> = Vec::new();
    for _ in 0..SESSIONS {
        let session = rt
            .create_session(session_config_in(&cwd, ApprovalMode::Auto))
            .await
            .unwrap();
        let mut sub = subscribe(&session, false).await;
        session.submit(Input::text("go")).await.unwrap();
        let events = events_until(&mut sub, is_turn_complete).await;
        logs.push((session.id(), events));
    }
    // In every session, one more turn that is running a tool when the runtime stops.
    let mut running = Vec::new();
    for (id, _) in &logs {
        let session = rt.session(*id).await.unwrap();
        let mut sub = subscribe(&session, false).await;
        session.submit(Input::text("again")).await.unwrap();
        let events = events_until(&mut sub, |e| {
            matches!(&e.kind, EventKind::ToolStarted { tool_call_id, .. } if tool_call_id.as_str() == "c2")
        })
        .await;
        running.push(events);
    }

    // One more input in the first session queues behind its running turn.
    let first = rt.session(logs[0].0).await.unwrap();
    first.submit(Input::text("later")).await.unwrap();

    assert!(within(rt.drain(TIMEOUT)).await.unwrap(), "every turn ended");
    assert_eq!(
        first.submit(Input::text("more")).await,
        Err(RuntimeError::ShuttingDown)
    );
    let refused = rt
        .create_session(session_config_in(&cwd, ApprovalMode::Auto))
        .await
        .err();
    assert_eq!(refused, Some(RuntimeError::ShuttingDown));
    drop(first);
    within(rt.shutdown()).await.unwrap();
    let reopened = Store::open(&path, StoreOptions::default());
    let store = match reopened {
        Ok(store) => store,
        Err(e) => panic!("reopening right after shutdown failed: {e}"),
    };

    let cancelled_end = [
        EventKind::ToolMessage(tool_message("c2", "cancelled", true)),
        EventKind::TurnCancelled {
            reason: "runtime shutdown".into(),
        },
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None,
        },
    ];
    for (i, ((id, finished), interrupted)) in logs.iter().zip(&running).enumerate() {
        let log = store.read_from(*id, Seq::FIRST).unwrap();
        // The finished turn, the second one up to its running tool, then its cancelled
        // end (the first session's queued input stays queued, never started).
        assert_eq!(log[..finished.len()], finished[..]);
        assert_eq!(log[..interrupted.len()], interrupted[..]);
        let mut tail: Vec<EventKind> = log[interrupted.len()..]
            .iter()
            .map(|e| e.kind.clone())
            .collect();
        if i == 0 {
            assert!(
                matches!(&tail[0], EventKind::InputQueued { input, .. } if input.text == "later"),
                "{tail:?}"
            );
            tail.remove(0);
        }
        assert_eq!(tail, cancelled_end);
    }
    store.close().await;
}

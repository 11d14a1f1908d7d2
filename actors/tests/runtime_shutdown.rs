//! `Runtime::shutdown` on a multi-threaded tokio runtime returns only when every actor
//! (sessions, turns, tools) has stopped and dropped its store handle, so the same redb
//! file opens again at once (no `AlreadyOpen`) with the whole log intact — also when a
//! turn was still running a tool at shutdown.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod turn_support;

use foya_protocol::{ApprovalMode, Event, EventKind, Input, Seq, SessionId};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use turn_support::{
    TIMEOUT, builtin, events_until, is_turn_complete, session_config, start, subscribe, within,
    workdir,
};

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
    let (rt, _) = start(store, script, builtin()).await;
    let mut logs: Vec<(SessionId, Vec<Event>)> = Vec::new();
    for _ in 0..SESSIONS {
        let session = rt
            .create_session(session_config(&cwd, ApprovalMode::Auto))
            .await
            .unwrap();
        let mut sub = subscribe(&session, false).await;
        session.submit(Input::text("go")).await.unwrap();
        let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
        logs.push((session.id(), events));
    }
    // In every session, one more turn that is running a tool when the runtime stops.
    let mut running = Vec::new();
    for (id, _) in &logs {
        let session = rt.session(*id).await.unwrap();
        let mut sub = subscribe(&session, false).await;
        session.submit(Input::text("again")).await.unwrap();
        let events = within(
            TIMEOUT,
            events_until(&mut sub, |e| {
                matches!(&e.kind, EventKind::ToolStarted { tool_call_id, .. } if tool_call_id.as_str() == "c2")
            }),
        )
        .await;
        running.push(events);
    }

    within(TIMEOUT, rt.shutdown()).await;
    let reopened = Store::open(&path, StoreOptions::default());
    let store = match reopened {
        Ok(store) => store,
        Err(e) => panic!("reopening right after shutdown failed: {e}"),
    };

    for ((id, finished), interrupted) in logs.iter().zip(&running) {
        let log = store.read_from(*id, Seq::FIRST).unwrap();
        // The finished turn, then the interrupted one up to its running tool (closed on
        // the next load).
        assert_eq!(log[..finished.len()], finished[..]);
        assert_eq!(&log, interrupted);
    }
    store.close().await;
}

//! `Runtime::stats`: the live counts the actors keep (sessions live and hibernated, turns
//! running, queue depth, pending approvals), read without asking any actor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::testkit::{
    config_for, events_until, is_turn_complete, memory_store, script, session_config, subscribe,
    wait_until, within,
};
use foya_actors::{Runtime, RuntimeStats};
use foya_protocol::{ApprovalDecision, ApprovalMode, EventKind, Input};
use serde_json::json;
use std::time::Duration;

const AFTER: Duration = Duration::from_secs(60);

fn counts(s: RuntimeStats) -> [u64; 5] {
    [
        s.sessions_live,
        s.sessions_hibernated,
        s.turns_active,
        s.inputs_queued,
        s.approvals_pending,
    ]
}

#[tokio::test(start_paused = true)]
async fn stats_count_live_and_hibernated_sessions_turns_queues_and_approvals() {
    let replies = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "exec", "arguments": {"cmd": "ls"}}]},
        {"text": "done"},
        {"text": "second"},
    ]});
    let mut config = config_for(memory_store(), script(replies));
    config.hibernate_after = Some(AFTER);
    let source = config.stats.clone();
    let rt = Runtime::start(config).await.unwrap();
    assert_eq!(counts(rt.stats()), [0, 0, 0, 0, 0]);

    // Watched (a subscriber each), so none hibernates meanwhile (paused time jumps
    // whenever the runtime waits for the store); a session that did is woken by the
    // subscription.
    let (mut sessions, mut watchers) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let session = rt
            .create_session(session_config(ApprovalMode::Ask))
            .await
            .unwrap();
        watchers.push(subscribe(&session, true).await);
        sessions.push(session);
    }
    assert_eq!(counts(rt.stats()), [3, 0, 0, 0, 0]);

    // A turn waiting for its approval, and an input queued behind it.
    let session = &sessions[0];
    let sub = &mut watchers[0];
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(sub, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    }))
    .await
    .unwrap();
    session.submit(Input::text("next")).await.unwrap();
    wait_until("a queued input and a pending approval", || {
        counts(rt.stats()) == [3, 0, 1, 1, 1]
    })
    .await;
    assert_eq!(
        source.read(),
        rt.stats(),
        "the config's source is the runtime's"
    );

    let Some(EventKind::ApprovalRequested { request_id, .. }) =
        events.last().map(|e| e.kind.clone())
    else {
        panic!("no approval request");
    };
    session
        .decide_approval(request_id, ApprovalDecision::AllowOnce, None)
        .await
        .unwrap();
    let mut completed = 0;
    within(events_until(sub, |e| {
        completed += usize::from(is_turn_complete(e));
        completed == 2
    }))
    .await
    .unwrap();
    wait_until("both turns over", || counts(rt.stats()) == [3, 0, 0, 0, 0]).await;

    // Idle and unwatched for `hibernate_after`: every session hibernates.
    drop(watchers);
    wait_until("three sessions hibernated", || {
        counts(rt.stats()) == [0, 3, 0, 0, 0]
    })
    .await;
    // A call wakes one.
    sessions[1].pending_approvals().await.unwrap();
    assert_eq!(counts(rt.stats()), [1, 2, 0, 0, 0]);
    rt.shutdown().await;
}

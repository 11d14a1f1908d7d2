//! Hibernation and lazy start-up: an idle, unwatched session stops holding anything and
//! wakes on its next call with its log, state and queue as they were; start-up reads the
//! log of no session that has nothing to recover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::runtime::{Runtime, SessionHandle};
use crate::testkit::{
    config_for, events_until, is_turn_complete, script, session_config, subscribe, types, within,
};
use foya_protocol::{
    ApprovalMode, Event, EventKind, Input, InputId, RunId, Seq, SessionConfig, SessionId,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::time::Duration;

const AFTER: Duration = Duration::from_secs(60);

/// Waits (paused time: each sleep jumps the clock) until `id` is loaded or not.
async fn until_loaded(rt: &Runtime, id: SessionId, loaded: bool) {
    within(async {
        while rt.is_loaded(id) != loaded {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .unwrap();
}

/// A runtime on a fresh in-memory store that hibernates an idle, unwatched session after
/// [`AFTER`], or at once above `at_once_above` live sessions (`None`: the default
/// count), with `responses` scripted; and one session of it (bypass mode).
async fn hibernating(
    responses: serde_json::Value,
    at_once_above: Option<usize>,
) -> (Store, Runtime, SessionHandle) {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let mut config = config_for(store.clone(), script(json!({ "responses": responses })));
    config.hibernate_after = Some(AFTER);
    if let Some(above) = at_once_above {
        config.hibernate_at_once_above = Some(above);
    }
    let rt = Runtime::start(config).await.unwrap();
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    (store, rt, session)
}

/// A woken session's `log`: its seqs dense from 1, the inputs `queued` started after the
/// first turn in order, the second of them queued behind the first.
fn assert_ran_in_order(log: &[Event], queued: [InputId; 2]) {
    let seqs: Vec<u64> = log.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let started: Vec<InputId> = log
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TurnStarted { input_id } => Some(input_id),
            _ => None,
        })
        .collect();
    assert_eq!(started[1..], queued);
    assert!(types(log).contains(&"input_queued"), "{:?}", types(log));
}

#[tokio::test(start_paused = true)]
async fn an_idle_unwatched_session_hibernates_and_wakes_with_its_log_state_and_queue() {
    // "two" streams after a (paused-clock) pause, so the second input surely arrives while
    // the first woken turn runs and queues behind it.
    let (store, rt, session) = hibernating(
        json!([{"text": "one"}, {"text": "two", "delay_ms": 1000}, {"text": "three"}]),
        None,
    )
    .await;
    let id = session.id();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    session.set_title("kept".into()).await.unwrap();

    // Watched: it stays loaded however long it idles.
    tokio::time::sleep(AFTER * 5).await;
    assert!(rt.is_loaded(id));
    // Unwatched: it hibernates, and nothing reads its log meanwhile.
    drop(sub);
    until_loaded(&rt, id, false).await;
    let reads = store.logs_read();
    tokio::time::sleep(AFTER * 5).await;
    assert_eq!(store.logs_read(), reads);

    // Two inputs at once: the first wakes it (one log read) and runs, the second queues
    // behind it; its seqs go on from the log, and the state (title) is the log's.
    let a = session.submit(Input::text("second")).await.unwrap();
    let b = session.submit(Input::text("third")).await.unwrap();
    assert!(rt.is_loaded(id));
    assert_eq!(store.logs_read(), reads + 1);
    let mut sub = subscribe(&session, false).await;
    let mut completed = 0;
    let log = within(events_until(&mut sub, |e| {
        completed += usize::from(is_turn_complete(e));
        completed == 3
    }))
    .await
    .unwrap();
    assert_ran_in_order(&log, [a, b]);
    let summary = rt.list_sessions().await.unwrap();
    assert_eq!(summary[0].title.as_deref(), Some("kept"));
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_subscription_wakes_a_hibernated_session_with_its_whole_log() {
    let (_store, rt, session) = hibernating(json!([{"text": "one"}]), None).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    let before = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    drop(sub);
    until_loaded(&rt, session.id(), false).await;
    let mut sub = subscribe(&session, false).await;
    assert!(rt.is_loaded(session.id()));
    let after = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(after, before);
    rt.shutdown().await;
}

/// A session's first events, as written by hand.
fn raw(id: SessionId, kinds: Vec<EventKind>) -> Vec<Event> {
    let run = Some(RunId::new());
    kinds
        .into_iter()
        .zip(1..)
        .map(|(kind, seq)| Event {
            session_id: id,
            seq: Seq(seq),
            run_id: (seq > 1).then_some(run).flatten(),
            at_ms: 1,
            kind,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_reads_only_the_logs_of_sessions_with_something_to_recover() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let created = || EventKind::SessionCreated {
        config: SessionConfig::new("/tmp"),
    };
    for _ in 0..50 {
        store
            .append(raw(SessionId::new(), vec![created()]))
            .await
            .unwrap();
    }
    let interrupted = SessionId::new();
    let input = InputId::new();
    let events = raw(
        interrupted,
        vec![
            created(),
            EventKind::UserMessage {
                input_id: input,
                input: Input::text("go"),
            },
            EventKind::TurnStarted { input_id: input },
        ],
    );
    store.append(events).await.unwrap();
    let rt = Runtime::start(config_for(store.clone(), script(json!({"responses": []}))))
        .await
        .unwrap();
    let reads = store.logs_read();
    assert_eq!(rt.recover_all().await.unwrap(), 1);
    assert_eq!(
        store.logs_read() - reads,
        1,
        "one log read: the interrupted session's"
    );
    assert!(rt.is_loaded(interrupted));
    assert_eq!(rt.loaded_sessions(), 1);
    rt.shutdown().await;
}

/// Waits until `id` is no longer loaded; returns how long that took (paused time).
async fn unloaded_after(rt: &Runtime, id: SessionId) -> Duration {
    let start = tokio::time::Instant::now();
    within(async {
        while rt.is_loaded(id) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn an_unwatched_session_hibernates_as_soon_as_its_turn_ends() {
    let (_store, rt, session) = hibernating(json!([{"text": "one"}]), Some(0)).await;
    // `run` subscribes for its turn and drops the subscription with the outcome.
    let outcome = session.run(Input::text("first")).await.unwrap();
    assert_eq!(outcome.text, "one");
    let took = unloaded_after(&rt, session.id()).await;
    assert!(took < AFTER / 10, "hibernated only after {took:?}");
    assert_eq!(rt.stats().sessions_hibernated, 1);
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_hibernated_session_leaves_no_task_behind() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let mut config = config_for(store, script(json!({ "responses": [{"text": "one"}] })));
    config.hibernate_after = Some(AFTER);
    config.hibernate_at_once_above = Some(0);
    let rt = Runtime::start(config).await.unwrap();
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    session.run(Input::text("first")).await.unwrap();
    let took = unloaded_after(&rt, session.id()).await;
    assert!(took < AFTER / 10, "hibernated only after {took:?}");
    // Its hibernation timer went with it: a detached one would hold the stopped actor's
    // cell (its mailboxes' first blocks) until it fired, `AFTER` later.
    let start = tokio::time::Instant::now();
    within(async {
        while metrics.num_alive_tasks() > before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    let took = start.elapsed();
    assert!(
        took < AFTER / 10,
        "a task of the session lived on for {took:?}"
    );
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_watched_session_stays_loaded_and_hibernates_when_its_last_subscriber_leaves() {
    let (_store, rt, session) = hibernating(json!([{"text": "one"}]), Some(0)).await;
    let id = session.id();
    let mut first = subscribe(&session, false).await;
    let second = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    within(events_until(&mut first, is_turn_complete))
        .await
        .unwrap();
    tokio::time::sleep(AFTER * 5).await;
    assert!(rt.is_loaded(id), "a watched session hibernated");
    // One subscriber left: still watched.
    drop(first);
    tokio::time::sleep(AFTER / 2).await;
    assert!(
        rt.is_loaded(id),
        "a session with a subscriber left hibernated"
    );
    drop(second);
    let took = unloaded_after(&rt, id).await;
    assert!(took < AFTER / 10, "hibernated only after {took:?}");
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_handle_wakes_a_hibernated_session_which_runs_its_queue_in_order() {
    // "two" streams after a (paused-clock) pause, so "third" surely arrives while the
    // woken session runs "second" and queues behind it.
    let (store, rt, session) = hibernating(
        json!([{"text": "one"}, {"text": "two", "delay_ms": 1000}, {"text": "three"}]),
        Some(0),
    )
    .await;
    let id = session.id();
    let first = session.run(Input::text("first")).await.unwrap();
    assert_eq!(first.text, "one");
    unloaded_after(&rt, id).await;

    // The embedder's handle still works: two inputs at once, the first wakes the session
    // (one log read), the second queues behind it; the queue runs before it hibernates.
    let reads = store.logs_read();
    let a = session.submit(Input::text("second")).await.unwrap();
    let b = session.submit(Input::text("third")).await.unwrap();
    assert_eq!(store.logs_read(), reads + 1);
    unloaded_after(&rt, id).await;
    let log = session.history(Seq::FIRST).await.unwrap();
    assert_ran_in_order(&log, [a, b]);
    let texts: Vec<&str> = log
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) => Some(m.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
    // And `run` on it again: woken, answered, hibernated.
    let again = session.run(Input::text("fourth")).await;
    assert!(again.is_ok(), "{again:?}");
    unloaded_after(&rt, id).await;
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn at_or_below_the_live_count_an_idle_session_waits_out_hibernate_after() {
    let (_store, rt, session) = hibernating(json!([{"text": "one"}]), Some(1)).await;
    session.run(Input::text("first")).await.unwrap();
    tokio::time::sleep(AFTER / 2).await;
    assert!(
        rt.is_loaded(session.id()),
        "hibernated at once below the count"
    );
    let took = unloaded_after(&rt, session.id()).await;
    assert!(took >= AFTER / 4, "{took:?}");
    rt.shutdown().await;
}

/// What a loaded session holds inline (printed for docs/benchmarks.md; run with
/// `--nocapture`).
#[test]
fn sizes_of_a_loaded_sessions_parts() {
    use std::mem::size_of;
    println!(
        "Session {} (machine {}, fold {}, config {}), Subscriber {}, Event {}, SessionMsg {}",
        size_of::<super::actor::Session>(),
        size_of::<super::machine::SessionMachine>(),
        size_of::<super::state::SessionState>(),
        size_of::<SessionConfig>(),
        size_of::<super::actor::Subscriber>(),
        size_of::<Event>(),
        size_of::<super::SessionMsg>(),
    );
}

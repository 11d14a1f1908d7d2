//! A runtime on a real PostgreSQL whose connections fail under it (a test-owned TCP
//! forwarder between them): a commit whose answer is lost, and an outage during which a
//! failed session's restart cannot read the log. Neither leaves a session stuck: the log
//! is what the session goes on from, and a restart that could not read it is tried again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::{Runtime, RuntimeConfig, SessionHandle};
use foya_protocol::{
    ApprovalMode, Event, EventKind, Input, InputId, Seq, SessionConfig, SessionId, TurnStatus,
};
use foya_storage::{EventLog as _, LogStore};
use foya_storage_pg::{PgLog, PgOptions, testkit};
use foya_tests::fault_cluster::{Forwarder, WriteFault};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One global bound for every wait of a test.
const WAIT: Duration = Duration::from_secs(90);

/// A runtime on a fresh store through a forwarder, with one idle session (its folder
/// `tmp`), and the store read straight (the test's view).
struct Outage {
    forwarder: Forwarder,
    straight: PgLog,
    rt: Runtime,
    session: SessionHandle,
    id: SessionId,
    tmp: tempfile::TempDir,
}

/// An [`Outage`] whose model answers with `responses` in turn.
async fn outage(responses: serde_json::Value) -> Outage {
    outage_writing_on(responses, PgOptions::default().connections).await
}

/// An [`Outage`] whose store writes on `connections` connections.
async fn outage_writing_on(responses: serde_json::Value, connections: usize) -> Outage {
    let url = testkit::fresh_url().await;
    let (forwarder, through) = Forwarder::in_front_of(&url).await;
    let options = || PgOptions {
        shards: 4,
        ..PgOptions::default()
    };
    let behind = PgLog::open(
        &through,
        PgOptions {
            connections,
            ..options()
        },
    )
    .await
    .unwrap();
    let straight = PgLog::open(&url, options()).await.unwrap();
    let script: Script = serde_json::from_value(json!({ "responses": responses })).unwrap();
    let mut config = RuntimeConfig::new(
        LogStore::shared(behind),
        Arc::new(ScriptedClient::from_script(script)),
    );
    config.tools = Arc::new(foya_actors::tools::ToolRegistry::builtin_with_sandbox(
        foya_actors::testkit::sandbox_runner(),
    ));
    let rt = Runtime::start(config).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut config = SessionConfig::new(tmp.path());
    config.approval_mode = ApprovalMode::Bypass;
    let session = rt.create_session(config).await.unwrap();
    let id = session.id();
    Outage {
        forwarder,
        straight,
        rt,
        session,
        id,
        tmp,
    }
}

/// Waits (one global bound) until `log` holds events of `id` that `done` accepts,
/// polling the store (the session is not asked: asking would load it).
async fn until_log(log: &PgLog, id: SessionId, what: &str, done: impl Fn(&[Event]) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = log.read_from(id, Seq::FIRST).await.unwrap();
        if done(&events) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An [`Outage`] (its store writing on `connections` connections) whose session runs a
/// tool call that waits for a file `go` in its folder, with an input queued behind it.
async fn busy_with_an_input_queued(connections: usize) -> Outage {
    let call = json!({"tool_calls": [{"id": "c1", "name": "shell", "arguments":
        {"command": "while [ ! -e go ]; do sleep 0.05; done"}}]});
    let o = outage_writing_on(
        json!([call, {"text": "second answer"}, {"text": "third"}]),
        connections,
    )
    .await;
    o.session.submit(Input::text("first")).await.unwrap();
    until_log(&o.straight, o.id, "the call started", |events| {
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ToolStarted { .. }))
    })
    .await;
    o.session.submit(Input::text("second")).await.unwrap();
    until_log(&o.straight, o.id, "the queued input", |events| {
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::InputQueued { .. }))
    })
    .await;
    o
}

/// Sends an input whose statement reaches the server `delay` late while the server
/// refuses new connections (those open stay open: the writer's, the reader's), so its
/// server process cannot be ended: the input is answered neither as taken nor as
/// refused (a store writing on one connection: the session's retry cannot go through
/// another). Returns its id.
async fn sent_late_while_refusing_new(o: &Outage, delay: Duration) -> InputId {
    let late = InputId::new();
    o.forwarder.refuse_new();
    o.forwarder.fail_next_write(WriteFault::Late(delay));
    let answer = o.session.submit_with_id(late, Input::text("late")).await;
    assert!(!o.forwarder.write_fault_pending(), "nothing was delayed");
    assert!(
        !matches!(answer, Ok(_) | Err(foya_actors::RuntimeError::Storage(_))),
        "an input whose statement may still commit was answered as taken or refused: {answer:?}"
    );
    late
}

/// Waits (one global bound) until the forwarder has tried a late write.
async fn until_late_write_tried(forwarder: &Forwarder) {
    let deadline = Instant::now() + WAIT;
    while forwarder.late_writes() == 0 {
        assert!(Instant::now() < deadline, "the late write was never tried");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the forwarder has tried the late write of input `late`, and checks that
/// it committed nothing (its server process was ended first).
async fn until_late_write_came_to_nothing(
    forwarder: &Forwarder,
    log: &PgLog,
    id: SessionId,
    late: InputId,
) {
    until_late_write_tried(forwarder).await;
    let events = log.read_from(id, Seq::FIRST).await.unwrap();
    assert_eq!(
        times_taken(&events, late),
        0,
        "the late statement committed: {events:#?}"
    );
}

/// How many times the log took input `input` (its `user_message`s).
fn times_taken(events: &[Event], input: InputId) -> usize {
    events
        .iter()
        .filter(
            |e| matches!(&e.kind, EventKind::UserMessage { input_id, .. } if *input_id == input),
        )
        .count()
}

fn completed(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::TurnComplete {
                    status: TurnStatus::Completed,
                    ..
                }
            )
        })
        .count()
}

/// Dense seqs from 1, and every `turn_started` closed by one `turn_complete` before
/// the next turn starts.
fn assert_sound(events: &[Event]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let mut open = false;
    for e in events {
        match e.kind {
            EventKind::TurnStarted { .. } => {
                assert!(!open, "a turn started inside another: {events:#?}");
                open = true;
            }
            EventKind::TurnComplete { .. } => {
                assert!(open, "a turn closed twice: {events:#?}");
                open = false;
            }
            _ => {}
        }
    }
    assert!(!open, "a turn left open: {events:#?}");
}

/// An idle session's input is committed, but the connection closes before the answer:
/// the input is taken (the log is asked, or the session goes on from the log), a retry
/// of its id is taken once, and the session runs the next input. Before, the session
/// kept the seq it had before the lost answer, and every later input failed with a seq
/// mismatch until it was unloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_leaves_the_session_going_on_from_the_log() {
    let o = outage(json!([{"text": "one"}, {"text": "two"}, {"text": "three"}])).await;

    o.forwarder.fail_next_write(WriteFault::Cut);
    let input = InputId::new();
    let first = o.session.submit_with_id(input, Input::text("cut")).await;
    assert!(!o.forwarder.write_fault_pending(), "nothing was cut");
    // Committed whatever the runtime was told.
    until_log(&o.straight, o.id, "the cut input", |events| {
        times_taken(events, input) > 0
    })
    .await;
    // A client that was not told its input was taken retries it under its id (within a
    // bound well below the idle unload that used to end the stuck state).
    if first.is_err() {
        submit_until_taken(&o.session, input, "cut").await;
    }
    // The session takes new input and runs it to its end.
    let outcome = o.session.run(Input::text("next")).await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    let events = o.straight.read_from(o.id, Seq::FIRST).await.unwrap();
    assert_sound(&events);
    let taken = times_taken(&events, input);
    assert_eq!(taken, 1, "the input was taken {taken} times: {events:#?}");
    // The usual case: the log said the commit happened, and the cut input's turn ran.
    if first.is_ok() {
        assert_eq!(completed(&events), 2, "{events:#?}");
    }
    o.rt.shutdown().await;
}

/// Submits `text` under `input` until it is taken (within a bound well below the idle
/// unload that used to end a stuck session), the way a client retries a refused input.
async fn submit_until_taken(session: &SessionHandle, input: InputId, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match session.submit_with_id(input, Input::text(text)).await {
            Ok(_) => return,
            Err(e) => assert!(Instant::now() < deadline, "the retry is refused: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The statement of an idle session's input is lost on its way, and the log holds
/// other events at the seqs it was written for (another writer's: an earlier statement
/// of this session that committed after it was answered as failed looks the same). The
/// input is not taken as committed: the session goes on from the log (the other turn
/// closed), the input is in it once after its retry, and every turn is closed. Before,
/// the input was answered as taken and was in no log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_lost_where_the_log_holds_other_events_is_not_taken_for_them() {
    let o = outage(json!([{"text": "one"}, {"text": "two"}, {"text": "three"}])).await;
    // Another writer's input and turn start, at the seqs the next append will take.
    let other = InputId::new();
    let foreign = |seq: u64, kind: EventKind| Event {
        session_id: o.id,
        seq: Seq(seq),
        run_id: Some(foya_protocol::RunId::new()),
        at_ms: 1,
        kind,
    };
    o.straight
        .append(
            &[
                foreign(
                    2,
                    EventKind::UserMessage {
                        input_id: other,
                        input: Input::text("elsewhere"),
                    },
                ),
                foreign(3, EventKind::TurnStarted { input_id: other }),
            ],
            foya_storage::Fence::None,
        )
        .await
        .unwrap();

    let lost = InputId::new();
    o.forwarder.fail_next_write(WriteFault::Drop);
    // Answered as refused, or as taken by the session restarted from the log (the
    // handle asks a restarted session once more): never as the other writer's events.
    let _ = o.session.submit_with_id(lost, Input::text("lost")).await;
    assert!(!o.forwarder.write_fault_pending(), "nothing was dropped");
    submit_until_taken(&o.session, lost, "lost").await;
    let outcome = o.session.run(Input::text("next")).await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    let events = o.straight.read_from(o.id, Seq::FIRST).await.unwrap();
    assert_sound(&events);
    for input in [other, lost] {
        let taken = times_taken(&events, input);
        assert_eq!(taken, 1, "{input:?} taken {taken} times: {events:#?}");
    }
    o.rt.shutdown().await;
}

/// An input's statement reaches the server only after the runtime saw its connection
/// close (lost in transit): the store ends the statement's server process before it
/// answers, so the late bytes reach no one and the input, answered as refused, is in no
/// log; the session takes the next input. Before, the late statement committed what
/// the session took as refused, and the session's next append met a seq mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_that_reaches_the_server_late_commits_nothing() {
    let o = outage(json!([{"text": "one"}, {"text": "two"}])).await;

    let late = InputId::new();
    o.forwarder
        .fail_next_write(WriteFault::Late(Duration::from_millis(300)));
    let refused = o.session.submit_with_id(late, Input::text("late")).await;
    assert!(refused.is_err(), "{refused:?}");
    until_late_write_tried(&o.forwarder).await;
    let events = o.straight.read_from(o.id, Seq::FIRST).await.unwrap();
    assert_eq!(
        times_taken(&events, late),
        0,
        "the refused input committed late: {events:#?}"
    );
    let outcome = o.session.run(Input::text("next")).await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_sound(&o.straight.read_from(o.id, Seq::FIRST).await.unwrap());
    o.rt.shutdown().await;
}

/// An input's statement reaches the server late, and the store cannot end its server
/// process first (the server refuses the connection opened for that; the store writes
/// on one connection, so the session's retry cannot go through another): the input is
/// answered neither as taken nor as refused, since the statement may still commit (it
/// does, 300 ms later). The session restarts from the log, takes the input once, closes
/// every turn and runs the next input. Before, the input was answered as refused and
/// committed all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_whose_server_process_cannot_be_ended_is_not_answered_as_refused() {
    let o = outage_writing_on(
        json!([{"text": "one"}, {"text": "two"}, {"text": "three"}]),
        1,
    )
    .await;

    let late = sent_late_while_refusing_new(&o, Duration::from_millis(300)).await;
    // The statement commits when it arrives: its server process was never ended.
    until_log(&o.straight, o.id, "the late input", |events| {
        times_taken(events, late) == 1
    })
    .await;
    o.forwarder.heal();

    let next = InputId::new();
    submit_until_taken(&o.session, next, "next").await;
    until_log(
        &o.straight,
        o.id,
        "every turn closed, the next input's ran",
        |events| {
            let started = events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
                .count();
            let closed = events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::TurnComplete { .. }))
                .count();
            times_taken(events, next) == 1 && completed(events) >= 1 && started == closed
        },
    )
    .await;
    let events = o.straight.read_from(o.id, Seq::FIRST).await.unwrap();
    assert_sound(&events);
    assert_eq!(times_taken(&events, late), 1, "{events:#?}");
    o.rt.shutdown().await;
}

/// As above, but the statement is on its way longer: the server takes connections
/// again first, and the writer ends the statement's server process before its next
/// statement (another session's). The late bytes then commit nothing, and the input,
/// retried under its id, is taken once. Without that, the input committed whenever its
/// bytes arrived, long after its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_process_not_ended_at_once_is_ended_before_the_next_statement() {
    let o = outage_writing_on(json!([{"text": "one"}, {"text": "two"}]), 1).await;

    let late = sent_late_while_refusing_new(&o, Duration::from_secs(3)).await;
    o.forwarder.heal();
    // Another session's statement: the writer ends the late one's process first.
    let tmp = tempfile::tempdir().unwrap();
    o.rt.create_session(SessionConfig::new(tmp.path()))
        .await
        .unwrap();
    until_late_write_came_to_nothing(&o.forwarder, &o.straight, o.id, late).await;

    submit_until_taken(&o.session, late, "late").await;
    let outcome = o.session.run(Input::text("next")).await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    let events = o.straight.read_from(o.id, Seq::FIRST).await.unwrap();
    assert_sound(&events);
    assert_eq!(times_taken(&events, late), 1, "{events:#?}");
    o.rt.shutdown().await;
}

/// As above, but nothing is written after the server takes connections again: the
/// runtime shuts down, and its store ends the late statement's server process as it
/// closes. The late bytes commit nothing. Without that, the input committed after the
/// runtime that answered it was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_process_not_ended_at_once_is_ended_when_the_store_closes() {
    let o = outage_writing_on(json!([{"text": "one"}]), 1).await;

    let late = sent_late_while_refusing_new(&o, Duration::from_secs(3)).await;
    o.forwarder.heal();
    o.rt.shutdown().await;
    until_late_write_came_to_nothing(&o.forwarder, &o.straight, o.id, late).await;
}

/// A session runs a tool call with an input queued, and the database stops taking new
/// connections (those open go on, so the log can be read) as the call's result is
/// written: that statement's outcome is unknown, and each restart of the session reads
/// the log and fails at its first write, three times at once. Once the database takes
/// connections again, a later restart (30 s after each failure) closes the turn and runs
/// the queued input, though nothing asks for the session. Before, it was left stopped
/// after the third, its turn open and its input unrun until a request came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_restarts_cannot_write_is_restarted_later_once_they_can() {
    let o = busy_with_an_input_queued(1).await;

    o.forwarder.refuse_new();
    o.forwarder
        .fail_next_write(WriteFault::Late(Duration::from_millis(500)));
    std::fs::write(o.tmp.path().join("go"), "").unwrap();
    until_late_write_tried(&o.forwarder).await;
    // Its restarts fail at their first write (a new connection, refused) until the
    // Supervisor stops restarting at once.
    let deadline = Instant::now() + WAIT;
    while o.forwarder.refused() < 3 || o.rt.loaded_session_ids().contains(&o.id) {
        assert!(
            Instant::now() < deadline,
            "the session's restarts never failed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    o.forwarder.heal();

    // Nothing asks for the session: a later restart closes the turn and runs the input.
    until_log(&o.straight, o.id, "the queued input's turn", |events| {
        completed(events) == 1
    })
    .await;
    assert_sound(&o.straight.read_from(o.id, Seq::FIRST).await.unwrap());
    o.rt.shutdown().await;
}

/// The store goes away while a session runs a tool call with an input queued: the
/// session actor fails on its next append, and its restart cannot read the log. Once
/// the store is back, the restart is tried again without any request for the session:
/// the interrupted turn is closed and the queued input runs. Before, the failed restart
/// was not tried again and the session waited for a request that might never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_could_not_read_the_log_is_tried_again_once_the_store_is_back() {
    let o = busy_with_an_input_queued(PgOptions::default().connections).await;

    // The store goes away; the call ends, and its result cannot be written.
    o.forwarder.refuse();
    std::fs::write(o.tmp.path().join("go"), "").unwrap();
    // At least one restart could not read the log: the connection attempts refused
    // are the session's own (the runtime does nothing else with the store meanwhile)
    // and a restart makes one at least.
    let deadline = Instant::now() + WAIT;
    while o.forwarder.refused() < 2 || o.rt.loaded_session_ids().contains(&o.id) {
        assert!(Instant::now() < deadline, "the session never failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    o.forwarder.heal();

    // Nothing asks for the session: the Supervisor restarts it by itself.
    until_log(&o.straight, o.id, "the queued input's turn", |events| {
        completed(events) == 1
    })
    .await;
    let events = o.straight.read_from(o.id, Seq::FIRST).await.unwrap();
    assert_sound(&events);
    let statuses: Vec<TurnStatus> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::TurnComplete { status, .. } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(
        statuses,
        [TurnStatus::Failed, TurnStatus::Completed],
        "{events:#?}"
    );
    o.rt.shutdown().await;
}

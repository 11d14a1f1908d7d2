//! Ownership and failover (issue 42's node side) on a real PostgreSQL. In process: a
//! runtime with a `ShardOwnership` creates sessions in the shards it holds and refuses
//! the others; once another node claimed its shard (its lease expired unrenewed: a
//! paused owner), its next write is refused as fenced and it drops every session of the
//! shard without writing; the new owner takes the session over, a retried input id is
//! taken once, and the epochs never decrease along the session's seqs. End to end:
//! `foya node` processes on one store, the owner of a session killed with SIGKILL
//! mid-tool-call, another node takes its shards, closes the turn as interrupted without
//! re-running the tool, and the session takes input again; SIGTERM hands off at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::StopCause;
use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::{Runtime, RuntimeConfig, RuntimeError};
use foya_protocol::{
    ApprovalMode, EventKind, Input, InputId, Seq, SessionConfig, SessionId, TurnStatus,
};
use foya_storage::{EventLog as _, LogStore};
use foya_storage_pg::{
    ClaimError, LeaseKeeper, LeaseOptions, NodeLease, PgLog, PgOptions, ShardOwnership, testkit,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One global bound for every wait of a test.
const WAIT: Duration = Duration::from_secs(90);

async fn open(url: &str) -> PgLog {
    let options = PgOptions {
        shards: 4,
        ..PgOptions::default()
    };
    PgLog::open(url, options).await.unwrap()
}

async fn runtime(log: &PgLog, ownership: Arc<ShardOwnership>, texts: &[&str]) -> Runtime {
    let responses: Vec<_> = texts.iter().map(|t| json!({ "text": t })).collect();
    let script: Script = serde_json::from_value(json!({ "responses": responses })).unwrap();
    let model = Arc::new(ScriptedClient::from_script(script));
    let mut config = RuntimeConfig::new(LogStore::shared(log.clone()), model);
    config.ownership = Some(ownership);
    Runtime::start(config).await.unwrap()
}

/// `lease`'s ownership record holding shard 0 (claimed by the test), and the receiver of
/// its fencing notices (kept by the caller for the test's length).
fn owning_shard_0(
    lease: &NodeLease,
) -> (
    Arc<ShardOwnership>,
    tokio::sync::mpsc::UnboundedReceiver<u32>,
) {
    let (own, fenced) = ShardOwnership::new(lease.clone());
    own.claimed(0);
    (Arc::new(own), fenced)
}

/// Claims `shard` for `lease`, waiting (one global bound) while another lease holds it.
async fn claim_when_free(lease: &NodeLease, shard: u32) -> foya_storage::Fence {
    let deadline = Instant::now() + WAIT;
    loop {
        match lease.claim(shard).await {
            Ok(fence) => return fence,
            Err(ClaimError::Held { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("claim of shard {shard}: {e}"),
        }
    }
}

fn epoch(fence: foya_storage::Fence) -> u64 {
    match fence {
        foya_storage::Fence::Epoch { epoch, .. } => epoch,
        foya_storage::Fence::None => panic!("an unfenced claim"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_is_fenced_and_drops_its_shard_and_the_new_owner_takes_each_input_once() {
    let url = testkit::fresh_url().await;
    let (log_a, log_b) = (open(&url).await, open(&url).await);

    // Node A holds shard 0 under a short lease it never renews (no keeper): a paused
    // owner whose own view still says it holds the shard.
    let lease_a = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_millis(800)))
        .await
        .unwrap();
    let fence_a = lease_a.claim(0).await.unwrap();
    let (own_a, _fenced_a) = owning_shard_0(&lease_a);
    let runtime_a = runtime(&log_a, Arc::clone(&own_a), &["first answer"]).await;

    // Sessions created on A get ids in the shard it holds.
    let s1 = runtime_a
        .create_session(SessionConfig::new("/w"))
        .await
        .unwrap();
    let s2 = runtime_a
        .create_session(SessionConfig::new("/w"))
        .await
        .unwrap();
    for s in [&s1, &s2] {
        assert_eq!(log_a.session_shard(s.id()).await.unwrap(), Some(0));
    }
    // A session of a shard A does not hold is refused with a typed error.
    let elsewhere = loop {
        let id = foya_protocol::SessionId::new();
        if log_a.shards().of(id) == 1 {
            break id;
        }
    };
    match runtime_a.session(elsewhere).await {
        Err(RuntimeError::NotOwner { session, shard, .. }) => {
            assert_eq!((session, shard), (elsewhere, 1));
        }
        other => panic!("expected NotOwner, got {other:?}"),
    }

    // One turn on A, under a client-chosen input id.
    let input_id = InputId::new();
    let outcome = s1
        .run_with_id(input_id, Input::text("hello"))
        .await
        .unwrap();
    assert_eq!(outcome.text, "first answer");
    let s2_before = log_a.last_seq(s2.id()).await.unwrap();

    // Node B claims shard 0 once A's lease expired on the database's clock.
    let lease_b = NodeLease::register(&url, "b", LeaseOptions::default())
        .await
        .unwrap();
    let keeper_b = LeaseKeeper::spawn(lease_b.clone());
    let fence_b = claim_when_free(&lease_b, 0).await;
    assert!(epoch(fence_b) > epoch(fence_a));

    // A, stale, tries to write: the store refuses the fence, nothing is written, and A
    // drops every loaded session of the shard.
    let stale = s2.submit(Input::text("from the stale owner")).await;
    assert!(stale.is_err(), "a fenced write was acknowledged: {stale:?}");
    let deadline = Instant::now() + WAIT;
    while !runtime_a.loaded_session_ids().is_empty() {
        assert!(Instant::now() < deadline, "A kept its fenced sessions");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log_a.last_seq(s2.id()).await.unwrap(), s2_before);
    match runtime_a.session(s1.id()).await {
        Err(RuntimeError::NotOwner { shard: 0, .. }) => {}
        other => panic!("expected NotOwner after the fence, got {other:?}"),
    }

    // B takes the session over: the retried input id is taken once, a new one runs.
    let (own_b, _fenced_b) = owning_shard_0(&lease_b);
    let runtime_b = runtime(&log_b, own_b, &["second answer"; 3]).await;
    let on_b = runtime_b.session(s1.id()).await.unwrap();
    on_b.submit_with_id(input_id, Input::text("hello"))
        .await
        .unwrap();
    let outcome = on_b.run(Input::text("again")).await.unwrap();
    assert_eq!(outcome.text, "second answer");
    let log = log_b.read_from(s1.id(), Seq::FIRST).await.unwrap();
    let taken = log
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::UserMessage { input_id: id, .. } if *id == input_id)
                || matches!(&e.kind, EventKind::InputQueued { input_id: id, .. } if *id == input_id)
        })
        .count();
    assert_eq!(taken, 1, "the retried input was taken twice");

    // The epochs never decrease along the session's seqs: A's events under A's epoch,
    // then B's under B's.
    let epochs = log_b.event_epochs(s1.id()).await.unwrap();
    assert!(epochs.windows(2).all(|w| w[0].1 <= w[1].1), "{epochs:?}");
    assert_eq!(epochs.first().unwrap().1, epoch(fence_a));
    assert_eq!(epochs.last().unwrap().1, epoch(fence_b));
    assert!(log_b.epoch_regressions(10).await.unwrap().is_empty());

    runtime_b.shutdown().await;
    runtime_a.shutdown().await;
    keeper_b.shutdown().await.unwrap();
}

/// A runtime over `log` with the built-in tools (the shell), scripted with `script`,
/// whose handoffs let turns finish for `drain`.
async fn runtime_with_tools(
    log: &PgLog,
    ownership: Arc<ShardOwnership>,
    script: serde_json::Value,
    drain: Duration,
) -> Runtime {
    let script: Script = serde_json::from_value(script).unwrap();
    let model = Arc::new(ScriptedClient::from_script(script));
    let mut config = RuntimeConfig::new(LogStore::shared(log.clone()), model);
    config.tools = Arc::new(foya_actors::tools::ToolRegistry::builtin_with_sandbox(
        foya_actors::testkit::sandbox_runner(),
    ));
    config.ownership = Some(ownership);
    config.handoff_drain = drain;
    Runtime::start(config).await.unwrap()
}

/// Waits (one global bound) until the log of `id` holds an event `matches` accepts.
async fn until_logged(
    log: &PgLog,
    id: SessionId,
    what: &str,
    matches: impl Fn(&EventKind) -> bool,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let events = log.read_from(id, Seq::FIRST).await.unwrap();
        if events.iter().any(|e| matches(&e.kind)) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        // Polling the store: the log is what both nodes share.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A graceful handoff while a tool call runs longer than the handoff's drain, as a
/// node's placement does it (drain the shard, `Runtime::hand_off`, release): once the
/// drain passed, the old owner cancels the call before its side effect and closes the
/// turn once under its fence, its `turn_cancelled` naming the handoff; the new owner claims the shard, loads
/// the session (nothing left to recover: no call paired a second time) and runs the next
/// input. The call's only result is "cancelled", it never ran and is not re-run, the
/// epochs never decrease, and the fault harness's checker finds nothing in the log (a
/// cancelled call owes no side effect).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_mid_tool_call_closes_the_turn_once_and_nothing_pairs_the_call_again() {
    let url = testkit::fresh_url().await;
    let (log_a, log_b) = (open(&url).await, open(&url).await);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("s0");
    std::fs::create_dir_all(&work).unwrap();
    let ran = tmp.path().join("ran.log");
    // The fault harness's side-effect line, after a sleep the handoff interrupts.
    let command = format!(
        "sleep 30; echo \"$(basename \"$PWD\") 1 0\" >> '{}'",
        ran.display()
    );
    let call = json!({"tool_calls": [{"id": "c1", "name": "shell",
        "arguments": {"command": command}}]});

    let lease_a = NodeLease::register(&url, "a", LeaseOptions::default())
        .await
        .unwrap();
    let keeper_a = LeaseKeeper::spawn(lease_a.clone());
    let fence_a = lease_a.claim(0).await.unwrap();
    let (own_a, _fenced_a) = owning_shard_0(&lease_a);
    let script_a = json!({"responses": [call, {"text": "never reached"}]});
    // A drain far shorter than the call (30 s).
    let drain = Duration::from_millis(300);
    let runtime_a = runtime_with_tools(&log_a, Arc::clone(&own_a), script_a, drain).await;
    let mut config = SessionConfig::new(&work);
    config.approval_mode = ApprovalMode::Bypass;
    let session = runtime_a.create_session(config).await.unwrap();
    let id = session.id();
    assert_eq!(log_a.session_shard(id).await.unwrap(), Some(0));
    let mut watcher = session
        .subscribe(Seq::FIRST, foya_actors::SubscribeOptions::default())
        .await
        .unwrap();
    session.submit(Input::text("go")).await.unwrap();
    until_logged(&log_a, id, "the call started", |k| {
        matches!(k, EventKind::ToolStarted { .. })
    })
    .await;

    // The handoff (`node_shards.rs`): no more admits, the drain, then the turn
    // cancelled and its end committed, the sessions dropped, the shard released.
    let handoff = Instant::now();
    own_a.drain(0);
    let outcome = runtime_a
        .hand_off(
            |s| foya_storage::Ownership::shard_of(own_a.as_ref(), s, None) == 0,
            StopCause::HandedOff,
        )
        .await;
    assert!(!outcome.drained, "the 30 s call ended within the drain");
    assert!(
        outcome.ended,
        "the handed-off turn did not end within the grace"
    );
    // A subscriber is told the session moved, after the turn's end (not `lagged`).
    let mut updates = Vec::new();
    while let Some(update) = watcher.recv().await {
        updates.push(update);
    }
    let last_event = updates.iter().rev().find_map(|u| match u {
        foya_protocol::SessionUpdate::Event(e) => Some(e),
        _ => None,
    });
    assert!(
        matches!(
            last_event.map(|e| &e.kind),
            Some(EventKind::TurnComplete { .. })
        ),
        "{updates:#?}"
    );
    match updates.last() {
        Some(foya_protocol::SessionUpdate::Notice(foya_protocol::event::Notice::Moved {
            last_seq,
            reason,
            ..
        })) => {
            assert_eq!(*last_seq, last_event.unwrap().seq);
            assert_eq!(reason, "shard handed off to another node");
        }
        other => panic!("expected Moved last, got {other:?}"),
    }
    assert!(lease_a.release(0).await.unwrap());
    own_a.released(0);
    match runtime_a.session(id).await {
        Err(RuntimeError::NotOwner { shard: 0, .. }) => {}
        other => panic!("expected NotOwner after the handoff, got {other:?}"),
    }

    // B claims at once (released, not expired) and takes the session over.
    let lease_b = NodeLease::register(&url, "b", LeaseOptions::default())
        .await
        .unwrap();
    let keeper_b = LeaseKeeper::spawn(lease_b.clone());
    let fence_b = lease_b.claim(0).await.unwrap();
    eprintln!(
        "handoff: drain to claimed elsewhere in {:?}",
        handoff.elapsed()
    );
    assert!(epoch(fence_b) > epoch(fence_a));
    let (own_b, _fenced_b) = owning_shard_0(&lease_b);
    let script_b = json!({"responses": [call, {"text": "after the handoff"}]});
    let runtime_b = runtime_with_tools(&log_b, own_b, script_b, drain).await;
    let on_b = runtime_b.session(id).await.unwrap();
    let outcome = on_b.run(Input::text("again")).await.unwrap();
    assert_eq!(outcome.text, "after the handoff");

    let events = log_b.read_from(id, Seq::FIRST).await.unwrap();
    let results: Vec<&foya_protocol::ToolMessage> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolMessage(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].is_error && results[0].content == "cancelled",
        "{results:?}"
    );
    let ends: Vec<TurnStatus> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnComplete { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [TurnStatus::Cancelled, TurnStatus::Completed]);
    // The cancel names the handoff, not a shutdown.
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnCancelled { reason } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, ["shard handed off to another node"]);
    assert!(!ran.exists(), "the cancelled call ran its side effect");
    assert!(log_b.epoch_regressions(10).await.unwrap().is_empty());
    // The fault harness's checker on this log.
    use foya_tests::fault_cluster::{check_log, check_tool_runs, ran_lines};
    assert_eq!(check_log(id, &events, None), Vec::<String>::new());
    assert_eq!(
        check_tool_runs(id, "s0", &events, &ran_lines(&ran)),
        Vec::<String>::new()
    );

    runtime_b.shutdown().await;
    runtime_a.shutdown().await;
    keeper_b.shutdown().await.unwrap();
    keeper_a.shutdown().await.unwrap();
}

/// A graceful handoff while a turn runs that ends within the drain: the old owner stops
/// taking new inputs for the shard at once (refused `NotOwner`, retryable: a client
/// retries on the next owner), lets the running turn finish — it completes normally on
/// the old owner, under its epoch, nothing cancelled — and starts nothing from the
/// queue; the input queued before the handoff stays in the log and runs on the new
/// owner, and the input refused during the drain, retried there with its id, is taken
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_lets_a_turn_within_the_drain_complete_and_refuses_new_inputs_retryably() {
    let url = testkit::fresh_url().await;
    let (log_a, log_b) = (open(&url).await, open(&url).await);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("s0");
    std::fs::create_dir_all(&work).unwrap();
    // The call ends when the test says so (a file appears): the turn's length is the
    // test's, not a timer's.
    let go = tmp.path().join("go");
    let command = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done; echo done",
        go.display()
    );
    let call = json!({"tool_calls": [{"id": "c1", "name": "shell",
        "arguments": {"command": command}}]});

    let lease_a = NodeLease::register(&url, "a", LeaseOptions::default())
        .await
        .unwrap();
    let keeper_a = LeaseKeeper::spawn(lease_a.clone());
    let fence_a = lease_a.claim(0).await.unwrap();
    let (own_a, _fenced_a) = owning_shard_0(&lease_a);
    let script_a = json!({"responses": [call, {"text": "finished on a"}]});
    // A drain longer than any wait of the test: the turn ends within it.
    let runtime_a = Arc::new(runtime_with_tools(&log_a, Arc::clone(&own_a), script_a, WAIT).await);
    let mut config = SessionConfig::new(&work);
    config.approval_mode = ApprovalMode::Bypass;
    let session = runtime_a.create_session(config).await.unwrap();
    let id = session.id();
    session.submit(Input::text("first")).await.unwrap();
    // Queued behind the running turn before the handoff.
    let queued = session.submit(Input::text("queued")).await.unwrap();
    until_logged(&log_a, id, "the call started", |k| {
        matches!(k, EventKind::ToolStarted { .. })
    })
    .await;

    // The handoff starts: no more admits, then the drain.
    own_a.drain(0);
    let handing = {
        let runtime_a = Arc::clone(&runtime_a);
        let own_a = Arc::clone(&own_a);
        tokio::spawn(async move {
            runtime_a
                .hand_off(
                    |s| foya_storage::Ownership::shard_of(own_a.as_ref(), s, None) == 0,
                    StopCause::HandedOff,
                )
                .await
        })
    };
    // A new input during the drain is refused, retryably, and nothing is written.
    let before = log_a.last_seq(id).await.unwrap();
    let retried = InputId::new();
    match session
        .submit_with_id(retried, Input::text("during the drain"))
        .await
    {
        Err(RuntimeError::NotOwner { shard: 0, .. }) => {}
        other => panic!("expected NotOwner during the drain, got {other:?}"),
    }
    assert_eq!(log_a.last_seq(id).await.unwrap(), before);
    assert!(
        !handing.is_finished(),
        "the handoff did not wait for the turn"
    );

    // The call ends: the turn completes on A, and the handoff ends without a cancel.
    std::fs::write(&go, "").unwrap();
    let outcome = tokio::time::timeout(WAIT, handing).await.unwrap().unwrap();
    assert!(outcome.drained && outcome.ended, "{outcome:?}");
    assert!(lease_a.release(0).await.unwrap());
    own_a.released(0);
    let on_a = log_a.read_from(id, Seq::FIRST).await.unwrap();
    let ends: Vec<TurnStatus> = on_a
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnComplete { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [TurnStatus::Completed], "the queued input ran on A");
    assert!(
        !on_a
            .iter()
            .any(|e| matches!(e.kind, EventKind::TurnCancelled { .. })),
        "a turn was cancelled"
    );

    // B claims at once and takes the session over: the queued input runs there, and the
    // input refused during the drain, retried with its id, is taken once.
    let lease_b = NodeLease::register(&url, "b", LeaseOptions::default())
        .await
        .unwrap();
    let keeper_b = LeaseKeeper::spawn(lease_b.clone());
    let fence_b = lease_b.claim(0).await.unwrap();
    assert!(epoch(fence_b) > epoch(fence_a));
    let (own_b, _fenced_b) = owning_shard_0(&lease_b);
    // A scripted model answers response N+1 after N assistant messages: A's two first.
    let script_b = json!({"responses": [
        {"text": "unused"}, {"text": "unused"},
        {"text": "queued ran on b"}, {"text": "retried on b"}
    ]});
    let runtime_b = runtime_with_tools(&log_b, own_b, script_b, WAIT).await;
    let on_b = runtime_b.session(id).await.unwrap();
    on_b.submit_with_id(retried, Input::text("during the drain"))
        .await
        .unwrap();
    on_b.submit_with_id(retried, Input::text("during the drain"))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    let events = loop {
        let events = log_b.read_from(id, Seq::FIRST).await.unwrap();
        let done = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::TurnComplete { .. }))
            .count();
        if done == 3 {
            break events;
        }
        assert!(Instant::now() < deadline, "the inputs never ran on B");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let started: Vec<InputId> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::TurnStarted { input_id } => Some(*input_id),
            _ => None,
        })
        .collect();
    assert_eq!(&started[1..], [queued, retried]);
    let taken = events
        .iter()
        .filter(
            |e| matches!(&e.kind, EventKind::UserMessage { input_id, .. } if *input_id == retried),
        )
        .count();
    assert_eq!(taken, 1, "the retried input was taken twice");
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) if !m.text.is_empty() => Some(m.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        ["finished on a", "queued ran on b", "retried on b"],
        "{:#?}",
        events.iter().map(|e| &e.kind).collect::<Vec<_>>()
    );
    assert!(
        events
            .iter()
            .all(|e| !matches!(e.kind, EventKind::TurnCancelled { .. }))
    );
    // A's turn under A's epoch, B's under B's.
    let epochs = log_b.event_epochs(id).await.unwrap();
    assert!(epochs.windows(2).all(|w| w[0].1 <= w[1].1), "{epochs:?}");
    assert!(log_b.epoch_regressions(10).await.unwrap().is_empty());

    runtime_b.shutdown().await;
    if let Ok(runtime_a) = Arc::try_unwrap(runtime_a) {
        runtime_a.shutdown().await;
    }
    keeper_b.shutdown().await.unwrap();
    keeper_a.shutdown().await.unwrap();
}

// ---- end to end: `foya node` processes on one store ----

mod nodes {
    use super::WAIT;
    use foya_actors::cluster::{ClusterClient, ClusterNode, NodeConfig};
    use foya_actors::provider::scripted::{Script, ScriptedClient};
    use foya_actors::{Runtime, RuntimeConfig};
    use foya_protocol::{
        ApprovalMode, Event, EventKind, Input, InputId, Seq, SessionConfig, SessionId,
        SessionUpdate, TurnStatus,
    };
    use foya_storage::{EventLog as _, Store, StoreOptions};
    use foya_storage_pg::{Directory, PgLog, PgOptions, testkit};
    use serde_json::json;
    use std::path::Path;
    use std::process::Stdio;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt as _, BufReader};
    use tokio::process::{Child, Command};
    use tokio::time::Instant;

    const COOKIE: &str = "failover-cookie";

    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    /// `foya node NAME` on the store, with its own scripted model, dialling `peers`.
    async fn spawn_node(dir: &Path, name: &str, port: u16, peers: &[u16], store: &str) -> Child {
        let mut command = Command::new(foya_tests::foya_bin::foya_bin());
        command
            .env("HOME", foya_tests::foya_bin::test_home())
            .env_remove("FOYA_DATA_DIR")
            .args(["node", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--name", name, "--cookie-file"])
            .arg(dir.join("cookie"))
            .args(["--provider", "scripted", "--script"])
            .arg(dir.join(format!("script-{name}.json")))
            .arg("--data-dir")
            .arg(dir.join(format!("data-{name}")))
            .args(["--store", store]);
        for peer in peers {
            command.args(["--connect", &format!("127.0.0.1:{peer}")]);
        }
        let mut child = command
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("the node started")
            .unwrap()
            .expect("the node exited");
        assert_eq!(
            line,
            format!("foya node {name} listening on 127.0.0.1:{port}")
        );
        child
    }

    /// The test's own cluster node (no store of the cluster's: a client).
    async fn client_node(port: u16, peers: &[u16]) -> ClusterNode {
        let store = Store::open_in_memory(StoreOptions::default()).unwrap();
        let model = Arc::new(ScriptedClient::from_script(Script::default()));
        let runtime = Runtime::start(RuntimeConfig::new(store, model))
            .await
            .unwrap();
        let listen = format!("127.0.0.1:{port}").parse().unwrap();
        let peers = peers.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut config = NodeConfig::new(listen, COOKIE, peers, "t");
        config.heartbeat = Duration::from_millis(100);
        config.heartbeat_timeout = Duration::from_millis(500);
        ClusterNode::start(runtime, config).await.unwrap()
    }

    /// Polls `check` until it answers `Some`, within the global bound.
    async fn until<T, F: std::future::Future<Output = Option<T>>>(
        what: &str,
        mut check: impl FnMut() -> F,
    ) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn owner(directory: &Directory, shard: u32) -> Option<String> {
        directory
            .shard_owner(shard)
            .await
            .unwrap()
            .map(|owner| owner.node)
    }

    /// A session created through `client` on node `on`, in a shard placement gives
    /// `on` among `live` (so no handoff moves it meanwhile), its shard owned by `on`.
    async fn session_on(
        client: &ClusterClient,
        log: &PgLog,
        directory: &Directory,
        on: &str,
        live: &[&str],
        cwd: &Path,
    ) -> (SessionId, u32) {
        loop {
            let mut config = SessionConfig::new(cwd);
            config.approval_mode = ApprovalMode::Bypass;
            let id = until("a session created", || {
                let config = config.clone();
                async move { client.create_session(Some(on), config).await.ok() }
            })
            .await;
            let shard = log.session_shard(id).await.unwrap().unwrap();
            if foya_storage_pg::shard::owner(shard, live) == Some(on) {
                until("the shard owned", || async {
                    (owner(directory, shard).await.as_deref() == Some(on)).then_some(())
                })
                .await;
                return (id, shard);
            }
        }
    }

    async fn events(log: &PgLog, id: SessionId) -> Vec<Event> {
        log.read_from(id, Seq::FIRST).await.unwrap()
    }

    fn completes(events: &[Event]) -> Vec<(TurnStatus, Option<String>)> {
        events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::TurnComplete { status, reason, .. } => Some((*status, reason.clone())),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_killed_mid_tool_call_fails_over_and_sigterm_hands_off_at_once() {
        let _serial = foya_tests::IN_PROCESS_CLUSTER.lock().await;
        let store = testkit::fresh_url().await;
        let log = PgLog::open(&store, PgOptions::default()).await.unwrap();
        let directory = Directory::new(&store).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join("cookie"), format!("{COOKIE}\n")).unwrap();
        let marker = dir.join("marker");
        let command = format!("echo run >> {}; exec sleep 60", marker.display());
        let script_a = json!({"responses": [
            {"tool_calls": [{"id": "s1", "name": "shell", "arguments": {"command": command}}]},
            {"text": "never reached"}
        ]});
        std::fs::write(dir.join("script-a.json"), script_a.to_string()).unwrap();
        let after = json!({"responses": [{"text": "after failover"}, {"text": "after handoff"}]});
        for name in ["b", "c"] {
            std::fs::write(dir.join(format!("script-{name}.json")), after.to_string()).unwrap();
        }
        let (a_port, b_port, c_port, t_port) = (free_port(), free_port(), free_port(), free_port());
        let mut a = spawn_node(dir, "a", a_port, &[b_port], &store).await;
        let mut b = spawn_node(dir, "b", b_port, &[a_port], &store).await;
        let t = client_node(t_port, &[a_port, b_port, c_port]).await;
        let client = t.client();
        for name in ["a", "b"] {
            client.wait_for_node(name, WAIT).await.unwrap();
        }

        // A session on A, mid-turn: its shell call started (the marker has its line).
        let (session, shard) = session_on(&client, &log, &directory, "a", &["a", "b"], dir).await;
        // A subscriber on the test's node follows the session across both moves.
        let mut sub = client.subscribe(session, Seq::FIRST).await.unwrap();
        let followed = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut ends = 0;
            while ends < 3 {
                match sub.recv().await {
                    Some(SessionUpdate::Event(event)) => {
                        ends += usize::from(event.kind.type_name() == "turn_complete");
                        seen.push(event);
                    }
                    Some(SessionUpdate::Notice(notice)) => panic!("subscription notice {notice:?}"),
                    Some(SessionUpdate::Delta(_)) => {}
                    None => panic!("the subscription ended"),
                }
            }
            seen
        });
        client
            .submit_with_id(session, InputId::new(), Input::text("run it"))
            .await
            .unwrap();
        until("the tool started", || async {
            std::fs::read_to_string(&marker)
                .ok()
                .filter(|m| m.contains("run"))
        })
        .await;

        // kill -9 the owner; the session takes input again on B.
        a.start_kill().unwrap();
        let killed = Instant::now();
        let retried = InputId::new();
        until("the input accepted on another node", || async {
            client
                .submit_with_id(session, retried, Input::text("after"))
                .await
                .ok()
        })
        .await;
        let failover = killed.elapsed();
        eprintln!("failover: kill -9 to input accepted on another node in {failover:?}");
        assert_eq!(owner(&directory, shard).await.as_deref(), Some("b"));
        let _ = a.wait().await;

        // The interrupted turn was closed once, its call paired "outcome unknown" and
        // never re-run; then the new input ran on B.
        let log_events = until("the input's turn done", || async {
            let events = events(&log, session).await;
            (completes(&events).len() == 2).then_some(events)
        })
        .await;
        let ends = completes(&log_events);
        assert_ne!(ends[0].0, TurnStatus::Completed, "{ends:?}");
        assert!(
            ends[0].1.as_deref().unwrap_or("").contains("interrupted"),
            "{ends:?}"
        );
        assert_eq!(ends[1].0, TurnStatus::Completed);
        let results: Vec<String> = log_events
            .iter()
            .filter(|e| e.kind.type_name() == "tool_message")
            .map(|e| serde_json::to_string(&e.kind).unwrap())
            .collect();
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(results[0].contains("outcome unknown"), "{results:?}");
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "run\n");
        let users = log_events
            .iter()
            .filter(|e| e.kind.type_name() == "user_message")
            .count();
        assert_eq!(users, 2);
        // Retried after the failover with the same id: taken once.
        client
            .submit_with_id(session, retried, Input::text("after"))
            .await
            .unwrap();
        assert!(log.epoch_regressions(10).await.unwrap().is_empty());

        // SIGTERM hands B's shards off at once: C owns the shard well before B's lease
        // could have expired (5 s).
        let mut c = spawn_node(dir, "c", c_port, &[b_port], &store).await;
        client.wait_for_node("c", WAIT).await.unwrap();
        // Once placement settled (C took its share), a shard B keeps: SIGTERM on B
        // hands it to C.
        let shards = log.shards();
        let kept = shards
            .all()
            .find(|s| foya_storage_pg::shard::owner(*s, &["b", "c"]) == Some("b"))
            .unwrap();
        let taken = shards
            .all()
            .find(|s| foya_storage_pg::shard::owner(*s, &["b", "c"]) == Some("c"))
            .unwrap();
        until("C took its share", || async {
            (owner(&directory, taken).await.as_deref() == Some("c")).then_some(())
        })
        .await;
        assert_eq!(owner(&directory, kept).await.as_deref(), Some("b"));
        let pid = nix::unistd::Pid::from_raw(i32::try_from(b.id().unwrap()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let signalled = Instant::now();
        let status = b.wait().await.unwrap();
        assert!(status.success(), "node b exited with {status}");
        // Released, not expired: the moment B has exited its lease is no longer live and
        // no shard names it (a node that died without releasing stays live until its lease
        // runs out, 5 s).
        assert!(directory.live_node("b").await.unwrap().is_none());
        assert_ne!(owner(&directory, kept).await.as_deref(), Some("b"));
        until("C owns B's shards", || async {
            let kept = owner(&directory, kept).await;
            let session_shard = owner(&directory, shard).await;
            (kept.as_deref() == Some("c") && session_shard.as_deref() == Some("c")).then_some(())
        })
        .await;
        let handoff = signalled.elapsed();
        eprintln!("handoff: SIGTERM to the shard owned elsewhere in {handoff:?}");
        client
            .submit_with_id(session, InputId::new(), Input::text("after handoff"))
            .await
            .unwrap();
        until("the third turn done", || async {
            (completes(&events(&log, session).await).len() == 3).then_some(())
        })
        .await;
        assert!(log.epoch_regressions(10).await.unwrap().is_empty());
        // The subscriber saw every event once, in order, across both moves.
        let seen = tokio::time::timeout(WAIT, followed).await.unwrap().unwrap();
        let stored = events(&log, session).await;
        let upto: Vec<&Event> = stored.iter().take(seen.len()).collect();
        assert_eq!(seen.iter().collect::<Vec<_>>(), upto);
        c.start_kill().unwrap();
        let _ = c.wait().await;
        t.shutdown().await;
    }
}

//! Issue 42's fault harness (`foya_tests::fault_cluster`): three `foya node` processes
//! on one real PostgreSQL (`FOYA_TEST_PG`, or a server of the test's own where the fault
//! is PostgreSQL's), the simulated model over HTTP with a delay per step and a `shell`
//! call per step that appends a line to a side-effect file, sessions mid-turn, and per
//! fault several runs, each ended by the invariant checker reading the store: 0
//! acknowledged events missing, seqs dense, epochs never decreasing along a session's
//! seqs, 0 tool calls run twice, every interrupted turn closed once with every call
//! paired.
//!
//! The faults: kill -9 of the node owning most sessions (the time from the kill to each
//! of its sessions accepting input on another node is printed, p50/p99); SIGSTOP of an
//! owner past its lease, then SIGCONT (it must not write again); a partition between one
//! node and PostgreSQL (a forwarder of the test's that stops forwarding); a fourth node
//! joining under load (it must take a share of the sessions); a PostgreSQL restart.
//! Each fault run first waits until placement settled (every shard held by a live lease,
//! each node some), so the five need fenced shard ownership and failover (issue 42's
//! nodes); the harness itself (the checker on hand-made logs, the forwarder, process
//! control, the no-fault run) is proved here on what a cluster without failover already
//! does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_protocol::{
    AssistantMessage, Event, EventKind, FinishReason, InputId, RunId, Seq, SessionId, ToolCall,
    ToolCallId, ToolMessage, TurnStatus,
};
use foya_storage::EventLog as _;
use foya_tests::fault_cluster::{
    Acked, Cluster, Forwarder, Load, Workload, busiest, check_log, check_store, check_tool_runs,
    percentile, probe_until_accepted, ran_lines, wait_at_rest, wait_placed,
};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Runs of each fault.
const RUNS: usize = 2;
/// Sessions per run.
const SESSIONS: usize = 9;
/// The bound on a dead node's session accepting input elsewhere (generous: the issue's
/// target, p99 ≤ 8 s, is printed, not asserted).
const FAILOVER_BOUND: Duration = Duration::from_secs(30);
/// How long the sessions get to come to rest after a fault.
const REST_BOUND: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// The checker on logs built by hand: each rule catches what it is for.

fn event(seq: u64, run: Option<RunId>, kind: EventKind) -> Event {
    Event {
        session_id: SessionId::from_bytes([7; 16]),
        seq: Seq(seq),
        run_id: run,
        at_ms: 0,
        kind,
    }
}

fn call(id: &str, step: u32) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: "shell".into(),
        arguments: serde_json::json!({ "command": format!("step {step}") }),
        extra: None,
    }
}

/// A turn of two tool steps, the second call answered `second`, then closed `status`.
fn turn(second: &str, status: TurnStatus, reason: Option<&str>) -> Vec<Event> {
    let run = Some(RunId::new());
    let input = InputId::new();
    let kinds = vec![
        EventKind::UserMessage {
            input_id: input,
            input: foya_protocol::Input::text("go"),
        },
        EventKind::TurnStarted { input_id: input },
        EventKind::StepStarted { step: 1 },
        EventKind::AssistantMessage(AssistantMessage {
            tool_calls: vec![call("c1", 1)],
            finish_reason: Some(FinishReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        EventKind::ToolMessage(ToolMessage::text(ToolCallId::new("c1"), "ok", false)),
        EventKind::StepStarted { step: 2 },
        EventKind::AssistantMessage(AssistantMessage {
            tool_calls: vec![call("c2", 2)],
            finish_reason: Some(FinishReason::ToolCalls),
            ..AssistantMessage::default()
        }),
        EventKind::ToolMessage(ToolMessage::text(ToolCallId::new("c2"), second, true)),
        EventKind::TurnComplete {
            status,
            reason: reason.map(str::to_owned),
            error: None,
        },
    ];
    let mut out = vec![event(
        1,
        None,
        EventKind::SessionCreated {
            config: foya_protocol::SessionConfig::new("/tmp"),
        },
    )];
    for (i, kind) in kinds.into_iter().enumerate() {
        out.push(event(i as u64 + 2, run, kind));
    }
    out
}

fn id() -> SessionId {
    SessionId::from_bytes([7; 16])
}

#[test]
fn the_checker_passes_a_sound_log_and_names_each_broken_rule() {
    let unknown = "outcome unknown: the runtime stopped while this ran; it was not re-run";
    let sound = turn(
        unknown,
        TurnStatus::Cancelled,
        Some("interrupted by restart"),
    );
    assert_eq!(check_log(id(), &sound, None), Vec::<String>::new());
    assert!(foya_tests::fault_cluster::at_rest(&sound));

    // A gap in the seqs.
    let mut gap = sound.clone();
    gap.remove(4);
    let broken = check_log(id(), &gap, None);
    assert!(
        broken.iter().any(|b| b.contains("seq 6 at position 4")),
        "{broken:?}"
    );

    // An acknowledged event missing, and one changed.
    let mut acked = Acked::default();
    acked.events.insert(Seq(20), sound[3].clone());
    let mut changed = sound[2].clone();
    changed.at_ms = 1;
    acked.events.insert(Seq(3), changed);
    let broken = check_log(id(), &sound, Some(&acked));
    assert!(
        broken
            .iter()
            .any(|b| b.contains("acknowledged event 20 is missing")),
        "{broken:?}"
    );
    assert!(
        broken
            .iter()
            .any(|b| b.contains("acknowledged event 3 differs")),
        "{broken:?}"
    );

    // An accepted input never taken, one taken twice.
    let mut acked = Acked::default();
    acked.inputs.push(InputId::new());
    let taken = match &sound[1].kind {
        EventKind::UserMessage { input_id, .. } => *input_id,
        _ => unreachable!(),
    };
    acked.inputs.push(taken);
    let mut twice = sound.clone();
    let mut again = sound[1].clone();
    again.seq = Seq(twice.len() as u64 + 1);
    twice.push(again);
    let broken = check_log(id(), &twice, Some(&acked));
    assert!(
        broken.iter().any(|b| b.contains("ran 0 times")),
        "{broken:?}"
    );
    assert!(
        broken.iter().any(|b| b.contains("ran 2 times")),
        "{broken:?}"
    );

    // A call left unpaired, a turn never closed, a turn closed twice.
    let mut unpaired = sound.clone();
    unpaired.remove(8);
    for (i, e) in unpaired.iter_mut().enumerate() {
        e.seq = Seq(i as u64 + 1);
    }
    let broken = check_log(id(), &unpaired, None);
    assert!(
        broken
            .iter()
            .any(|b| b.contains("tool call c2") && b.contains("0 results")),
        "{broken:?}"
    );
    let mut open = sound.clone();
    open.pop();
    let broken = check_log(id(), &open, None);
    assert!(
        broken.iter().any(|b| b.contains("never closed")),
        "{broken:?}"
    );
    assert!(!foya_tests::fault_cluster::at_rest(&open));
    let mut closed_twice = sound.clone();
    let mut second = sound.last().unwrap().clone();
    second.seq = Seq(closed_twice.len() as u64 + 1);
    closed_twice.push(second);
    let broken = check_log(id(), &closed_twice, None);
    assert!(
        broken.iter().any(|b| b.contains("closes no open turn")),
        "{broken:?}"
    );
}

#[test]
fn the_tool_check_counts_runs_against_the_calls_in_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let ran = tmp.path().join("ran.log");
    let unknown = "outcome unknown: the runtime stopped while this ran; it was not re-run";
    // Step 1 answered, step 2 "outcome unknown": step 1 ran once, step 2 at most once.
    let log = turn(
        unknown,
        TurnStatus::Cancelled,
        Some("interrupted by restart"),
    );
    for lines in ["s0 1 0\n", "s0 1 0\ns0 2 0\n"] {
        std::fs::write(&ran, lines).unwrap();
        assert_eq!(
            check_tool_runs(id(), "s0", &log, &ran_lines(&ran)),
            Vec::<String>::new()
        );
    }
    // A run twice (the second call re-run after a failover) is named.
    std::fs::write(&ran, "s0 1 0\ns0 2 0\ns0 2 0\ns1 2 0\n").unwrap();
    let broken = check_tool_runs(id(), "s0", &log, &ran_lines(&ran));
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert!(
        broken[0].contains("step 2 (#0) ran 2 times for 1 calls"),
        "{broken:?}"
    );
    // A call cancelled (a handoff) before its side effect: its "cancelled" result, an
    // error, says nothing ran, so no line is owed for it.
    let cancelled = turn(
        "cancelled",
        TurnStatus::Cancelled,
        Some("shard handed off to another node"),
    );
    std::fs::write(&ran, "s0 1 0\n").unwrap();
    assert_eq!(
        check_tool_runs(id(), "s0", &cancelled, &ran_lines(&ran)),
        Vec::<String>::new()
    );
    // A result of a call that never ran is named too.
    std::fs::write(&ran, "s0 2 0\n").unwrap();
    let broken = check_tool_runs(id(), "s0", &log, &ran_lines(&ran));
    assert!(
        broken
            .iter()
            .any(|b| b.contains("1 results of the call of step 1")),
        "{broken:?}"
    );
}

// ---------------------------------------------------------------------------------------
// The forwarder.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forwarder_forwards_holds_a_partition_silent_and_heals() {
    // An echo server behind it.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let forwarder = Forwarder::start(target).await;
    let roundtrip = |mut s: tokio::net::TcpStream| async move {
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_millis(500), s.read_exact(&mut buf))
            .await
            .map(|r| r.map(|_| buf))
            .map_err(|_| s)
    };
    let a = tokio::net::TcpStream::connect(forwarder.addr())
        .await
        .unwrap();
    let a = match roundtrip(a).await {
        Ok(Ok(buf)) => {
            assert_eq!(&buf, b"ping");
            tokio::net::TcpStream::connect(forwarder.addr())
                .await
                .unwrap()
        }
        other => panic!("not forwarded: {:?}", other.map(|r| r.is_ok()).is_ok()),
    };
    forwarder.partition();
    assert!(!forwarder.forwarding());
    // Both an open connection and a new one stay silent (no answer, no close).
    let mut held = match roundtrip(a).await {
        Err(s) => s,
        Ok(r) => panic!("answered through a partition: {:?}", r.is_ok()),
    };
    let new = tokio::net::TcpStream::connect(forwarder.addr())
        .await
        .unwrap();
    assert!(
        roundtrip(new).await.is_err(),
        "a new connection answered through a partition"
    );
    forwarder.heal();
    // The held connection is closed at the heal; a new one is forwarded again.
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), held.read(&mut buf))
        .await
        .expect("the held connection is closed at the heal")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let again = tokio::net::TcpStream::connect(forwarder.addr())
        .await
        .unwrap();
    assert_eq!(&roundtrip(again).await.unwrap().unwrap(), b"ping");
}

// ---------------------------------------------------------------------------------------
// The cluster runs.

/// Starts a 3-node cluster on `store` with the default workload, creates the sessions,
/// submits one input to each and waits until half of them run a tool call.
async fn loaded(store: &str, node_stores: &[Option<String>]) -> (Cluster, Load) {
    loaded_with(store, node_stores, true).await
}

/// [`loaded`]; with `placed`, the sessions are created once every node holds its share
/// of the shards (a cluster without shard ownership never gets there).
async fn loaded_with(store: &str, node_stores: &[Option<String>], placed: bool) -> (Cluster, Load) {
    let mut cluster = Cluster::start(store, 0, 4, Workload::default()).await;
    for s in node_stores {
        cluster.start_node(s.as_deref()).await;
    }
    for node in &cluster.nodes {
        cluster
            .client()
            .wait_for_node(&node.name, Duration::from_secs(60))
            .await
            .unwrap();
    }
    if placed {
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        if let Err(e) = wait_placed(store, &names, FAILOVER_BOUND).await {
            cluster.fail(&e).await;
        }
    }
    let load = Load::create(&cluster, SESSIONS).await;
    load.submit_all(&cluster, "work through your steps").await;
    let half = SESSIONS.div_ceil(2);
    if let Err(e) = load
        .wait_mid_tool(store, half, Duration::from_secs(60))
        .await
    {
        cluster.fail(&e).await;
    }
    load.snapshot(store).await;
    (cluster, load)
}

/// Ends a run: every session at rest, then the checker; panics naming what broke.
async fn settle_and_check(run: &str, store: &str, cluster: Cluster, load: Load) {
    let rest = wait_at_rest(store, &load, REST_BOUND).await;
    load.stop();
    let verdict = check_store(store, &cluster, &load).await;
    println!(
        "{run}: {} events, {} tool runs, {} turns interrupted, {} results \"outcome unknown\", {} broken",
        verdict.events,
        verdict.tool_runs,
        verdict.interrupted,
        verdict.unknown,
        verdict.broken.len()
    );
    if let Err(e) = rest {
        cluster
            .fail(&format!("{run}: {e}\nchecker: {:#?}", verdict.broken))
            .await;
    }
    if !verdict.broken.is_empty() {
        cluster.fail(&format!("{run}: {:#?}", verdict.broken)).await;
    }
    cluster.shutdown().await;
}

/// The harness on what works without failover: three nodes, sessions mid-turn, one node
/// paused and resumed (SIGSTOP/SIGCONT) inside its lease, every turn completes, the
/// checker finds nothing, and SIGTERM stops every node with status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_without_a_fault_pass_the_checker() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    let store = foya_storage_pg::testkit::fresh_url().await;
    let stores = vec![None, None, None];
    let (mut cluster, load) = loaded_with(&store, &stores, false).await;
    // A short pause (well inside a lease) changes nothing.
    cluster.nodes[0].stop();
    // The fault is the pause's length, not a synchronisation.
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.nodes[0].cont();
    wait_at_rest(&store, &load, REST_BOUND).await.unwrap();
    load.stop();
    let verdict = check_store(&store, &cluster, &load).await;
    assert!(verdict.broken.is_empty(), "{:#?}", verdict.broken);
    // When every turn completed (nodes that own shards may hand some over, cancelling
    // their turns, while the cluster forms), each ran all its tool steps: one line per
    // call.
    if verdict.completed == SESSIONS {
        assert_eq!(
            verdict.tool_runs,
            SESSIONS * (Workload::default().steps_per_turn as usize - 1)
        );
    }
    for node in &mut cluster.nodes {
        let status = node.term(Duration::from_secs(30)).await;
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{} on SIGTERM",
            node.name
        );
    }
    cluster.shutdown().await;
}

/// kill -9 of the node owning most sessions, mid-turn: each of its sessions accepts
/// input on another node (time printed), the interrupted turns are closed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_owner_of_many_shards() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    let mut waits = Vec::new();
    for run in 0..RUNS {
        let store = foya_storage_pg::testkit::fresh_url().await;
        let (mut cluster, load) = loaded(&store, &[None, None, None]).await;
        let (victim, sessions) = match busiest(&store, &load).await {
            Ok(found) => found,
            Err(e) => {
                cluster.fail(&format!("kill -9 run {run}: {e}")).await;
            }
        };
        let index = cluster.nodes.iter().position(|n| n.name == victim).unwrap();
        let killed = Instant::now();
        cluster.nodes[index].kill9().await;
        let probed = probe_until_accepted(&cluster, &load, &sessions, killed, FAILOVER_BOUND).await;
        match probed {
            Ok(w) => {
                println!(
                    "kill -9 run {run} (victim {victim}, {} sessions): accepted elsewhere after p50 {:?}, max {:?}",
                    w.len(),
                    percentile(&w, 50.0),
                    percentile(&w, 100.0)
                );
                waits.extend(w);
            }
            Err(e) => {
                cluster
                    .fail(&format!("kill -9 run {run} (victim {victim}): {e}"))
                    .await;
            }
        }
        settle_and_check(&format!("kill -9 run {run}"), &store, cluster, load).await;
    }
    println!(
        "kill -9 to input accepted on another node over {} sessions: p50 {:?}, p99 {:?}",
        waits.len(),
        percentile(&waits, 50.0),
        percentile(&waits, 99.0)
    );
}

/// SIGSTOP of an owner until its sessions accept input elsewhere (its lease expired),
/// then SIGCONT: the resumed node must not write again (no epoch regression, seqs dense,
/// no call re-run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_past_the_lease_then_sigcont() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    for run in 0..RUNS {
        let store = foya_storage_pg::testkit::fresh_url().await;
        let (mut cluster, load) = loaded(&store, &[None, None, None]).await;
        let (victim, sessions) = match busiest(&store, &load).await {
            Ok(found) => found,
            Err(e) => {
                cluster.fail(&format!("SIGSTOP run {run}: {e}")).await;
            }
        };
        let index = cluster.nodes.iter().position(|n| n.name == victim).unwrap();
        let stopped = Instant::now();
        cluster.nodes[index].stop();
        let probed =
            probe_until_accepted(&cluster, &load, &sessions, stopped, FAILOVER_BOUND).await;
        cluster.nodes[index].cont();
        if let Err(e) = probed {
            cluster
                .fail(&format!("SIGSTOP run {run} (victim {victim}): {e}"))
                .await;
        }
        settle_and_check(&format!("SIGSTOP run {run}"), &store, cluster, load).await;
    }
}

/// One node reaches PostgreSQL through a forwarder that stops forwarding: its sessions
/// accept input on the other nodes; after the heal the checker finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_between_one_node_and_postgres() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    for run in 0..RUNS {
        let store = foya_storage_pg::testkit::fresh_url().await;
        let (forwarder, through) = Forwarder::in_front_of(&store).await;
        let (cluster, mut load) = loaded(&store, &[Some(through), None, None]).await;
        // Sessions of n1's (behind the forwarder): more are created until it owns one
        // (rendezvous placement gives it about a third).
        let mut cut = Vec::new();
        for _ in 0..10 {
            let owned = foya_tests::fault_cluster::owners(&store, &load).await;
            cut = load
                .sessions
                .iter()
                .filter(|s| owned.get(s).is_some_and(|n| n == "n1"))
                .copied()
                .collect();
            if !cut.is_empty() {
                break;
            }
            load.add(&cluster, 3).await;
        }
        if cut.is_empty() {
            cluster
                .fail(&format!(
                    "partition run {run}: n1 (behind the forwarder) owns no session's shard"
                ))
                .await;
        }
        let parted = Instant::now();
        forwarder.partition();
        let probed = probe_until_accepted(&cluster, &load, &cut, parted, FAILOVER_BOUND).await;
        forwarder.heal();
        if let Err(e) = probed {
            cluster.fail(&format!("partition run {run}: {e}")).await;
        }
        settle_and_check(&format!("partition run {run}"), &store, cluster, load).await;
    }
}

/// A fourth node joins while the sessions run: it takes a share of them (graceful
/// handoff), and nothing breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_under_load() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    for run in 0..RUNS {
        let store = foya_storage_pg::testkit::fresh_url().await;
        let (mut cluster, load) = loaded(&store, &[None, None, None]).await;
        let joined = Instant::now();
        let index = cluster.start_node(None).await;
        let name = cluster.nodes[index].name.clone();
        let mut share = 0;
        while joined.elapsed() < FAILOVER_BOUND {
            share = foya_tests::fault_cluster::shards_held(&store)
                .await
                .get(&name)
                .copied()
                .unwrap_or(0);
            if share > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if share == 0 {
            cluster
                .fail(&format!(
                    "join run {run}: {name} took no shard within {FAILOVER_BOUND:?}"
                ))
                .await;
        }
        println!(
            "join run {run}: {name} holds {share} shards after {:?}",
            joined.elapsed()
        );
        // Inputs after the move reach every session.
        let probed = probe_until_accepted(
            &cluster,
            &load,
            &load.sessions,
            Instant::now(),
            FAILOVER_BOUND,
        )
        .await;
        if let Err(e) = probed {
            cluster.fail(&format!("join run {run}: {e}")).await;
        }
        settle_and_check(&format!("join run {run}"), &store, cluster, load).await;
    }
}

/// A fourth node joins while sessions are inside a long tool call whose side effect comes
/// last, longer than the nodes' handoff drain (`--handoff-drain 1`): the sessions
/// placement gives the new node are handed off mid-call (once the drain passed, the old
/// owner cancels the call before its side effect and closes the turn once, under its
/// fence, naming the handoff) and take their next input on the new node; the checker finds nothing (no call
/// run twice or paired twice, and a cancelled call owes no side effect). The node's start
/// to its listening line includes its settling (the handoff); printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_while_calls_run() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    let store = foya_storage_pg::testkit::fresh_url().await;
    let workload = Workload {
        steps_per_turn: 2,
        tool_sleep_ms: 6000,
        effect_last: true,
        handoff_drain_ms: Some(1000),
        ..Workload::default()
    };
    let mut cluster = Cluster::start(&store, 3, 4, workload).await;
    let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    if let Err(e) = wait_placed(&store, &names, FAILOVER_BOUND).await {
        cluster.fail(&e).await;
    }
    // Sessions until two of them are in shards placement gives n4 once it joins.
    let log = foya_storage_pg::PgLog::open(&store, foya_storage_pg::PgOptions::default())
        .await
        .unwrap();
    let after_join = ["n1", "n2", "n3", "n4"];
    let mut load = Load::create(&cluster, 3).await;
    let mut moving = Vec::new();
    for _ in 0..30 {
        moving.clear();
        for id in &load.sessions {
            let shard = log.session_shard(*id).await.unwrap().unwrap();
            if foya_storage_pg::shard::owner(shard, &after_join) == Some("n4") {
                moving.push(*id);
            }
        }
        if moving.len() >= 2 {
            break;
        }
        load.add(&cluster, 3).await;
    }
    assert!(moving.len() >= 2, "no session in n4's future shards");
    load.submit_all(&cluster, "work through your steps").await;
    // Every moving session inside its call (tool_started, no result yet).
    let deadline = Instant::now() + FAILOVER_BOUND;
    loop {
        let mut inside = 0;
        for id in &moving {
            let events = log.read_from(*id, Seq::FIRST).await.unwrap();
            let started = events
                .iter()
                .any(|e| matches!(e.kind, EventKind::ToolStarted { .. }));
            let answered = events
                .iter()
                .any(|e| matches!(e.kind, EventKind::ToolMessage(_)));
            inside += usize::from(started && !answered);
        }
        if inside == moving.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sessions never ran their calls"
        );
        // Polling the store: the log is the witness every node shares.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.snapshot(&store).await;
    let joined = Instant::now();
    cluster.start_node(None).await;
    println!(
        "join while calls run: n4 listening (its shards handed over) after {:?}",
        joined.elapsed()
    );
    // n4 announced itself once it held its shards: the moving sessions are its.
    let owned = foya_tests::fault_cluster::owners(&store, &load).await;
    for id in &moving {
        assert_eq!(owned.get(id).map(String::as_str), Some("n4"), "{id}");
    }
    let probed = probe_until_accepted(
        &cluster,
        &load,
        &load.sessions,
        Instant::now(),
        FAILOVER_BOUND,
    )
    .await;
    log.close().await;
    if let Err(e) = probed {
        cluster.fail(&format!("join while calls run: {e}")).await;
    }
    let rest = wait_at_rest(&store, &load, REST_BOUND).await;
    load.stop();
    let verdict = check_store(&store, &cluster, &load).await;
    println!(
        "join while calls run: {} events, {} tool runs, {} turns cancelled, {} broken",
        verdict.events,
        verdict.tool_runs,
        verdict.cancelled,
        verdict.broken.len()
    );
    cluster.shutdown().await;
    rest.unwrap();
    assert!(verdict.broken.is_empty(), "{:#?}", verdict.broken);
    // The moving sessions' first turns were cancelled by the handoff, mid-call, once
    // the drain passed, their cancel naming the handoff.
    assert!(
        verdict.cancelled >= moving.len(),
        "{} turns cancelled",
        verdict.cancelled
    );
    let log = foya_storage_pg::PgLog::open(&store, foya_storage_pg::PgOptions::default())
        .await
        .unwrap();
    for id in &moving {
        let reasons: Vec<String> = log
            .read_from(*id, Seq::FIRST)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::TurnCancelled { reason } => Some(reason),
                _ => None,
            })
            .collect();
        assert_eq!(reasons, ["shard handed off to another node"], "{id}");
    }
    log.close().await;
}

/// PostgreSQL restarts (fast: every connection cut) while the sessions run: the nodes
/// reconnect, every session accepts input again, and nothing breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_under_load() {
    let _one = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    let server = foya_storage_pg::testkit::OwnServer::start().await;
    for run in 0..RUNS {
        // A schema of the run's own on the test's server.
        let store = own_schema(&server.url(), run).await;
        let (cluster, load) = loaded(&store, &[None, None, None]).await;
        let restarted = Instant::now();
        server.restart().await;
        let probed =
            probe_until_accepted(&cluster, &load, &load.sessions, restarted, FAILOVER_BOUND).await;
        if let Err(e) = probed {
            cluster
                .fail(&format!("PostgreSQL restart run {run}: {e}"))
                .await;
        }
        settle_and_check(
            &format!("PostgreSQL restart run {run}"),
            &store,
            cluster,
            load,
        )
        .await;
    }
}

/// A URL of `base` whose connections use schema `foya_fault_<run>`, created empty.
async fn own_schema(base: &str, run: usize) -> String {
    let schema = format!("foya_fault_{run}");
    let (client, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    drop(client);
    let _ = driver.await;
    format!("{base}?options=-c%20search_path%3D{schema}")
}

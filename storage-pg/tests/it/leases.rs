//! Shards, node leases, epochs and fencing against a real PostgreSQL (issue 42's storage
//! layer): racing claims, a paused old owner fenced on every write path, lease expiry on
//! the database's clock, the keeper's self-fence when PostgreSQL stops answering (a
//! test-owned TCP forwarder) and across a PostgreSQL restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_protocol::command::ParentRef;
use foya_protocol::{
    Event, EventKind, Input, InputId, RunId, Seq, SessionConfig, SessionId, TitleSource, ToolCallId,
};
use foya_storage::{AppendError, EventLog, Fence, Page};
use foya_storage_pg::{
    ClaimError, LeaseError, LeaseKeeper, LeaseOptions, LeaseStatus, NodeLease, PgLog, PgOptions,
    testkit,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// One global bound for every wait of a test.
const WAIT: Duration = Duration::from_secs(60);

fn event(session: SessionId, seq: u64, kind: EventKind) -> Event {
    Event {
        session_id: session,
        seq: Seq(seq),
        run_id: None,
        at_ms: 1_000 + seq,
        kind,
    }
}

fn created(session: SessionId) -> Event {
    let mut config = SessionConfig::new("/w");
    config.title = Some("first".into());
    event(session, 1, EventKind::SessionCreated { config })
}

fn child_created(session: SessionId, parent: SessionId) -> Event {
    let mut config = SessionConfig::new("/w");
    config.parent = Some(ParentRef {
        session_id: parent,
        run_id: RunId::new(),
        tool_call_id: ToolCallId::new("call-1"),
    });
    event(session, 1, EventKind::SessionCreated { config })
}

fn step(session: SessionId, seq: u64) -> Event {
    event(session, seq, EventKind::StepStarted { step: 1 })
}

/// A new session id whose (root) shard is `shard`.
fn session_in(log: &PgLog, shard: u32) -> SessionId {
    loop {
        let id = SessionId::new();
        if log.shards().of(id) == shard {
            return id;
        }
    }
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Whether `node`'s lease has expired on the database's clock.
async fn expired(db: &tokio_postgres::Client, node: &str) -> bool {
    db.query_one(
        "SELECT expires_at <= clock_timestamp() FROM foya_nodes WHERE node = $1",
        &[&node],
    )
    .await
    .unwrap()
    .get(0)
}

/// Waits (one global bound) until `node`'s lease has expired on the database's clock.
async fn until_expired(db: &tokio_postgres::Client, node: &str) {
    tokio::time::timeout(WAIT, async {
        while !expired(db, node).await {
            // Asking the database's clock again: it gives no other signal.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the lease never expired on the database's clock");
}

fn fenced(result: &Result<(), AppendError>, shard: u32) -> bool {
    matches!(result, Err(AppendError::Fenced { shard: s, .. }) if *s == shard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_count_is_fixed_when_the_store_is_created() {
    let url = testkit::fresh_url().await;
    let options = PgOptions {
        shards: 16,
        ..PgOptions::default()
    };
    let log = PgLog::open(&url, options).await.unwrap();
    assert_eq!(log.shards().count(), 16);
    let db = client(&url).await;
    let rows: i64 = db
        .query_one("SELECT count(*) FROM foya_shards", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 16);
    // Opening it again asking for another count keeps the store's.
    let again = PgLog::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(again.shards().count(), 16);
    // A session lands in its hash shard, a sub-agent's child in its parent's.
    let parent = SessionId::new();
    log.append(&[created(parent)], Fence::None).await.unwrap();
    let parent_shard = log.shards().of(parent);
    assert_eq!(log.session_shard(parent).await.unwrap(), Some(parent_shard));
    let child = loop {
        let id = SessionId::new();
        if log.shards().of(id) != parent_shard {
            break id;
        }
    };
    log.append(&[child_created(child, parent)], Fence::None)
        .await
        .unwrap();
    assert_eq!(log.session_shard(child).await.unwrap(), Some(parent_shard));
    assert_eq!(log.shards().of_child(parent_shard), parent_shard);
    // A grandchild too.
    let grandchild = SessionId::new();
    log.append(&[child_created(grandchild, child)], Fence::None)
        .await
        .unwrap();
    assert_eq!(
        log.session_shard(grandchild).await.unwrap(),
        Some(parent_shard)
    );
    assert!(
        PgLog::open(
            &testkit::fresh_url().await,
            PgOptions {
                shards: 0,
                ..PgOptions::default()
            }
        )
        .await
        .is_err()
    );
    again.close().await;
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_store_is_migrated_and_keeps_its_sessions() {
    let url = testkit::fresh_url().await;
    let db = client(&url).await;
    // A store as version 1 left it, with a session of two events.
    db.batch_execute(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/schema_v1.sql"
    )))
    .await
    .unwrap();
    db.batch_execute(
        "CREATE TABLE foya_schema (version integer PRIMARY KEY, \
         applied_at timestamptz NOT NULL DEFAULT now()); \
         INSERT INTO foya_schema (version) VALUES (1)",
    )
    .await
    .unwrap();
    let session = SessionId::new();
    let body = |e: &Event| foya_storage::codec::encode_event(e).unwrap();
    let shard = i32::try_from(foya_storage_pg::shard_of(session)).unwrap();
    let id = uuid::Uuid::from_bytes(*session.as_bytes());
    db.execute(
        "INSERT INTO foya_sessions (session, shard, cwd, model, title, created_at_ms, \
         updated_at_ms, last_seq) VALUES ($1, $2, '/w', '', 'first', 1001, 1002, 2)",
        &[&id, &shard],
    )
    .await
    .unwrap();
    for e in [created(session), step(session, 2)] {
        db.execute(
            "INSERT INTO foya_events (session, seq, epoch, at_ms, body) VALUES ($1, $2, 0, $3, $4)",
            &[
                &id,
                &i64::try_from(e.seq.0).unwrap(),
                &i64::try_from(e.at_ms).unwrap(),
                &body(&e),
            ],
        )
        .await
        .unwrap();
    }
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(
        log.schema_version().await.unwrap(),
        foya_storage_pg::SCHEMA_VERSION
    );
    assert_eq!(log.shards().count(), 256);
    assert_eq!(log.read_from(session, Seq::FIRST).await.unwrap().len(), 2);
    log.append(&[step(session, 3)], Fence::None).await.unwrap();
    let lease = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    let fence = lease.claim(shard.unsigned_abs()).await.unwrap();
    log.append(&[step(session, 4)], fence).await.unwrap();
    assert_eq!(
        log.event_epochs(session).await.unwrap(),
        vec![(Seq(1), 0), (Seq(2), 0), (Seq(3), 0), (Seq(4), 1)]
    );
    assert_eq!(log.epoch_regressions(10).await.unwrap(), vec![]);
    // The check finds an event written under a lower epoch than its predecessor (here
    // forged past the store's rules, straight into the table).
    db.execute(
        "INSERT INTO foya_events (session, seq, epoch, at_ms, body) VALUES ($1, 5, 0, 0, '')",
        &[&id],
    )
    .await
    .unwrap();
    assert_eq!(
        log.epoch_regressions(10).await.unwrap(),
        vec![foya_storage_pg::EpochRegression {
            session,
            seq: Seq(5),
            epoch: 0,
            previous: 1
        }]
    );
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_racing_for_one_shard_commit_under_one_epoch_at_a_time() {
    let url = testkit::fresh_url().await;
    // Two processes: each its own log (connections) and lease.
    let log_a = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let log_b = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let session = SessionId::new();
    let shard = log_a.shards().of(session);
    let a = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(2)))
        .await
        .unwrap();
    let b = NodeLease::register(&url, "b", LeaseOptions::new(Duration::from_secs(2)))
        .await
        .unwrap();
    // Both claim at once: exactly one gets the shard.
    let (claim_a, claim_b) = tokio::join!(a.claim(shard), b.claim(shard));
    let (winner, loser, fence, loser_log, winner_log) = match (claim_a, claim_b) {
        (Ok(fence), Err(ClaimError::Held { owner, .. })) => {
            assert_eq!(owner, "a");
            (&a, &b, fence, &log_b, &log_a)
        }
        (Err(ClaimError::Held { owner, .. }), Ok(fence)) => {
            assert_eq!(owner, "b");
            (&b, &a, fence, &log_a, &log_b)
        }
        other => panic!("exactly one claim must win: {other:?}"),
    };
    assert_eq!(fence, Fence::Epoch { shard, epoch: 1 });
    assert_eq!(winner.held().get(&shard), Some(&1));
    assert!(loser.held().is_empty());
    // Unfenced, the loser cannot write the owned shard either.
    let unfenced = loser_log.append(&[created(session)], Fence::None).await;
    assert!(fenced(&unfenced, shard), "{unfenced:?}");
    winner_log.append(&[created(session)], fence).await.unwrap();

    // Each writer appends as fast as it can, each append the next seq it reads; the
    // winner's lease is not renewed (a paused or dead owner), the loser renews its own
    // and claims the shard as soon as the database lets it.
    let writer = |log: PgLog, lease: NodeLease, wait_for_shard: bool| async move {
        let mut committed = 0u64;
        let mut fenced_after_commit = false;
        let deadline = Instant::now() + WAIT;
        let mut fence = lease.fence(shard);
        loop {
            assert!(Instant::now() < deadline, "the race did not end");
            if wait_for_shard {
                // The new owner stays live (its keeper, in a node).
                lease.renew().await.unwrap();
            }
            let current = match fence {
                Some(fence) => fence,
                None if wait_for_shard => match lease.claim(shard).await {
                    Ok(claimed) => {
                        fence = Some(claimed);
                        claimed
                    }
                    Err(ClaimError::Held { .. }) => continue,
                    Err(e) => panic!("{e}"),
                },
                None => return (committed, fenced_after_commit),
            };
            let next = log.last_seq(session).await.unwrap().unwrap().0 + 1;
            match log.append(&[step(session, next)], current).await {
                Ok(()) => committed += 1,
                Err(AppendError::SeqMismatch { .. }) => {}
                Err(AppendError::Fenced { shard: s, .. }) => {
                    assert_eq!(s, shard);
                    fenced_after_commit = committed > 0;
                    // Never retried: this writer lost the shard.
                    return (committed, fenced_after_commit);
                }
                Err(e) => panic!("{e}"),
            }
            if wait_for_shard && committed >= 20 {
                return (committed, fenced_after_commit);
            }
        }
    };
    let (old, new) = tokio::join!(
        writer(winner_log.clone(), winner.clone(), false),
        writer(loser_log.clone(), loser.clone(), true),
    );
    assert!(old.0 > 0, "the first owner committed nothing");
    assert!(old.1, "the first owner was not fenced");
    assert_eq!(new.0, 20);
    // The log: dense seqs, one epoch then the other, never back.
    let epochs = winner_log.event_epochs(session).await.unwrap();
    let seqs: Vec<u64> = epochs.iter().map(|(s, _)| s.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(seqs.len() as u64, 1 + old.0 + new.0);
    let mut distinct: Vec<u64> = epochs.iter().map(|(_, e)| *e).collect();
    assert!(distinct.windows(2).all(|w| w[0] <= w[1]), "{epochs:?}");
    distinct.dedup();
    assert_eq!(distinct, vec![1, 2]);
    assert_eq!(winner_log.epoch_regressions(10).await.unwrap(), vec![]);
    log_a.close().await;
    log_b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_old_owner_is_fenced_on_every_write_path() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let db = client(&url).await;
    let session = SessionId::new();
    let shard = log.shards().of(session);
    let a = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(1)))
        .await
        .unwrap();
    let old = a.claim(shard).await.unwrap();
    log.append(&[created(session)], old).await.unwrap();
    let queued = InputId::new();
    log.append(
        &[event(
            session,
            2,
            EventKind::InputQueued {
                input_id: queued,
                input: Input::text("hi"),
            },
        )],
        old,
    )
    .await
    .unwrap();
    let attachment = uuid::Uuid::now_v7();
    assert!(
        log.put_attachment_fenced(attachment, "image/png", b"a", old)
            .await
            .unwrap()
    );
    // "a" is paused past its lease (it renews nothing); "b" takes the shard.
    until_expired(&db, "a").await;
    let b = NodeLease::register(&url, "b", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    let new = b.claim(shard).await.unwrap();
    assert_eq!(new, Fence::Epoch { shard, epoch: 2 });
    let summary = log.session(session).await.unwrap().unwrap();

    // "a" wakes up and writes with the epoch it holds: every path is refused.
    let stale = |r: Result<(), AppendError>| {
        assert_eq!(
            r,
            Err(AppendError::Fenced {
                shard,
                epoch: Some(2)
            })
        );
    };
    stale(log.append(&[step(session, 3)], old).await);
    stale(
        log.append(
            &[event(
                session,
                3,
                EventKind::TurnStarted { input_id: queued },
            )],
            old,
        )
        .await,
    );
    stale(
        log.append(
            &[event(
                session,
                3,
                EventKind::InputQueued {
                    input_id: InputId::new(),
                    input: Input::text("more"),
                },
            )],
            old,
        )
        .await,
    );
    stale(
        log.append(
            &[event(
                session,
                3,
                EventKind::TitleSet {
                    title: "stale".into(),
                    source: TitleSource::User,
                },
            )],
            old,
        )
        .await,
    );
    stale(
        log.append(&[event(session, 3, EventKind::SessionDeleted {})], old)
            .await,
    );
    let new_session = session_in(&log, shard);
    stale(log.append(&[created(new_session)], old).await);
    stale(
        log.append(&[child_created(SessionId::new(), session)], old)
            .await,
    );
    assert!(
        !log.put_attachment_fenced(uuid::Uuid::now_v7(), "image/png", b"x", old)
            .await
            .unwrap()
    );
    // Nothing of it was written: log, summary, title, recovery index, sessions.
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(2)));
    assert_eq!(log.session(session).await.unwrap().unwrap(), summary);
    assert_eq!(log.pending_sessions().await.unwrap(), vec![session]);
    assert_eq!(log.list_sessions(Page::ALL).await.unwrap().len(), 1);
    assert_eq!(log.session(new_session).await.unwrap(), None);
    // An unfenced write of the owned shard is refused too.
    let unfenced = log.append(&[step(session, 3)], Fence::None).await;
    assert!(fenced(&unfenced, shard), "{unfenced:?}");
    // "a" cannot renew nor claim again: its lease expired on the database's clock.
    assert!(matches!(a.renew().await, Err(LeaseError::Lost { .. })));
    assert_eq!(a.claim(shard).await, Err(ClaimError::LeaseLost));
    assert!(a.status().borrow().is_lost());
    assert!(a.held().is_empty());
    // The new owner writes every path; the fence must name the session's shard.
    log.append(
        &[
            step(session, 3),
            event(
                session,
                4,
                EventKind::TitleSet {
                    title: "new".into(),
                    source: TitleSource::User,
                },
            ),
        ],
        new,
    )
    .await
    .unwrap();
    let elsewhere = session_in(&log, (shard + 1) % log.shards().count());
    assert_eq!(
        log.append(&[created(elsewhere)], new).await,
        Err(AppendError::WrongShard {
            shard: (shard + 1) % log.shards().count(),
            fence_shard: shard
        })
    );
    let child = SessionId::new();
    log.append(&[child_created(child, session)], new)
        .await
        .unwrap();
    assert_eq!(log.session_shard(child).await.unwrap(), Some(shard));
    let epochs: Vec<u64> = log
        .event_epochs(session)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(epochs, vec![1, 1, 2, 2]);
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_append_in_a_batch_does_not_fail_the_others() {
    let url = testkit::fresh_url().await;
    // One writer connection: concurrent appends share statements.
    let log = PgLog::open(
        &url,
        PgOptions {
            connections: 1,
            ..PgOptions::default()
        },
    )
    .await
    .unwrap();
    let a = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    let b = NodeLease::register(&url, "b", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    let lost_shard = 3;
    let stale = a.claim(lost_shard).await.unwrap();
    a.release(lost_shard).await.unwrap();
    b.claim(lost_shard).await.unwrap();
    let mut sessions = Vec::new();
    for i in 0..24u32 {
        let shard = if i % 4 == 0 { lost_shard } else { 10 + i };
        let session = session_in(&log, shard);
        let fence = if shard == lost_shard {
            b.fence(shard).unwrap()
        } else {
            a.claim(shard).await.unwrap()
        };
        log.append(&[created(session)], fence).await.unwrap();
        sessions.push((session, shard));
    }
    let commits_before = log.stats().commits;
    let appends = sessions.iter().map(|(session, shard)| {
        let log = log.clone();
        let fence = if *shard == lost_shard {
            stale
        } else {
            a.fence(*shard).unwrap()
        };
        let session = *session;
        async move { log.append(&[step(session, 2)], fence).await }
    });
    let results = futures_join(appends).await;
    for ((session, shard), result) in sessions.iter().zip(results) {
        if *shard == lost_shard {
            assert!(fenced(&result, lost_shard), "{result:?}");
            assert_eq!(log.last_seq(*session).await.unwrap(), Some(Seq(1)));
        } else {
            result.unwrap();
            assert_eq!(log.last_seq(*session).await.unwrap(), Some(Seq(2)));
        }
    }
    // Fewer statements than appends: they were batched.
    assert!(log.stats().commits - commits_before < 24);
    log.close().await;
}

/// Awaits every future concurrently on this task, in order.
async fn futures_join<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut pending: Vec<_> = futures.into_iter().map(Box::pin).map(Some).collect();
    let mut results: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *result = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_is_on_the_database_clock() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let db = client(&url).await;
    let before: std::time::SystemTime = db
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    let a = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(2)))
        .await
        .unwrap();
    let after: std::time::SystemTime = db
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    // The expiry is the database's time of the registration plus the TTL.
    let row = db
        .query_one(
            "SELECT renewed_at, expires_at FROM foya_nodes WHERE node = 'a'",
            &[],
        )
        .await
        .unwrap();
    let renewed: std::time::SystemTime = row.get(0);
    let expires: std::time::SystemTime = row.get(1);
    assert!(before <= renewed && renewed <= after);
    assert_eq!(
        expires.duration_since(renewed).unwrap(),
        Duration::from_secs(2)
    );
    // The name is taken while the lease lives.
    let taken = NodeLease::register(&url, "a", LeaseOptions::default()).await;
    assert!(
        matches!(&taken, Err(LeaseError::NameTaken { expires_in, .. }) if *expires_in <= Duration::from_secs(2)),
        "{taken:?}"
    );
    let shard = 5;
    let fence = a.claim(shard).await.unwrap();
    let b = NodeLease::register(&url, "b", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(matches!(
        b.claim(shard).await,
        Err(ClaimError::Held { ref owner, .. }) if owner == "a"
    ));
    // A renewal moves the expiry on the database's clock.
    a.renew().await.unwrap();
    let renewed_again: std::time::SystemTime = db
        .query_one("SELECT renewed_at FROM foya_nodes WHERE node = 'a'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(renewed_again >= after);
    // Once the database's clock passes the expiry, a's fence is refused even before
    // anyone claims the shard, a's renewal is refused, and b may claim.
    let session = session_in(&log, shard);
    until_expired(&db, "a").await;
    let refused = log.append(&[created(session)], fence).await;
    assert_eq!(
        refused,
        Err(AppendError::Fenced {
            shard,
            epoch: Some(1)
        })
    );
    assert!(matches!(a.renew().await, Err(LeaseError::Lost { .. })));
    assert_eq!(
        b.claim(shard).await.unwrap(),
        Fence::Epoch { shard, epoch: 2 }
    );
    // The name is free again: a new registration is a new lease (its old epochs stay
    // dead), and it claims with a new epoch.
    let a_again = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_ne!(a_again.id(), a.id());
    b.shutdown().await.unwrap();
    assert_eq!(
        a_again.claim(shard).await.unwrap(),
        Fence::Epoch { shard, epoch: 3 }
    );
    assert_eq!(
        log.append(&[created(session)], fence).await,
        Err(AppendError::Fenced {
            shard,
            epoch: Some(3)
        })
    );
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_releases_every_shard_at_once() {
    let url = testkit::fresh_url().await;
    let _log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let a = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(60)))
        .await
        .unwrap();
    let keeper = LeaseKeeper::spawn(a.clone());
    for shard in 0..8 {
        keeper.lease().claim(shard).await.unwrap();
    }
    assert_eq!(keeper.held().len(), 8);
    let b = NodeLease::register_at(
        &url,
        "b",
        Some("127.0.0.1:4371"),
        LeaseOptions::new(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let live = b.live_nodes().await.unwrap();
    let names: Vec<(&str, Option<&str>)> = live
        .iter()
        .map(|n| (n.node.as_str(), n.address.as_deref()))
        .collect();
    assert_eq!(names, vec![("a", None), ("b", Some("127.0.0.1:4371"))]);
    keeper.shutdown().await.unwrap();
    // a left the live set at once.
    let live = b.live_nodes().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].node, "b");
    assert_eq!(*a.status().borrow(), LeaseStatus::Released);
    assert!(a.held().is_empty());
    // Without waiting for a's TTL (60 s), b claims them all.
    for shard in 0..8 {
        assert_eq!(
            b.claim(shard).await.unwrap(),
            Fence::Epoch { shard, epoch: 2 }
        );
    }
    // And a's name is free.
    NodeLease::register(&url, "a", LeaseOptions::default())
        .await
        .unwrap();
}

/// A TCP forwarder owned by the test, between a client and PostgreSQL: it forwards
/// until [`Forwarder::stall`], then keeps every connection open and forwards nothing
/// (a partition: no reset, no answer).
struct Forwarder {
    addr: std::net::SocketAddr,
    stalled: Arc<AtomicBool>,
}

impl Forwarder {
    async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stalled = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stalled);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let flag = Arc::clone(&flag);
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (in_read, in_write) = inbound.into_split();
                    let (out_read, out_write) = outbound.into_split();
                    tokio::join!(
                        pump(in_read, out_write, Arc::clone(&flag)),
                        pump(out_read, in_write, flag),
                    );
                });
            }
        });
        Self { addr, stalled }
    }

    fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }
}

/// Copies bytes until the flag stalls it; then holds both ends open, silent.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.load(Ordering::SeqCst) {
            // Partitioned: swallow everything from now on, keep the sockets open.
            while !matches!(from.read(&mut buf).await, Ok(0) | Err(_)) {}
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `url` with its `host:port` replaced by `addr`.
fn via(url: &str, addr: std::net::SocketAddr) -> String {
    let at = url.find('@').unwrap() + 1;
    let slash = at + url[at..].find('/').unwrap();
    format!("{}{addr}{}", &url[..at], &url[slash..])
}

fn upstream(url: &str) -> std::net::SocketAddr {
    let at = url.find('@').unwrap() + 1;
    let slash = at + url[at..].find('/').unwrap();
    url[at..slash].parse().unwrap()
}

/// Waits until `status` satisfies `done` (one global bound); returns it.
async fn wait_status(
    status: &mut tokio::sync::watch::Receiver<LeaseStatus>,
    done: impl Fn(&LeaseStatus) -> bool,
) -> LeaseStatus {
    tokio::time::timeout(WAIT, status.wait_for(|s| done(s)))
        .await
        .expect("the keeper never reported")
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_reports_the_loss_before_the_ttl_when_postgres_stops_answering() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let db = client(&url).await;
    let forwarder = Forwarder::start(upstream(&url)).await;
    let ttl = Duration::from_secs(3);
    let options = LeaseOptions {
        ttl,
        renew_every: Duration::from_millis(500),
        margin: Duration::from_secs(1),
    };
    let lease = NodeLease::register(&via(&url, forwarder.addr), "a", options)
        .await
        .unwrap();
    let keeper = LeaseKeeper::spawn(lease.clone());
    let mut status = keeper.status();
    let shard = 2;
    let fence = lease.claim(shard).await.unwrap();
    // It renews: two confirmed renewals, each moving the database's expiry.
    wait_status(
        &mut status,
        |s| matches!(s, LeaseStatus::Live { renewals, .. } if *renewals >= 2),
    )
    .await;
    assert!(!expired(&db, "a").await);
    // The partition: the forwarder stops forwarding; the keeper must report before the
    // lease expires in the database.
    let cut = Instant::now();
    forwarder.stall();
    let lost = wait_status(&mut status, LeaseStatus::is_lost).await;
    let reported_after = cut.elapsed();
    let still_live_in_db = !expired(&db, "a").await;
    assert!(
        still_live_in_db,
        "the loss was reported after the database's expiry ({reported_after:?}): {lost:?}"
    );
    assert!(reported_after < ttl, "{reported_after:?}");
    assert!(keeper.held().is_empty());
    assert_eq!(lease.fence(shard), None);
    assert_eq!(lease.claim(shard).await, Err(ClaimError::LeaseLost));
    // The store refuses the lost lease's fence from its expiry on.
    until_expired(&db, "a").await;
    let session = session_in(&log, shard);
    assert!(fenced(&log.append(&[created(session)], fence).await, shard));
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_reports_the_loss_when_the_database_refuses_the_renewal() {
    let url = testkit::fresh_url().await;
    let _log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let db = client(&url).await;
    let lease = NodeLease::register(&url, "a", LeaseOptions::new(Duration::from_secs(3)))
        .await
        .unwrap();
    let keeper = LeaseKeeper::spawn(lease.clone());
    lease.claim(1).await.unwrap();
    // The lease ends in the database (as if this process had been paused past it).
    db.execute(
        "UPDATE foya_nodes SET expires_at = clock_timestamp() WHERE node = 'a'",
        &[],
    )
    .await
    .unwrap();
    let reason = tokio::time::timeout(WAIT, keeper.lost()).await.unwrap();
    assert!(reason.contains("refused"), "{reason}");
    assert!(keeper.held().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_a_postgres_restart_the_keeper_renews_or_reports_the_loss() {
    let server = testkit::OwnServer::start().await;
    let url = server.url();
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let shard = 4;
    let session = session_in(&log, shard);

    // A short restart: the keeper reconnects and renews; the writer reconnects; the
    // fence still holds.
    let options = LeaseOptions {
        ttl: Duration::from_secs(20),
        renew_every: Duration::from_millis(500),
        margin: Duration::from_secs(4),
    };
    let lease = NodeLease::register(&url, "a", options).await.unwrap();
    let keeper = LeaseKeeper::spawn(lease.clone());
    let fence = lease.claim(shard).await.unwrap();
    log.append(&[created(session)], fence).await.unwrap();
    let mut status = keeper.status();
    let before = match &*status.borrow() {
        LeaseStatus::Live { renewals, .. } => *renewals,
        other => panic!("{other:?}"),
    };
    server.restart().await;
    wait_status(
        &mut status,
        |s| matches!(s, LeaseStatus::Live { renewals, .. } if *renewals >= before + 2),
    )
    .await;
    // The first batch after the restart may fail on its old connection (never written);
    // then the writer's fresh connection commits.
    let mut seq = 2;
    let deadline = Instant::now() + WAIT;
    loop {
        match log.append(&[step(session, seq)], fence).await {
            Ok(()) => break,
            Err(AppendError::Storage(_)) if Instant::now() < deadline => {}
            Err(e) => panic!("{e}"),
        }
    }
    seq += 1;
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(seq - 1)));

    // A long outage: stopped past the TTL. The keeper reports the loss; when the server
    // is back, the lease is not renewed and its fence is refused.
    let short = NodeLease::register(&url, "b", LeaseOptions::new(Duration::from_secs(2)))
        .await
        .unwrap();
    let short_keeper = LeaseKeeper::spawn(short.clone());
    let other_shard = 6;
    let other = session_in(&log, other_shard);
    let short_fence = short.claim(other_shard).await.unwrap();
    log.append(&[created(other)], short_fence).await.unwrap();
    server.stop().await;
    tokio::time::timeout(WAIT, short_keeper.lost())
        .await
        .unwrap();
    server.start_again().await;
    // Nothing renews it any more: it expires on the database's clock (which ran on
    // while the server was down).
    until_expired(&client(&url).await, "b").await;
    assert!(matches!(short.renew().await, Err(LeaseError::Lost { .. })));
    let deadline = Instant::now() + WAIT;
    loop {
        match log.append(&[step(other, 2)], short_fence).await {
            Err(AppendError::Fenced { shard, .. }) => {
                assert_eq!(shard, other_shard);
                break;
            }
            Err(AppendError::Storage(_)) if Instant::now() < deadline => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(log.last_seq(other).await.unwrap(), Some(Seq(1)));
    log.close().await;
}

/// The storage seam's fencing checks (`foya_storage::conformance`) on PostgreSQL: this
/// node ("a") claims shards; another node ("b") takes one over after a releases it.
mod fencing_conformance {
    use foya_protocol::SessionId;
    use foya_storage::Fence;
    use foya_storage::conformance::ShardControl;
    use foya_storage_pg::{LeaseOptions, NodeLease, PgLog, PgOptions, Shards, testkit};
    use std::time::Duration;

    struct TwoNodes {
        shards: Shards,
        a: NodeLease,
        b: NodeLease,
    }

    impl ShardControl for TwoNodes {
        async fn own(&self, session: SessionId) -> Fence {
            self.a.claim(self.shards.of(session)).await.unwrap()
        }
        async fn take_over(&self, fence: Fence) -> bool {
            let Fence::Epoch { shard, .. } = fence else {
                return false;
            };
            assert!(self.a.release(shard).await.unwrap());
            self.b.claim(shard).await.unwrap();
            true
        }
    }

    async fn fresh_owned() -> (PgLog, TwoNodes) {
        let url = testkit::fresh_url().await;
        let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
        let options = LeaseOptions::new(Duration::from_secs(60));
        let a = NodeLease::register(&url, "a", options).await.unwrap();
        let b = NodeLease::register(&url, "b", options).await.unwrap();
        let shards = log.shards();
        (log, TwoNodes { shards, a, b })
    }

    foya_storage::fencing_conformance_tests!(fresh_owned);
}

/// A process paused past its lease (SIGSTOP, a long GC pause, a VM migration): the
/// keeper's runtime is blocked — its timers, its connections' drivers — while the lease
/// expires on the database's clock. On resume the keeper reports the loss before any
/// renewal, and the database did not renew the lease.
#[test]
fn a_keeper_paused_past_its_lease_reports_the_loss_on_resume_without_renewing() {
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = main.block_on(testkit::fresh_url());
    let _log = main
        .block_on(PgLog::open(&url, PgOptions::default()))
        .unwrap();
    let db = main.block_on(client(&url));
    let (paused_tx, paused_rx) = std::sync::mpsc::channel::<u64>();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
    let node_url = url.clone();
    // The "process": one thread, one runtime, the lease and its keeper.
    let process = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let options = LeaseOptions {
                ttl: Duration::from_secs(2),
                renew_every: Duration::from_millis(300),
                margin: Duration::from_millis(500),
            };
            let lease = NodeLease::register(&node_url, "a", options).await.unwrap();
            let keeper = LeaseKeeper::spawn(lease.clone());
            lease.claim(0).await.unwrap();
            let mut status = keeper.status();
            let renewed = wait_status(
                &mut status,
                |s| matches!(s, LeaseStatus::Live { renewals, .. } if *renewals >= 1),
            )
            .await;
            let LeaseStatus::Live { renewals, .. } = renewed else {
                unreachable!()
            };
            // Paused: this thread blocks, so nothing of the runtime runs.
            paused_tx.send(renewals).unwrap();
            resume_rx.recv().unwrap();
            let reason = tokio::time::timeout(WAIT, keeper.lost()).await.unwrap();
            let LeaseStatus::Lost { .. } = &*status.borrow() else {
                unreachable!()
            };
            (reason, keeper.held().len())
        })
    });
    paused_rx.recv().unwrap();
    main.block_on(until_expired(&db, "a"));
    resume_tx.send(()).unwrap();
    let (reason, held) = process.join().unwrap();
    assert!(reason.contains("no renewal confirmed"), "{reason}");
    assert_eq!(held, 0);
    // The lease was not renewed after its expiry, and the shard is free for another.
    assert!(main.block_on(expired(&db, "a")));
    let b = main
        .block_on(NodeLease::register(
            &url,
            "b",
            LeaseOptions::new(Duration::from_secs(60)),
        ))
        .unwrap();
    assert_eq!(
        main.block_on(b.claim(0)).unwrap(),
        Fence::Epoch { shard: 0, epoch: 2 }
    );
}

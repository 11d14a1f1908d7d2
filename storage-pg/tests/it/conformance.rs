//! The storage seam's conformance suite (`foya_storage::conformance`) on PostgreSQL,
//! each test in a schema of its own, and what only a shared engine does: fenced appends,
//! attachments, the schema version, several processes' logs on one database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_protocol::{Event, EventKind, Seq, SessionConfig, SessionId};
use foya_storage::{AppendError, EventLog, Fence, Page};
use foya_storage_pg::{LeaseOptions, NodeLease, PgLog, PgOptions, SCHEMA_VERSION, testkit};

async fn fresh() -> PgLog {
    PgLog::open(&testkit::fresh_url().await, PgOptions::default())
        .await
        .unwrap()
}

foya_storage::conformance_tests!(fresh);

fn created(session: SessionId) -> Event {
    Event {
        session_id: session,
        seq: Seq::FIRST,
        run_id: None,
        at_ms: 1,
        kind: EventKind::SessionCreated {
            config: SessionConfig::new("/w"),
        },
    }
}

fn step(session: SessionId, seq: u64) -> Event {
    Event {
        session_id: session,
        seq: Seq(seq),
        run_id: None,
        at_ms: 1 + seq,
        kind: EventKind::StepStarted { step: 1 },
    }
}

async fn sql(url: &str, statement: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    client.batch_execute(statement).await.unwrap();
    drop(client);
    let _ = driver.await;
}

#[tokio::test]
async fn a_stale_fence_is_refused_and_writes_nothing() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let session = SessionId::new();
    log.append(&[created(session)], Fence::None).await.unwrap();
    let shard = log.shards().of(session);
    let a = NodeLease::register(&url, "a", LeaseOptions::default())
        .await
        .unwrap();
    let fence = a.claim(shard).await.unwrap();
    assert_eq!(fence, Fence::Epoch { shard, epoch: 1 });
    log.append(&[step(session, 2)], fence).await.unwrap();
    // Another node claims the shard (a released it).
    assert!(a.release(shard).await.unwrap());
    let b = NodeLease::register(&url, "b", LeaseOptions::default())
        .await
        .unwrap();
    let newer = b.claim(shard).await.unwrap();
    let stale = log.append(&[step(session, 3)], fence).await;
    assert_eq!(
        stale,
        Err(AppendError::Fenced {
            shard,
            epoch: Some(2)
        })
    );
    assert!(!stale.unwrap_err().is_retryable());
    // A shard the store does not have fences too.
    let unknown = log
        .append(
            &[step(session, 3)],
            Fence::Epoch {
                shard: 9999,
                epoch: 0,
            },
        )
        .await;
    assert_eq!(
        unknown,
        Err(AppendError::Fenced {
            shard: 9999,
            epoch: None
        })
    );
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(2)));
    log.append(&[step(session, 3)], newer).await.unwrap();
    log.close().await;
}

#[tokio::test]
async fn the_database_enforces_dense_seqs_and_records_the_schema_version() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(log.schema_version().await.unwrap(), SCHEMA_VERSION);
    let session = SessionId::new();
    log.append(&[created(session)], Fence::None).await.unwrap();
    // A second writer (another process) sees the same rules: its gap is refused.
    let other = PgLog::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(
        other.append(&[step(session, 3)], Fence::None).await,
        Err(AppendError::SeqMismatch {
            expected: Seq(2),
            got: Seq(3)
        })
    );
    other
        .append(&[step(session, 2)], Fence::None)
        .await
        .unwrap();
    assert_eq!(
        log.append(&[step(session, 2)], Fence::None).await,
        Err(AppendError::SeqMismatch {
            expected: Seq(3),
            got: Seq(2)
        })
    );
    // A direct duplicate insert is refused by the primary key.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let id = uuid::Uuid::from_bytes(*session.as_bytes());
    let duplicate = client
        .execute(
            "INSERT INTO foya_events (session, seq, epoch, at_ms, body) VALUES ($1, 2, 0, 0, '')",
            &[&id],
        )
        .await;
    assert!(duplicate.is_err());
    drop(client);
    let _ = driver.await;
    // Both see both sessions' listing.
    let listed = log.list_sessions(Page::ALL).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_seq, Seq(2));
    other.close().await;
    log.close().await;
}

#[tokio::test]
async fn attachments_are_stored_in_the_database() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let id = uuid::Uuid::now_v7();
    log.put_attachment(id, "image/png", b"\x89PNG bytes")
        .await
        .unwrap();
    // Another node reads it.
    let other = PgLog::open(&url, PgOptions::default()).await.unwrap();
    assert_eq!(
        other.attachment(id).await.unwrap(),
        Some(("image/png".to_owned(), b"\x89PNG bytes".to_vec()))
    );
    assert_eq!(other.attachment(uuid::Uuid::now_v7()).await.unwrap(), None);
    log.close().await;
    other.close().await;
}

/// The seam's attachment store (what the runtime uses): blocking calls answered by the
/// log's own thread, from inside a single-threaded runtime too (the caller's runtime is
/// not needed to make progress).
#[tokio::test(flavor = "current_thread")]
async fn the_seams_attachment_store_blocks_without_needing_the_callers_runtime() {
    let url = testkit::fresh_url().await;
    let log = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let other = PgLog::open(&url, PgOptions::default()).await.unwrap();
    let (mine, theirs) = (log.attachments().unwrap(), other.attachments().unwrap());
    let id = *uuid::Uuid::now_v7().as_bytes();
    mine.put(id, "image/gif", b"GIF89a").unwrap();
    assert_eq!(
        theirs.get(id).unwrap(),
        Some(("image/gif".to_owned(), b"GIF89a".to_vec()))
    );
    assert_eq!(theirs.get(*uuid::Uuid::now_v7().as_bytes()).unwrap(), None);
    // Also through the LogStore the runtime holds.
    let store = foya_storage::LogStore::shared(other.clone());
    assert!(store.attachments().unwrap().get(id).unwrap().is_some());
    log.close().await;
    other.close().await;
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let url = testkit::fresh_url().await;
    PgLog::open(&url, PgOptions::default())
        .await
        .unwrap()
        .close()
        .await;
    sql(&url, "INSERT INTO foya_schema (version) VALUES (99)").await;
    let refused = PgLog::open(&url, PgOptions::default()).await.unwrap_err();
    assert!(
        refused.to_string().contains("version 99, newer"),
        "{refused}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgresql://postgres:secret@127.0.0.1:{port}/postgres");
    let error = PgLog::open(&url, PgOptions::default()).await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("cannot connect to PostgreSQL at"),
        "{message}"
    );
    assert!(!message.contains("secret"), "{message}");
}

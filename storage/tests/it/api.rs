//! The public `Store` API: appends and reads, refusals, summaries, close, reopen and
//! group commit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{config, created, event, log, step};
use foya_protocol::{EventKind, Seq, SessionId, SessionSummary, TitleSource};
use foya_storage::{AppendError, Durability, OpenError, Store, StoreOptions, StoreStats};

fn memory() -> Store {
    Store::open_in_memory(StoreOptions::default()).unwrap()
}

fn summary(id: SessionId, title: &str, last_seq: u64, updated_at_ms: u64) -> SessionSummary {
    SessionSummary {
        id,
        title: Some(title.into()),
        cwd: config(None).cwd,
        model: "gpt-test".into(),
        created_at_ms: 1001,
        updated_at_ms,
        last_seq: Seq(last_seq),
        deleted: false,
        node: None,
    }
}

#[tokio::test]
async fn appended_events_read_back_in_order() {
    let store = memory();
    let (a, b) = (SessionId::new(), SessionId::new());
    store.append(log(a, 1, 1)).await.unwrap();
    store.append(log(a, 2, 3)).await.unwrap();
    store.append(log(a, 4, 5)).await.unwrap();
    store.append(log(b, 1, 1)).await.unwrap();
    store.append(vec![]).await.unwrap();

    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 5));
    assert_eq!(store.read_from(a, Seq(0)).unwrap(), log(a, 1, 5));
    assert_eq!(store.read_from(a, Seq(4)).unwrap(), log(a, 4, 5));
    assert_eq!(store.read_from(a, Seq(6)).unwrap(), vec![]);
    assert_eq!(store.read_from(SessionId::new(), Seq(1)).unwrap(), vec![]);
    assert_eq!(store.read_range(a, Seq(2), 2).unwrap(), log(a, 2, 3));
    assert_eq!(store.read_range(a, Seq(4), 10).unwrap(), log(a, 4, 5));
    assert_eq!(store.read_range(a, Seq(1), 0).unwrap(), vec![]);
    assert_eq!(store.read_from(b, Seq(1)).unwrap(), log(b, 1, 1));
    assert_eq!(store.last_seq(a).unwrap(), Some(Seq(5)));
    assert_eq!(store.last_seq(b).unwrap(), Some(Seq(1)));
    assert_eq!(store.last_seq(SessionId::new()).unwrap(), None);

    assert_eq!(
        store.session(a).unwrap(),
        Some(summary(a, "first title", 5, 1005))
    );
    assert_eq!(store.session(SessionId::new()).unwrap(), None);
    assert_eq!(
        store.list_sessions().unwrap(),
        vec![
            summary(a, "first title", 5, 1005),
            summary(b, "first title", 1, 1001)
        ]
    );

    // A later title change moves b to the front.
    let title = EventKind::TitleSet {
        title: "Renamed".into(),
        source: TitleSource::User,
    };
    let mut renamed = event(b, 2, title);
    renamed.at_ms = 5000;
    store.append(vec![renamed]).await.unwrap();
    assert_eq!(
        store.list_sessions().unwrap(),
        vec![
            summary(b, "Renamed", 2, 5000),
            summary(a, "first title", 5, 1005)
        ]
    );
    assert_eq!(
        store.stats(),
        StoreStats {
            appended_events: 7,
            commits: 5
        }
    );
}

#[tokio::test]
async fn appends_that_do_not_continue_the_log_are_refused() {
    let store = memory();
    let (a, other) = (SessionId::new(), SessionId::new());
    store.append(log(a, 1, 2)).await.unwrap();

    let gap = store.append(vec![step(a, 4)]).await;
    assert_eq!(
        gap,
        Err(AppendError::SeqMismatch {
            expected: Seq(3),
            got: Seq(4)
        })
    );
    let duplicate = store.append(vec![step(a, 2)]).await;
    assert_eq!(
        duplicate,
        Err(AppendError::SeqMismatch {
            expected: Seq(3),
            got: Seq(2)
        })
    );
    let not_dense = store.append(vec![step(a, 3), step(a, 5)]).await;
    assert_eq!(
        not_dense,
        Err(AppendError::SeqMismatch {
            expected: Seq(4),
            got: Seq(5)
        })
    );
    let mixed = store.append(vec![step(a, 3), step(other, 4)]).await;
    assert_eq!(
        mixed,
        Err(AppendError::MixedSessions {
            expected: a,
            got: other
        })
    );

    assert_eq!(
        store.append(vec![step(other, 1)]).await,
        Err(AppendError::UnknownSession)
    );
    let mut late_created = created(other);
    late_created.seq = Seq(2);
    assert_eq!(
        store.append(vec![late_created]).await,
        Err(AppendError::SeqMismatch {
            expected: Seq(1),
            got: Seq(2)
        })
    );

    // Nothing of the refused appends was written.
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 2));
    assert_eq!(store.session(other).unwrap(), None);
    store.append(vec![step(a, 3)]).await.unwrap();
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 3));
    // Batches with only refused appends commit nothing (no fsync).
    assert_eq!(
        store.stats(),
        StoreStats {
            appended_events: 3,
            commits: 2
        }
    );
}

#[tokio::test]
async fn nothing_is_appended_after_session_deleted() {
    let store = memory();
    let (a, b) = (SessionId::new(), SessionId::new());
    store.append(log(a, 1, 2)).await.unwrap();
    store
        .append(vec![event(a, 3, EventKind::SessionDeleted {})])
        .await
        .unwrap();
    assert_eq!(
        store.append(vec![step(a, 4)]).await,
        Err(AppendError::SessionDeleted)
    );
    assert_eq!(store.last_seq(a).unwrap(), Some(Seq(3)));
    assert_eq!(
        store.session(a).unwrap(),
        Some(SessionSummary {
            deleted: true,
            ..summary(a, "first title", 3, 1003)
        })
    );

    // Events after session_deleted within one append are refused as a whole.
    store.append(log(b, 1, 1)).await.unwrap();
    let after = store
        .append(vec![event(b, 2, EventKind::SessionDeleted {}), step(b, 3)])
        .await;
    assert_eq!(after, Err(AppendError::SessionDeleted));
    assert_eq!(store.read_from(b, Seq(1)).unwrap(), log(b, 1, 1));
}

#[tokio::test]
async fn close_drains_queued_appends_then_refuses_new_ones() {
    let store = memory();
    let s: Vec<SessionId> = (0..4).map(|_| SessionId::new()).collect();
    // join! polls in order: the four appends are queued before close starts.
    let (r0, r1, r2, r3, ()) = tokio::join!(
        store.append(log(s[0], 1, 1)),
        store.append(log(s[1], 1, 2)),
        store.append(log(s[2], 1, 3)),
        store.append(log(s[3], 1, 4)),
        store.close(),
    );
    assert_eq!([r0, r1, r2, r3], [Ok(()), Ok(()), Ok(()), Ok(())]);
    store.close().await;
    assert_eq!(
        store.append(vec![step(s[0], 2)]).await,
        Err(AppendError::Closed)
    );
    for (i, session) in s.iter().enumerate() {
        assert_eq!(
            store.read_from(*session, Seq(1)).unwrap(),
            log(*session, 1, i as u64 + 1)
        );
    }
    assert_eq!(store.stats().appended_events, 10);
}

#[tokio::test]
async fn a_reopened_file_has_the_committed_data_and_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dirs/foya.redb");
    let (a, b) = (SessionId::new(), SessionId::new());
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        store.append(log(a, 1, 3)).await.unwrap();
        store.append(log(b, 1, 1)).await.unwrap();
        store
            .append(vec![event(b, 2, EventKind::SessionDeleted {})])
            .await
            .unwrap();
        let again = Store::open(&path, StoreOptions::default());
        assert!(
            matches!(&again, Err(OpenError::AlreadyOpen { path: p }) if *p == path),
            "{again:?}"
        );
        // Dropped without close.
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 3));
    assert_eq!(
        store.session(a).unwrap(),
        Some(summary(a, "first title", 3, 1003))
    );
    // The writer's view of each session is rebuilt from the file.
    assert_eq!(
        store.append(vec![step(a, 3)]).await,
        Err(AppendError::SeqMismatch {
            expected: Seq(4),
            got: Seq(3)
        })
    );
    store.append(vec![step(a, 4)]).await.unwrap();
    assert_eq!(
        store.append(vec![step(b, 3)]).await,
        Err(AppendError::SessionDeleted)
    );
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 4));
    store.close().await;
}

/// The first bytes of a file whose creation redb did not finish (a `foya run` SIGKILLed
/// a few milliseconds after start on a new data dir): the header's layout fields are
/// written, the magic number (written last) is not. Taken from such a file.
fn torn_creation() -> Vec<u8> {
    let mut file = vec![0u8; 73_728];
    file[8..24].copy_from_slice(&[0, 4, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0]);
    file[0x18..0x1d].copy_from_slice(&[0, 0, 0, 0, 0x11]);
    file[0x40] = 3;
    file
}

#[tokio::test]
async fn a_file_whose_creation_was_interrupted_is_moved_aside_and_created_anew_and_a_foreign_one_is_refused()
 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    std::fs::write(&path, torn_creation()).unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let a = SessionId::new();
    store.append(log(a, 1, 2)).await.unwrap();
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 2));
    store.close().await;
    drop(store);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 2));
    store.close().await;
    drop(store);
    // Nothing was deleted: the torn file was moved aside, as it was.
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("foya.redb.torn-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read(dir.path().join(&aside[0])).unwrap(),
        torn_creation()
    );

    // Anything else that is not a database is left alone and refused.
    let foreign = dir.path().join("notes.redb");
    std::fs::write(&foreign, b"my notes, not a database").unwrap();
    let refused = Store::open(&foreign, StoreOptions::default());
    assert!(
        matches!(&refused, Err(OpenError::Corrupt { path, message }) if *path == foreign && message.contains("not a redb database")),
        "{refused:?}"
    );
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        b"my notes, not a database"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_commits() {
    const SESSIONS: usize = 50;
    const PER_SESSION: u64 = 10;
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        durability: Durability::Immediate,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("foya.redb"), options).unwrap();
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
    let tasks: Vec<_> = sessions
        .iter()
        .map(|&session| {
            let store = store.clone();
            tokio::spawn(async move {
                for seq in 1..=PER_SESSION {
                    store.append(log(session, seq, seq)).await?;
                }
                Ok::<_, AppendError>(())
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(()));
    }
    let appends = SESSIONS as u64 * PER_SESSION;
    let stats = store.stats();
    assert_eq!(stats.appended_events, appends);
    // Each commit (one fsync) carried many sessions' appends.
    assert!(stats.commits < appends / 2, "{stats:?}");
    for session in sessions {
        assert_eq!(
            store.read_from(session, Seq(1)).unwrap(),
            log(session, 1, PER_SESSION)
        );
    }
    store.close().await;
}

#[tokio::test]
async fn non_durable_commits_are_visible_to_reads() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        durability: Durability::None,
        max_batch: 2,
        queue_capacity: 1,
        ..StoreOptions::default()
    };
    let store = Store::open(&dir.path().join("fast.redb"), options).unwrap();
    let a = SessionId::new();
    for seq in 1..=5 {
        store.append(log(a, seq, seq)).await.unwrap();
    }
    assert_eq!(store.read_from(a, Seq(1)).unwrap(), log(a, 1, 5));
    assert_eq!(
        store.stats(),
        StoreStats {
            appended_events: 5,
            commits: 5
        }
    );
    store.close().await;
}

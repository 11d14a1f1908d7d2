//! Backpressure of the bounded append queue under a slow disk: producers wait for queue
//! space instead of piling up, and once the disk catches up everything commits in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::tests::{SlowDisk, created, step};
use crate::store::{Store, StoreOptions};
use crate::writer::INJECTED_FAILURE;
use crate::{AppendError, Durability};
use foya_protocol::{Seq, SessionId};
use redb::Database;
use redb::backends::InMemoryBackend;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);
const PRODUCERS: usize = 40;
const EVENTS_PER_PRODUCER: u64 = 5;
const QUEUE: usize = 2;

fn slow_store(disk: &SlowDisk) -> Store {
    let db = Database::builder()
        .create_with_backend(disk.clone())
        .unwrap();
    let options = StoreOptions {
        queue_capacity: QUEUE,
        max_batch: 4,
        durability: Durability::Immediate,
        ..StoreOptions::default()
    };
    Store::start(db, None, PathBuf::from("slow"), options, None, Vec::new()).unwrap()
}

/// Yields until `done` holds (under the global timeout).
async fn until(mut done: impl FnMut() -> bool) {
    tokio::time::timeout(TIMEOUT, async {
        while !done() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_wait_on_a_slow_disk_and_everything_commits_in_order() {
    let disk = SlowDisk {
        data: Arc::new(InMemoryBackend::new()),
        gate: Arc::new((std::sync::Mutex::new(true), std::sync::Condvar::new())),
        waiting: Arc::default(),
    };
    let store = slow_store(&disk);
    let (waiting_tx, waiting) = std::sync::mpsc::channel();
    *disk.waiting.lock().unwrap() = Some(waiting_tx);
    disk.set_open(false);
    let blocker = SessionId::new();
    let first = tokio::spawn({
        let store = store.clone();
        async move { store.append(vec![created(blocker)]).await }
    });
    waiting.recv_timeout(TIMEOUT).unwrap(); // the writer is stuck in the fsync

    let acked = Arc::new(AtomicUsize::new(0));
    let sessions: Vec<SessionId> = (0..PRODUCERS).map(|_| SessionId::new()).collect();
    let producers: Vec<_> = sessions
        .iter()
        .map(|&session| {
            let (store, acked) = (store.clone(), Arc::clone(&acked));
            tokio::spawn(async move {
                store.append(vec![created(session)]).await.unwrap();
                acked.fetch_add(1, Ordering::SeqCst);
                for seq in 2..=EVENTS_PER_PRODUCER {
                    store.append(vec![step(session, seq)]).await.unwrap();
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    // The queue fills up to its capacity and no further: the other producers wait.
    until(|| store.queued() == QUEUE).await;
    for _ in 0..100 {
        tokio::task::yield_now().await;
        assert!(store.queued() <= QUEUE);
    }
    assert_eq!(
        acked.load(Ordering::SeqCst),
        0,
        "nothing is acked before it commits"
    );
    assert!(!first.is_finished());

    disk.set_open(true);
    assert_eq!(first.await.unwrap(), Ok(()));
    for producer in producers {
        tokio::time::timeout(TIMEOUT, producer)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        acked.load(Ordering::SeqCst),
        PRODUCERS * EVENTS_PER_PRODUCER as usize
    );
    for session in sessions {
        let mut expected = vec![created(session)];
        expected.extend((2..=EVENTS_PER_PRODUCER).map(|seq| step(session, seq)));
        assert_eq!(store.read_from(session, Seq(1)).unwrap(), expected);
    }
    assert_eq!(
        store.stats().appended_events,
        1 + PRODUCERS as u64 * EVENTS_PER_PRODUCER
    );
    store.close().await;
}

#[tokio::test]
async fn injected_failures_fail_whole_batches_then_writes_resume() {
    let store = Store::open_in_memory(StoreOptions {
        durability: Durability::None,
        ..StoreOptions::default()
    })
    .unwrap();
    assert_eq!(store.durability(), Durability::None);
    let a = SessionId::new();
    store.append(vec![created(a)]).await.unwrap();
    store.inject_append_failures(2);
    for _ in 0..2 {
        assert_eq!(
            store.append(vec![step(a, 2)]).await,
            Err(AppendError::Storage(INJECTED_FAILURE.into()))
        );
    }
    store.append(vec![step(a, 2)]).await.unwrap();
    assert_eq!(
        store.read_from(a, Seq(1)).unwrap(),
        vec![created(a), step(a, 2)]
    );
    store.close().await;
}

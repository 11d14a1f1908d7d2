//! Writer unit tests: one batch mixing valid and invalid appends, and recovery from
//! a failing disk (a backend whose writes fail on demand, like a full disk).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::db::Reopen;
use crate::store::{Store, StoreOptions, StoreStats};
use foya_protocol::{SessionConfig, SessionId};
use redb::backends::InMemoryBackend;
use redb::{ReadableDatabase, StorageBackend};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

fn event(session: SessionId, seq: u64, kind: EventKind) -> Event {
    Event {
        session_id: session,
        seq: Seq(seq),
        run_id: None,
        at_ms: 100 + seq,
        kind,
    }
}

pub(super) fn created(session: SessionId) -> Event {
    event(
        session,
        1,
        EventKind::SessionCreated {
            config: SessionConfig::new("/w"),
        },
    )
}

pub(super) fn step(session: SessionId, seq: u64) -> Event {
    event(session, seq, EventKind::StepStarted { step: 1 })
}

fn request(events: Vec<Event>) -> (Request, oneshot::Receiver<Result<(), AppendError>>) {
    let encoded = events
        .iter()
        .map(|e| codec::encode_event(e).unwrap())
        .collect();
    let (reply, answer) = oneshot::channel();
    (
        Request {
            events: events.iter().map(super::EventMeta::of).collect(),
            encoded,
            reply,
        },
        answer,
    )
}

fn memory_writer() -> Writer {
    let db = Database::builder()
        .create_with_backend(InMemoryBackend::new())
        .unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(EVENTS).unwrap();
    txn.open_table(SESSIONS).unwrap();
    txn.commit().unwrap();
    Writer {
        db: Arc::new(DbSlot::new(db, None)),
        durability: redb::Durability::Immediate,
        max_batch: 16,
        commit_linger: std::time::Duration::ZERO,
        counters: Arc::default(),
        cache: HashMap::new(),
        journal: None,
    }
}

/// Runs `writer` on its own thread over a queue pre-filled with `first` (a batch of
/// several requests, so the writer is contended), then sends `second` one by one as soon
/// as the first batch is answered. Returns the commit count.
fn commits_with_linger(linger: std::time::Duration) -> u64 {
    let mut writer = memory_writer();
    writer.commit_linger = linger;
    let counters = Arc::clone(&writer.counters);
    let (a, b, c, d) = (
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
        SessionId::new(),
    );
    let (tx, rx) = mpsc::channel(16);
    let (r1, a1) = request(vec![created(a)]);
    let (r2, a2) = request(vec![created(b)]);
    tx.try_send(r1).unwrap();
    tx.try_send(r2).unwrap();
    let thread = std::thread::spawn(move || writer.run(rx));
    a1.blocking_recv().unwrap().unwrap();
    a2.blocking_recv().unwrap().unwrap();
    let (r3, a3) = request(vec![created(c)]);
    let (r4, a4) = request(vec![created(d)]);
    tx.blocking_send(r3).unwrap();
    tx.blocking_send(r4).unwrap();
    a3.blocking_recv().unwrap().unwrap();
    a4.blocking_recv().unwrap().unwrap();
    drop(tx);
    thread.join().unwrap();
    counters.commits.load(Ordering::Relaxed)
}

#[test]
fn a_contended_writer_lingers_so_appends_sent_one_after_another_share_a_commit() {
    // The linger (far longer than two channel sends) is what puts the 3rd and 4th
    // appends in one transaction: without it the writer would wake for the 3rd alone.
    assert_eq!(
        commits_with_linger(std::time::Duration::from_millis(500)),
        2
    );
}

#[test]
fn a_lone_writer_never_lingers() {
    // One append at a time, with a linger that would hang the test if it applied.
    let mut writer = memory_writer();
    writer.commit_linger = std::time::Duration::from_secs(3600);
    let session = SessionId::new();
    let (tx, rx) = mpsc::channel(16);
    let thread = std::thread::spawn(move || writer.run(rx));
    for seq in 1..=3 {
        let events = if seq == 1 {
            vec![created(session)]
        } else {
            vec![step(session, seq)]
        };
        let (r, answer) = request(events);
        tx.blocking_send(r).unwrap();
        answer.blocking_recv().unwrap().unwrap();
    }
    drop(tx);
    thread.join().unwrap();
}

#[test]
fn one_batch_commits_the_valid_appends_and_refuses_the_invalid_ones() {
    let mut writer = memory_writer();
    let (a, b, c) = (SessionId::new(), SessionId::new(), SessionId::new());
    let (requests, answers): (Vec<_>, Vec<_>) = [
        vec![created(a)],
        vec![step(b, 1)], // unknown session
        vec![created(c), step(c, 2)],
        vec![step(a, 2)], // continues a's append earlier in the batch
        vec![step(a, 5)], // gap
        vec![step(c, 2)], // duplicate of the batch's own c/2
    ]
    .into_iter()
    .map(request)
    .unzip();
    writer.write_batch(requests);
    let outcomes: Vec<_> = answers
        .into_iter()
        .map(|mut rx| rx.try_recv().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        vec![
            Ok(()),
            Err(AppendError::UnknownSession),
            Ok(()),
            Ok(()),
            Err(AppendError::SeqMismatch {
                expected: Seq(3),
                got: Seq(5)
            }),
            Err(AppendError::SeqMismatch {
                expected: Seq(3),
                got: Seq(2)
            }),
        ]
    );
    assert_eq!(writer.counters.commits.load(Ordering::Relaxed), 1);
    assert_eq!(writer.counters.appended_events.load(Ordering::Relaxed), 4);
    let last: Vec<_> = [a, b, c]
        .iter()
        .map(|s| writer.cache.get(&session_key(*s)))
        .collect();
    assert_eq!(
        last.iter()
            .map(|s| s.map(|s| s.last_seq))
            .collect::<Vec<_>>(),
        vec![Some(Seq(2)), None, Some(Seq(2))]
    );
}

/// The stored `sessions` row of `session` (raw bytes) and the summary readers see.
fn stored_row(writer: &Writer, session: SessionId) -> Vec<u8> {
    let db = writer.db.get().unwrap();
    let txn = db.begin_read().unwrap();
    let sessions = txn.open_table(SESSIONS).unwrap();
    sessions
        .get(session_key(session))
        .unwrap()
        .unwrap()
        .value()
        .to_vec()
}

#[test]
fn an_ordinary_append_leaves_the_summary_row_alone_and_a_cold_writer_still_continues_the_log() {
    let mut writer = memory_writer();
    let a = SessionId::new();
    let append = |writer: &mut Writer, events: Vec<Event>| {
        let (request, mut answer) = request(events);
        writer.write_batch(vec![request]);
        answer.try_recv().unwrap()
    };
    assert_eq!(append(&mut writer, vec![created(a)]), Ok(()));
    let row = stored_row(&writer, a);
    assert_eq!(append(&mut writer, vec![step(a, 2), step(a, 3)]), Ok(()));
    assert_eq!(
        stored_row(&writer, a),
        row,
        "an ordinary append rewrote the row"
    );

    // A title changes the row; a writer that lost its cache (a restart, an eviction)
    // takes the last seq and time from the events, so it refuses a stale seq.
    let title = event(
        a,
        4,
        EventKind::TitleSet {
            title: "renamed".into(),
            source: foya_protocol::TitleSource::User,
        },
    );
    assert_eq!(append(&mut writer, vec![title]), Ok(()));
    assert_ne!(stored_row(&writer, a), row);
    assert_eq!(append(&mut writer, vec![step(a, 5)]), Ok(()));
    writer.cache.clear();
    assert_eq!(
        append(&mut writer, vec![step(a, 5)]),
        Err(AppendError::SeqMismatch {
            expected: Seq(6),
            got: Seq(5)
        })
    );
    assert_eq!(append(&mut writer, vec![step(a, 6)]), Ok(()));
    let summary = writer.cache.get(&session_key(a)).unwrap();
    assert_eq!(
        (
            summary.title.as_deref(),
            summary.last_seq,
            summary.updated_at_ms
        ),
        (Some("renamed"), Seq(6), 106)
    );
}

/// A memory backend whose writes and syncs fail while `full` is set, like a full disk.
#[derive(Debug, Clone)]
struct FlakyDisk {
    data: Arc<InMemoryBackend>,
    full: Arc<AtomicBool>,
}

impl FlakyDisk {
    fn check(&self) -> Result<(), std::io::Error> {
        if self.full.load(Ordering::SeqCst) {
            Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "No space left on device",
            ))
        } else {
            Ok(())
        }
    }
}

impl StorageBackend for FlakyDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.data.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.data.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.check()?;
        self.data.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.check()?;
        self.data.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.check()?;
        self.data.write(offset, data)
    }
}

#[tokio::test]
async fn a_full_disk_fails_only_its_batch_and_the_writer_recovers() {
    let disk = FlakyDisk {
        data: Arc::new(InMemoryBackend::new()),
        full: Arc::default(),
    };
    let db = Database::builder()
        .create_with_backend(disk.clone())
        .unwrap();
    let reopen_disk = disk.clone();
    let reopen: Reopen = Box::new(move || {
        Database::builder()
            .create_with_backend(reopen_disk.clone())
            .map_err(|e| e.to_string())
    });
    let store = Store::start(
        db,
        Some(reopen),
        PathBuf::from("flaky"),
        StoreOptions::default(),
        None,
        Vec::new(),
    )
    .unwrap();
    let a = SessionId::new();
    store.append(vec![created(a)]).await.unwrap();

    disk.full.store(true, Ordering::SeqCst);
    let failed = store.append(vec![step(a, 2)]).await;
    assert!(
        matches!(&failed, Err(AppendError::Storage(m)) if m.contains("No space left on device")),
        "{failed:?}"
    );

    disk.full.store(false, Ordering::SeqCst);
    // Seq 2 is expected again: the failed batch left no trace in the writer's state.
    store.append(vec![step(a, 2)]).await.unwrap();
    store.append(vec![step(a, 3)]).await.unwrap();
    assert_eq!(
        store.read_from(a, Seq(1)).unwrap(),
        vec![created(a), step(a, 2), step(a, 3)]
    );
    assert_eq!(store.session(a).unwrap().map(|s| s.last_seq), Some(Seq(3)));
    assert_eq!(
        store.stats(),
        StoreStats {
            appended_events: 3,
            commits: 3
        }
    );
    store.close().await;
}

/// A memory backend whose `sync_data` (the commit's fsync) waits while the gate is
/// closed, and reports each waiting sync: a disk that is slow on demand.
#[derive(Debug, Clone)]
pub(super) struct SlowDisk {
    pub(super) data: Arc<InMemoryBackend>,
    pub(super) gate: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    pub(super) waiting: Arc<std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>>,
}

impl SlowDisk {
    pub(super) fn set_open(&self, open: bool) {
        *self.gate.0.lock().unwrap() = open;
        self.gate.1.notify_all();
    }
}

impl StorageBackend for SlowDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.data.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.data.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.data.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut open = self.gate.0.lock().unwrap();
        if !*open && let Some(waiting) = self.waiting.lock().unwrap().take() {
            waiting.send(()).unwrap();
        }
        while !*open {
            open = self.gate.1.wait(open).unwrap();
        }
        self.data.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.data.write(offset, data)
    }
}

/// Polls `future` once.
async fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *future).poll(cx)))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_disk_makes_appends_wait_for_queue_space() {
    let disk = SlowDisk {
        data: Arc::new(InMemoryBackend::new()),
        gate: Arc::new((std::sync::Mutex::new(true), std::sync::Condvar::new())),
        waiting: Arc::default(),
    };
    let db = Database::builder()
        .create_with_backend(disk.clone())
        .unwrap();
    let options = StoreOptions {
        queue_capacity: 1,
        ..StoreOptions::default()
    };
    let store = Store::start(db, None, PathBuf::from("slow"), options, None, Vec::new()).unwrap();
    let (a, b, c) = (SessionId::new(), SessionId::new(), SessionId::new());

    let (waiting_tx, waiting) = std::sync::mpsc::channel();
    *disk.waiting.lock().unwrap() = Some(waiting_tx);
    disk.set_open(false);
    let first = tokio::spawn({
        let store = store.clone();
        async move { store.append(vec![created(a)]).await }
    });
    // The writer is now inside a's commit, stuck on the fsync.
    waiting
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap();

    let mut queued = Box::pin(store.append(vec![created(b)]));
    assert!(
        poll_once(&mut queued).await.is_pending(),
        "b takes the one queue slot"
    );
    let mut blocked = Box::pin(store.append(vec![created(c)]));
    assert!(
        poll_once(&mut blocked).await.is_pending(),
        "c waits for queue space"
    );
    drop(blocked); // cancelled before it was queued: nothing of c is written

    disk.set_open(true);
    assert_eq!(first.await.unwrap(), Ok(()));
    assert_eq!(queued.await, Ok(()));
    assert_eq!(store.session(c).unwrap(), None);
    assert_eq!(store.last_seq(b).unwrap(), Some(Seq(1)));
    store.close().await;
}

#[tokio::test]
async fn values_from_a_future_format_are_refused_clearly() {
    let db = Database::builder()
        .create_with_backend(InMemoryBackend::new())
        .unwrap();
    let (future, fine) = (SessionId::new(), SessionId::new());
    let txn = db.begin_write().unwrap();
    {
        let mut events = txn.open_table(EVENTS).unwrap();
        let mut sessions = txn.open_table(SESSIONS).unwrap();
        let unknown_version = [codec::FORMAT_VERSION + 1, 0x80];
        events
            .insert((session_key(future), 1), unknown_version.as_slice())
            .unwrap();
        sessions
            .insert(session_key(future), unknown_version.as_slice())
            .unwrap();
    }
    txn.commit().unwrap();
    let store = Store::start(
        db,
        None,
        PathBuf::from("future"),
        StoreOptions::default(),
        None,
        Vec::new(),
    )
    .unwrap();

    let refused = crate::ReadError::UnsupportedFormat {
        version: codec::FORMAT_VERSION + 1,
        supported: codec::FORMAT_VERSION,
    };
    assert_eq!(store.read_from(future, Seq(1)), Err(refused.clone()));
    assert_eq!(store.session(future), Err(refused.clone()));
    assert_eq!(store.list_sessions(), Err(refused.clone()));
    // Appends to that session are refused; other sessions are not affected.
    assert_eq!(
        store.append(vec![step(future, 2)]).await,
        Err(AppendError::Storage(refused.to_string()))
    );
    store.append(vec![created(fine)]).await.unwrap();
    assert_eq!(store.read_from(fine, Seq(1)).unwrap(), vec![created(fine)]);
    store.close().await;
}

/// Collects the group commits it is told of.
#[derive(Debug, Default)]
struct Commits(std::sync::Mutex<Vec<crate::CommitStat>>);

impl crate::CommitObserver for Commits {
    fn committed(&self, commit: crate::CommitStat) {
        self.0.lock().unwrap().push(commit);
    }
}

#[tokio::test]
async fn an_observer_is_told_of_every_group_commit_its_time_and_size() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let commits = Arc::new(Commits::default());
    assert!(store.observe_commits(commits.clone()));
    assert!(
        !store.observe_commits(commits.clone()),
        "one observer per store"
    );
    let a = SessionId::new();
    store.append(vec![created(a), step(a, 2)]).await.unwrap();
    store.append(vec![step(a, 3)]).await.unwrap();
    // A refused append commits nothing: nobody is told.
    assert!(store.append(vec![step(a, 9)]).await.is_err());
    let seen = commits.0.lock().unwrap().clone();
    assert_eq!(
        seen.iter()
            .map(|c| (c.appends, c.events))
            .collect::<Vec<_>>(),
        [(1, 2), (1, 1)]
    );
    assert!(seen.iter().all(|c| c.duration > std::time::Duration::ZERO));
    assert_eq!(store.stats().commits, 2);
}

/// What an append observer was told, in order.
#[derive(Debug, Default)]
struct Appends(std::sync::Mutex<Vec<String>>);

impl crate::AppendObserver for Appends {
    fn appended(&self, events: &[Event], _elapsed: std::time::Duration) {
        let seqs = events
            .iter()
            .map(|e| e.seq.0.to_string())
            .collect::<Vec<_>>();
        self.0
            .lock()
            .unwrap()
            .push(format!("appended {}", seqs.join(",")));
    }
    fn append_failed(&self, events: &[Event], _elapsed: std::time::Duration) {
        self.0
            .lock()
            .unwrap()
            .push(format!("failed {}", events.len()));
    }
    fn read(&self, _session: SessionId, events: &[Event]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("read {}", events.len()));
    }
}

/// Telemetry follows a redb store through its observer instead of a wrapper: every
/// append (committed or refused) and every log read, through every clone, as each returns.
#[tokio::test]
async fn an_append_observer_is_told_of_every_append_and_read_as_it_returns() {
    use crate::EventLog as _;
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let appends = Arc::new(Appends::default());
    let log = crate::LogStore::from(store.clone());
    assert!(log.observe_appends(appends.clone()));
    assert!(
        !store.observe_appends(appends.clone()),
        "one observer per store"
    );
    let a = SessionId::new();
    log.append(&[created(a), step(a, 2)], crate::Fence::None)
        .await
        .unwrap();
    // Told once the append returned: what it committed is readable.
    assert_eq!(appends.0.lock().unwrap().as_slice(), ["appended 1,2"]);
    store.append(vec![step(a, 3)]).await.unwrap();
    assert!(store.append(vec![step(a, 9)]).await.is_err());
    store.inject_append_failures(1);
    assert!(store.append(vec![step(a, 4)]).await.is_err());
    assert_eq!(log.read_range(a, Seq(2), 10).await.unwrap().len(), 2);
    assert_eq!(
        appends.0.lock().unwrap().as_slice(),
        [
            "appended 1,2",
            "appended 3",
            "failed 1",
            "failed 1",
            "read 2"
        ]
    );
    // The append latencies count the committed appends only, as before.
    assert_eq!(store.append_latency().count(), 2);
}

//! [`Store`]: opening the database, starting the writer thread, queueing appends and
//! closing.

use crate::codec;
use crate::db::{DbSlot, Reopen};
use crate::error::{AppendError, OpenError};
use crate::header::REDB_MAGIC_LEN;
use crate::schema::{EVENTS, SESSIONS};
use crate::writer::{Counters, Request, Writer};
use foya_protocol::Event;
use redb::Database;
use redb::backends::InMemoryBackend;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot, watch};

/// How hard a commit pushes data to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is fsynced before its appends resolve: an acknowledged event survives
    /// a process or machine crash. The default.
    #[default]
    Immediate,
    /// Commits are not fsynced: fast, but a crash may lose recent commits (never leaving a
    /// torn log). For load tests.
    None,
}

impl Durability {
    /// redb's level (kept private so redb stays out of the public API).
    fn to_redb(self) -> redb::Durability {
        match self {
            Durability::Immediate => redb::Durability::Immediate,
            Durability::None => redb::Durability::None,
        }
    }
}

/// Options of [`Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Commit durability; default [`Durability::Immediate`].
    pub durability: Durability,
    /// Most appends committed in one write transaction; default 1024 (0 counts as 1).
    pub max_batch: usize,
    /// Capacity of the bounded append queue, in appends; default 4096 (0 counts as 1).
    /// A full queue makes [`Store::append`] wait (backpressure).
    pub queue_capacity: usize,
    /// Group-commit linger: when the previous write transaction held appends of more
    /// than one caller (several sessions are writing), the writer waits this long after
    /// draining the queue for more appends to join the transaction before committing.
    /// Fewer, larger transactions cost less CPU per event (redb checksums and flushes
    /// each dirty page once per commit). A lone writer (the previous transaction held one
    /// append) never lingers, so a single session's append latency is unchanged. Default
    /// 200 µs; `Duration::ZERO` turns it off.
    pub commit_linger: std::time::Duration,
    /// Bytes of redb's page cache (read cache and write buffer); default 128 MiB. The runtime reads a session's log once and keeps
    /// it in memory, so the cache mostly holds the pages appends touch: redb's own
    /// default (1 GiB) let a 100 000-session load test hold half a gigabyte of pages at no
    /// saving in CPU (docs/benchmarks.md).
    pub cache_size: usize,
}

/// Default of [`StoreOptions::cache_size`]: 128 MiB.
const DEFAULT_CACHE_SIZE: usize = 128 << 20;

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Immediate,
            max_batch: 1024,
            queue_capacity: 4096,
            commit_linger: std::time::Duration::from_micros(200),
            cache_size: DEFAULT_CACHE_SIZE,
        }
    }
}

/// Counters for load tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Events committed since the store was opened.
    pub appended_events: u64,
    /// Successful write transactions since the store was opened.
    pub commits: u64,
}

/// The event store. Cheap to clone: all clones share one database and one writer
/// thread. Dropping the last clone stops the writer after it committed what was queued
/// (a short blocking wait); [`Store::close`] does the same without blocking.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) db: Arc<DbSlot>,
    pub(crate) location: PathBuf,
    /// `None` once closing started.
    sender: Mutex<Option<mpsc::Sender<Request>>>,
    /// Joined on drop, so the file is unlocked when the last clone is gone.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Becomes `true` when the writer thread has stopped.
    stopped: watch::Receiver<bool>,
    pub(crate) counters: Arc<Counters>,
    durability: Durability,
    /// Acknowledged events found missing when the store opened.
    pub(crate) losses: Vec<crate::Loss>,
}

// `Store` is shared across tasks and threads.
const _: fn() = || {
    fn shareable<T: Send + Sync + Clone + fmt::Debug + 'static>() {}
    shareable::<Store>();
};

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.inner.location)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Moves aside a database file whose creation was interrupted, so that redb creates it
/// anew.
///
/// redb writes a new file's magic number last (since redb 2, so a torn creation is
/// detected rather than mistaken for a database): a process killed in the few
/// milliseconds of creating the file leaves one whose first bytes are zero, which every
/// later open refuses ("magic number mismatch") — the data dir would stay unusable
/// until someone moved the file by hand. Such a file never held a committed
/// transaction; still, nothing is deleted: the file is renamed to
/// `<name>.torn-<unix ms>` beside it (a real database whose first bytes were zeroed by
/// something else can still be repaired by hand) and a warning names it. The check and
/// the rename happen under an exclusive `flock` (the lock redb takes) on the file, and
/// only while the path still names the locked file, so a file another process is
/// creating or using is left alone; any other content (a database, a foreign file) is
/// left for redb to open or refuse. Best effort: a file that cannot be read, locked or
/// renamed is left as it is.
fn recover_torn_creation(path: &Path) {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt as _;
    let Ok(mut file) = std::fs::OpenOptions::new().read(true).open(path) else {
        return;
    };
    if file.try_lock().is_err() {
        return;
    }
    let mut head = [0u8; REDB_MAGIC_LEN];
    let Ok(read) = file.read(&mut head) else {
        return;
    };
    if read == 0 || head[..read].iter().any(|b| *b != 0) {
        return;
    }
    let same_file = match (file.metadata(), std::fs::metadata(path)) {
        (Ok(locked), Ok(named)) => locked.dev() == named.dev() && locked.ino() == named.ino(),
        _ => false,
    };
    if !same_file {
        return;
    }
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".torn-{}", now_unix_ms()));
    let aside = PathBuf::from(aside);
    match std::fs::rename(path, &aside) {
        Ok(()) => tracing::warn!(
            path = %path.display(),
            moved_to = %aside.display(),
            "the database file has no magic number (its creation was interrupted); it was \
             moved aside and is created anew"
        ),
        Err(e) => tracing::warn!(
            path = %path.display(),
            error = %e,
            "cannot move aside a database file whose creation was interrupted"
        ),
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

impl Store {
    /// Opens (or creates) the database file at `path`, creating missing parent
    /// directories. A file left by a killed process is repaired by redb on open (this may
    /// take a while for a large file).
    ///
    /// # Errors
    /// [`OpenError::CreateDir`], [`OpenError::AlreadyOpen`] when another store (writable
    /// or [`crate::ReadOnlyStore`]) holds the file, [`OpenError::Database`] when redb cannot open or repair it,
    /// [`OpenError::Corrupt`] when it is damaged (an empty file whose journal names
    /// acknowledged sessions included: it is not started over),
    /// [`OpenError::Spawn`] when the writer thread cannot start.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store, OpenError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| OpenError::CreateDir {
                path: parent.to_owned(),
                source,
            })?;
        }
        // An empty file whose journal names acknowledged sessions is damage: starting
        // over is `foya store repair`'s decision, not an open's.
        if let Some(message) = crate::open::emptied(path) {
            return Err(OpenError::Corrupt {
                path: path.to_owned(),
                message,
            });
        }
        // Cut short: redb's repair would write to it before failing.
        if let Some(message) = crate::header::layout_problem(path) {
            return Err(OpenError::Corrupt {
                path: path.to_owned(),
                message,
            });
        }
        recover_torn_creation(path);
        let cache_size = options.cache_size;
        let db = crate::guard::contain("opening the database", || {
            Database::builder().set_cache_size(cache_size).create(path)
        })
        .map_err(|message| OpenError::Corrupt {
            path: path.to_owned(),
            message,
        })?
        .map_err(|e| OpenError::from_redb(path, e))?;
        let file = path.to_owned();
        let reopen: Reopen = Box::new(move || {
            Database::builder()
                .set_cache_size(cache_size)
                .create(&file)
                .map_err(|e| e.to_string())
        });
        let (journal, losses) = crate::losses::verify(&db, path);
        for loss in &losses {
            tracing::warn!(%loss, "acknowledged events are missing from the store");
        }
        Self::start(
            db,
            Some(reopen),
            path.to_owned(),
            options,
            Some(journal),
            losses,
        )
    }

    /// Opens a fresh database held in memory (redb's in-memory backend), for tests.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_in_memory(options: StoreOptions) -> Result<Store, OpenError> {
        let location = PathBuf::from(":memory:");
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .map_err(|e| OpenError::Database {
                path: location.clone(),
                message: e.to_string(),
            })?;
        Self::start(db, None, location, options, None, Vec::new())
    }

    /// Starts a store on an opened database; `reopen` opens it again after an I/O error.
    pub(crate) fn start(
        db: Database,
        reopen: Option<Reopen>,
        location: PathBuf,
        options: StoreOptions,
        journal: Option<crate::journal::Journal>,
        losses: Vec<crate::Loss>,
    ) -> Result<Store, OpenError> {
        let db_error = |e: &dyn fmt::Display| OpenError::Database {
            path: location.clone(),
            message: e.to_string(),
        };
        // Create the tables up front so readers never meet a missing table; a file from
        // before the recovery index (or the listing index) gets it built, once.
        let created = crate::guard::contain("creating the tables", || {
            let txn = db.begin_write().map_err(|e| db_error(&e))?;
            txn.open_table(EVENTS).map_err(|e| db_error(&e))?;
            txn.open_table(SESSIONS).map_err(|e| db_error(&e))?;
            crate::pending::ensure(&txn).map_err(|e| db_error(&e))?;
            crate::recent::ensure(&txn).map_err(|e| db_error(&e))?;
            txn.commit().map_err(|e| db_error(&e))
        });
        match created {
            Ok(result) => result?,
            Err(message) => {
                crate::guard::drop_contained(db);
                return Err(OpenError::Corrupt {
                    path: location,
                    message,
                });
            }
        }

        let db = Arc::new(DbSlot::new(db, reopen));
        let counters = Arc::new(Counters::default());
        let (sender, receiver) = mpsc::channel(options.queue_capacity.max(1));
        let (stopped_tx, stopped) = watch::channel(false);
        let writer = Writer {
            db: Arc::clone(&db),
            durability: options.durability.to_redb(),
            max_batch: options.max_batch,
            commit_linger: options.commit_linger,
            counters: Arc::clone(&counters),
            cache: HashMap::new(),
            journal,
        };
        let thread = std::thread::Builder::new()
            .name("foya-store-writer".into())
            .spawn(move || {
                writer.run(receiver);
                let _ = stopped_tx.send(true);
            })
            .map_err(OpenError::Spawn)?;
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                location,
                sender: Mutex::new(Some(sender)),
                thread: Mutex::new(Some(thread)),
                stopped,
                counters,
                durability: options.durability,
                losses,
            }),
        })
    }

    /// Appends events of ONE session. Their seqs must continue that session's log densely
    /// (the first event of a new session has `Seq(1)` and is `session_created`). Resolves
    /// only after the write transaction holding the events committed (group commit: one
    /// transaction carries many sessions' pending appends). An empty `events` resolves
    /// `Ok` at once.
    ///
    /// # Errors
    /// [`AppendError::SeqMismatch`] (gap, duplicate, or seqs not dense inside `events`),
    /// [`AppendError::UnknownSession`], [`AppendError::SessionDeleted`],
    /// [`AppendError::MixedSessions`], [`AppendError::Encode`], [`AppendError::Storage`]
    /// when the batch's commit failed (nothing of it was written), [`AppendError::Closed`].
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the append was queued, the events
    /// may still commit. Dropped while waiting for queue space, nothing was queued.
    pub async fn append(&self, events: Vec<Event>) -> Result<(), AppendError> {
        self.append_all(&events).await
    }

    /// [`Store::append`] of borrowed events: they are encoded here and the writer gets
    /// only what it needs of them, so the caller keeps its events and nothing is copied.
    ///
    /// # Errors
    /// As [`Store::append`].
    ///
    /// # Cancel safety
    /// As [`Store::append`].
    pub async fn append_all(&self, events: &[Event]) -> Result<(), AppendError> {
        let started = std::time::Instant::now();
        let result = if events.is_empty() {
            Ok(())
        } else {
            self.commit_all(events).await
        };
        let elapsed = started.elapsed();
        if result.is_ok() && !events.is_empty() {
            self.inner.counters.append_latency.record(elapsed);
        }
        if let Some(observer) = self.inner.counters.append_observer.get() {
            match &result {
                Ok(()) => observer.appended(events, elapsed),
                Err(_) => observer.append_failed(events, elapsed),
            }
        }
        result
    }

    /// [`Store::append_all`]'s work: the events encoded, queued for the writer, and its
    /// answer.
    async fn commit_all(&self, events: &[Event]) -> Result<(), AppendError> {
        AppendError::check_batch(events)?;
        let encoded = events
            .iter()
            .map(codec::encode_event)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| AppendError::Encode(e.0))?;
        let sender = self
            .inner
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(AppendError::Closed)?;
        let (reply, answer) = oneshot::channel();
        sender
            .send(Request {
                events: events.iter().map(crate::writer::EventMeta::of).collect(),
                encoded,
                reply,
            })
            .await
            .map_err(|_| AppendError::Closed)?;
        drop(sender);
        answer.await.map_err(|_| {
            AppendError::Storage("the store writer failed before answering this append".into())
        })?
    }

    /// The commit durability this store was opened with.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// Test seam (fault injection): the next `batches` write transactions fail as if the
    /// disk were full — every append of such a batch gets [`AppendError::Storage`] with a
    /// message containing "No space left on device", nothing of it is written — then
    /// writes work again. Calls add up. Not for production use.
    #[doc(hidden)]
    pub fn inject_append_failures(&self, batches: u64) {
        self.inner
            .counters
            .injected_failures
            .fetch_add(batches, Ordering::SeqCst);
    }

    /// Appends waiting in the bounded queue (not yet taken by the writer), for tests.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.inner
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, |s| s.max_capacity() - s.capacity())
    }

    /// Tells `observer` of every later group commit; `false` when one is installed
    /// already (it stays).
    pub fn observe_commits(&self, observer: std::sync::Arc<dyn crate::CommitObserver>) -> bool {
        self.inner.counters.observer.set(observer).is_ok()
    }

    /// Tells `observer` of every later append (its events, or its failure) and log read,
    /// as each returns, on the caller's task; `false` when one is installed already (it
    /// stays). Every clone of this store shares it.
    pub fn observe_appends(&self, observer: std::sync::Arc<dyn crate::AppendObserver>) -> bool {
        self.inner.counters.append_observer.set(observer).is_ok()
    }

    /// Counters of committed events and transactions since open.
    #[must_use]
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            appended_events: self.inner.counters.appended_events.load(Ordering::Relaxed),
            commits: self.inner.counters.commits.load(Ordering::Relaxed),
        }
    }

    /// Appends ([`Store::append`] or [`Store::append_all`] calls with at least one event)
    /// committed since the store was opened: the caller's commit granularity, where
    /// [`StoreStats::commits`] counts write transactions (group commit puts many appends
    /// in one). For load tests.
    #[must_use]
    pub fn appends_committed(&self) -> u64 {
        self.inner.counters.appends.load(Ordering::Relaxed)
    }

    /// The latencies of the appends acknowledged since the store was opened (from the
    /// [`Store::append_all`] call to its commit's acknowledgement). For load tests.
    #[must_use]
    pub fn append_latency(&self) -> crate::Latencies {
        self.inner.counters.append_latency.snapshot()
    }

    /// CPU time the store's writer thread has used since the store was opened (user +
    /// system, read from the thread's own CPU clock, `CLOCK_THREAD_CPUTIME_ID`):
    /// validating, inserting and committing appends — redb's btree work, checksums and
    /// the CPU of its fsync calls — not the encoding, which [`Store::append_all`] does on
    /// the caller's thread, nor the time spent waiting for work. Cumulative and
    /// monotonic; nanosecond resolution. Published once per write transaction, before
    /// its appends resolve (so an append that resolved has its commit counted), and
    /// when the writer stops; `Duration::ZERO` before the first transaction. Cheap: one
    /// atomic load.
    #[must_use]
    pub fn writer_cpu(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.inner.counters.writer_cpu_ns.load(Ordering::Relaxed))
    }

    /// Acknowledged events the database no longer held when this store opened (its
    /// acknowledgement journal said more was committed than it holds: redb's repair
    /// rolled back past acknowledged commits, or the file was damaged or replaced). Each
    /// is also recorded in `<file>.losses` ([`crate::recorded_losses`]). Empty for the
    /// in-memory backend.
    #[must_use]
    pub fn losses(&self) -> &[crate::Loss] {
        &self.inner.losses
    }

    /// Stops accepting appends, waits until every queued append is committed (or failed)
    /// and the writer thread stopped. Later appends fail with [`AppendError::Closed`];
    /// reads keep working. Idempotent.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future does not undo the close; the queue still drains.
    pub async fn close(&self) {
        drop(
            self.inner
                .sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let mut stopped = self.inner.stopped.clone();
        // Err means the writer thread is gone (and so has stopped).
        let _ = stopped.wait_for(|s| *s).await;
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(
            self.sender
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        // Wait for the writer to drain (it holds the database), so reopening the file
        // right after dropping the last clone works.
        if let Some(thread) = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = thread.join();
        }
    }
}

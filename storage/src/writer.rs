//! The writer thread: the only place that opens redb write transactions.
//!
//! It blocks on the bounded request queue, drains up to `max_batch` more requests, and
//! commits all of them in one transaction (group commit). Each request is validated
//! against the session's summary (last seq, deleted flag), cached in memory and loaded
//! lazily (the `sessions` row, brought up to the session's latest event). Only an append
//! that changes the summary's stored fields (creation, title, deletion) rewrites its
//! `sessions` row; an ordinary append inserts just its events (and moves the session's
//! row of the listing index, `recent.rs`, once per batch). Changes of a batch live in an overlay that is merged
//! into the cache only after the commit succeeded, so a failed commit leaves the cache
//! exactly as the database is. A failed batch answers every request with
//! [`AppendError::Storage`]; the thread goes on with the next batch.
//!
//! After each batch's transaction (committed or failed), before answering it, the thread
//! reads its own CPU clock (`CLOCK_THREAD_CPUTIME_ID`) once and publishes the total in
//! [`Counters::writer_cpu_ns`] ([`crate::Store::writer_cpu`]), and once more when it stops.

use crate::codec;
use crate::db::DbSlot;
use crate::error::{AppendError, ReadError};
use crate::pending::{PENDING, PendingChange};
use crate::schema::{EVENTS, SESSIONS, current_summary, session_key};
use foya_protocol::{Event, EventKind, Seq, SessionId, SessionSummary};
use redb::{Database, ReadableTable, Table};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

/// Cached summaries beyond this count are dropped (and reloaded lazily when needed).
const MAX_CACHED_SESSIONS: usize = 65_536;

/// One queued append: the events of one session (checked dense by the caller) as the
/// writer needs them, their encoded values, and where to answer.
pub(crate) struct Request {
    pub(crate) events: Vec<EventMeta>,
    pub(crate) encoded: Vec<Vec<u8>>,
    pub(crate) reply: oneshot::Sender<Result<(), AppendError>>,
}

/// What the writer needs of an appended event besides its encoding: its place in the
/// log and what it changes in the session's summary (so the caller keeps its events
/// instead of handing the writer a copy).
pub(crate) struct EventMeta {
    pub(crate) session_id: SessionId,
    pub(crate) seq: Seq,
    pub(crate) at_ms: u64,
    pub(crate) change: SummaryChange,
    /// What it changes in the recovery index (`pending.rs`).
    pub(crate) pending: PendingChange,
}

/// How one event changes a session's summary.
pub(crate) enum SummaryChange {
    None,
    /// `session_created`: the summary's initial title, cwd and model.
    Created {
        title: Option<String>,
        cwd: std::path::PathBuf,
        model: String,
    },
    /// `title_set`.
    Title(String),
    /// `session_deleted`.
    Deleted,
}

impl EventMeta {
    /// The metadata of `event`.
    pub(crate) fn of(event: &Event) -> Self {
        let change = match &event.kind {
            EventKind::SessionCreated { config } => SummaryChange::Created {
                title: config.title.clone(),
                cwd: config.cwd.clone(),
                model: config.model.clone(),
            },
            EventKind::TitleSet { title, .. } => SummaryChange::Title(title.clone()),
            EventKind::SessionDeleted {} => SummaryChange::Deleted,
            _ => SummaryChange::None,
        };
        Self {
            session_id: event.session_id,
            seq: event.seq,
            at_ms: event.at_ms,
            change,
            pending: PendingChange::of(&event.kind),
        }
    }
}

/// Counters shared with [`crate::Store::stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) appended_events: AtomicU64,
    pub(crate) commits: AtomicU64,
    /// Appends (one [`crate::Store::append`] call each) committed since the store was
    /// opened.
    pub(crate) appends: AtomicU64,
    /// Test seam ([`crate::Store::inject_append_failures`]): this many coming batches
    /// fail as if the disk were full, before touching the database.
    pub(crate) injected_failures: AtomicU64,
    /// CPU time the writer thread has used since it started, in nanoseconds (its
    /// thread CPU clock, published after each batch's transaction and when it stops).
    pub(crate) writer_cpu_ns: AtomicU64,
    /// Logs read ([`crate::Store::read_range`] calls, `read_from` included).
    pub(crate) logs_read: AtomicU64,
    /// Latencies of the acknowledged appends ([`crate::Store::append_latency`]).
    pub(crate) append_latency: crate::LatencyHistogram,
    /// Told of every group commit ([`crate::Store::observe_commits`]).
    pub(crate) observer: std::sync::OnceLock<std::sync::Arc<dyn crate::CommitObserver>>,
    /// Told of every append and log read ([`crate::Store::observe_appends`]).
    pub(crate) append_observer: std::sync::OnceLock<std::sync::Arc<dyn crate::AppendObserver>>,
}

impl Counters {
    /// Publishes the calling thread's CPU time so far as the writer's.
    fn publish_writer_cpu(&self) {
        self.writer_cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }
}

/// CPU time of the calling thread so far (user + system, `CLOCK_THREAD_CPUTIME_ID`), in
/// nanoseconds; 0 if the clock cannot be read.
fn thread_cpu_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
        let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
    })
}

/// Message of a batch failed by [`crate::Store::inject_append_failures`].
pub(crate) const INJECTED_FAILURE: &str = "injected failure: No space left on device";

/// State owned by the writer thread.
pub(crate) struct Writer {
    pub(crate) db: Arc<DbSlot>,
    pub(crate) durability: redb::Durability,
    pub(crate) max_batch: usize,
    /// See [`crate::StoreOptions::commit_linger`].
    pub(crate) commit_linger: std::time::Duration,
    pub(crate) counters: Arc<Counters>,
    /// Summaries of sessions seen, as committed.
    pub(crate) cache: HashMap<u128, SessionSummary>,
    /// The acknowledgement journal (`None` for the in-memory backend).
    pub(crate) journal: Option<crate::journal::Journal>,
}

/// Moves what is queued into `batch`, up to `max_batch` requests, without waiting.
fn drain(rx: &mut mpsc::Receiver<Request>, batch: &mut Vec<Request>, max_batch: usize) {
    while batch.len() < max_batch {
        match rx.try_recv() {
            Ok(request) => batch.push(request),
            Err(_) => break,
        }
    }
}

impl Writer {
    /// Runs until every sender is dropped and the queue is drained.
    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        let max_batch = self.max_batch.max(1);
        let mut contended = false;
        while let Some(first) = rx.blocking_recv() {
            let mut batch = Vec::with_capacity(max_batch.min(64));
            batch.push(first);
            drain(&mut rx, &mut batch, max_batch);
            if contended && batch.len() < max_batch && !self.commit_linger.is_zero() {
                // Several callers are writing: give the ones about to append a moment
                // to join this transaction (a batching policy, not synchronisation).
                std::thread::sleep(self.commit_linger);
                drain(&mut rx, &mut batch, max_batch);
            }
            contended = batch.len() > 1;
            // A panic inside redb must not kill the writer: the batch's reply senders are
            // dropped by the unwind (their callers see a storage failure) and the cache,
            // which may be half-updated, is rebuilt lazily from the database.
            // The database is reopened before the next transaction (it may be damaged).
            let outcome = crate::guard::contain("writing a batch", || self.write_batch(batch));
            if let Err(message) = outcome {
                tracing::error!(%message, "store writer recovered from a panic; the batch failed");
                self.cache.clear();
                self.db.mark_poisoned();
            }
        }
        if let (Some(journal), Ok(db)) = (&self.journal, self.available_db()) {
            crate::losses::mark_clean(&db, journal);
        }
        self.counters.publish_writer_cpu();
        tracing::debug!("store writer stopped");
    }

    fn write_batch(&mut self, batch: Vec<Request>) {
        let span = tracing::debug_span!("store_commit", batch.len = batch.len());
        let _enter = span.enter();
        let mut duration = std::time::Duration::ZERO;
        let injected = self
            .counters
            .injected_failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = match self.available_db() {
            Ok(_) if injected => Err(BatchFailure {
                error: AppendError::Storage(INJECTED_FAILURE.into()),
                io: false,
            }),
            Ok(db) => {
                let started = std::time::Instant::now();
                let result = self.try_commit(&db, &batch);
                duration = started.elapsed();
                result
            }
            Err(message) => Err(BatchFailure {
                error: AppendError::Storage(message),
                io: false,
            }),
        };
        // Before any answer: whoever sees its append resolved sees its commit counted.
        self.counters.publish_writer_cpu();
        match result {
            Ok((outcomes, overlay)) => {
                let events: usize = batch
                    .iter()
                    .zip(&outcomes)
                    .filter(|(_, o)| o.is_ok())
                    .map(|(r, _)| r.events.len())
                    .sum();
                if !overlay.is_empty() {
                    self.counters.commits.fetch_add(1, Ordering::Relaxed);
                    // After the commit, before any append resolves: what is journaled
                    // was committed, and every resolved append is journaled.
                    if let Some(journal) = &mut self.journal {
                        journal.acknowledge(
                            overlay.iter().map(|(key, c)| (*key, c.summary.last_seq.0)),
                        );
                    }
                }
                let appends = outcomes.iter().filter(|o| o.is_ok()).count();
                if !overlay.is_empty()
                    && let Some(observer) = self.counters.observer.get()
                {
                    observer.committed(crate::CommitStat {
                        duration,
                        appends,
                        events,
                    });
                }
                self.counters
                    .appended_events
                    .fetch_add(events as u64, Ordering::Relaxed);
                self.counters
                    .appends
                    .fetch_add(appends as u64, Ordering::Relaxed);
                if self.cache.len() + overlay.len() > MAX_CACHED_SESSIONS {
                    self.cache.clear();
                }
                self.cache
                    .extend(overlay.into_iter().map(|(key, c)| (key, c.summary)));
                for (request, outcome) in batch.into_iter().zip(outcomes) {
                    // The caller may have stopped waiting (cancelled append): fine.
                    let _ = request.reply.send(outcome);
                }
            }
            Err(failure) => {
                tracing::warn!(error = %failure.error, "store batch failed; its appends are refused");
                for request in batch {
                    let _ = request.reply.send(Err(failure.error.clone()));
                }
                if failure.io {
                    // redb refuses everything after an I/O error until reopened.
                    if let Err(message) = self.db.reopen() {
                        tracing::warn!(error = %message, "store reopen failed; retried on the next batch");
                    }
                }
            }
        }
    }

    /// The database, reopened first if an earlier reopen failed.
    fn available_db(&self) -> Result<Arc<Database>, String> {
        if !self.db.is_available() || self.db.is_poisoned() {
            self.db.reopen()?;
        }
        self.db.get()
    }

    /// Validates and inserts the batch in one write transaction and commits it. Returns
    /// each request's outcome and the summaries it changed.
    fn try_commit(
        &self,
        db: &Database,
        batch: &[Request],
    ) -> Result<(Outcomes, Overlay), BatchFailure> {
        let mut txn = db.begin_write().map_err(BatchFailure::redb)?;
        txn.set_durability(self.durability)
            .map_err(BatchFailure::redb)?;
        let mut overlay = Overlay::with_capacity(batch.len());
        let mut outcomes = Vec::with_capacity(batch.len());
        {
            let mut events = txn.open_table(EVENTS).map_err(BatchFailure::redb)?;
            let mut sessions = txn.open_table(SESSIONS).map_err(BatchFailure::redb)?;
            let mut pending = txn.open_table(PENDING).map_err(BatchFailure::redb)?;
            let mut recent = txn
                .open_table(crate::recent::RECENT)
                .map_err(BatchFailure::redb)?;
            // Each session's `updated_at_ms` before the batch (`None`: a new session),
            // for the listing index.
            let mut before: HashMap<u128, Option<u64>> = HashMap::with_capacity(batch.len());
            for request in batch {
                let Some(first) = request.events.first() else {
                    outcomes.push(Ok(()));
                    continue;
                };
                let key = session_key(first.session_id);
                let (current, stored_changed) = match overlay.get(&key) {
                    Some(changed) => (Ok(Some(changed.summary.clone())), changed.stored_changed),
                    None => match self.cache.get(&key) {
                        Some(summary) => (Ok(Some(summary.clone())), false),
                        None => (load_summary(&sessions, &events, key)?, false),
                    },
                };
                if let Ok(current) = &current {
                    before
                        .entry(key)
                        .or_insert_with(|| current.as_ref().map(|s| s.updated_at_ms));
                }
                match current.and_then(|current| next_summary(current, &request.events)) {
                    Ok(summary) => {
                        for (event, value) in request.events.iter().zip(&request.encoded) {
                            events
                                .insert((key, event.seq.0), value.as_slice())
                                .map_err(BatchFailure::redb)?;
                            crate::pending::apply(&mut pending, key, event.pending)
                                .map_err(BatchFailure::redb)?;
                        }
                        let stored_changed = stored_changed
                            || request
                                .events
                                .iter()
                                .any(|e| !matches!(e.change, SummaryChange::None));
                        overlay.insert(
                            key,
                            Changed {
                                summary,
                                stored_changed,
                            },
                        );
                        outcomes.push(Ok(()));
                    }
                    Err(refused) => outcomes.push(Err(refused)),
                }
            }
            for (key, changed) in &overlay {
                let was = before.get(key).copied().flatten();
                crate::recent::moved(&mut recent, *key, was, changed.summary.updated_at_ms)
                    .map_err(BatchFailure::redb)?;
            }
            for (key, changed) in overlay.iter().filter(|(_, c)| c.stored_changed) {
                let value = codec::encode(&changed.summary).map_err(|e| BatchFailure {
                    error: AppendError::Encode(e.0),
                    io: false,
                })?;
                sessions
                    .insert(*key, value.as_slice())
                    .map_err(BatchFailure::redb)?;
            }
        }
        if overlay.is_empty() {
            // Every append was refused: nothing to make durable, skip the fsync.
            txn.abort().map_err(BatchFailure::redb)?;
        } else {
            txn.commit().map_err(BatchFailure::redb)?;
        }
        Ok((outcomes, overlay))
    }
}

/// Each request's answer, in batch order.
type Outcomes = Vec<Result<(), AppendError>>;

/// Summaries changed by a batch, merged into the cache once it committed.
type Overlay = HashMap<u128, Changed>;

/// A session's summary after a batch's appends.
struct Changed {
    summary: SessionSummary,
    /// An append changed a field kept in the `sessions` row (not only `last_seq` and
    /// `updated_at_ms`, which readers take from the events): the row is rewritten.
    stored_changed: bool,
}

/// A failure of a whole batch: nothing of it was committed.
struct BatchFailure {
    /// What every request of the batch is answered.
    error: AppendError,
    /// An I/O error: redb must be reopened before it accepts writes again.
    io: bool,
}

impl BatchFailure {
    fn redb(e: impl Into<redb::Error>) -> Self {
        let e: redb::Error = e.into();
        let io = matches!(e, redb::Error::Io(_) | redb::Error::PreviousIo);
        Self {
            error: AppendError::Storage(e.to_string()),
            io,
        }
    }
}

impl fmt::Debug for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BatchFailure({}, io: {})", self.error, self.io)
    }
}

/// A session's committed summary (`None`: unknown session), or why it cannot be used.
type LoadedSummary = Result<Option<SessionSummary>, AppendError>;

/// The committed summary of a session, up to its latest event. A summary (or latest
/// event) that does not decode refuses only the appends of its session; a redb failure
/// fails the batch.
fn load_summary(
    sessions: &Table<'_, u128, &[u8]>,
    events: &Table<'_, (u128, u64), &[u8]>,
    key: u128,
) -> Result<LoadedSummary, BatchFailure> {
    let Some(value) = sessions.get(key).map_err(BatchFailure::redb)? else {
        return Ok(Ok(None));
    };
    match current_summary(events, key, value.value()) {
        Ok(summary) => Ok(Ok(Some(summary))),
        Err(ReadError::Storage(message)) => Err(BatchFailure {
            error: AppendError::Storage(message),
            io: false,
        }),
        Err(refused) => Ok(Err(AppendError::from(refused))),
    }
}

/// Checks that `events` (one session, dense seqs) continue the log summarised by
/// `current`, and returns the summary after them.
pub(crate) fn next_summary(
    current: Option<SessionSummary>,
    events: &[EventMeta],
) -> Result<SessionSummary, AppendError> {
    let mut summary = match (current, events.first()) {
        (_, None) => return Err(AppendError::Storage("empty append".into())),
        (Some(summary), Some(first)) => {
            if summary.deleted {
                return Err(AppendError::SessionDeleted);
            }
            let expected = summary.last_seq.next();
            if first.seq != expected {
                return Err(AppendError::SeqMismatch {
                    expected,
                    got: first.seq,
                });
            }
            summary
        }
        (None, Some(first)) => {
            let SummaryChange::Created { title, cwd, model } = &first.change else {
                return Err(AppendError::UnknownSession);
            };
            if first.seq != Seq::FIRST {
                return Err(AppendError::SeqMismatch {
                    expected: Seq::FIRST,
                    got: first.seq,
                });
            }
            SessionSummary {
                id: first.session_id,
                title: title.clone(),
                cwd: cwd.clone(),
                model: model.clone(),
                created_at_ms: first.at_ms,
                updated_at_ms: first.at_ms,
                last_seq: Seq(0),
                deleted: false,
                node: None,
            }
        }
    };
    for event in events {
        if summary.deleted {
            return Err(AppendError::SessionDeleted);
        }
        match &event.change {
            SummaryChange::Title(title) => summary.title = Some(title.clone()),
            SummaryChange::Deleted => summary.deleted = true,
            SummaryChange::None | SummaryChange::Created { .. } => {}
        }
        summary.last_seq = event.seq;
        summary.updated_at_ms = event.at_ms;
    }
    Ok(summary)
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "writer_backpressure_tests.rs"]
mod backpressure_tests;

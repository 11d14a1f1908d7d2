//! The storage seam: [`EventLog`], what the runtime asks of an event store, and
//! [`LogStore`], the handle the runtime holds.
//!
//! Two engines implement [`EventLog`]: the embedded redb [`Store`] (the default: one
//! file per data directory) and, in the separate crate `foya-storage-pg`, a log in
//! PostgreSQL that several machines share. Both keep the same rules — per session a
//! dense `seq` starting with `session_created` at 1, nothing after `session_deleted`, the
//! recovery index and the summary changed with the events that change them, a committed
//! event never changed — and the conformance suite (feature `conformance`,
//! `foya_storage::conformance`) checks them on each.
//!
//! Reads are `async`: a network engine cannot answer "briefly" from async code the way a
//! local file does. The redb store answers them at once on the caller's thread, as
//! before (its futures are ready on their first poll).
//!
//! **The hot path does not pay for the seam.** [`LogStore`] is an enum: its `Redb`
//! variant calls the [`Store`] directly (no allocation, no dynamic dispatch); only the
//! `Shared` variant, whose every call is a network round trip anyway, goes through a
//! boxed future ([`DynEventLog`]).
//!
//! **Fencing.** Every append carries a [`Fence`]. A shared engine checks it atomically
//! with the insert and refuses a stale one with [`AppendError::Fenced`], which is never
//! retried ([`AppendError::is_retryable`]): the writer lost the session's shard to
//! another node and must stop. [`Fence::None`] claims no shard: a shared engine accepts
//! it only while no node owns the session's shard. The redb store ignores every fence
//! (its data-directory lock is its fence: one process writes a file; it is a single
//! node that owns every shard).

use crate::error::{AppendError, ReadError};
use crate::latency::Latencies;
pub use crate::listing::{Cursor, Page};
use crate::store::{Store, StoreStats};
use foya_protocol::{Event, Seq, SessionId, SessionSummary};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The ownership token an append is made under: a shared engine commits the append only
/// while the shard's epoch is still `epoch` and its owner's lease is live (checked in
/// the same statement as the insert). `None` (the default) claims no shard: a shared
/// engine then commits only while no node owns the session's shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fence {
    /// No ownership check (a single-node store, or a tool working on a stopped store).
    #[default]
    None,
    /// Commit only while `shard`'s epoch is `epoch`.
    Epoch {
        /// The session's shard.
        shard: u32,
        /// The epoch the writer claimed the shard with.
        epoch: u64,
    },
}

/// The operations the runtime uses on an event store. Implemented by the redb
/// [`Store`], by `foya_storage_pg::PgLog`, and by [`LogStore`] (either).
///
/// Every method's future is `Send`, so the runtime's actors can await it.
pub trait EventLog: Clone + Send + Sync + fmt::Debug + 'static {
    /// Appends events of ONE session whose seqs continue its log densely (the first
    /// event of a new session is `session_created` at `Seq(1)`), with the recovery index
    /// and the summary they change, in one transaction. Resolves after the commit.
    ///
    /// # Errors
    /// As [`Store::append`], and [`AppendError::Fenced`] when `fence` is stale.
    fn append(
        &self,
        events: &[Event],
        fence: Fence,
    ) -> impl Future<Output = Result<(), AppendError>> + Send;

    /// At most `limit` committed events of `session` with seq `>= from`, in seq order
    /// (empty for an unknown session).
    ///
    /// # Errors
    /// [`ReadError`].
    fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Event>, ReadError>> + Send;

    /// Every committed event of `session` with seq `>= from`.
    ///
    /// # Errors
    /// [`ReadError`].
    fn read_from(
        &self,
        session: SessionId,
        from: Seq,
    ) -> impl Future<Output = Result<Vec<Event>, ReadError>> + Send {
        self.read_range(session, from, usize::MAX)
    }

    /// The seq of the session's latest committed event; `None` for an unknown session.
    ///
    /// # Errors
    /// [`ReadError`].
    fn last_seq(
        &self,
        session: SessionId,
    ) -> impl Future<Output = Result<Option<Seq>, ReadError>> + Send;

    /// The session's summary (deleted sessions too, `deleted: true`).
    ///
    /// # Errors
    /// [`ReadError`].
    fn session(
        &self,
        session: SessionId,
    ) -> impl Future<Output = Result<Option<SessionSummary>, ReadError>> + Send;

    /// A page of session summaries, deleted ones included, most recently updated first
    /// (ties: newer id first).
    ///
    /// # Errors
    /// [`ReadError`].
    fn list_sessions(
        &self,
        page: Page,
    ) -> impl Future<Output = Result<Vec<SessionSummary>, ReadError>> + Send;

    /// The sessions that may have work left (queued inputs, an open turn), from the
    /// recovery index: what start-up recovers. Never a deleted session; a superset is
    /// safe.
    ///
    /// # Errors
    /// [`ReadError`].
    fn pending_sessions(&self) -> impl Future<Output = Result<Vec<SessionId>, ReadError>> + Send;

    /// Stops accepting appends and waits until every queued append is committed or
    /// failed. Later appends fail with [`AppendError::Closed`]. Idempotent.
    fn close(&self) -> impl Future<Output = ()> + Send;

    /// Counters of committed events and transactions since open.
    fn stats(&self) -> StoreStats;

    /// The latencies of the appends acknowledged since open (call to acknowledgement),
    /// for load tests; empty for a log that does not record them.
    fn append_latency(&self) -> Latencies {
        Latencies::default()
    }

    /// The attachment store this log keeps beside it, readable by every node that opens
    /// the log (`None`: attachments stay in the local data directory, as with redb).
    fn attachments(&self) -> Option<Arc<dyn SharedAttachments>> {
        None
    }

    /// Tells `observer` of every later group commit (its time and size); `false` when
    /// the store does not report them or has an observer already.
    fn observe_commits(&self, observer: std::sync::Arc<dyn crate::CommitObserver>) -> bool {
        let _ = observer;
        false
    }

    /// Tells `observer` of every later append and log read as each returns (what a
    /// wrapper around the log would see, without the wrapper); `false` when the store
    /// does not report them or has an observer already: then wrap it.
    fn observe_appends(&self, observer: std::sync::Arc<dyn crate::AppendObserver>) -> bool {
        let _ = observer;
        false
    }

    /// Where the log is, for messages: a file path, or a database URL without its
    /// password.
    fn location(&self) -> String;
}

impl EventLog for Store {
    async fn append(&self, events: &[Event], _fence: Fence) -> Result<(), AppendError> {
        // The data directory's lock is redb's fence: one process writes a file.
        self.append_all(events).await
    }

    async fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, ReadError> {
        Store::read_range(self, session, from, limit)
    }

    async fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        Store::last_seq(self, session)
    }

    async fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        Store::session(self, session)
    }

    async fn list_sessions(&self, page: Page) -> Result<Vec<SessionSummary>, ReadError> {
        Store::list_page(self, page)
    }

    async fn pending_sessions(&self) -> Result<Vec<SessionId>, ReadError> {
        Store::pending_sessions(self)
    }

    async fn close(&self) {
        Store::close(self).await;
    }

    fn stats(&self) -> StoreStats {
        Store::stats(self)
    }

    fn append_latency(&self) -> Latencies {
        Store::append_latency(self)
    }

    fn observe_commits(&self, observer: std::sync::Arc<dyn crate::CommitObserver>) -> bool {
        Store::observe_commits(self, observer)
    }

    fn observe_appends(&self, observer: std::sync::Arc<dyn crate::AppendObserver>) -> bool {
        Store::observe_appends(self, observer)
    }

    fn location(&self) -> String {
        self.inner.location.display().to_string()
    }
}

/// The page of `all` (already in the listing's order) that `page` asks for.
pub(crate) fn paged(all: Vec<SessionSummary>, page: Page) -> Vec<SessionSummary> {
    let start = match page.after {
        Some(cursor) => all.partition_point(|s| !cursor.precedes(s)),
        None => 0,
    };
    all.into_iter().skip(start).take(page.limit).collect()
}

/// Attachments (image uploads, tools' images) kept in a shared engine beside the log,
/// so that every node reads what any node stored ([`EventLog::attachments`]).
///
/// The calls block the calling thread until the engine answered (the attachment store
/// above them is synchronous, like a local file's): an implementation must answer from
/// its own thread or connection, never need the caller's async runtime to make
/// progress, and bound its wait.
pub trait SharedAttachments: Send + Sync + fmt::Debug + 'static {
    /// Stores `bytes` of `media_type` under `id` (an id already stored keeps its first
    /// bytes: ids are fresh UUIDv7s, an attachment never changes).
    ///
    /// # Errors
    /// [`SharedAttachmentError`]: the engine's error.
    fn put(
        &self,
        id: [u8; 16],
        media_type: &str,
        bytes: &[u8],
    ) -> Result<(), SharedAttachmentError>;

    /// The media type and bytes of attachment `id`; `None` when there is none.
    ///
    /// # Errors
    /// [`SharedAttachmentError`]: the engine's error.
    fn get(&self, id: [u8; 16]) -> Result<Option<(String, Vec<u8>)>, SharedAttachmentError>;
}

/// A shared attachment engine refused or did not answer ([`SharedAttachments`]); its
/// message, fit to show to a user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SharedAttachmentError(pub String);

/// A boxed future, for [`DynEventLog`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`EventLog`] with boxed futures, so a shared engine can sit behind a pointer in
/// [`LogStore::Shared`] without `foya-storage` naming it. Every [`EventLog`] is one.
pub trait DynEventLog: Send + Sync + fmt::Debug + 'static {
    /// [`EventLog::append`].
    fn append_dyn<'a>(
        &'a self,
        events: &'a [Event],
        fence: Fence,
    ) -> BoxFuture<'a, Result<(), AppendError>>;
    /// [`EventLog::read_range`].
    fn read_range_dyn(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, ReadError>>;
    /// [`EventLog::last_seq`].
    fn last_seq_dyn(&self, session: SessionId) -> BoxFuture<'_, Result<Option<Seq>, ReadError>>;
    /// [`EventLog::session`].
    fn session_dyn(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<Option<SessionSummary>, ReadError>>;
    /// [`EventLog::list_sessions`].
    fn list_sessions_dyn(
        &self,
        page: Page,
    ) -> BoxFuture<'_, Result<Vec<SessionSummary>, ReadError>>;
    /// [`EventLog::pending_sessions`].
    fn pending_sessions_dyn(&self) -> BoxFuture<'_, Result<Vec<SessionId>, ReadError>>;
    /// [`EventLog::close`].
    fn close_dyn(&self) -> BoxFuture<'_, ()>;
    /// [`EventLog::stats`].
    fn stats_dyn(&self) -> StoreStats;
    /// [`EventLog::append_latency`].
    fn append_latency_dyn(&self) -> Latencies;
    /// [`EventLog::attachments`].
    fn attachments_dyn(&self) -> Option<Arc<dyn SharedAttachments>>;
    /// [`EventLog::observe_commits`].
    fn observe_commits_dyn(&self, observer: std::sync::Arc<dyn crate::CommitObserver>) -> bool;
    /// [`EventLog::observe_appends`].
    fn observe_appends_dyn(&self, observer: std::sync::Arc<dyn crate::AppendObserver>) -> bool;
    /// [`EventLog::location`].
    fn location_dyn(&self) -> String;
}

impl<L: EventLog> DynEventLog for L {
    fn append_dyn<'a>(
        &'a self,
        events: &'a [Event],
        fence: Fence,
    ) -> BoxFuture<'a, Result<(), AppendError>> {
        Box::pin(self.append(events, fence))
    }
    fn read_range_dyn(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Event>, ReadError>> {
        Box::pin(self.read_range(session, from, limit))
    }
    fn last_seq_dyn(&self, session: SessionId) -> BoxFuture<'_, Result<Option<Seq>, ReadError>> {
        Box::pin(self.last_seq(session))
    }
    fn session_dyn(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<Option<SessionSummary>, ReadError>> {
        Box::pin(self.session(session))
    }
    fn list_sessions_dyn(
        &self,
        page: Page,
    ) -> BoxFuture<'_, Result<Vec<SessionSummary>, ReadError>> {
        Box::pin(self.list_sessions(page))
    }
    fn pending_sessions_dyn(&self) -> BoxFuture<'_, Result<Vec<SessionId>, ReadError>> {
        Box::pin(self.pending_sessions())
    }
    fn close_dyn(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.close())
    }
    fn stats_dyn(&self) -> StoreStats {
        self.stats()
    }
    fn append_latency_dyn(&self) -> Latencies {
        self.append_latency()
    }
    fn attachments_dyn(&self) -> Option<Arc<dyn SharedAttachments>> {
        self.attachments()
    }
    fn observe_commits_dyn(&self, observer: std::sync::Arc<dyn crate::CommitObserver>) -> bool {
        self.observe_commits(observer)
    }
    fn observe_appends_dyn(&self, observer: std::sync::Arc<dyn crate::AppendObserver>) -> bool {
        self.observe_appends(observer)
    }
    fn location_dyn(&self) -> String {
        self.location()
    }
}

/// The event store the runtime holds: the embedded redb [`Store`], called directly, or
/// a shared engine (PostgreSQL) behind [`DynEventLog`]. Cheap to clone.
#[derive(Clone, Debug)]
pub enum LogStore {
    /// The embedded redb store (the default).
    Redb(Store),
    /// A store shared by several machines (`foya-storage-pg`).
    Shared(Arc<dyn DynEventLog>),
}

impl LogStore {
    /// A shared engine's log.
    pub fn shared(log: impl EventLog) -> Self {
        Self::Shared(Arc::new(log))
    }

    /// The redb store, when it is one (the redb-only tools: survey, check, salvage,
    /// backup, the acknowledgement journal, load-test counters).
    #[must_use]
    pub fn as_redb(&self) -> Option<&Store> {
        match self {
            Self::Redb(store) => Some(store),
            Self::Shared(_) => None,
        }
    }

    /// Whether this is a shared engine (not the embedded redb file).
    #[must_use]
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::Shared(_))
    }
}

impl From<Store> for LogStore {
    fn from(store: Store) -> Self {
        Self::Redb(store)
    }
}

impl EventLog for LogStore {
    async fn append(&self, events: &[Event], fence: Fence) -> Result<(), AppendError> {
        match self {
            Self::Redb(store) => store.append_all(events).await,
            Self::Shared(log) => log.append_dyn(events, fence).await,
        }
    }

    async fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, ReadError> {
        match self {
            Self::Redb(store) => Store::read_range(store, session, from, limit),
            Self::Shared(log) => log.read_range_dyn(session, from, limit).await,
        }
    }

    async fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        match self {
            Self::Redb(store) => Store::last_seq(store, session),
            Self::Shared(log) => log.last_seq_dyn(session).await,
        }
    }

    async fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        match self {
            Self::Redb(store) => Store::session(store, session),
            Self::Shared(log) => log.session_dyn(session).await,
        }
    }

    async fn list_sessions(&self, page: Page) -> Result<Vec<SessionSummary>, ReadError> {
        match self {
            Self::Redb(store) => EventLog::list_sessions(store, page).await,
            Self::Shared(log) => log.list_sessions_dyn(page).await,
        }
    }

    async fn pending_sessions(&self) -> Result<Vec<SessionId>, ReadError> {
        match self {
            Self::Redb(store) => Store::pending_sessions(store),
            Self::Shared(log) => log.pending_sessions_dyn().await,
        }
    }

    async fn close(&self) {
        match self {
            Self::Redb(store) => Store::close(store).await,
            Self::Shared(log) => log.close_dyn().await,
        }
    }

    fn stats(&self) -> StoreStats {
        match self {
            Self::Redb(store) => Store::stats(store),
            Self::Shared(log) => log.stats_dyn(),
        }
    }

    fn append_latency(&self) -> Latencies {
        match self {
            Self::Redb(store) => Store::append_latency(store),
            Self::Shared(log) => log.append_latency_dyn(),
        }
    }

    fn attachments(&self) -> Option<Arc<dyn SharedAttachments>> {
        match self {
            Self::Redb(_) => None,
            Self::Shared(log) => log.attachments_dyn(),
        }
    }

    fn observe_commits(&self, observer: std::sync::Arc<dyn crate::CommitObserver>) -> bool {
        match self {
            Self::Redb(store) => Store::observe_commits(store, observer),
            Self::Shared(log) => log.observe_commits_dyn(observer),
        }
    }

    fn observe_appends(&self, observer: std::sync::Arc<dyn crate::AppendObserver>) -> bool {
        match self {
            Self::Redb(store) => Store::observe_appends(store, observer),
            Self::Shared(log) => log.observe_appends_dyn(observer),
        }
    }

    fn location(&self) -> String {
        match self {
            Self::Redb(store) => EventLog::location(store),
            Self::Shared(log) => log.location_dyn(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: u8, at: u64) -> SessionSummary {
        SessionSummary {
            id: SessionId::from_bytes([id; 16]),
            title: None,
            cwd: "/w".into(),
            model: String::new(),
            created_at_ms: at,
            updated_at_ms: at,
            last_seq: Seq(1),
            deleted: false,
            node: None,
        }
    }

    #[test]
    fn pages_follow_the_listing_order_and_resume_after_the_cursor() {
        // Listing order: newest update first, ties newer id first.
        let all = vec![
            summary(1, 30),
            summary(3, 20),
            summary(2, 20),
            summary(4, 10),
        ];
        let first = paged(all.clone(), Page::first(2));
        assert_eq!(first, all[..2].to_vec());
        let cursor = Cursor::after(&first[1]);
        assert_eq!(
            paged(all.clone(), Page::after(cursor, 2)),
            all[2..].to_vec()
        );
        assert_eq!(
            paged(all.clone(), Page::after(Cursor::after(&all[3]), 5)),
            vec![]
        );
        assert_eq!(paged(all.clone(), Page::ALL), all);
    }
}

//! `foya-storage-pg`: Foya's event log in PostgreSQL, the shared engine behind the
//! storage seam ([`foya_storage::EventLog`]): every node of a cluster reads and writes
//! one log, so a node's death strands no session's history.
//!
//! Invariants: this crate is the only one that names the PostgreSQL client; it keeps the
//! rules of the redb store — per session a dense `seq` from `session_created` at 1,
//! nothing after `session_deleted`, the recovery index and the summary changed in the
//! same transaction as the events — and they are enforced by the database itself (the
//! `foya_append` function and the `(session, seq)` primary key), not by a cache here.
//!
//! # Schema
//!
//! `schema_v1.sql` and `schema_v2.sql` (version [`SCHEMA_VERSION`], recorded in
//! `foya_schema`; applied on [`PgLog::open`] by `migrate.rs`): `foya_sessions` (the
//! summary, `last_seq`, `deleted`, the shard), `foya_events` (`(session, seq)` primary
//! key; `body` is [`foya_storage::codec`]'s versioned encoding of the event, `epoch` the
//! shard epoch it was written under), `foya_pending` (the recovery index), `foya_shards`
//! (each shard's epoch and owning lease), `foya_nodes` (node leases), `foya_meta` (the
//! shard count) and `foya_attachments` (image bytes, readable by every node: the runtime's
//! attachment store reads and writes them through [`EventLog::attachments`],
//! [`PgAttachments`]).
//!
//! # Writes: group commit in one statement
//!
//! [`PgLog`]'s writer task takes queued appends (many sessions') and sends each batch
//! as ONE statement, `SELECT * FROM foya_append(…arrays…)`, in autocommit on one of
//! [`PgOptions::connections`] connections: the batch is one transaction, but no client
//! ever holds a transaction open between statements, so a paused process blocks
//! nothing. While every connection is busy, appends queue and the next statement carries
//! them all (PostgreSQL's own group commit adds the concurrent statements' commits to one
//! WAL flush). Each append resolves after its statement committed, with its own outcome:
//! a refused append (gap, deleted session, stale fence) writes nothing and does not
//! affect the others of the batch; a failed statement (connection lost, server restart)
//! fails every append of it with [`AppendError::Storage`] and the connection is opened
//! again for the next batch. Such a statement may have committed before its answer was
//! lost; its server process is ended before the appends are answered (so nothing of it
//! commits later), and the runtime's session reads the log before it takes the append
//! as not written. When that process cannot be ended (the server unreachable, or
//! refusing the connection opened for it, or slower than 5 s), the appends are answered
//! [`AppendError::Unknown`], and so is every failed append until it has been ended on a
//! later connection: the session then restarts from the log instead of taking them as
//! refused.
//!
//! # Acknowledgement
//!
//! An append resolves after PostgreSQL reported its commit: with the server's
//! `synchronous_commit = on` (PostgreSQL's default) the WAL was flushed on the primary
//! and, when `synchronous_standby_names` names a standby, on that standby too
//! (docs/durability.md). [`PgOptions::synchronous_commit`] `false` sets it `off` on the
//! writer's connections (load tests): a server crash may then lose the last commits.
//!
//! # Shards, leases and fencing
//!
//! Sessions hash into a fixed number of shards ([`Shards`], [`shard`]); nodes hold
//! leases renewed on the database's clock and own shards by bumping their epochs
//! ([`lease`]: [`NodeLease`], [`LeaseKeeper`]). An append under [`Fence::Epoch`] commits
//! only while `foya_shards` has the shard at that epoch and its owner's lease is live,
//! and the session is in that shard (checked `FOR SHARE` in the same statement);
//! otherwise it fails with [`AppendError::Fenced`] (or [`AppendError::WrongShard`]),
//! which is never retried. An unfenced append commits only while no live lease owns the
//! session's shard. Each event records the epoch it was written under
//! ([`PgLog::event_epochs`], [`PgLog::epoch_regressions`]).
#![warn(missing_docs)]

mod attachments;
pub mod directory;
pub mod lease;
mod migrate;
mod ownership;
pub mod shard;
#[cfg(feature = "testkit")]
pub mod testkit;
mod writer;

pub use attachments::{ANSWER_WITHIN, PgAttachments};
pub use directory::{Directory, Placement};
pub use lease::{
    ClaimError, EpochRegression, LeaseError, LeaseKeeper, LeaseOptions, LeaseStatus, LiveNode,
    NodeLease,
};
pub use migrate::SCHEMA_VERSION;
pub use ownership::ShardOwnership;
pub use shard::{DEFAULT_SHARDS, Shards};

use foya_protocol::{Event, EventKind, Seq, SessionId, SessionSummary};
use foya_storage::{
    AppendError, EventLog, Fence, Latencies, Page, ReadError, SharedAttachments, StoreStats,
};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::{Client, Config, NoTls, Statement};
use uuid::Uuid;

/// The number of shards of a store created with the default [`PgOptions::shards`].
pub const SHARDS: u32 = DEFAULT_SHARDS;

/// The shard of a root `session` in a store of [`SHARDS`] shards ([`Shards::of`]; a
/// store's own count: [`PgLog::shards`]).
#[must_use]
pub fn shard_of(session: SessionId) -> u32 {
    Shards::default().of(session)
}

/// Why [`PgLog::open`] (or an attachment call) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The URL is not a PostgreSQL connection string.
    #[error("invalid PostgreSQL URL: {0}")]
    Config(String),
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to PostgreSQL at {location}: {message}")]
    Connect {
        /// The server (URL without password).
        location: String,
        /// Why.
        message: String,
    },
    /// The database's schema was written by a newer build.
    #[error(
        "the database's Foya schema is version {found}, newer than this build's {supported}; \
         upgrade foya"
    )]
    NewerSchema {
        /// The version found in `foya_schema`.
        found: i32,
        /// The version this build writes.
        supported: i32,
    },
    /// A statement failed.
    #[error("PostgreSQL: {0}")]
    Db(String),
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Db(render(&e))
    }
}

/// A PostgreSQL error with the server's message and detail, when it sent one.
pub(crate) fn render(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {} ({detail})", db.severity(), db.message()),
            None => format!("{}: {}", db.severity(), db.message()),
        },
        None => {
            let mut out = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                out.push_str(": ");
                out.push_str(&s.to_string());
                source = s.source();
            }
            out
        }
    }
}

/// Options of [`PgLog::open`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections the writer sends batches on, at most one statement in flight each;
    /// default 2 (0 counts as 1). Appends arriving while every connection is busy join
    /// the next batch: with 2 instead of 4, three nodes on one server committed 1.7×
    /// fewer, larger batches and the server used 28 % less CPU (docs/benchmarks.md).
    pub connections: usize,
    /// Most appends in one statement; default 512 (0 counts as 1).
    pub max_batch: usize,
    /// Capacity of the bounded append queue; default 4096. A full queue makes appends
    /// wait (backpressure).
    pub queue_capacity: usize,
    /// `true` (default): the server's `synchronous_commit` setting stands (PostgreSQL's
    /// default `on`: an acknowledged append was flushed). `false`: `off` on the writer's
    /// connections, for load tests.
    pub synchronous_commit: bool,
    /// The shard count of a store this open creates (default [`DEFAULT_SHARDS`], at most
    /// [`shard::MAX_SHARDS`]); an existing store keeps the count it was created with.
    pub shards: u32,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            connections: 2,
            max_batch: 512,
            queue_capacity: 4096,
            synchronous_commit: true,
            shards: DEFAULT_SHARDS,
        }
    }
}

/// Counters for [`EventLog::stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) appended_events: AtomicU64,
    pub(crate) commits: AtomicU64,
    /// Latencies of the acknowledged appends (call to acknowledgement).
    pub(crate) append_latency: foya_storage::LatencyHistogram,
    /// Told of every batch's statement ([`EventLog::observe_commits`]).
    pub(crate) observer: std::sync::OnceLock<Arc<dyn foya_storage::CommitObserver>>,
}

/// The event log in PostgreSQL. Cheap to clone: clones share the writer task and the
/// connections. Dropping the last clone stops the writer after what was queued.
#[derive(Clone)]
pub struct PgLog {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    location: String,
    reader: tokio::sync::Mutex<Option<Arc<Reader>>>,
    /// `None` once closing started.
    sender: Mutex<Option<mpsc::Sender<writer::Request>>>,
    stopped: watch::Receiver<bool>,
    counters: Arc<Counters>,
    /// `foya_attachments`' thread, started by the first [`EventLog::attachments`].
    attachments: std::sync::OnceLock<Arc<PgAttachments>>,
    shards: Shards,
}

impl fmt::Debug for PgLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgLog")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// `postgresql://user@host:port/db` of `config`: what messages name (never a password).
fn location(config: &Config) -> String {
    let user = config.get_user().unwrap_or("");
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("");
    format!("postgresql://{user}@{host}:{port}/{db}")
}

/// Opens a connection and runs its driver in a task.
pub(crate) async fn connect(config: &Config) -> Result<Client, PgError> {
    let (client, connection) = config.connect(NoTls).await.map_err(|e| PgError::Connect {
        location: location(config),
        message: render(&e),
    })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %render(&e), "a PostgreSQL connection ended");
        }
    });
    // Belt and braces: no session of ours ever sits in an open transaction.
    client
        .batch_execute("SET idle_in_transaction_session_timeout = '2s'")
        .await?;
    Ok(client)
}

/// The read connection and its prepared statements.
struct Reader {
    client: Client,
    read_range: Statement,
    last_seq: Statement,
    session: Statement,
    list_first: Statement,
    list_after: Statement,
    pending: Statement,
}

const SUMMARY_COLUMNS: &str =
    "session, cwd, model, title, created_at_ms, updated_at_ms, last_seq, deleted";

impl Reader {
    async fn connect(config: &Config) -> Result<Self, PgError> {
        let client = connect(config).await?;
        let read_range = client
            .prepare(
                "SELECT seq, body FROM foya_events WHERE session = $1 AND seq >= $2 \
                 ORDER BY seq LIMIT $3",
            )
            .await?;
        let last_seq = client
            .prepare("SELECT last_seq FROM foya_sessions WHERE session = $1")
            .await?;
        let session = client
            .prepare(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM foya_sessions WHERE session = $1"
            ))
            .await?;
        let list_first = client
            .prepare(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM foya_sessions \
                 ORDER BY updated_at_ms DESC, session DESC LIMIT $1"
            ))
            .await?;
        let list_after = client
            .prepare(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM foya_sessions \
                 WHERE (updated_at_ms, session) < ($1, $2) \
                 ORDER BY updated_at_ms DESC, session DESC LIMIT $3"
            ))
            .await?;
        let pending = client
            .prepare("SELECT DISTINCT session FROM foya_pending")
            .await?;
        Ok(Self {
            client,
            read_range,
            last_seq,
            session,
            list_first,
            list_after,
            pending,
        })
    }
}

fn uuid(id: SessionId) -> Uuid {
    Uuid::from_bytes(*id.as_bytes())
}

/// A count or seq as PostgreSQL's `bigint` (saturating: `usize::MAX` limits mean "all").
fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn read_err(e: &tokio_postgres::Error) -> ReadError {
    ReadError::Storage(render(e))
}

/// A summary row (columns [`SUMMARY_COLUMNS`]).
fn summary(row: &tokio_postgres::Row) -> Result<SessionSummary, ReadError> {
    let get_u64 = |i: usize| -> Result<u64, ReadError> {
        let v: i64 = row.try_get(i).map_err(|e| read_err(&e))?;
        u64::try_from(v).map_err(|_| ReadError::Decode(format!("negative value {v}")))
    };
    let id: Uuid = row.try_get(0).map_err(|e| read_err(&e))?;
    Ok(SessionSummary {
        id: SessionId::from_bytes(*id.as_bytes()),
        cwd: row
            .try_get::<_, String>(1)
            .map_err(|e| read_err(&e))?
            .into(),
        model: row.try_get(2).map_err(|e| read_err(&e))?,
        title: row.try_get(3).map_err(|e| read_err(&e))?,
        created_at_ms: get_u64(4)?,
        updated_at_ms: get_u64(5)?,
        last_seq: Seq(get_u64(6)?),
        deleted: row.try_get(7).map_err(|e| read_err(&e))?,
        node: None,
    })
}

impl PgLog {
    /// Connects to the database `url` names (`postgresql://user@host:port/db`; TLS is not
    /// offered: use a loopback or otherwise private network), brings its schema to
    /// [`SCHEMA_VERSION`] and starts the writer.
    ///
    /// # Errors
    /// [`PgError::Config`], [`PgError::Connect`], [`PgError::NewerSchema`],
    /// [`PgError::Db`].
    pub async fn open(url: &str, options: PgOptions) -> Result<PgLog, PgError> {
        let mut config: Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| PgError::Config(render(&e)))?;
        if config.get_application_name().is_none() {
            config.application_name("foya");
        }
        let location = location(&config);
        let new_shards = Shards::new(options.shards).ok_or_else(|| {
            PgError::Config(format!(
                "a store has 1 to {} shards, not {}",
                shard::MAX_SHARDS,
                options.shards
            ))
        })?;
        let mut client = connect(&config).await?;
        migrate::migrate(&mut client, new_shards.count()).await?;
        let shards = lease::store_shards(&client).await?;
        drop(client);
        let reader = Reader::connect(&config).await?;
        let mut connections = Vec::new();
        let unended = Arc::new(writer::Unended::default());
        for _ in 0..options.connections.max(1) {
            connections.push(
                writer::Connection::open(
                    &config,
                    options.synchronous_commit,
                    shards,
                    Arc::clone(&unended),
                )
                .await?,
            );
        }
        let counters = Arc::new(Counters::default());
        let (sender, receiver) = mpsc::channel(options.queue_capacity.max(1));
        let (stopped_tx, stopped) = watch::channel(false);
        tokio::spawn(writer::run(
            receiver,
            connections,
            options.max_batch.max(1),
            Arc::clone(&counters),
            stopped_tx,
        ));
        Ok(PgLog {
            inner: Arc::new(Inner {
                config,
                location,
                reader: tokio::sync::Mutex::new(Some(Arc::new(reader))),
                sender: Mutex::new(Some(sender)),
                stopped,
                counters,
                attachments: std::sync::OnceLock::new(),
                shards,
            }),
        })
    }

    /// The read connection, opened again when it was lost.
    async fn reader(&self) -> Result<Arc<Reader>, ReadError> {
        let mut slot = self.inner.reader.lock().await;
        if let Some(reader) = slot.as_ref().filter(|r| !r.client.is_closed()) {
            return Ok(Arc::clone(reader));
        }
        let reader = Arc::new(
            Reader::connect(&self.inner.config)
                .await
                .map_err(|e| ReadError::Storage(e.to_string()))?,
        );
        *slot = Some(Arc::clone(&reader));
        Ok(reader)
    }

    /// Stores an attachment's bytes under `id` (an existing id keeps its first bytes).
    ///
    /// # Errors
    /// [`PgError::Db`] when the statement fails.
    pub async fn put_attachment(
        &self,
        id: Uuid,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<(), PgError> {
        let reader = self
            .reader()
            .await
            .map_err(|e| PgError::Db(e.to_string()))?;
        reader
            .client
            .execute(
                "INSERT INTO foya_attachments (id, media_type, bytes) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &media_type, &bytes],
            )
            .await?;
        Ok(())
    }

    /// The attachment `id`: its media type and bytes; `None` when there is none.
    ///
    /// # Errors
    /// [`PgError::Db`] when the statement fails.
    pub async fn attachment(&self, id: Uuid) -> Result<Option<(String, Vec<u8>)>, PgError> {
        let reader = self
            .reader()
            .await
            .map_err(|e| PgError::Db(e.to_string()))?;
        let row = reader
            .client
            .query_opt(
                "SELECT media_type, bytes FROM foya_attachments WHERE id = $1",
                &[&id],
            )
            .await?;
        match row {
            Some(row) => Ok(Some((row.try_get(0)?, row.try_get(1)?))),
            None => Ok(None),
        }
    }

    /// The schema version the database is at.
    ///
    /// # Errors
    /// [`PgError::Db`] when the statement fails.
    pub async fn schema_version(&self) -> Result<i32, PgError> {
        let reader = self
            .reader()
            .await
            .map_err(|e| PgError::Db(e.to_string()))?;
        Ok(reader
            .client
            .query_one("SELECT coalesce(max(version), 0) FROM foya_schema", &[])
            .await?
            .try_get(0)?)
    }
}

/// Whether `kind` is `session_created` (and its summary fields).
fn created_fields(kind: &EventKind) -> Option<(String, String, Option<String>)> {
    match kind {
        EventKind::SessionCreated { config } => Some((
            config.cwd.to_string_lossy().into_owned(),
            config.model.clone(),
            config.title.clone(),
        )),
        _ => None,
    }
}

impl EventLog for PgLog {
    async fn append(&self, events: &[Event], fence: Fence) -> Result<(), AppendError> {
        if events.is_empty() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        AppendError::check_batch(events)?;
        let request = writer::Request::new(events, fence)?;
        let (reply, answer) = oneshot::channel();
        let sender = self
            .inner
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(AppendError::Closed)?;
        sender
            .send(request.with_reply(reply))
            .await
            .map_err(|_| AppendError::Closed)?;
        drop(sender);
        answer.await.map_err(|_| {
            AppendError::Storage("the PostgreSQL writer stopped before answering".into())
        })??;
        self.inner.counters.append_latency.record(started.elapsed());
        Ok(())
    }

    async fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, ReadError> {
        let reader = self.reader().await?;
        let limit = big(u64::try_from(limit).unwrap_or(u64::MAX));
        let rows = reader
            .client
            .query(&reader.read_range, &[&uuid(session), &big(from.0), &limit])
            .await
            .map_err(|e| read_err(&e))?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get(0).map_err(|e| read_err(&e))?;
                let body: &[u8] = row.try_get(1).map_err(|e| read_err(&e))?;
                let seq = u64::try_from(seq)
                    .map_err(|_| ReadError::Decode(format!("negative seq {seq}")))?;
                foya_storage::codec::decode_event(session, Seq(seq), body)
            })
            .collect()
    }

    async fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        let reader = self.reader().await?;
        let row = reader
            .client
            .query_opt(&reader.last_seq, &[&uuid(session)])
            .await
            .map_err(|e| read_err(&e))?;
        match row {
            Some(row) => {
                let seq: i64 = row.try_get(0).map_err(|e| read_err(&e))?;
                Ok(u64::try_from(seq).ok().filter(|s| *s > 0).map(Seq))
            }
            None => Ok(None),
        }
    }

    async fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        let reader = self.reader().await?;
        let row = reader
            .client
            .query_opt(&reader.session, &[&uuid(session)])
            .await
            .map_err(|e| read_err(&e))?;
        row.as_ref().map(summary).transpose()
    }

    async fn list_sessions(&self, page: Page) -> Result<Vec<SessionSummary>, ReadError> {
        let reader = self.reader().await?;
        let limit = big(u64::try_from(page.limit).unwrap_or(u64::MAX));
        let rows = match page.after {
            None => reader.client.query(&reader.list_first, &[&limit]).await,
            Some(cursor) => {
                reader
                    .client
                    .query(
                        &reader.list_after,
                        &[&big(cursor.updated_at_ms), &uuid(cursor.id), &limit],
                    )
                    .await
            }
        }
        .map_err(|e| read_err(&e))?;
        rows.iter().map(summary).collect()
    }

    async fn pending_sessions(&self) -> Result<Vec<SessionId>, ReadError> {
        let reader = self.reader().await?;
        let rows = reader
            .client
            .query(&reader.pending, &[])
            .await
            .map_err(|e| read_err(&e))?;
        rows.iter()
            .map(|row| {
                let id: Uuid = row.try_get(0).map_err(|e| read_err(&e))?;
                Ok(SessionId::from_bytes(*id.as_bytes()))
            })
            .collect()
    }

    async fn close(&self) {
        drop(
            self.inner
                .sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let mut stopped = self.inner.stopped.clone();
        let _ = stopped.wait_for(|s| *s).await;
    }

    fn observe_commits(&self, observer: Arc<dyn foya_storage::CommitObserver>) -> bool {
        self.inner.counters.observer.set(observer).is_ok()
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            appended_events: self.inner.counters.appended_events.load(Ordering::Relaxed),
            commits: self.inner.counters.commits.load(Ordering::Relaxed),
        }
    }

    fn append_latency(&self) -> Latencies {
        self.inner.counters.append_latency.snapshot()
    }

    fn attachments(&self) -> Option<Arc<dyn SharedAttachments>> {
        let shared = self.inner.attachments.get_or_init(|| {
            Arc::new(PgAttachments::start(
                self.inner.config.clone(),
                self.inner.location.clone(),
            ))
        });
        Some(Arc::clone(shared) as Arc<dyn SharedAttachments>)
    }

    fn location(&self) -> String {
        self.inner.location.clone()
    }
}

//! The group-commit writer: one task takes queued appends and sends each batch as one
//! `foya_append` statement on an idle connection (see the crate docs).

use crate::{Counters, PgError, Shards, connect, created_fields, render, uuid};
use foya_protocol::{Event, EventKind, Seq, SessionId};
use foya_storage::{AppendError, Fence};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Config, Statement};
use uuid::Uuid;

/// One event as the statement takes it.
struct Encoded {
    seq: i64,
    at_ms: i64,
    body: Vec<u8>,
    title: Option<String>,
    deleted: bool,
    pending_kind: i16,
    pending_item: Option<Uuid>,
}

/// One append waiting for its batch.
pub(crate) struct Request {
    session: SessionId,
    first: Seq,
    fence: Fence,
    created: Option<(String, String, Option<String>)>,
    /// A new sub-agent session's parent (it is recorded in the parent's shard).
    parent: Option<SessionId>,
    events: Vec<Encoded>,
    reply: Option<oneshot::Sender<Result<(), AppendError>>>,
}

fn int(n: u64, what: &str) -> Result<i64, AppendError> {
    i64::try_from(n).map_err(|_| AppendError::Encode(format!("{what} {n} is too large")))
}

impl Request {
    /// Encodes `events` (one session's, dense: checked by the caller).
    pub(crate) fn new(events: &[Event], fence: Fence) -> Result<Self, AppendError> {
        let first = events
            .first()
            .ok_or(AppendError::Storage("empty append".into()))?;
        let encoded = events
            .iter()
            .map(|event| {
                let body = foya_storage::codec::encode_event(event)
                    .map_err(|e| AppendError::Encode(e.0))?;
                let id = |bytes: &[u8; 16]| Some(Uuid::from_bytes(*bytes));
                let (pending_kind, pending_item) = match &event.kind {
                    EventKind::InputQueued { input_id, .. } => (1, id(input_id.as_bytes())),
                    EventKind::InputDropped { input_id, .. } => (2, id(input_id.as_bytes())),
                    EventKind::TurnStarted { input_id } => (3, id(input_id.as_bytes())),
                    EventKind::TurnComplete { .. } => (4, None),
                    EventKind::SessionDeleted {} => (5, None),
                    _ => (0, None),
                };
                Ok(Encoded {
                    seq: int(event.seq.0, "seq")?,
                    at_ms: int(event.at_ms, "time")?,
                    body,
                    title: match &event.kind {
                        EventKind::TitleSet { title, .. } => Some(title.clone()),
                        _ => None,
                    },
                    deleted: matches!(event.kind, EventKind::SessionDeleted {}),
                    pending_kind,
                    pending_item,
                })
            })
            .collect::<Result<Vec<_>, AppendError>>()?;
        Ok(Self {
            session: first.session_id,
            first: first.seq,
            fence,
            created: created_fields(&first.kind),
            parent: match &first.kind {
                EventKind::SessionCreated { config } => {
                    config.parent.as_ref().map(|p| p.session_id)
                }
                _ => None,
            },
            events: encoded,
            reply: None,
        })
    }

    pub(crate) fn with_reply(mut self, reply: oneshot::Sender<Result<(), AppendError>>) -> Self {
        self.reply = Some(reply);
        self
    }

    fn answer(&mut self, result: Result<(), AppendError>) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(result);
        }
    }
}

/// One writer connection, its prepared `foya_append` statement and its server process;
/// opened again after it was lost.
pub(crate) struct Connection {
    config: Config,
    synchronous_commit: bool,
    shards: Shards,
    open: Option<(Client, Statement, Backend)>,
    unended: Arc<Unended>,
}

/// Server processes of failed statements that could not be ended, shared by the
/// writer's connections: each is ended before the writer's next statement, on whichever
/// connection sends it (and once more when the store closes). While one is
/// left, a statement of it may still commit, so a failed append is answered
/// [`AppendError::Unknown`], never as refused (a retry refused while the first try may
/// still commit would be answered as not taken).
#[derive(Debug, Default)]
pub(crate) struct Unended(std::sync::Mutex<Vec<Backend>>);

impl Unended {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<Backend>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A server process: its pid, and when it started (µs since the epoch), which tells it
/// from a later process given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backend {
    pid: i32,
    started_us: i64,
}

/// How long a failed statement's answer waits for its server process to end.
const END_BACKEND_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most server processes kept to be ended later; past it the oldest is forgotten.
const MAX_UNENDED: usize = 64;

/// The start of server process `$1`, if it is still there.
const BACKEND_START: &str = "SELECT (extract(epoch FROM backend_start) * 1000000)::int8 \
    FROM pg_stat_activity WHERE pid = $1";

const APPEND: &str = "SELECT r_append, r_code, r_expected, r_shard FROM foya_append(\
    $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)";

impl Connection {
    pub(crate) async fn open(
        config: &Config,
        synchronous_commit: bool,
        shards: Shards,
        unended: Arc<Unended>,
    ) -> Result<Self, PgError> {
        let mut connection = Self {
            config: config.clone(),
            synchronous_commit,
            shards,
            open: None,
            unended,
        };
        connection.ensure().await?;
        Ok(connection)
    }

    async fn ensure(&mut self) -> Result<(&Client, &Statement), PgError> {
        if self.open.as_ref().is_some_and(|(c, _, _)| c.is_closed()) {
            self.open = None;
        }
        if self.open.is_none() {
            let client = connect(&self.config).await?;
            if !self.synchronous_commit {
                client.batch_execute("SET synchronous_commit = off").await?;
            }
            let types = [
                Type::UUID_ARRAY,
                Type::INT4_ARRAY,
                Type::UUID_ARRAY,
                Type::INT8_ARRAY,
                Type::INT4_ARRAY,
                Type::INT4_ARRAY,
                Type::INT8_ARRAY,
                Type::BOOL_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::TEXT_ARRAY,
                Type::INT8_ARRAY,
                Type::INT8_ARRAY,
                Type::BYTEA_ARRAY,
                Type::TEXT_ARRAY,
                Type::BOOL_ARRAY,
                Type::INT2_ARRAY,
                Type::UUID_ARRAY,
            ];
            let statement = client.prepare_typed(APPEND, &types).await?;
            let pid: i32 = client
                .query_one("SELECT pg_backend_pid()", &[])
                .await?
                .try_get(0)
                .map_err(|e| PgError::Db(render(&e)))?;
            let started_us: i64 = client
                .query_one(BACKEND_START, &[&pid])
                .await?
                .try_get(0)
                .map_err(|e| PgError::Db(render(&e)))?;
            self.open = Some((client, statement, Backend { pid, started_us }));
        }
        match &self.open {
            Some((client, statement, _)) => {
                // Failed statements' server processes that could not be ended are
                // ended before this connection writes (any of the writer's).
                if !self.unended.list().is_empty() {
                    end_unended(&self.unended, client).await;
                }
                Ok((client, statement))
            }
            None => Err(PgError::Db("no connection".into())),
        }
    }

    /// Ends `backend` (a failed statement's server process) and waits until it is gone,
    /// at most [`END_BACKEND_WAIT`] in all, on a connection of its own; `false` when that
    /// cannot be confirmed (the server cannot be reached, or refuses the connection, or
    /// is slower): the statement may still commit.
    async fn end_backend(&self, backend: Backend) -> bool {
        let ended = tokio::time::timeout(END_BACKEND_WAIT, async {
            let client = connect(&self.config).await.map_err(|e| e.to_string())?;
            end_backend_on(&client, backend).await
        })
        .await;
        match ended {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(pid = backend.pid, error = %e, "cannot end a failed statement's server process");
                false
            }
            Err(_) => {
                tracing::warn!(
                    pid = backend.pid,
                    "a failed statement's server process could not be ended in time"
                );
                false
            }
        }
    }

    /// At close: ends the listed server processes once more (on a connection opened for
    /// it when none is), and names those left, whose statements may still commit: once
    /// this process is gone nothing remembers them.
    async fn end_unended_at_close(&mut self) {
        if self.unended.list().is_empty() {
            return;
        }
        // `ensure` ends them before it answers.
        let _ = tokio::time::timeout(END_BACKEND_WAIT * 2, self.ensure()).await;
        let left: Vec<i32> = self.unended.list().iter().map(|b| b.pid).collect();
        if !left.is_empty() {
            tracing::error!(
                pids = ?left,
                "the store closes with failed statements whose server processes could not be \
                 ended: they may still commit"
            );
        }
    }

    /// Remembers `backend`, whose statement's outcome is unknown, to be ended once a
    /// connection opens again.
    fn keep_unended(&self, backend: Backend) {
        let mut list = self.unended.list();
        if list.len() >= MAX_UNENDED {
            let forgotten = list.remove(0);
            tracing::warn!(
                pid = forgotten.pid,
                "too many failed statements' server processes wait to be ended: one is forgotten"
            );
        }
        list.push(backend);
    }

    /// Commits `batch` in one statement and answers each append.
    async fn commit(&mut self, mut batch: Vec<Request>, counters: &Counters) {
        let started = std::time::Instant::now();
        // Lock sessions in one order across concurrent statements (no deadlock); the
        // sort is stable, so one session's appends keep their order.
        batch.sort_by_key(|r| r.session);
        let mut a_session = Vec::with_capacity(batch.len());
        let mut a_shard = Vec::with_capacity(batch.len());
        let mut a_parent: Vec<Option<Uuid>> = Vec::with_capacity(batch.len());
        let mut a_first = Vec::with_capacity(batch.len());
        let mut a_count = Vec::with_capacity(batch.len());
        let mut a_fence_shard: Vec<Option<i32>> = Vec::with_capacity(batch.len());
        let mut a_fence_epoch: Vec<Option<i64>> = Vec::with_capacity(batch.len());
        let mut a_created = Vec::with_capacity(batch.len());
        let mut a_cwd: Vec<Option<&str>> = Vec::with_capacity(batch.len());
        let mut a_model: Vec<Option<&str>> = Vec::with_capacity(batch.len());
        let mut a_title: Vec<Option<&str>> = Vec::with_capacity(batch.len());
        let mut e_seq = Vec::new();
        let mut e_at = Vec::new();
        let mut e_body: Vec<&[u8]> = Vec::new();
        let mut e_title: Vec<Option<&str>> = Vec::new();
        let mut e_deleted = Vec::new();
        let mut e_pkind = Vec::new();
        let mut e_pitem = Vec::new();
        let mut events = 0u64;
        let mut appends = 0usize;
        for request in &batch {
            a_session.push(uuid(request.session));
            // A child's own hash: used only when its parent is not in the store.
            let hashed = request.parent.unwrap_or(request.session);
            a_shard.push(i32::try_from(self.shards.of(hashed)).unwrap_or(0));
            a_parent.push(request.parent.map(uuid));
            a_first.push(i64::try_from(request.first.0).unwrap_or(i64::MAX));
            a_count.push(i32::try_from(request.events.len()).unwrap_or(i32::MAX));
            match request.fence {
                Fence::None => {
                    a_fence_shard.push(None);
                    a_fence_epoch.push(None);
                }
                Fence::Epoch { shard, epoch } => {
                    a_fence_shard.push(Some(i32::try_from(shard).unwrap_or(i32::MAX)));
                    a_fence_epoch.push(Some(i64::try_from(epoch).unwrap_or(i64::MAX)));
                }
            }
            a_created.push(request.created.is_some());
            a_cwd.push(request.created.as_ref().map(|c| c.0.as_str()));
            a_model.push(request.created.as_ref().map(|c| c.1.as_str()));
            a_title.push(request.created.as_ref().and_then(|c| c.2.as_deref()));
            for event in &request.events {
                e_seq.push(event.seq);
                e_at.push(event.at_ms);
                e_body.push(event.body.as_slice());
                e_title.push(event.title.as_deref());
                e_deleted.push(event.deleted);
                e_pkind.push(event.pending_kind);
                e_pitem.push(event.pending_item);
            }
        }
        let result = match self.ensure().await {
            Ok((client, statement)) => client
                .query(
                    statement,
                    &[
                        &a_session,
                        &a_shard,
                        &a_parent,
                        &a_first,
                        &a_count,
                        &a_fence_shard,
                        &a_fence_epoch,
                        &a_created,
                        &a_cwd,
                        &a_model,
                        &a_title,
                        &e_seq,
                        &e_at,
                        &e_body,
                        &e_title,
                        &e_deleted,
                        &e_pkind,
                        &e_pitem,
                    ],
                )
                .await
                .map_err(|e| render(&e)),
            Err(e) => Err(e.to_string()),
        };
        let rows = match result {
            Ok(rows) => rows,
            Err(message) => {
                tracing::warn!(error = %message, appends = batch.len(), "a PostgreSQL batch failed");
                // The connection is opened again for the next batch, and its server
                // process is ended before anyone is answered: bytes of the statement
                // still on their way (a connection lost in transit) then reach no one,
                // so what the log holds once the appends are answered is final.
                if let Some((client, _, backend)) = self.open.take() {
                    drop(client);
                    if !self.end_backend(backend).await {
                        self.keep_unended(backend);
                    }
                }
                // While a failed statement's server process may still commit it (this
                // one's or an earlier one's), no append is answered as refused.
                let error = if self.unended.list().is_empty() {
                    AppendError::Storage(message)
                } else {
                    AppendError::Unknown(format!(
                        "{message}; a failed statement's server process could not be ended, \
                         so it may still commit"
                    ))
                };
                for request in &mut batch {
                    request.answer(Err(error.clone()));
                }
                return;
            }
        };
        counters.commits.fetch_add(1, Ordering::Relaxed);
        for row in rows {
            let outcome = (|| -> Result<(usize, Result<(), AppendError>), String> {
                let index: i32 = row.try_get(0).map_err(|e| render(&e))?;
                let code: i16 = row.try_get(1).map_err(|e| render(&e))?;
                let expected: Option<i64> = row.try_get(2).map_err(|e| render(&e))?;
                let shard: Option<i32> = row.try_get(3).map_err(|e| render(&e))?;
                let shard = shard.and_then(|s| u32::try_from(s).ok());
                let index = usize::try_from(index - 1).map_err(|_| "bad append index")?;
                let expected_seq =
                    || Seq(expected.and_then(|e| u64::try_from(e).ok()).unwrap_or(0));
                let result = match code {
                    0 => Ok(()),
                    1 => Err(AppendError::SeqMismatch {
                        expected: expected_seq(),
                        got: batch.get(index).map_or(Seq(0), |r| r.first),
                    }),
                    2 => Err(AppendError::SessionDeleted),
                    3 => Err(AppendError::UnknownSession),
                    4 => Err(AppendError::Fenced {
                        shard: shard.unwrap_or(0),
                        epoch: expected.and_then(|e| u64::try_from(e).ok()),
                    }),
                    6 => Err(AppendError::WrongShard {
                        shard: shard.unwrap_or(0),
                        fence_shard: match batch.get(index).map(|r| r.fence) {
                            Some(Fence::Epoch { shard, .. }) => shard,
                            _ => 0,
                        },
                    }),
                    other => Err(AppendError::Storage(format!(
                        "foya_append answered an unknown code {other}"
                    ))),
                };
                Ok((index, result))
            })();
            match outcome {
                Ok((index, result)) => {
                    if let Some(request) = batch.get_mut(index) {
                        if result.is_ok() {
                            events += request.events.len() as u64;
                            appends += 1;
                        }
                        request.answer(result);
                    }
                }
                Err(message) => tracing::warn!(error = %message, "an unreadable foya_append row"),
            }
        }
        counters
            .appended_events
            .fetch_add(events, Ordering::Relaxed);
        if let Some(observer) = counters.observer.get() {
            observer.committed(foya_storage::CommitStat {
                duration: started.elapsed(),
                appends,
                events: usize::try_from(events).unwrap_or(usize::MAX),
            });
        }
        // An append the statement did not answer (never expected): say so.
        for request in &mut batch {
            request.answer(Err(AppendError::Storage(
                "the batch's statement did not answer this append".into(),
            )));
        }
    }
}

/// Ends, through `client`, the server processes that could not be ended when their
/// statements failed; those it cannot end stay listed for the next try.
async fn end_unended(unended: &Unended, client: &Client) {
    let listed = unended.list().clone();
    for backend in listed {
        let ended = tokio::time::timeout(END_BACKEND_WAIT, end_backend_on(client, backend))
            .await
            .unwrap_or_else(|_| Err("not ended in time".into()));
        match ended {
            Ok(()) => {
                unended.list().retain(|b| *b != backend);
                tracing::info!(
                    pid = backend.pid,
                    "a failed statement's server process was ended once the server was reached again"
                );
            }
            Err(e) => {
                tracing::warn!(pid = backend.pid, error = %e, "cannot end a failed statement's server process");
            }
        }
    }
}

/// Ends `backend` through `client` and waits until it is gone (a process that has the
/// same pid but a later start is another one: it is left alone).
async fn end_backend_on(client: &Client, backend: Backend) -> Result<(), String> {
    client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid = $1 AND (extract(epoch FROM backend_start) * 1000000)::int8 = $2",
            &[&backend.pid, &backend.started_us],
        )
        .await
        .map_err(|e| render(&e))?;
    loop {
        let alive = client
            .query_opt(BACKEND_START, &[&backend.pid])
            .await
            .map_err(|e| render(&e))?
            .map(|row| row.try_get::<_, i64>(0))
            .transpose()
            .map_err(|e| render(&e))?;
        if alive != Some(backend.started_us) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The writer task: batches queued appends onto idle connections until every sender
/// is gone, then waits for the statements in flight and reports it stopped.
pub(crate) async fn run(
    mut queue: mpsc::Receiver<Request>,
    connections: Vec<Connection>,
    max_batch: usize,
    counters: Arc<Counters>,
    stopped: watch::Sender<bool>,
) {
    let total = connections.len();
    let (idle_tx, mut idle) = mpsc::unbounded_channel();
    for connection in connections {
        let _ = idle_tx.send(connection);
    }
    while let Some(first) = queue.recv().await {
        // Appends arriving while every connection is busy join this batch.
        let Some(mut connection) = idle.recv().await else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let idle_tx = idle_tx.clone();
        let counters = Arc::clone(&counters);
        tokio::spawn(async move {
            connection.commit(batch, &counters).await;
            let _ = idle_tx.send(connection);
        });
    }
    drop(idle_tx);
    let mut returned = Vec::with_capacity(total);
    for _ in 0..total {
        match idle.recv().await {
            Some(connection) => returned.push(connection),
            None => break,
        }
    }
    if let Some(connection) = returned.first_mut() {
        connection.end_unended_at_close().await;
    }
    let _ = stopped.send(true);
}

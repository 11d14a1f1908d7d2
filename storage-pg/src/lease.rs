//! Node leases and shard ownership in the store (schema version 2).
//!
//! A node [registers](NodeLease::register) a lease under its name: a row of
//! `foya_nodes` with a fresh lease id and an expiry `clock_timestamp() + ttl` — the
//! **database's clock**, never this machine's, so nodes with skewed clocks agree on who
//! is live. A name held by another live lease is refused ([`LeaseError::NameTaken`]).
//! The node [renews](NodeLease::renew) it (again on the database's clock; an expired
//! lease is never renewed: the node must register again, under a new lease id) and
//! [claims](NodeLease::claim) shards: a claim bumps the shard's epoch and is allowed
//! only while no other live lease owns the shard (its owner released it, or its lease
//! expired). The returned [`Fence`] is what the node appends under; the store refuses
//! it ([`foya_storage::AppendError::Fenced`]) as soon as the shard moved on to another
//! epoch or the lease expired, in the same statement as the write.
//!
//! [`LeaseKeeper`] is the task that renews a lease every `ttl / 3` and **self-fences**:
//! it reports [`LeaseStatus::Lost`] on its watch channel when a renewal is not confirmed
//! by `valid_until - margin`, where `valid_until` is the moment the last confirmed
//! renewal was *sent* plus the TTL (the database's expiry is at least that late), so the
//! report comes before the database lets another node claim the shards — whether the
//! database is unreachable, slow, or this process was paused (on resume its timers are
//! overdue and it reports before it renews). A renewal the database refuses (the lease
//! expired) is a loss too. After a loss the node must stop writing: cancel its turns,
//! drop its sessions; the store refuses its fences from the lease's expiry on.

use crate::shard::Shards;
use crate::{PgError, location, render};
use foya_protocol::{Seq, SessionId};
use foya_storage::{Fence, ReadError};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_postgres::{Client, Config, NoTls};
use uuid::Uuid;

/// Timings of a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseOptions {
    /// How long a renewal keeps the lease (on the database's clock). Default 5 s: a dead
    /// node's shards can be claimed at most this long after its last renewal.
    pub ttl: Duration,
    /// How often the keeper renews; default `ttl / 3`.
    pub renew_every: Duration,
    /// How long before the lease's conservative end the keeper gives up on an
    /// unconfirmed renewal and reports the loss; default `ttl / 5`.
    pub margin: Duration,
}

impl LeaseOptions {
    /// A lease of `ttl`, renewed every `ttl / 3`, reported lost `ttl / 5` before its end.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            renew_every: ttl / 3,
            margin: ttl / 5,
        }
    }
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self::new(Duration::from_secs(5))
    }
}

/// Why registering, renewing or releasing a lease failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The URL is not a PostgreSQL connection string, or the options are not usable.
    #[error("invalid lease configuration: {0}")]
    Config(String),
    /// The server could not be reached (or a statement failed).
    #[error("PostgreSQL at {location}: {message}")]
    Db {
        /// The server (URL without password).
        location: String,
        /// Why.
        message: String,
    },
    /// Another live lease holds this node name.
    #[error(
        "the node name {node:?} is held by another live lease (it expires in {expires_in:?} \
         unless renewed)"
    )]
    NameTaken {
        /// The name.
        node: String,
        /// Until the other lease expires, on the database's clock.
        expires_in: Duration,
    },
    /// The lease expired (or was replaced): the database refused to renew it. Every
    /// shard it held may be claimed by another node; register again.
    #[error("the lease of node {node:?} was lost: {reason}")]
    Lost {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
}

/// Why [`NodeLease::claim`] did not give the shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// Another live lease owns the shard.
    #[error(
        "shard {shard} is owned by node {owner:?} (its lease expires in {expires_in:?} unless renewed)"
    )]
    Held {
        /// The shard.
        shard: u32,
        /// The owner's node name.
        owner: String,
        /// Until its lease expires, on the database's clock.
        expires_in: Duration,
    },
    /// This node's lease is lost (expired, replaced, or reported lost by the keeper).
    #[error("this node's lease is lost; it may not claim shards")]
    LeaseLost,
    /// The store has no such shard.
    #[error("the store has no shard {0}")]
    NoSuchShard(u32),
    /// The database failed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// A lease's state, as its [`LeaseKeeper`] reports it on a watch channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Confirmed until `valid_until` (this process's monotonic clock, conservative: the
    /// moment the last confirmed renewal was sent, plus the TTL).
    Live {
        /// The lease's conservative end.
        valid_until: Instant,
        /// How many renewals were confirmed since registration.
        renewals: u64,
    },
    /// Lost: stop writing, cancel turns, drop the sessions of every shard.
    Lost {
        /// Why.
        reason: String,
    },
    /// Released by [`NodeLease::shutdown`].
    Released,
}

impl LeaseStatus {
    /// Whether the lease is lost.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }
}

/// A node with a live lease ([`NodeLease::live_nodes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveNode {
    /// Its name.
    pub node: String,
    /// Where it is reached, as it registered ([`NodeLease::register_at`]).
    pub address: Option<String>,
    /// Until its lease expires unless renewed (the database's clock).
    pub expires_in: Duration,
}

/// A decrease of the epoch along a session's seqs (never expected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRegression {
    /// The session.
    pub session: SessionId,
    /// The event written under a lower epoch than its predecessor.
    pub seq: Seq,
    /// Its epoch.
    pub epoch: u64,
    /// The epoch of the event before it.
    pub previous: u64,
}

/// A node's lease in the store and the shards it holds. Cheap to clone.
#[derive(Clone)]
pub struct NodeLease {
    inner: Arc<Inner>,
}

struct Inner {
    node: String,
    lease: Uuid,
    options: LeaseOptions,
    config: Config,
    location: String,
    shards: Shards,
    /// For claims and releases.
    control: tokio::sync::Mutex<Option<Client>>,
    /// For renewals (a slow claim never delays one).
    renewer: tokio::sync::Mutex<Option<Client>>,
    held: Mutex<BTreeMap<u32, u64>>,
    status: watch::Sender<LeaseStatus>,
}

impl fmt::Debug for NodeLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeLease")
            .field("node", &self.inner.node)
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// The shard count recorded in the store.
pub(crate) async fn store_shards(client: &Client) -> Result<Shards, PgError> {
    let value: String = client
        .query_one("SELECT value FROM foya_meta WHERE key = 'shards'", &[])
        .await?
        .try_get(0)?;
    value
        .parse::<u32>()
        .ok()
        .and_then(Shards::new)
        .ok_or_else(|| PgError::Db(format!("foya_meta.shards is not a shard count: {value:?}")))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn from_millis(ms: Option<i64>) -> Duration {
    Duration::from_millis(ms.and_then(|m| u64::try_from(m).ok()).unwrap_or(0))
}

impl NodeLease {
    /// Registers node `node`'s lease in the store at `url` (whose schema must exist:
    /// open a [`crate::PgLog`] on it first), valid for `options.ttl` on the database's
    /// clock.
    ///
    /// # Errors
    /// [`LeaseError::NameTaken`] while another live lease holds the name;
    /// [`LeaseError::Config`], [`LeaseError::Db`].
    pub async fn register(
        url: &str,
        node: &str,
        options: LeaseOptions,
    ) -> Result<NodeLease, LeaseError> {
        Self::register_at(url, node, None, options).await
    }

    /// [`NodeLease::register`], recording where the node is reached (`address`, what
    /// [`NodeLease::live_nodes`] reports to the others).
    ///
    /// # Errors
    /// As [`NodeLease::register`].
    pub async fn register_at(
        url: &str,
        node: &str,
        address: Option<&str>,
        options: LeaseOptions,
    ) -> Result<NodeLease, LeaseError> {
        let mut config: Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| LeaseError::Config(render(&e)))?;
        if options.ttl.is_zero() || options.renew_every.is_zero() || options.margin >= options.ttl {
            return Err(LeaseError::Config(format!(
                "a lease needs a TTL, a renewal period and a margin smaller than the TTL \
                 ({options:?})"
            )));
        }
        if node.is_empty() {
            return Err(LeaseError::Config("a node needs a name".into()));
        }
        if config.get_application_name().is_none() {
            config.application_name("foya-lease");
        }
        // A connection attempt never outlives the margin: the keeper must decide in time.
        config.connect_timeout(options.margin.max(Duration::from_millis(100)));
        let location = location(&config);
        let db = |e: &tokio_postgres::Error| LeaseError::Db {
            location: location.clone(),
            message: render(e),
        };
        let client = open(&config, &location).await?;
        let shards = store_shards(&client).await.map_err(|e| LeaseError::Db {
            location: location.clone(),
            message: e.to_string(),
        })?;
        let lease = Uuid::now_v7();
        let sent = Instant::now();
        let row = client
            .query_opt(
                "INSERT INTO foya_nodes AS n (node, lease, ttl_ms, registered_at, renewed_at, \
                 expires_at, address) \
                 SELECT $1, $2, $3::bigint, c.t, c.t, \
                 c.t + $3::bigint * interval '1 millisecond', $4 \
                 FROM (SELECT clock_timestamp() AS t) c \
                 ON CONFLICT (node) DO UPDATE SET lease = EXCLUDED.lease, \
                 address = EXCLUDED.address, \
                 ttl_ms = EXCLUDED.ttl_ms, registered_at = EXCLUDED.registered_at, \
                 renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at \
                 WHERE n.expires_at <= EXCLUDED.registered_at RETURNING n.lease",
                &[&node, &lease, &millis(options.ttl), &address],
            )
            .await
            .map_err(|e| db(&e))?;
        if row.is_none() {
            let left: Option<i64> = client
                .query_opt(
                    "SELECT ceil(extract(epoch FROM (expires_at - clock_timestamp())) * 1000)\
                     ::bigint FROM foya_nodes WHERE node = $1",
                    &[&node],
                )
                .await
                .map_err(|e| db(&e))?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(|e| db(&e))?;
            return Err(LeaseError::NameTaken {
                node: node.to_owned(),
                expires_in: from_millis(left),
            });
        }
        let (status, _) = watch::channel(LeaseStatus::Live {
            valid_until: sent + options.ttl,
            renewals: 0,
        });
        Ok(NodeLease {
            inner: Arc::new(Inner {
                node: node.to_owned(),
                lease,
                options,
                config,
                location,
                shards,
                control: tokio::sync::Mutex::new(Some(client)),
                renewer: tokio::sync::Mutex::new(None),
                held: Mutex::new(BTreeMap::new()),
                status,
            }),
        })
    }

    /// The node's name.
    #[must_use]
    pub fn node(&self) -> &str {
        &self.inner.node
    }

    /// The lease's id (fresh on every registration).
    #[must_use]
    pub fn id(&self) -> Uuid {
        self.inner.lease
    }

    /// The store's shard count.
    #[must_use]
    pub fn shards(&self) -> Shards {
        self.inner.shards
    }

    /// The lease's timings.
    #[must_use]
    pub fn options(&self) -> LeaseOptions {
        self.inner.options
    }

    /// The lease's state, and its changes.
    #[must_use]
    pub fn status(&self) -> watch::Receiver<LeaseStatus> {
        self.inner.status.subscribe()
    }

    /// The shards this node holds and their epochs (empty once the lease is lost or
    /// released).
    #[must_use]
    pub fn held(&self) -> BTreeMap<u32, u64> {
        self.held_map().clone()
    }

    /// The fence to append `shard`'s sessions under, while this node holds it and its
    /// lease is live.
    #[must_use]
    pub fn fence(&self, shard: u32) -> Option<Fence> {
        if !matches!(*self.inner.status.borrow(), LeaseStatus::Live { .. }) {
            return None;
        }
        self.held_map().get(&shard).map(|epoch| Fence::Epoch {
            shard,
            epoch: *epoch,
        })
    }

    fn held_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, u64>> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn db(&self, e: &tokio_postgres::Error) -> LeaseError {
        LeaseError::Db {
            location: self.inner.location.clone(),
            message: render(e),
        }
    }

    /// Renews the lease for another TTL on the database's clock; returns its new
    /// conservative end on this process's clock (when the renewal was sent, plus the
    /// TTL). Does not change [`NodeLease::status`] (the keeper does).
    ///
    /// # Errors
    /// [`LeaseError::Lost`] when the database refused (the lease had expired, or the
    /// name was registered again); [`LeaseError::Db`] when it could not be asked.
    pub async fn renew(&self) -> Result<Instant, LeaseError> {
        let mut slot = self.inner.renewer.lock().await;
        // Taken out while in use: a renewal abandoned half-way (the keeper's timeout)
        // drops its connection instead of leaving a reply in it.
        let client = match slot.take().filter(|c| !c.is_closed()) {
            Some(client) => client,
            None => open(&self.inner.config, &self.inner.location).await?,
        };
        let sent = Instant::now();
        let row = client
            .query_opt(
                "UPDATE foya_nodes SET renewed_at = c.t, \
                 expires_at = c.t + ttl_ms * interval '1 millisecond' \
                 FROM (SELECT clock_timestamp() AS t) c \
                 WHERE node = $1 AND lease = $2 AND expires_at > c.t \
                 RETURNING ttl_ms",
                &[&self.inner.node, &self.inner.lease],
            )
            .await
            .map_err(|e| self.db(&e))?;
        *slot = Some(client);
        match row {
            Some(_) => Ok(sent + self.inner.options.ttl),
            None => Err(LeaseError::Lost {
                node: self.inner.node.clone(),
                reason: "the database refused to renew it: it expired or the name was \
                         registered again"
                    .into(),
            }),
        }
    }

    /// Runs `statement` on the control connection (opened again when lost).
    async fn control<T>(
        &self,
        run: impl AsyncFnOnce(&Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, LeaseError> {
        let ttl = self.inner.options.ttl;
        let mut slot = self.inner.control.lock().await;
        // Bounded by the TTL: past it the answer no longer matters (the lease is lost).
        let bounded = tokio::time::timeout(ttl, async {
            let client = match slot.take().filter(|c| !c.is_closed()) {
                Some(client) => client,
                None => open(&self.inner.config, &self.inner.location).await?,
            };
            let result = run(&client).await.map_err(|e| self.db(&e))?;
            *slot = Some(client);
            Ok(result)
        })
        .await;
        bounded.unwrap_or_else(|_| {
            Err(LeaseError::Db {
                location: self.inner.location.clone(),
                message: format!("no answer within the lease's TTL ({ttl:?})"),
            })
        })
    }

    /// The nodes whose leases are live now (on the database's clock), this one included,
    /// by name: the set placement ([`crate::shard::placement`]) spreads shards over.
    ///
    /// # Errors
    /// [`LeaseError::Db`].
    pub async fn live_nodes(&self) -> Result<Vec<LiveNode>, LeaseError> {
        let rows = self
            .control(async |client| {
                client
                    .query(
                        "SELECT node, address, ceil(extract(epoch FROM \
                         (expires_at - clock_timestamp())) * 1000)::bigint \
                         FROM foya_nodes WHERE expires_at > clock_timestamp() ORDER BY node",
                        &[],
                    )
                    .await
            })
            .await?;
        rows.iter()
            .map(|row| {
                Ok(LiveNode {
                    node: row.try_get(0).map_err(|e| self.db(&e))?,
                    address: row.try_get(1).map_err(|e| self.db(&e))?,
                    expires_in: from_millis(row.try_get(2).map_err(|e| self.db(&e))?),
                })
            })
            .collect()
    }

    /// Claims `shard`: bumps its epoch and makes this node its owner, when no other live
    /// lease owns it. A shard this lease holds already is answered with its epoch
    /// unchanged. Returns the fence to append the shard's sessions under.
    ///
    /// # Errors
    /// [`ClaimError::Held`], [`ClaimError::LeaseLost`] (this lease is not live: the
    /// status then turns [`LeaseStatus::Lost`]), [`ClaimError::NoSuchShard`],
    /// [`ClaimError::Lease`].
    pub async fn claim(&self, shard: u32) -> Result<Fence, ClaimError> {
        if !matches!(*self.inner.status.borrow(), LeaseStatus::Live { .. }) {
            return Err(ClaimError::LeaseLost);
        }
        let Ok(shard_arg) = i32::try_from(shard) else {
            return Err(ClaimError::NoSuchShard(shard));
        };
        let (node, lease) = (self.inner.node.clone(), self.inner.lease);
        let row = self
            .control(async move |client| {
                client
                    .query_one(
                        "SELECT r_code, r_epoch, r_owner, r_ms FROM foya_claim($1, $2, $3)",
                        &[&shard_arg, &node, &lease],
                    )
                    .await
            })
            .await?;
        let get = |e: tokio_postgres::Error| ClaimError::Lease(self.db(&e));
        let code: i16 = row.try_get(0).map_err(get)?;
        let epoch: Option<i64> = row.try_get(1).map_err(get)?;
        let owner: Option<String> = row.try_get(2).map_err(get)?;
        let ms: Option<i64> = row.try_get(3).map_err(get)?;
        let epoch = epoch.and_then(|e| u64::try_from(e).ok()).unwrap_or(0);
        match code {
            0 | 1 => {
                // A loss reported meanwhile wins: the epoch is not recorded as held.
                let mut held = self.held_map();
                if !matches!(*self.inner.status.borrow(), LeaseStatus::Live { .. }) {
                    return Err(ClaimError::LeaseLost);
                }
                held.insert(shard, epoch);
                Ok(Fence::Epoch { shard, epoch })
            }
            2 => Err(ClaimError::Held {
                shard,
                owner: owner.unwrap_or_default(),
                expires_in: from_millis(ms),
            }),
            3 => {
                self.lose("the database says the lease is not live (it expired)".into());
                Err(ClaimError::LeaseLost)
            }
            4 => Err(ClaimError::NoSuchShard(shard)),
            other => Err(ClaimError::Lease(LeaseError::Db {
                location: self.inner.location.clone(),
                message: format!("foya_claim answered an unknown code {other}"),
            })),
        }
    }

    /// Releases `shard` (a graceful handoff: another node may claim it at once). The
    /// shard leaves [`NodeLease::held`] first, so the caller stops writing it before the
    /// database hears of it. Returns whether this lease owned it.
    ///
    /// # Errors
    /// [`LeaseError::Db`].
    pub async fn release(&self, shard: u32) -> Result<bool, LeaseError> {
        self.held_map().remove(&shard);
        let Ok(shard) = i32::try_from(shard) else {
            return Ok(false);
        };
        let lease = self.inner.lease;
        // One shard row per statement: a release never holds two shards' locks, so it
        // forms no lock cycle with the appends that hold them (see schema_v2.sql).
        let changed = self
            .control(async move |client| {
                client
                    .execute(
                        "UPDATE foya_shards SET owner = NULL, owner_lease = NULL \
                         WHERE shard = $1 AND owner_lease = $2",
                        &[&shard, &lease],
                    )
                    .await
            })
            .await?;
        Ok(changed == 1)
    }

    /// Graceful shutdown: releases every shard this node holds, then ends the lease (its
    /// expiry becomes now on the database's clock), so other nodes may claim at once.
    /// The status turns [`LeaseStatus::Released`] (a keeper stops).
    ///
    /// # Errors
    /// [`LeaseError::Db`] (the lease then expires by its TTL).
    pub async fn shutdown(&self) -> Result<(), LeaseError> {
        let shards: Vec<u32> = {
            let held = self.held_map();
            self.inner.status.send_if_modified(|status| {
                if matches!(status, LeaseStatus::Released) {
                    false
                } else {
                    *status = LeaseStatus::Released;
                    true
                }
            });
            held.keys().copied().collect()
        };
        for shard in shards {
            self.release(shard).await?;
        }
        let lease = self.inner.lease;
        self.control(async move |client| {
            client
                .execute(
                    "UPDATE foya_nodes SET expires_at = clock_timestamp() \
                     WHERE lease = $1 AND expires_at > clock_timestamp()",
                    &[&lease],
                )
                .await
        })
        .await?;
        Ok(())
    }

    /// Records the loss: the status turns [`LeaseStatus::Lost`] (unless released), the
    /// held shards are forgotten, and the lease is ended in the database when it can
    /// still be reached (best effort, in the background), so that its fences are refused
    /// at once and other nodes may claim.
    fn lose(&self, reason: String) {
        // Under the held map's lock, so that a watcher woken by the report finds the
        // shards forgotten, and a claim answered meanwhile records nothing.
        let changed = {
            let mut held = self.held_map();
            held.clear();
            self.inner.status.send_if_modified(|status| {
                if matches!(status, LeaseStatus::Live { .. }) {
                    *status = LeaseStatus::Lost { reason };
                    true
                } else {
                    false
                }
            })
        };
        if !changed {
            return;
        }
        tracing::warn!(node = %self.inner.node, "the node's lease is lost");
        let (config, location, lease) = (
            self.inner.config.clone(),
            self.inner.location.clone(),
            self.inner.lease,
        );
        let margin = self.inner.options.margin;
        tokio::spawn(async move {
            let end = async {
                let client = open(&config, &location).await.ok()?;
                client
                    .execute(
                        "UPDATE foya_nodes SET expires_at = clock_timestamp() \
                         WHERE lease = $1 AND expires_at > clock_timestamp()",
                        &[&lease],
                    )
                    .await
                    .ok()
            };
            let _ = tokio::time::timeout(margin, end).await;
        });
    }
}

/// Opens a connection for lease statements and runs its driver in a task.
async fn open(config: &Config, location: &str) -> Result<Client, LeaseError> {
    let (client, connection) = config.connect(NoTls).await.map_err(|e| LeaseError::Db {
        location: location.to_owned(),
        message: render(&e),
    })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %render(&e), "a lease connection ended");
        }
    });
    Ok(client)
}

/// The task that keeps a [`NodeLease`]: renews it every `renew_every`, and reports
/// [`LeaseStatus::Lost`] on the lease's watch channel before the lease can have expired
/// in the database when it cannot renew (see the module docs). It ends when the lease is
/// lost or released, or when the keeper is dropped.
#[derive(Debug)]
pub struct LeaseKeeper {
    lease: NodeLease,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseKeeper {
    /// Starts keeping `lease` (on the current tokio runtime).
    #[must_use]
    pub fn spawn(lease: NodeLease) -> LeaseKeeper {
        let task = tokio::spawn(keep(lease.clone()));
        LeaseKeeper { lease, task }
    }

    /// The kept lease.
    #[must_use]
    pub fn lease(&self) -> &NodeLease {
        &self.lease
    }

    /// The lease's state and its changes: [`LeaseStatus::Lost`] is the self-fence signal.
    #[must_use]
    pub fn status(&self) -> watch::Receiver<LeaseStatus> {
        self.lease.status()
    }

    /// The shards the node holds, with their epochs.
    #[must_use]
    pub fn held(&self) -> BTreeMap<u32, u64> {
        self.lease.held()
    }

    /// Resolves with the reason when the lease is lost (never, if it is released first).
    pub async fn lost(&self) -> String {
        let mut status = self.status();
        loop {
            if let LeaseStatus::Lost { reason } = &*status.borrow_and_update() {
                return reason.clone();
            }
            if status.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Stops renewing, releases every shard and ends the lease ([`NodeLease::shutdown`]).
    ///
    /// # Errors
    /// As [`NodeLease::shutdown`].
    pub async fn shutdown(self) -> Result<(), LeaseError> {
        self.task.abort();
        self.lease.shutdown().await
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The keeper's loop.
async fn keep(lease: NodeLease) {
    let LeaseOptions {
        ttl,
        renew_every,
        margin,
    } = lease.options();
    let mut status = lease.status();
    let (mut valid_until, mut renewals) = match &*status.borrow_and_update() {
        LeaseStatus::Live {
            valid_until,
            renewals,
        } => (*valid_until, *renewals),
        _ => return,
    };
    let retry = (renew_every / 4).max(Duration::from_millis(20));
    let mut next = Instant::now() + renew_every;
    let mut last_error: Option<String> = None;
    loop {
        let lost_at = valid_until.checked_sub(margin).unwrap_or(valid_until);
        tokio::select! {
            () = tokio::time::sleep_until(next.min(lost_at)) => {}
            changed = status.changed() => {
                if changed.is_err()
                    || !matches!(*status.borrow_and_update(), LeaseStatus::Live { .. })
                {
                    return;
                }
                continue;
            }
        }
        let now = Instant::now();
        if now >= lost_at {
            // Overdue (the database did not answer in time, or this process was paused).
            let why = last_error.map_or_else(String::new, |e| format!(" (last error: {e})"));
            lease.lose(format!(
                "no renewal confirmed within the lease's TTL ({ttl:?}) less its margin \
                 ({margin:?}){why}"
            ));
            return;
        }
        let sent = now;
        match tokio::time::timeout(lost_at - now, lease.renew()).await {
            Ok(Ok(until)) => {
                if Instant::now() >= until.checked_sub(margin).unwrap_or(until) {
                    lease.lose(format!(
                        "the renewal was confirmed too late to count (after {:?})",
                        sent.elapsed()
                    ));
                    return;
                }
                valid_until = until;
                renewals += 1;
                last_error = None;
                lease.inner.status.send_if_modified(|s| {
                    if matches!(s, LeaseStatus::Live { .. }) {
                        *s = LeaseStatus::Live {
                            valid_until,
                            renewals,
                        };
                        true
                    } else {
                        false
                    }
                });
                next = sent + renew_every;
            }
            Ok(Err(LeaseError::Lost { reason, .. })) => {
                lease.lose(reason);
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(node = %lease.node(), error = %e, "renewing the node's lease failed; retrying");
                last_error = Some(e.to_string());
                next = Instant::now() + retry;
            }
            Err(_elapsed) => {
                lease.lose(format!(
                    "PostgreSQL did not confirm the renewal before the lease's margin \
                     ({margin:?} before its TTL of {ttl:?} ends)"
                ));
                return;
            }
        }
    }
}

impl crate::PgLog {
    /// The store's shard count (fixed when it was created).
    #[must_use]
    pub fn shards(&self) -> Shards {
        self.inner.shards
    }

    /// The shard `session` is recorded in (a sub-agent's child: its parent's); `None`
    /// for an unknown session.
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn session_shard(&self, session: SessionId) -> Result<Option<u32>, ReadError> {
        let reader = self.reader().await?;
        let row = reader
            .client
            .query_opt(
                "SELECT shard FROM foya_sessions WHERE session = $1",
                &[&crate::uuid(session)],
            )
            .await
            .map_err(|e| crate::read_err(&e))?;
        match row {
            Some(row) => {
                let shard: i32 = row.try_get(0).map_err(|e| crate::read_err(&e))?;
                Ok(u32::try_from(shard).ok())
            }
            None => Ok(None),
        }
    }

    /// The sessions of the recovery index (queued inputs, open turns) in `shards`:
    /// what a node that claimed those shards recovers ([`EventLog::pending_sessions`]
    /// filtered by shard).
    ///
    /// [`EventLog::pending_sessions`]: foya_storage::EventLog::pending_sessions
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn pending_sessions_in(&self, shards: &[u32]) -> Result<Vec<SessionId>, ReadError> {
        let reader = self.reader().await?;
        let shards: Vec<i32> = shards
            .iter()
            .filter_map(|s| i32::try_from(*s).ok())
            .collect();
        let rows = reader
            .client
            .query(
                "SELECT DISTINCT p.session FROM foya_pending p \
                 JOIN foya_sessions s ON s.session = p.session \
                 WHERE s.shard = ANY($1)",
                &[&shards],
            )
            .await
            .map_err(|e| crate::read_err(&e))?;
        rows.iter()
            .map(|row| {
                let id: Uuid = row.try_get(0).map_err(|e| crate::read_err(&e))?;
                Ok(SessionId::from_bytes(*id.as_bytes()))
            })
            .collect()
    }

    /// The epoch each of `session`'s events was written under, in seq order.
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn event_epochs(&self, session: SessionId) -> Result<Vec<(Seq, u64)>, ReadError> {
        let reader = self.reader().await?;
        let rows = reader
            .client
            .query(
                "SELECT seq, epoch FROM foya_events WHERE session = $1 ORDER BY seq",
                &[&crate::uuid(session)],
            )
            .await
            .map_err(|e| crate::read_err(&e))?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get(0).map_err(|e| crate::read_err(&e))?;
                let epoch: i64 = row.try_get(1).map_err(|e| crate::read_err(&e))?;
                Ok((
                    Seq(u64::try_from(seq).unwrap_or(0)),
                    u64::try_from(epoch).unwrap_or(0),
                ))
            })
            .collect()
    }

    /// Every event whose epoch is lower than its predecessor's in its session (at most
    /// `limit`): empty in a store where fencing held. Reads every event (a check, not a
    /// hot path).
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn epoch_regressions(&self, limit: usize) -> Result<Vec<EpochRegression>, ReadError> {
        let reader = self.reader().await?;
        let limit = crate::big(u64::try_from(limit).unwrap_or(u64::MAX));
        let rows = reader
            .client
            .query(
                "SELECT session, seq, epoch, previous FROM (\
                   SELECT session, seq, epoch, \
                   lag(epoch) OVER (PARTITION BY session ORDER BY seq) AS previous \
                   FROM foya_events) e \
                 WHERE epoch < previous ORDER BY session, seq LIMIT $1",
                &[&limit],
            )
            .await
            .map_err(|e| crate::read_err(&e))?;
        rows.iter()
            .map(|row| {
                let get = |i: usize| -> Result<u64, ReadError> {
                    let v: i64 = row.try_get(i).map_err(|e| crate::read_err(&e))?;
                    Ok(u64::try_from(v).unwrap_or(0))
                };
                let session: Uuid = row.try_get(0).map_err(|e| crate::read_err(&e))?;
                Ok(EpochRegression {
                    session: SessionId::from_bytes(*session.as_bytes()),
                    seq: Seq(get(1)?),
                    epoch: get(2)?,
                    previous: get(3)?,
                })
            })
            .collect()
    }

    /// Stores an attachment's bytes under `id` only while `fence` holds (checked in the
    /// same statement, as appends are): the attachment write of a node that owns the
    /// shard of the session it belongs to. `Ok(false)`: fenced, nothing written (an
    /// existing id keeps its first bytes either way). [`Fence::None`] stores
    /// unconditionally.
    ///
    /// # Errors
    /// [`PgError::Db`] when the statement fails.
    pub async fn put_attachment_fenced(
        &self,
        id: Uuid,
        media_type: &str,
        bytes: &[u8],
        fence: Fence,
    ) -> Result<bool, PgError> {
        let Fence::Epoch { shard, epoch } = fence else {
            self.put_attachment(id, media_type, bytes).await?;
            return Ok(true);
        };
        let reader = self
            .reader()
            .await
            .map_err(|e| PgError::Db(e.to_string()))?;
        let shard = i32::try_from(shard).unwrap_or(i32::MAX);
        let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
        let row = reader
            .client
            .query_one(
                "WITH fence AS (SELECT foya_fence_ok($4, $5) AS ok), \
                 put AS (INSERT INTO foya_attachments (id, media_type, bytes) \
                   SELECT $1, $2, $3 FROM fence WHERE fence.ok \
                   ON CONFLICT (id) DO NOTHING RETURNING 1) \
                 SELECT ok FROM fence",
                &[&id, &media_type, &bytes, &shard, &epoch],
            )
            .await?;
        Ok(row.try_get(0)?)
    }
}

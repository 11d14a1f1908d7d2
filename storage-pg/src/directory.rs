//! Who serves which session: read-only queries over the leases and shards (schema
//! version 2), for a node that forwards a request to the owner of a session.
//!
//! A session is recorded in a shard (`foya_sessions.shard`; a sub-agent's child in its
//! parent's); a shard is owned by the lease that last claimed it (`foya_shards`), while
//! that lease is live on the database's clock; a lease's node is reached at the address
//! it registered ([`crate::NodeLease::register_at`]: a `foya node` registers its HTTP
//! address, `http://HOST:PORT`). [`Directory`] answers these on its own connection
//! (opened again when lost); it never writes.

use crate::lease::LiveNode;
use crate::{location, render};
use foya_protocol::SessionId;
use foya_storage::ReadError;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;
use tokio_postgres::{Client, Config, NoTls};
use uuid::Uuid;

/// Where a session is served now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The store has no such session.
    Unknown,
    /// Its shard is owned by this live node.
    Owned {
        /// The session's shard.
        shard: u32,
        /// The owner (its name and registered address).
        owner: LiveNode,
    },
    /// No live lease owns its shard: released, its owner's lease expired (a failover in
    /// progress), or never claimed.
    Unowned {
        /// The session's shard.
        shard: u32,
        /// Whether any node holds a live lease (a cluster that places shards); when none
        /// does, the store's sessions are written unfenced by whoever serves them.
        leased: bool,
    },
}

/// Read queries over the leases and shards of a store, on one connection of its own.
pub struct Directory {
    config: Config,
    location: String,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl fmt::Debug for Directory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Directory")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// What the owner columns of the queries below select: the owner's name, address and
/// milliseconds until its lease expires (all NULL when no live lease owns the shard).
const OWNER_COLUMNS: &str = "nd.node, nd.address, \
     ceil(extract(epoch FROM (nd.expires_at - clock_timestamp())) * 1000)::bigint";

/// The live lease that owns shard `sh` (joined to `foya_shards sh`).
const LIVE_OWNER: &str = "LEFT JOIN foya_nodes nd ON nd.lease = sh.owner_lease \
     AND nd.expires_at > clock_timestamp()";

impl Directory {
    /// A directory of the store at `url` (connected on first use; its schema must exist:
    /// open a [`crate::PgLog`] on it first).
    ///
    /// # Errors
    /// `url` is not a PostgreSQL connection string.
    pub fn new(url: &str) -> Result<Directory, ReadError> {
        let mut config: Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| ReadError::Storage(render(&e)))?;
        if config.get_application_name().is_none() {
            config.application_name("foya-directory");
        }
        config.connect_timeout(Duration::from_secs(5));
        let location = location(&config);
        Ok(Directory {
            config,
            location,
            client: tokio::sync::Mutex::new(None),
        })
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, ReadError> {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_none_or(Client::is_closed) {
            let (client, connection) = self.config.connect(NoTls).await.map_err(|e| {
                ReadError::Storage(format!("PostgreSQL at {}: {}", self.location, render(&e)))
            })?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %render(&e), "a directory connection ended");
                }
            });
            *slot = Some(client);
        }
        let Some(client) = slot.as_ref() else {
            return Err(ReadError::Storage("no directory connection".into()));
        };
        client
            .query(sql, params)
            .await
            .map_err(|e| crate::read_err(&e))
    }

    /// Where `session` is served now.
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn session(&self, session: SessionId) -> Result<Placement, ReadError> {
        let rows = self
            .query(
                &format!(
                    "SELECT s.shard, {OWNER_COLUMNS}, EXISTS (SELECT 1 FROM foya_nodes \
                     WHERE expires_at > clock_timestamp()) \
                     FROM foya_sessions s JOIN foya_shards sh ON sh.shard = s.shard \
                     {LIVE_OWNER} WHERE s.session = $1"
                ),
                &[&crate::uuid(session)],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Placement::Unknown);
        };
        let get = |e: tokio_postgres::Error| crate::read_err(&e);
        let shard: i32 = row.try_get(0).map_err(get)?;
        let shard = u32::try_from(shard)
            .map_err(|_| ReadError::Decode(format!("negative shard {shard}")))?;
        Ok(match owner(row, 1)? {
            Some(owner) => Placement::Owned { shard, owner },
            None => Placement::Unowned {
                shard,
                leased: row.try_get(4).map_err(get)?,
            },
        })
    }

    /// The live node that owns `shard`, if any.
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn shard_owner(&self, shard: u32) -> Result<Option<LiveNode>, ReadError> {
        let Ok(shard) = i32::try_from(shard) else {
            return Ok(None);
        };
        let rows = self
            .query(
                &format!(
                    "SELECT {OWNER_COLUMNS} FROM foya_shards sh {LIVE_OWNER} \
                     WHERE sh.shard = $1"
                ),
                &[&shard],
            )
            .await?;
        match rows.first() {
            Some(row) => owner(row, 0),
            None => Ok(None),
        }
    }

    /// The name of the live node that owns each of `sessions` (a session whose shard
    /// has no live owner, or that the store does not have, is left out).
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn owners(
        &self,
        sessions: &[SessionId],
    ) -> Result<HashMap<SessionId, String>, ReadError> {
        let ids: Vec<Uuid> = sessions.iter().map(|s| crate::uuid(*s)).collect();
        let rows = self
            .query(
                &format!(
                    "SELECT s.session, nd.node FROM foya_sessions s \
                     JOIN foya_shards sh ON sh.shard = s.shard {LIVE_OWNER} \
                     WHERE s.session = ANY($1) AND nd.node IS NOT NULL"
                ),
                &[&ids],
            )
            .await?;
        let get = |e: tokio_postgres::Error| crate::read_err(&e);
        rows.iter()
            .map(|row| {
                let id: Uuid = row.try_get(0).map_err(get)?;
                let node: String = row.try_get(1).map_err(get)?;
                Ok((SessionId::from_bytes(*id.as_bytes()), node))
            })
            .collect()
    }

    /// The live node named `node`, if its lease is live.
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn live_node(&self, node: &str) -> Result<Option<LiveNode>, ReadError> {
        let rows = self
            .query(
                &format!(
                    "SELECT {OWNER_COLUMNS} FROM foya_nodes nd \
                     WHERE nd.node = $1 AND nd.expires_at > clock_timestamp()"
                ),
                &[&node],
            )
            .await?;
        match rows.first() {
            Some(row) => owner(row, 0),
            None => Ok(None),
        }
    }
}

/// The owner in columns `at..at + 3` ([`OWNER_COLUMNS`]); `None` when they are NULL.
fn owner(row: &tokio_postgres::Row, at: usize) -> Result<Option<LiveNode>, ReadError> {
    let get = |e: tokio_postgres::Error| crate::read_err(&e);
    let node: Option<String> = row.try_get(at).map_err(get)?;
    let Some(node) = node else {
        return Ok(None);
    };
    let ms: Option<i64> = row.try_get(at + 2).map_err(get)?;
    Ok(Some(LiveNode {
        node,
        address: row.try_get(at + 1).map_err(get)?,
        expires_in: Duration::from_millis(ms.and_then(|m| u64::try_from(m).ok()).unwrap_or(0)),
    }))
}

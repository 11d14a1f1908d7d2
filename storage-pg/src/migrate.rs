//! Schema migrations: `foya_schema` records each version applied; [`migrate`] applies
//! the missing ones, each in one transaction, under a transaction-scoped advisory lock,
//! so several processes opening one database at once apply each version exactly once.
//! A database whose schema is newer than this build knows is refused.

use crate::PgError;
use tokio_postgres::Client;

/// The schema versions this build knows, in order: `(version, SQL)`.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("schema_v1.sql")),
    (2, include_str!("schema_v2.sql")),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = 2;

/// The advisory lock key migrations hold (`foya` in ASCII).
const LOCK_KEY: i64 = 0x666f_7961;

/// Brings the database's schema to [`SCHEMA_VERSION`]; returns the version found before.
/// A store created now (version 1 applied) gets `new_shards` shards; an existing one
/// keeps its count.
///
/// # Errors
/// [`PgError::NewerSchema`], or the database's error.
pub(crate) async fn migrate(client: &mut Client, new_shards: u32) -> Result<i32, PgError> {
    let txn = client.transaction().await?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS foya_schema (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let found: i32 = txn
        .query_one("SELECT coalesce(max(version), 0) FROM foya_schema", &[])
        .await?
        .try_get(0)?;
    if found > SCHEMA_VERSION {
        return Err(PgError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        txn.batch_execute(sql).await?;
        if *version == 1 {
            // Fixed at creation: version 2 creates the shards' rows from this count.
            txn.execute(
                "UPDATE foya_meta SET value = $1 WHERE key = 'shards'",
                &[&new_shards.to_string()],
            )
            .await?;
        }
        txn.execute("INSERT INTO foya_schema (version) VALUES ($1)", &[version])
            .await?;
        tracing::info!(version, "applied the PostgreSQL schema migration");
    }
    txn.commit().await?;
    Ok(found)
}

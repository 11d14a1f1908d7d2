//! `--store URL` (or `FOYA_STORE_URL`): a shared event store instead of the data
//! directory's redb file. `postgresql://` (or `postgres://`) URLs open the PostgreSQL log
//! (`foya-storage-pg`, cargo feature `postgres`, on in the `foya` binary by default).
//! Without `--store`, commands use the data directory's redb store as before.
//!
//! Attachments go to the shared store too (every node reads them; the data directory
//! keeps a copy). What stays with the data directory: hook transcripts and the
//! redb-only tools (`foya store check`, `salvage`, `backup`, the acknowledgement journal),
//! which refuse a `--store` ([`redb_only`]).

use crate::args::StoreArg;
use foya_storage::LogStore;

/// Whether `url` names a PostgreSQL store.
pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgresql://") || url.starts_with("postgres://")
}

/// The URL `arg` names, if any (an empty `FOYA_STORE_URL` counts as unset).
#[must_use]
pub fn url(arg: &StoreArg) -> Option<&str> {
    arg.store.as_deref().filter(|u| !u.trim().is_empty())
}

/// Opens the shared store `url` names (its schema migrated to this build's).
///
/// # Errors
/// An unknown scheme, a build without the `postgres` feature, or the store's refusal
/// (unreachable, a newer schema), with the URL (never its password) named.
pub async fn open(url: &str) -> anyhow::Result<LogStore> {
    if !is_postgres(url) {
        anyhow::bail!(
            "--store {:?}: not a store URL this foya knows (postgresql://user@host:port/db)",
            redact(url)
        );
    }
    open_postgres(url, true).await
}

/// [`open`], with `synchronous_commit` left to the server (`durable`) or off on the
/// writer's connections (load tests' `--durability none`: a server crash may lose the
/// last acknowledged commits).
///
/// # Errors
/// As [`open`].
pub async fn open_with(url: &str, durable: bool) -> anyhow::Result<LogStore> {
    if !is_postgres(url) {
        return open(url).await;
    }
    open_postgres(url, durable).await
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str, durable: bool) -> anyhow::Result<LogStore> {
    Ok(LogStore::shared(open_pg(url, durable).await?))
}

/// The PostgreSQL log itself (`foya node` keeps it for its shard queries).
///
/// # Errors
/// As [`open`].
#[cfg(feature = "postgres")]
pub(crate) async fn open_pg(url: &str, durable: bool) -> anyhow::Result<foya_storage_pg::PgLog> {
    let options = foya_storage_pg::PgOptions {
        synchronous_commit: durable,
        ..foya_storage_pg::PgOptions::default()
    };
    Ok(foya_storage_pg::PgLog::open(url, options).await?)
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_url: &str, _durable: bool) -> anyhow::Result<LogStore> {
    anyhow::bail!(
        "this foya was built without PostgreSQL support: build it with the `postgres` \
         feature (the default of the foya binary)"
    )
}

/// `url` without a password (`user:secret@` becomes `user@`).
#[must_use]
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(u, _)| u);
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// The error of a redb-only tool asked of a shared store.
#[must_use]
pub fn redb_only(tool: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`foya {tool}` works on a data directory's redb store (its file, its journal); \
         FOYA_STORE_URL names a shared store, which it does not apply to: use the \
         database's own tools there (pg_dump, a standby), or unset FOYA_STORE_URL to \
         work on a data directory"
    )
}

/// Why session `id` of a shared store takes no input (`None`: it does): unknown, or
/// deleted (as [`crate::data::open_for_input`] says for a data directory).
///
/// # Errors
/// The store cannot be read.
pub async fn input_refusal(
    store: &LogStore,
    id: foya_protocol::SessionId,
) -> anyhow::Result<Option<String>> {
    use foya_storage::EventLog as _;
    match store.session(id).await? {
        None => Ok(Some(format!("no session {id}"))),
        Some(s) if s.deleted => Ok(Some(format!(
            "session {id} was deleted: it takes no more inputs (its events stay readable \
             with `foya sessions show {id}`)"
        ))),
        Some(_) => Ok(None),
    }
}

/// `foya sessions show ID --store URL`: the session's events, one JSON object per line
/// with `--json` (as for a data directory), else one `seq type` line each; exit 1 when
/// there is no such session.
///
/// # Errors
/// The store cannot be opened or read.
pub async fn show(url: &str, id: foya_protocol::SessionId, json: bool) -> anyhow::Result<()> {
    use foya_storage::EventLog as _;
    use std::io::Write as _;
    let store = open(url).await?;
    if store.session(id).await?.is_none() {
        store.close().await;
        anyhow::bail!("no session {id}");
    }
    let events = store.read_from(id, foya_protocol::Seq::FIRST).await?;
    store.close().await;
    let mut out = std::io::stdout().lock();
    for event in &events {
        if json {
            writeln!(out, "{}", serde_json::to_string(event)?)?;
        } else {
            writeln!(out, "{:>5}  {}", event.seq, event.kind.type_name())?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `foya store copy`: every session of one store into the other (`--to-store URL`: the
/// data directory's redb store into the shared one; `--from-store URL`: back). Each
/// session continues from the target's last seq, so a copy that stopped is resumed by
/// running it again; events go in appends of at most 256.
///
/// # Errors
/// Neither or both directions given, a store that cannot be opened, read or written (the
/// session is named).
pub async fn copy(
    dir: Option<&std::path::Path>,
    to_store: Option<&str>,
    from_store: Option<&str>,
) -> anyhow::Result<()> {
    use foya_storage::EventLog as _;
    let dir = crate::data::data_dir(dir)?;
    let (source, target, label): (LogStore, LogStore, String) = match (to_store, from_store) {
        (Some(url), None) => {
            if !crate::data::store_path(&dir).is_file() {
                anyhow::bail!("{}", crate::data::missing_store(&dir));
            }
            let source = crate::data::open_store(&dir)?.into();
            (source, open(url).await?, redact(url))
        }
        (None, Some(url)) => {
            let source = open(url).await?;
            let target = crate::data::open_store(&dir)?.into();
            (source, target, dir.display().to_string())
        }
        _ => anyhow::bail!("give --to-store URL or --from-store URL"),
    };
    let (mut sessions, mut events) = (0usize, 0usize);
    let result = async {
        for summary in source.list_sessions(foya_storage::Page::ALL).await? {
            let from = target
                .last_seq(summary.id)
                .await?
                .map_or(foya_protocol::Seq::FIRST, foya_protocol::Seq::next);
            let log = source.read_from(summary.id, from).await?;
            for chunk in log.chunks(256) {
                target
                    .append(chunk, foya_storage::Fence::None)
                    .await
                    .map_err(|e| anyhow::anyhow!("session {}: {e}", summary.id))?;
            }
            sessions += 1;
            events += log.len();
        }
        anyhow::Ok(())
    }
    .await;
    source.close().await;
    target.close().await;
    result?;
    eprintln!("foya: copied {sessions} sessions ({events} new events) into {label}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn the_password_of_a_url_is_never_shown() {
        assert_eq!(
            redact("postgresql://foya:s3cret@db.example:5432/foya"),
            "postgresql://foya@db.example:5432/foya"
        );
        assert_eq!(
            redact("postgresql://foya@127.0.0.1/foya"),
            "postgresql://foya@127.0.0.1/foya"
        );
        assert_eq!(redact("nonsense"), "nonsense");
    }
}

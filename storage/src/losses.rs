//! Comparing the acknowledgement journal ([`crate::journal`]) with the database when a
//! store opens: a session whose latest committed seq is below the seq the journal says
//! was acknowledged lost events (redb's repair rolled back past acknowledged commits, or
//! the file was damaged or replaced). Each such loss is returned to the opener
//! ([`crate::Store::losses`]) and appended to `<database file>.losses` (one JSON object
//! per line), so `foya store check` still names it after the journal was brought back
//! in line with the database.

use crate::guard::contain;
use crate::journal;
use foya_protocol::{Seq, SessionId};
use redb::{Database, TableDefinition};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Acknowledged events a store no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Loss {
    /// The session.
    pub session: SessionId,
    /// The latest seq acknowledged to an appender.
    pub acknowledged: Seq,
    /// The latest seq the database holds (`None`: the session is gone).
    pub found: Option<Seq>,
    /// When the loss was found (Unix ms).
    pub found_at_ms: u64,
}

impl Loss {
    /// How many acknowledged events are missing.
    #[must_use]
    pub fn missing(&self) -> u64 {
        self.acknowledged
            .0
            .saturating_sub(self.found.map_or(0, |s| s.0))
    }
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.found {
            Some(found) => write!(
                f,
                "session {} lost {} acknowledged events: it was acknowledged up to seq {} and \
                 now ends at seq {found}",
                self.session,
                self.missing(),
                self.acknowledged
            ),
            None => write!(
                f,
                "session {} is gone: it was acknowledged up to seq {}",
                self.session, self.acknowledged
            ),
        }
    }
}

/// The losses log's path for a database file.
pub(crate) fn log_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".losses");
    PathBuf::from(name)
}

/// Every loss recorded beside the database file at `db` (a missing or unreadable log
/// holds none; a line that does not parse, bytes that are not UTF-8 included, is
/// skipped, the others still read).
#[must_use]
pub fn recorded_losses(db: &Path) -> Vec<Loss> {
    String::from_utf8_lossy(&std::fs::read(log_path(db)).unwrap_or_default())
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Compares the journal of the database file at `path` with `db`: returns the journal,
/// ready for appending (compacted to what the database holds), and the losses found
/// (also appended to the losses log).
pub(crate) fn verify(db: &Database, path: &Path) -> (journal::Journal, Vec<Loss>) {
    let journal_path = journal::path_for(path);
    let acks = match journal::load(&journal_path) {
        Ok(acks) => acks,
        Err(e) => {
            tracing::warn!(path = %journal_path.display(), error = %e, "cannot read the acknowledgement journal");
            journal::Acks::default()
        }
    };
    // Closed cleanly with exactly this journal: every acknowledged seq is in the
    // database (its last commit wrote the mark after the journal's last record), so
    // there is nothing to compare — a million sessions' lookups are skipped. An older
    // copy of the file, a killed writer or a journal written since fail the match (the
    // digest, not only the length: compaction at each open makes lengths repeat).
    let clean = take_clean_mark(db) == Some((journal_len(&journal_path), acks.digest));
    if clean && acks.damaged_records == 0 {
        let mut digest = acks.digest;
        if acks.records > acks.seqs.len() as u64 {
            match journal::rewrite(&journal_path, &acks.seqs) {
                Ok(written) => digest = written,
                Err(e) => {
                    tracing::warn!(path = %journal_path.display(), error = %e, "cannot rewrite the acknowledgement journal");
                }
            }
        }
        return (
            journal::Journal::open(journal_path, acks.seqs, digest),
            Vec::new(),
        );
    }
    if acks.damaged_records > 0 {
        tracing::warn!(
            path = %journal_path.display(),
            records = acks.damaged_records,
            "acknowledgement journal records did not check and were skipped"
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut losses = Vec::new();
    let mut current = HashMap::with_capacity(acks.seqs.len());
    // One read transaction for every session (a journal of a million sessions took
    // seconds with one transaction each); a session at a time only when that fails.
    let all = last_seqs(db, &acks.seqs);
    for (key, acknowledged) in &acks.seqs {
        let session = SessionId::from_bytes(key.to_be_bytes());
        let found = match all.as_ref().and_then(|all| all.get(key)) {
            Some(found) => Ok(Ok(*found)),
            None => contain("reading the last seq", || {
                crate::query::begin(db).and_then(|txn| crate::query::last_seq(&txn, session))
            }),
        };
        let found = match found {
            Ok(Ok(found)) => found,
            // Unreadable now: keep the claim, so a later open or check can still tell.
            _ => {
                current.insert(*key, *acknowledged);
                continue;
            }
        };
        if found.map_or(0, |s| s.0) < *acknowledged {
            losses.push(Loss {
                session,
                acknowledged: Seq(*acknowledged),
                found,
                found_at_ms: now,
            });
        }
        if let Some(found) = found {
            current.insert(*key, found.0);
        }
    }
    if !losses.is_empty() {
        record(path, &losses);
    }
    let stale =
        current != acks.seqs || acks.damaged_records > 0 || acks.records > current.len() as u64;
    let mut digest = acks.digest;
    if stale {
        match journal::rewrite(&journal_path, &current) {
            Ok(written) => digest = written,
            Err(e) => {
                tracing::warn!(path = %journal_path.display(), error = %e, "cannot rewrite the acknowledgement journal");
            }
        }
    }
    (
        journal::Journal::open(journal_path, current, digest),
        losses,
    )
}

/// The mark a clean close leaves in the database: the journal's length and digest then.
pub(crate) const CLEAN: TableDefinition<'static, &str, u64> = TableDefinition::new("clean_close");
const JOURNAL_LEN: &str = "journal_len";
const JOURNAL_DIGEST: &str = "journal_digest";

/// The journal file's length (0 when it does not exist).
pub(crate) fn journal_len(journal: &Path) -> u64 {
    std::fs::metadata(journal).map_or(0, |m| m.len())
}

/// Reads and removes the clean-close mark, (journal length, journal digest) (removed at
/// once, so a writer killed later leaves none); `None` when there was none (a mark of an
/// older foya has no digest) or it cannot be read.
fn take_clean_mark(db: &Database) -> Option<(u64, u64)> {
    let taken = contain(
        "reading the clean-close mark",
        || -> Result<Option<(u64, u64)>, redb::Error> {
            let txn = db.begin_write()?;
            let mark = {
                let mut table = txn.open_table(CLEAN)?;
                let len = table.remove(JOURNAL_LEN)?.map(|v| v.value());
                let digest = table.remove(JOURNAL_DIGEST)?.map(|v| v.value());
                len.zip(digest)
            };
            txn.commit()?;
            Ok(mark)
        },
    );
    taken.ok().and_then(Result::ok).flatten()
}

/// The clean-close mark as a read transaction sees it, left in place: (journal length,
/// journal digest; `None` in a mark of an older foya); `None` when there is none.
pub(crate) fn read_clean_mark(
    txn: &redb::ReadTransaction,
) -> Result<Option<(u64, Option<u64>)>, redb::Error> {
    let table = match txn.open_table(CLEAN) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(len) = table.get(JOURNAL_LEN)?.map(|v| v.value()) else {
        return Ok(None);
    };
    Ok(Some((len, table.get(JOURNAL_DIGEST)?.map(|v| v.value()))))
}

/// Acknowledged events a store opened for reading only does not hold (see
/// [`crate::ReadOnlyStore::unrecorded_losses`]): none when the file's clean-close mark
/// matches the journal (a mark without a digest, left by an older foya, by its length).
pub(crate) fn unrecorded(
    path: &Path,
    mark: Option<(u64, Option<u64>)>,
    last_seq: impl Fn(SessionId) -> Option<Option<Seq>>,
) -> Vec<Loss> {
    let journal_path = journal::path_for(path);
    let Ok(acks) = journal::load(&journal_path) else {
        return Vec::new();
    };
    let len = journal_len(&journal_path);
    let clean = match mark {
        Some((marked, Some(digest))) => marked == len && digest == acks.digest,
        Some((marked, None)) => marked == len,
        None => false,
    };
    if clean && acks.damaged_records == 0 {
        return Vec::new();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut acked: Vec<_> = acks.seqs.into_iter().collect();
    acked.sort_unstable();
    acked
        .into_iter()
        .filter_map(|(key, acknowledged)| {
            let session = SessionId::from_bytes(key.to_be_bytes());
            // An unreadable session is named by the read itself, not as a loss.
            let found = last_seq(session)?;
            (found.map_or(0, |s| s.0) < acknowledged).then_some(Loss {
                session,
                acknowledged: Seq(acknowledged),
                found,
                found_at_ms: now,
            })
        })
        .collect()
}

/// Leaves the clean-close mark: the journal's length and digest now. Called by the
/// writer after its last commit, when the journal holds every acknowledgement; none when
/// a journal write failed (the next open then compares).
pub(crate) fn mark_clean(db: &Database, journal: &journal::Journal) {
    let Some(digest) = journal.digest() else {
        tracing::warn!("the acknowledgement journal failed; the next open compares it");
        return;
    };
    let len = journal_len(journal.path());
    let marked = contain(
        "writing the clean-close mark",
        || -> Result<(), redb::Error> {
            let txn = db.begin_write()?;
            {
                let mut table = txn.open_table(CLEAN)?;
                table.insert(JOURNAL_LEN, len)?;
                table.insert(JOURNAL_DIGEST, digest)?;
            }
            txn.commit()?;
            Ok(())
        },
    );
    if !matches!(marked, Ok(Ok(()))) {
        tracing::warn!("cannot leave the clean-close mark; the next open compares the journal");
    }
}

/// The latest seq of every session in `acks`, read in one transaction in key order;
/// `None` when that read failed (an error or a contained panic on a damaged page).
fn last_seqs(db: &Database, acks: &HashMap<u128, u64>) -> Option<HashMap<u128, Option<Seq>>> {
    let mut keys: Vec<u128> = acks.keys().copied().collect();
    keys.sort_unstable();
    let read = contain("reading the last seqs", || {
        let txn = crate::query::begin(db)?;
        let mut out = HashMap::with_capacity(keys.len());
        for key in keys {
            let session = SessionId::from_bytes(key.to_be_bytes());
            out.insert(key, crate::query::last_seq(&txn, session)?);
        }
        Ok::<_, crate::ReadError>(out)
    });
    match read {
        Ok(Ok(all)) => Some(all),
        _ => None,
    }
}

/// Appends `losses` to the losses log of the database file at `path` (best effort).
fn record(path: &Path, losses: &[Loss]) {
    let log = log_path(path);
    let mut text = String::new();
    for loss in losses {
        if let Ok(line) = serde_json::to_string(loss) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
    if let Err(e) = written {
        tracing::warn!(path = %log.display(), error = %e, "cannot record lost events");
    }
}

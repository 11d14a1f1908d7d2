//! Opening a database file read-only with redb, and telling an interrupted creation
//! (an empty file, or one without redb's magic number) from a file that was emptied.
//! Shared by [`crate::ReadOnlyStore`], the recovered copies of `recover.rs` and
//! [`crate::Store::open`].

use crate::error::{OpenError, ReadError};
use crate::guard::contain;
use crate::header::REDB_MAGIC_LEN;
use redb::backends::FileBackend;
use redb::{Database, ReadOnlyDatabase, ReadTransaction};
use std::io::Read as _;
use std::path::Path;

/// What a [`crate::ReadOnlyStore`] reads.
pub(crate) enum Source {
    /// The file itself, opened read-only.
    File(ReadOnlyDatabase),
    /// A recovered private copy of a damaged file.
    Copy(Database),
}

impl Source {
    pub(crate) fn begin_read(&self) -> Result<ReadTransaction, ReadError> {
        match self {
            Source::File(db) => crate::query::begin(db),
            Source::Copy(db) => crate::query::begin(db),
        }
    }
}

/// redb's page cache of a read-only open: a listing or a survey reads each page about once,
/// so redb's default (1 GiB) only held what had been read (`foya sessions list --all` of a
/// million sessions peaked at 1.4 GB; with this, about 220 MiB).
const READ_ONLY_CACHE_SIZE: usize = 32 << 20;

/// Opens `file` (at `path`) with redb's read-only database, inside the panic boundary.
pub(crate) fn open_file(path: &Path, file: std::fs::File) -> Result<ReadOnlyDatabase, OpenError> {
    let backend = FileBackend::new(file).map_err(|e| OpenError::Database {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let opened = contain("opening the database", || {
        redb::Builder::new()
            .set_cache_size(READ_ONLY_CACHE_SIZE)
            .open_read_only_with_backend(backend)
    })
    .map_err(|message| OpenError::Corrupt {
        path: path.to_owned(),
        message,
    })?;
    match opened {
        Ok(db) => Ok(db),
        // redb refused the file and holds nothing of it any more: an interrupted
        // creation (which `Store::open` recovers from) is told apart from a foreign or
        // broken file by its first bytes.
        Err(other)
            if !matches!(other, redb::DatabaseError::DatabaseAlreadyOpen)
                && creation_interrupted(path) =>
        {
            if let Some(message) = emptied(path) {
                return Err(OpenError::Corrupt {
                    path: path.to_owned(),
                    message,
                });
            }
            tracing::debug!(path = %path.display(), error = %other, "database creation was interrupted");
            Err(OpenError::NeedsRecovery {
                path: path.to_owned(),
            })
        }
        Err(other) => Err(OpenError::from_redb(path, other)),
    }
}

/// Why the file at `path`, which looks like an interrupted creation (empty, or without
/// redb's magic number), is damage instead: its acknowledgement journal names sessions
/// whose events were acknowledged, so it held a database once (it was emptied or
/// overwritten: a bad copy, a full disk). `None` for anything else, an interrupted
/// creation included (nothing was ever acknowledged in it).
pub(crate) fn emptied(path: &Path) -> Option<String> {
    if !creation_interrupted(path) {
        return None;
    }
    let acks = crate::journal::load(&crate::journal::path_for(path)).ok()?;
    if acks.seqs.is_empty() {
        return None;
    }
    let what = match std::fs::metadata(path).map(|m| m.len()) {
        Ok(0) => "the file is empty".to_owned(),
        _ => format!("its first {REDB_MAGIC_LEN} bytes are zero (no redb magic number)"),
    };
    Some(format!(
        "{what}, yet its acknowledgement journal names {} session(s) whose events were \
         acknowledged: the file was emptied or overwritten (a bad copy, a full disk), not left \
         by an interrupted creation",
        acks.seqs.len()
    ))
}

/// Whether the file at `path` is what an interrupted creation leaves: empty, or without
/// redb's magic number (its first bytes zero; redb writes the magic number last).
fn creation_interrupted(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = Vec::with_capacity(REDB_MAGIC_LEN);
    match file.take(REDB_MAGIC_LEN as u64).read_to_end(&mut head) {
        Ok(_) => head.iter().all(|b| *b == 0),
        Err(_) => false,
    }
}

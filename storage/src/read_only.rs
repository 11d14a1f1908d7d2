//! [`ReadOnlyStore`]: the event log opened for reading only, for commands that only look
//! (`foya sessions list`, `foya sessions show`).
//!
//! Opening a [`crate::Store`] writes even when nothing is appended: its open commits the
//! table creation and its close saves redb's allocator state. This type opens the file
//! with redb's `ReadOnlyDatabase` instead, on a descriptor opened for reading only, so
//! not a byte of the file changes.

use crate::error::OpenError;
use crate::store::REDB_MAGIC_LEN;
use redb::ReadOnlyDatabase;
use redb::backends::FileBackend;
use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The event log of a database file, opened for reading only.
///
/// Guarantees:
/// - **Nothing is written.** The file is opened read-only (`O_RDONLY`) and redb's
///   read-only database never writes, not even on drop; no table is created (a file
///   without the `events` or `sessions` table reads as holding no sessions). Its bytes
///   and length stay as they were.
/// - **A stable view.** It holds a shared lock on the file for as long as it lives:
///   other `ReadOnlyStore`s may open the file meanwhile, a [`crate::Store`] may not
///   ([`OpenError::AlreadyOpen`], both ways). So no one writes while it is open and every
///   read sees the same committed state.
///
/// Reads are as [`crate::Store`]'s (same results, same errors), each a short redb read
/// transaction on the caller's thread. Dropping it releases the lock.
pub struct ReadOnlyStore {
    pub(crate) db: ReadOnlyDatabase,
    location: PathBuf,
}

// Shared across tasks and threads like `Store`.
const _: fn() = || {
    fn shareable<T: Send + Sync + fmt::Debug + 'static>() {}
    shareable::<ReadOnlyStore>();
};

impl fmt::Debug for ReadOnlyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl ReadOnlyStore {
    /// Opens the existing database file at `path` for reading only, creating and
    /// writing nothing (see the type's guarantees).
    ///
    /// # Errors
    /// - [`OpenError::NotFound`]: no file at `path` (none is created).
    /// - [`OpenError::AlreadyOpen`]: a [`crate::Store`] (in this process or another) has
    ///   the file open.
    /// - [`OpenError::NeedsRecovery`]: the file was not closed cleanly (the process that
    ///   wrote it was killed), or its creation was interrupted (empty, or no magic number
    ///   yet). Reading it needs redb's repair, which writes: [`crate::Store::open`] runs
    ///   it (then, once that store is closed, this open succeeds).
    /// - [`OpenError::Database`]: the file cannot be read, or is not a redb database.
    pub fn open(path: &Path) -> Result<ReadOnlyStore, OpenError> {
        let database_error = |message: String| OpenError::Database {
            path: path.to_owned(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => OpenError::NotFound {
                path: path.to_owned(),
            },
            _ => database_error(e.to_string()),
        })?;
        let backend = FileBackend::new(file).map_err(|e| database_error(e.to_string()))?;
        match redb::Builder::new().open_read_only_with_backend(backend) {
            Ok(db) => Ok(ReadOnlyStore {
                db,
                location: path.to_owned(),
            }),
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(OpenError::AlreadyOpen {
                path: path.to_owned(),
            }),
            Err(redb::DatabaseError::RepairAborted) => Err(OpenError::NeedsRecovery {
                path: path.to_owned(),
            }),
            // redb refused the file and holds nothing of it any more: an interrupted
            // creation (which `Store::open` recovers from) is told apart from a foreign
            // or broken file by its first bytes.
            Err(other) if creation_interrupted(path) => {
                tracing::debug!(path = %path.display(), error = %other, "database creation was interrupted");
                Err(OpenError::NeedsRecovery {
                    path: path.to_owned(),
                })
            }
            Err(other) => Err(database_error(other.to_string())),
        }
    }

    /// The database file this store reads.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.location
    }
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

//! [`ReadOnlyStore`]: the event log opened for reading only, for commands that only look
//! (`foya sessions list`, `foya sessions show`).
//!
//! Opening a [`crate::Store`] writes even when nothing is appended: its open commits the
//! table creation and its close saves redb's allocator state. This type opens the file
//! with redb's `ReadOnlyDatabase` instead, on a descriptor opened for reading only, so
//! not a byte of the file changes.
//!
//! A damaged file (one redb refuses, or cannot repair without writing) can still be read
//! through [`ReadOnlyStore::open_damaged`]: a private copy of it is recovered
//! ([`crate::recover`]) and read, and [`ReadOnlyStore::damage`] says what was found.
//! Every redb call runs inside the panic boundary ([`crate::guard`]); after a contained
//! panic the handle is dropped and the file (or copy) opened again.

use crate::error::{OpenError, ReadError};
use crate::guard::{contain, drop_contained};
use crate::open::{Source, open_file};
use redb::ReadTransaction;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

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
    /// `None` after a contained panic whose reopen failed.
    pub(crate) db: RwLock<Option<Arc<Source>>>,
    pub(crate) location: PathBuf,
    /// The private copy read instead of a damaged file (removed on drop).
    pub(crate) copy: Option<crate::recover::Copy>,
    /// What was found wrong with the file when it was opened (`open_damaged`).
    pub(crate) damage: Vec<String>,
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
    /// - [`OpenError::Corrupt`]: the file is damaged, cut short or not a redb database
    ///   (a panic of redb on it is contained and reported so), or empty (no magic
    ///   number) while its acknowledgement journal names acknowledged sessions;
    ///   [`ReadOnlyStore::open_damaged`] reads what it still holds.
    /// - [`OpenError::NewerFormat`]: a newer redb format.
    /// - [`OpenError::Database`]: the file cannot be read.
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
        let db = open_file(path, file)?;
        Ok(ReadOnlyStore {
            db: RwLock::new(Some(Arc::new(Source::File(db)))),
            location: path.to_owned(),
            copy: None,
            damage: Vec::new(),
        })
    }

    /// Opens a damaged file for reading what can still be read, never writing to it:
    /// the file is copied (under a shared lock) into a private temporary directory, and
    /// the copy is repaired by redb if it can be (rolled back to its last intact commit)
    /// and, if truncated, padded to its layout's length. [`ReadOnlyStore::damage`] says
    /// what was done. The copy is removed when the store is dropped.
    ///
    /// # Errors
    /// [`OpenError::NotFound`], [`OpenError::AlreadyOpen`] (a writer holds the file),
    /// [`OpenError::Corrupt`] or [`OpenError::NewerFormat`] when even the copy cannot be
    /// opened, [`OpenError::Database`] for an I/O failure.
    pub fn open_damaged(path: &Path) -> Result<ReadOnlyStore, OpenError> {
        let copy = crate::recover::copy_locked(path)?;
        let (db, damage) = crate::recover::open_copy(&copy.path, path)?;
        Ok(ReadOnlyStore {
            db: RwLock::new(Some(Arc::new(db))),
            location: path.to_owned(),
            copy: Some(copy),
            damage,
        })
    }

    /// What was found wrong with the file when it was opened by
    /// [`ReadOnlyStore::open_damaged`] (empty otherwise, or when the copy opened as it
    /// was).
    #[must_use]
    pub fn damage(&self) -> &[String] {
        &self.damage
    }

    /// Whether this store reads a recovered copy ([`ReadOnlyStore::open_damaged`]).
    #[must_use]
    pub fn is_copy(&self) -> bool {
        self.copy.is_some()
    }

    /// The database read now (`None`: unavailable after a failed reopen).
    pub(crate) fn source(&self) -> Result<Arc<Source>, ReadError> {
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                ReadError::Corrupt(
                    "the database could not be opened again after it was found damaged".into(),
                )
            })
    }

    /// Replaces the database after redb panicked on it: the old handle is dropped (its
    /// state may be half-updated) and the file, or the copy, opened again.
    pub(crate) fn replace_after_panic(&self) {
        let old = self
            .db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(old) = old {
            drop_contained(old);
        }
        let reopened = match &self.copy {
            None => std::fs::File::open(&self.location)
                .map_err(|e| e.to_string())
                .and_then(|file| open_file(&self.location, file).map_err(|e| e.to_string()))
                .map(Source::File),
            Some(copy) => crate::recover::open_copy(&copy.path, &self.location)
                .map(|(source, _)| source)
                .map_err(|e| e.to_string()),
        };
        match reopened {
            Ok(source) => {
                *self.db.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(source));
            }
            Err(message) => tracing::warn!(%message, "cannot reopen a damaged database"),
        }
    }

    /// Runs `query` on a read transaction, inside the panic boundary.
    pub(crate) fn read<T>(
        &self,
        what: &str,
        query: impl FnOnce(&ReadTransaction) -> Result<T, ReadError>,
    ) -> Result<T, ReadError> {
        let source = self.source()?;
        let outcome = contain(what, || query(&source.begin_read()?));
        drop(source);
        match outcome {
            Ok(result) => result,
            Err(message) => {
                self.replace_after_panic();
                Err(ReadError::Corrupt(message))
            }
        }
    }

    /// Acknowledged events the file does not hold that no writable open has recorded:
    /// the acknowledgement journal beside it says more was acknowledged (an older copy
    /// of the file put in its place, damage). Reading only, nothing is recorded (the
    /// next writable open records them, `foya store check` lists them). Empty when the
    /// file was closed cleanly with exactly this journal, so a sound store costs one
    /// read of its journal.
    #[must_use]
    pub fn unrecorded_losses(&self) -> Vec<crate::Loss> {
        let mark = self
            .read("reading the clean-close mark", |txn| {
                crate::losses::read_clean_mark(txn).map_err(ReadError::storage)
            })
            .ok()
            .flatten();
        crate::losses::unrecorded(&self.location, mark, |session| self.last_seq(session).ok())
    }

    /// Every session that can be read, and the ones that cannot (see
    /// [`crate::Survey`]): one damaged session or page does not hide the others.
    ///
    /// # Errors
    /// [`ReadError::Corrupt`] or [`ReadError::Storage`] when no read transaction can be
    /// started at all.
    pub fn survey(&self) -> Result<crate::Survey, ReadError> {
        self.survey_keeping(crate::survey::Keep::All)
    }

    /// What [`Self::survey`] finds unreadable, in the same order, without holding the
    /// summaries of the sessions that read: the same reads, each summary checked and
    /// dropped (a store of a million sessions is checked in tens of MiB, not GiB).
    ///
    /// # Errors
    /// As [`Self::survey`].
    pub fn unreadable(&self) -> Result<Vec<crate::Unreadable>, ReadError> {
        self.survey_keeping(crate::survey::Keep::Unreadable)
            .map(|survey| survey.unreadable)
    }

    fn survey_keeping(&self, keep: crate::survey::Keep) -> Result<crate::Survey, ReadError> {
        let source = self.source()?;
        let surveyed = match &*source {
            Source::File(db) => crate::survey::survey(db, keep),
            Source::Copy(db) => crate::survey::survey(db, keep),
        };
        drop(source);
        if surveyed.poisoned {
            self.replace_after_panic();
        }
        surveyed.result
    }

    /// The database file this store reads.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.location
    }
}

impl Drop for ReadOnlyStore {
    fn drop(&mut self) {
        // Closing a recovered copy writes to it, which may panic on a damaged page.
        if let Some(source) = self
            .db
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            drop_contained(source);
        }
    }
}

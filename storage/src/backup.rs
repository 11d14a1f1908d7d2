//! Online backup: a consistent copy of the whole store, taken inside one redb read
//! transaction (a snapshot of the latest commit, while appends go on), written to a new
//! database file that opens as a store.

use crate::error::{Error, OpenError, ReadError};
use crate::read_only::ReadOnlyStore;
use crate::schema::{EVENTS, SESSIONS};
use crate::store::Store;
use redb::{Database, ReadTransaction, ReadableTable};
use std::path::Path;

/// What a backup copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// Sessions copied (rows of the summary table).
    pub sessions: u64,
    /// Events copied.
    pub events: u64,
}

impl Store {
    /// Writes a consistent copy of the store (as of the latest commit when the call
    /// starts; appends go on meanwhile) to a new database file at `to`, fsynced.
    ///
    /// # Errors
    /// [`OpenError::Database`] when `to` exists and is not empty or cannot be written,
    /// [`ReadError`] when the store cannot be read (a damaged store: use
    /// [`crate::salvage`]).
    pub fn backup(&self, to: &Path) -> Result<BackupReport, Error> {
        let db = self.inner.db.get().map_err(ReadError::Storage)?;
        copy_to(to, || crate::query::begin(&*db))
    }
}

impl ReadOnlyStore {
    /// As [`Store::backup`].
    ///
    /// # Errors
    /// As [`Store::backup`].
    pub fn backup(&self, to: &Path) -> Result<BackupReport, Error> {
        let source = self.source()?;
        copy_to(to, || source.begin_read())
    }
}

/// Copies the tables as read by one transaction into a new file at `to`.
fn copy_to(
    to: &Path,
    begin: impl FnOnce() -> Result<ReadTransaction, ReadError>,
) -> Result<BackupReport, Error> {
    let target_error = |message: String| OpenError::Database {
        path: to.to_owned(),
        message,
    };
    if std::fs::metadata(to).is_ok_and(|m| m.len() > 0) {
        return Err(target_error("the backup file already exists; give a new file".into()).into());
    }
    let copied = crate::guard::contain("copying the store", || -> Result<_, Error> {
        let txn = begin()?;
        let target = Database::create(to).map_err(|e| target_error(e.to_string()))?;
        let write = target
            .begin_write()
            .map_err(|e| target_error(e.to_string()))?;
        let mut report = BackupReport::default();
        {
            let mut events = write
                .open_table(EVENTS)
                .map_err(|e| target_error(e.to_string()))?;
            if let Some(source) = crate::query::open(&txn, EVENTS)? {
                for entry in source.iter().map_err(ReadError::storage)? {
                    let (k, v) = entry.map_err(ReadError::storage)?;
                    events
                        .insert(k.value(), v.value())
                        .map_err(|e| target_error(e.to_string()))?;
                    report.events += 1;
                }
            }
            let mut sessions = write
                .open_table(SESSIONS)
                .map_err(|e| target_error(e.to_string()))?;
            if let Some(source) = crate::query::open(&txn, SESSIONS)? {
                for entry in source.iter().map_err(ReadError::storage)? {
                    let (k, v) = entry.map_err(ReadError::storage)?;
                    sessions
                        .insert(k.value(), v.value())
                        .map_err(|e| target_error(e.to_string()))?;
                    report.sessions += 1;
                }
            }
            // The recovery index, when the source has one (else the backup's first
            // `Store::open` builds it from the logs).
            if let Some(source) = crate::query::open(&txn, crate::pending::PENDING)? {
                let mut pending = write
                    .open_table(crate::pending::PENDING)
                    .map_err(|e| target_error(e.to_string()))?;
                for entry in source.iter().map_err(ReadError::storage)? {
                    let (k, _) = entry.map_err(ReadError::storage)?;
                    pending
                        .insert(k.value(), ())
                        .map_err(|e| target_error(e.to_string()))?;
                }
            }
        }
        write.commit().map_err(|e| target_error(e.to_string()))?;
        drop(target);
        Ok(report)
    });
    match copied {
        Ok(result) => result,
        Err(message) => Err(ReadError::Corrupt(message).into()),
    }
}

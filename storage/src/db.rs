//! The shared database handle. After an I/O error redb refuses every later operation
//! (`PreviousIo`) until the database is closed and opened again, so the writer can swap
//! in a freshly opened (and, if needed, repaired) database; readers always take the
//! current one. A database on which redb panicked (contained, [`crate::guard`]) is
//! marked poisoned and reopened the same way before the writer's next transaction.

use redb::Database;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// Opens the database again (same file or backend).
pub(crate) type Reopen = Box<dyn Fn() -> Result<Database, String> + Send + Sync>;

/// Longest wait for in-flight reads to release the failed database before reopening.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct DbSlot {
    /// `None` while a reopen is in progress or after it failed.
    current: RwLock<Option<Arc<Database>>>,
    /// `None` for the in-memory backend, which cannot be reopened.
    reopen: Option<Reopen>,
    /// redb panicked on this database (a damaged page): its state may be half-updated,
    /// so the writer reopens it before using it again.
    poisoned: AtomicBool,
}

impl DbSlot {
    pub(crate) fn new(db: Database, reopen: Option<Reopen>) -> Self {
        Self {
            current: RwLock::new(Some(Arc::new(db))),
            reopen,
            poisoned: AtomicBool::new(false),
        }
    }

    /// Marks the current database as one redb panicked on: the writer reopens it before
    /// its next transaction.
    pub(crate) fn mark_poisoned(&self) {
        self.poisoned.store(true, Ordering::SeqCst);
    }

    /// Whether the current database must be reopened before the next write.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// The current database.
    ///
    /// # Errors
    /// A message when the database is unavailable (its reopen after an I/O error failed).
    pub(crate) fn get(&self) -> Result<Arc<Database>, String> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                "the database is unavailable after an I/O error; it is reopened on the next append"
                    .to_owned()
            })
    }

    /// Whether a database is in place.
    pub(crate) fn is_available(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Closes the failed database and opens it again. Only the writer thread calls this.
    ///
    /// # Errors
    /// A message when the store cannot be reopened (in-memory, or the open failed).
    pub(crate) fn reopen(&self) -> Result<(), String> {
        let Some(reopen) = &self.reopen else {
            return Err("an in-memory database cannot be reopened".into());
        };
        let old = self
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut old) = old {
            // Reads hold the Arc only for one short call; wait until they are done so the
            // file lock is released when the old database drops.
            let started = Instant::now();
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        crate::guard::drop_contained(db);
                        break;
                    }
                    Err(shared) if started.elapsed() < RELEASE_TIMEOUT => {
                        old = shared;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(shared) => {
                        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                            Some(shared);
                        return Err("reads did not release the failed database in time".into());
                    }
                }
            }
        }
        let db = crate::guard::contain("reopening the database", reopen)??;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(db));
        self.poisoned.store(false, Ordering::SeqCst);
        tracing::info!("store database reopened after an I/O error or a contained panic");
        Ok(())
    }
}

impl Drop for DbSlot {
    fn drop(&mut self) {
        // Closing a database writes its allocator state, which may panic on a damaged
        // page.
        if let Some(db) = self
            .current
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            crate::guard::drop_contained(db);
        }
    }
}

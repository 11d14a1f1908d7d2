//! A damaged event store, as every command reports it: one line naming the file and what
//! was found, then what to do (`foya store check`, `foya store salvage`), and exit
//! status [`crate::args::EXIT_DAMAGED`]; lost acknowledged events found by an open, one
//! warning line per session; reading a damaged file through a private copy.

use foya_storage::{OpenError, ReadOnlyStore};
use std::path::Path;

/// Prints the line for a damaged store (`chain`: the error and its causes) and marks the
/// process to exit with [`crate::args::EXIT_DAMAGED`].
pub fn report(chain: &str) {
    DAMAGE_REPORTED.store(true, std::sync::atomic::Ordering::SeqCst);
    if chain.contains("newer format version") {
        eprintln!(
            "foya: {chain}; use the foya version that wrote it (this one cannot read it; \
             `foya store salvage --to NEW_DIR` copies the events it can decode)"
        );
    } else {
        eprintln!("foya: {chain}; {DAMAGE_HINT}");
    }
}

/// What to do about a damaged store, appended to the line reporting it.
pub const DAMAGE_HINT: &str = "the event store is damaged: run `foya store check` to \
     see what is wrong and `foya store salvage --to NEW_DIR` to copy every readable session \
     into a fresh store (both with the same --data-dir)";

/// Set when a damaged store was reported: the process exits with
/// [`crate::args::EXIT_DAMAGED`] instead of [`crate::args::EXIT_FAILED`].
pub static DAMAGE_REPORTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether `e` says the event store is damaged or of a newer format.
pub fn is_damage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<foya_storage::OpenError>()
            .is_some_and(foya_storage::OpenError::is_damage)
            || c.downcast_ref::<foya_storage::ReadError>()
                .is_some_and(foya_storage::ReadError::is_damage)
            || c.downcast_ref::<foya_storage::Error>()
                .is_some_and(|e| match e {
                    foya_storage::Error::Open(o) => o.is_damage(),
                    foya_storage::Error::Read(r) => r.is_damage(),
                    _ => false,
                })
    })
}

/// Says on stderr, one line each, what acknowledged events the store found missing
/// when it opened.
pub fn report_losses(path: &Path, losses: &[foya_storage::Loss]) {
    for loss in losses {
        eprintln!(
            "foya: warning: {loss} — the store {} was rolled back or damaged; recorded in \
             {}.losses (`foya store check` lists it)",
            path.display(),
            path.display()
        );
    }
}

/// Says on stderr, one line each, what acknowledged events a store opened for reading
/// only does not hold (not recorded yet: the next command that writes the store does).
pub fn report_unrecorded_losses(path: &Path, losses: &[foya_storage::Loss]) {
    for loss in losses {
        eprintln!(
            "foya: warning: {loss} — the store {} was rolled back or damaged (`foya store \
             check` lists it)",
            path.display()
        );
    }
}

/// Opens a damaged store for reading what it still holds (a private copy, see
/// [`ReadOnlyStore::open_damaged`]), after one line on stderr saying so.
pub fn open_damaged(path: &Path, found: &OpenError) -> Result<ReadOnlyStore, OpenError> {
    if matches!(found, OpenError::NewerFormat { .. }) {
        return Err(clone_refusal(found, path));
    }
    let store = ReadOnlyStore::open_damaged(path)?;
    DAMAGE_REPORTED.store(true, std::sync::atomic::Ordering::SeqCst);
    eprintln!(
        "foya: {found}; showing what can still be read (from a copy; the file is left as it \
         is); {}",
        DAMAGE_HINT
    );
    Ok(store)
}

/// The same refusal again (`OpenError` is not `Clone`).
fn clone_refusal(e: &OpenError, path: &Path) -> OpenError {
    match e {
        OpenError::NewerFormat { message, .. } => OpenError::NewerFormat {
            path: path.to_owned(),
            message: message.clone(),
        },
        other => OpenError::Corrupt {
            path: path.to_owned(),
            message: other.to_string(),
        },
    }
}

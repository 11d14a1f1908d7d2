//! A damaged event store, as every command reports it: one line naming the file and what
//! was found, then what to do (`foya store check`, `foya store salvage`), and exit
//! status [`crate::args::EXIT_DAMAGED`] (a [`crate::exit::CommandError::Damaged`]); lost
//! acknowledged events found by an open, one warning line per session.

use std::path::Path;

/// Prints the line for a damaged store (`chain`: the error and its causes).
pub fn report(chain: &str) {
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
     see what is wrong, then `foya store repair` to put every readable session back in its \
     place (the damaged file is kept beside it) or `foya store salvage --to NEW_DIR` to copy \
     them into a fresh store (all with the same --data-dir)";

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

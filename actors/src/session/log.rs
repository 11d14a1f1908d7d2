//! The session's committed log in memory, shared read-only with its turns.

use foya_protocol::Event;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

/// A session's committed events in seq order from seq 1, exactly as in the store.
///
/// The SessionActor is the only writer: it extends the log after each successful store
/// commit and before it answers the append, so a turn whose append was answered sees its
/// own events, and those the session and the turn's ToolActors appended before them. A
/// turn compiles each step's context from it under a read guard (compilation is
/// synchronous: the guard is never held across an `.await`), instead of reading its
/// session back from the store. Only ever grows: a failed append changes nothing.
#[derive(Debug, Clone)]
pub(crate) struct SharedLog(Arc<RwLock<Vec<Event>>>);

impl SharedLog {
    /// A log holding `events` (the store's whole log of the session, seq 1 first).
    pub(crate) fn new(events: Vec<Event>) -> Self {
        Self(Arc::new(RwLock::new(events)))
    }

    /// Reads the log. Cheap (uncontended but for the session's own short appends); keep
    /// the guard only for synchronous work.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Vec<Event>> {
        // A panic while the guard was held cannot leave the Vec half-extended in a way
        // that matters here: `extend` is the only writer.
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends committed events (the session's writer side).
    pub(super) fn extend(&self, events: Vec<Event>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(events);
    }
}

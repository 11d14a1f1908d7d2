//! The session's committed log in memory, shared read-only with its turns, with the
//! history fold its turns keep up to date.

use crate::context::HistoryFold;
use foya_protocol::Event;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

/// A session's committed events in seq order from seq 1, exactly as in the store.
///
/// The SessionActor is the only writer: it extends the log after each successful store
/// commit and before it answers the append, so a turn whose append was answered sees its
/// own events, and those the session and the turn's ToolActors appended before them. A
/// turn compiles each step's context from it under a read guard (compilation is
/// synchronous: the guard is never held across an `.await`), instead of reading its
/// session back from the store. Only ever grows: a failed append changes nothing.
///
/// It also holds the [`HistoryFold`] of the log, which lives as long as the log (across
/// the session's turns, and while the session is idle if it keeps its log): a step folds
/// only the events appended since the previous step, of this turn or an earlier one.
#[derive(Debug, Clone)]
pub(crate) struct SharedLog {
    events: Arc<RwLock<Vec<Event>>>,
    fold: Arc<Mutex<HistoryFold>>,
}

impl SharedLog {
    /// A log holding `events` (the store's whole log of the session, seq 1 first).
    pub(crate) fn new(events: Vec<Event>) -> Self {
        Self {
            events: Arc::new(RwLock::new(events)),
            fold: Arc::default(),
        }
    }

    /// Runs `f` on the log as it is now and its fold, brought up to date first. `f` runs
    /// synchronously under the log's read guard and the fold's lock: keep it short.
    pub(crate) fn with_fold<R>(&self, f: impl FnOnce(&[Event], &HistoryFold) -> R) -> R {
        let mut fold = self.lock_fold();
        let events = self.read();
        fold.update(&events);
        f(&events, &fold)
    }

    fn lock_fold(&self) -> MutexGuard<'_, HistoryFold> {
        self.fold.lock().unwrap_or_else(|poisoned| {
            // A panic during an update may have left the fold half-updated: start over.
            let mut fold = poisoned.into_inner();
            *fold = HistoryFold::new();
            self.fold.clear_poison();
            fold
        })
    }

    /// Reads the log. Cheap (uncontended but for the session's own short appends); keep
    /// the guard only for synchronous work.
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Vec<Event>> {
        // A panic while the guard was held cannot leave the Vec half-extended in a way
        // that matters here: `extend` is the only writer.
        self.events.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of events.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    /// Appends committed events (the session's writer side).
    pub(super) fn extend(&self, events: Vec<Event>) {
        self.events
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(events);
    }
}

/// The runtime-wide budget of events that idle sessions keep in memory
/// ([`crate::RuntimeConfig::idle_log_events`]).
///
/// A session going idle keeps its [`SharedLog`] only if the log fits what is left of the
/// budget (else it releases the log, and its next turn reads it from the store once);
/// the reservation is returned when the session's next turn starts or the session
/// actor stops. First come, first kept: nothing is evicted to make room.
#[derive(Debug, Clone)]
pub(crate) struct IdleLogs {
    left: Arc<AtomicUsize>,
}

impl IdleLogs {
    /// A budget of `events`.
    pub(crate) fn new(events: usize) -> Self {
        Self {
            left: Arc::new(AtomicUsize::new(events)),
        }
    }

    /// Reserves `events` of the budget, or `None` when they do not fit.
    pub(crate) fn reserve(&self, events: usize) -> Option<IdleReservation> {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(events)
            })
            .ok()
            .map(|_| IdleReservation {
                budget: self.clone(),
                events,
            })
    }
}

/// Events of an [`IdleLogs`] budget held by one idle session; returned on drop.
#[derive(Debug)]
pub(crate) struct IdleReservation {
    budget: IdleLogs,
    events: usize,
}

impl Drop for IdleReservation {
    fn drop(&mut self) {
        self.budget.left.fetch_add(self.events, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_budget_is_reserved_up_to_its_size_and_returned_on_drop() {
        let budget = IdleLogs::new(10);
        let first = budget.reserve(6);
        assert!(first.is_some());
        assert!(budget.reserve(5).is_none(), "6 + 5 > 10");
        let second = budget.reserve(4);
        assert!(second.is_some());
        assert!(budget.reserve(1).is_none());
        drop(first);
        assert!(budget.reserve(6).is_some(), "6 came back");
        drop(second);
        assert!(budget.reserve(10).is_some(), "everything came back");
    }
}

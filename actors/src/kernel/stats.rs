//! Live counts of a runtime ([`RuntimeStats`]), kept by the actors themselves with
//! atomics so that reading them is a few loads: no message to any actor.
//!
//! Each SessionActor holds a [`SessionShare`] (created in `pre_start`, dropped with the
//! actor's state whatever way it stops) carrying what it adds to the totals; the
//! supervisor counts the sessions it saw hibernate and not come back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A runtime's live counts at one moment ([`crate::Runtime::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// Sessions loaded (a SessionActor running): created, loaded or woken, not
    /// hibernated, deleted or stopped.
    pub sessions_live: u64,
    /// Sessions this runtime hibernated (idle for `hibernate_after`) and not loaded
    /// since. Sessions stored but never loaded by this runtime are not counted.
    pub sessions_hibernated: u64,
    /// Live sessions running a turn.
    pub turns_active: u64,
    /// Inputs waiting in the live sessions' queues behind a running turn (queue depth).
    pub inputs_queued: u64,
    /// Approval requests of the live sessions waiting for a decision.
    pub approvals_pending: u64,
}

#[derive(Debug, Default)]
struct Counters {
    live: AtomicU64,
    hibernated: AtomicU64,
    turns: AtomicU64,
    queued: AtomicU64,
    approvals: AtomicU64,
}

/// Where a runtime's [`RuntimeStats`] are read (cheap to clone; reading costs a few
/// atomic loads). [`crate::RuntimeConfig::stats`] is the one the runtime started from
/// that config keeps up to date: clone it before `Runtime::start` to read the counts
/// from outside (telemetry does), or call [`crate::Runtime::stats`].
#[derive(Debug, Clone, Default)]
pub struct StatsSource(Arc<Counters>);

impl StatsSource {
    /// The counts now.
    #[must_use]
    pub fn read(&self) -> RuntimeStats {
        let c = &self.0;
        RuntimeStats {
            sessions_live: c.live.load(Ordering::Relaxed),
            sessions_hibernated: c.hibernated.load(Ordering::Relaxed),
            turns_active: c.turns.load(Ordering::Relaxed),
            inputs_queued: c.queued.load(Ordering::Relaxed),
            approvals_pending: c.approvals.load(Ordering::Relaxed),
        }
    }

    /// A new live session's share (counts it live until dropped).
    pub(crate) fn session(&self) -> SessionShare {
        self.0.live.fetch_add(1, Ordering::Relaxed);
        SessionShare {
            counters: Arc::clone(&self.0),
            turn: false,
            queued: 0,
            approvals: 0,
        }
    }

    /// Sets the number of hibernated sessions (the supervisor's own count).
    pub(crate) fn set_hibernated(&self, n: usize) {
        self.0.hibernated.store(n as u64, Ordering::Relaxed);
    }
}

/// What one live session adds to the totals; taken back when dropped.
#[derive(Debug)]
pub(crate) struct SessionShare {
    counters: Arc<Counters>,
    turn: bool,
    queued: usize,
    approvals: usize,
}

fn shift(counter: &AtomicU64, from: usize, to: usize) {
    if to > from {
        counter.fetch_add((to - from) as u64, Ordering::Relaxed);
    } else if from > to {
        counter.fetch_sub((from - to) as u64, Ordering::Relaxed);
    }
}

impl SessionShare {
    /// The session now runs a turn (or not), has `queued` inputs waiting and
    /// `approvals` approval requests pending.
    pub(crate) fn set(&mut self, turn: bool, queued: usize, approvals: usize) {
        shift(
            &self.counters.turns,
            usize::from(self.turn),
            usize::from(turn),
        );
        shift(&self.counters.queued, self.queued, queued);
        shift(&self.counters.approvals, self.approvals, approvals);
        self.turn = turn;
        self.queued = queued;
        self.approvals = approvals;
    }
}

impl Drop for SessionShare {
    fn drop(&mut self) {
        self.set(false, 0, 0);
        self.counters.live.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_leave_nothing_when_dropped() {
        let source = StatsSource::default();
        let mut a = source.session();
        let mut b = source.session();
        a.set(true, 3, 1);
        b.set(true, 1, 0);
        a.set(true, 2, 0);
        let s = source.read();
        assert_eq!(
            (
                s.sessions_live,
                s.turns_active,
                s.inputs_queued,
                s.approvals_pending
            ),
            (2, 2, 3, 0)
        );
        drop(a);
        b.set(false, 0, 0);
        let s = source.read();
        assert_eq!(
            (s.sessions_live, s.turns_active, s.inputs_queued),
            (1, 0, 0)
        );
        drop(b);
        assert_eq!(source.read(), RuntimeStats::default());
    }
}

//! What a group commit tells an observer (metrics): a leaf, named by the writers and the
//! store alike.

/// One group commit of the store's writer: its write transaction's time and what it
/// committed ([`CommitObserver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitStat {
    /// The transaction, from its start to its durable commit.
    pub duration: std::time::Duration,
    /// Appends (one `append` call each) committed together.
    pub appends: usize,
    /// Events committed.
    pub events: usize,
}

/// Told of every group commit, on the writer (keep it short: a histogram's observe).
/// Installed with [`crate::EventLog::observe_commits`].
pub trait CommitObserver: Send + Sync + std::fmt::Debug {
    /// A group commit succeeded.
    fn committed(&self, commit: CommitStat);
}

/// Told of every append and every log read of a store, on the caller's task, as the call
/// returns (keep it short: it runs on the runtime's hot path). Installed with
/// [`crate::EventLog::observe_appends`]: a store that takes one calls it itself, so an
/// observer needs no wrapper around the store (no boxed future per append).
pub trait AppendObserver: Send + Sync + std::fmt::Debug {
    /// `events` (one session's, in seq order) committed, `elapsed` after the append was
    /// called.
    fn appended(&self, events: &[foya_protocol::Event], elapsed: std::time::Duration);

    /// An append of `events` failed after `elapsed`: nothing of it was committed.
    fn append_failed(&self, events: &[foya_protocol::Event], elapsed: std::time::Duration);

    /// `events` of `session` were read from the log (a session loaded, a stream caught
    /// up).
    fn read(&self, session: foya_protocol::SessionId, events: &[foya_protocol::Event]) {
        let _ = (session, events);
    }
}

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

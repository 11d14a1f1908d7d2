//! The listing's vocabulary, below both the stores and the log seam: where a page of
//! sessions starts ([`Cursor`]), which page ([`Page`]), and what a listing or a survey
//! could not read ([`Unreadable`]).

use foya_protocol::{SessionId, SessionSummary, UnixMs};

/// Where a page of [`crate::EventLog::list_sessions`] starts: after the session of this
/// `(updated_at_ms, id)` in the listing's order (most recently updated first, ties newer
/// id first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The `updated_at_ms` of the last session of the previous page.
    pub updated_at_ms: UnixMs,
    /// Its id.
    pub id: SessionId,
}

impl Cursor {
    /// The cursor after `summary`.
    #[must_use]
    pub fn after(summary: &SessionSummary) -> Self {
        Self {
            updated_at_ms: summary.updated_at_ms,
            id: summary.id,
        }
    }

    /// Whether `summary` comes after this cursor in the listing's order.
    #[must_use]
    pub fn precedes(&self, summary: &SessionSummary) -> bool {
        (summary.updated_at_ms, summary.id) < (self.updated_at_ms, self.id)
    }
}

/// Which sessions [`crate::EventLog::list_sessions`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Start after this session (`None`: from the most recently updated).
    pub after: Option<Cursor>,
    /// At most this many.
    pub limit: usize,
}

impl Page {
    /// Every session.
    pub const ALL: Page = Page {
        after: None,
        limit: usize::MAX,
    };

    /// The first `limit` sessions.
    #[must_use]
    pub fn first(limit: usize) -> Self {
        Self { after: None, limit }
    }

    /// The `limit` sessions after `cursor`.
    #[must_use]
    pub fn after(cursor: Cursor, limit: usize) -> Self {
        Self {
            after: Some(cursor),
            limit,
        }
    }
}

/// Something a survey could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreadable {
    /// The session, when known (`None`: a part of a table, whose sessions are unknown).
    pub session: Option<SessionId>,
    /// Why, in one line.
    pub reason: String,
}

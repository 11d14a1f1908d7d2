//! Reads: each one a short redb read transaction, callable from any thread. The queries
//! run on a read transaction of either a writable [`Store`] or a [`ReadOnlyStore`]; a
//! table that does not exist (a file no [`Store`] has initialised) reads as empty, so
//! the read-only side never needs to create one.
//!
//! Every read runs inside the panic boundary ([`crate::guard::contain`]): a damaged page
//! that makes redb panic fails that read with [`ReadError::Corrupt`], and the handle that
//! panicked is replaced (a [`ReadOnlyStore`] reopens the file at once; a [`Store`]'s
//! writer reopens it before its next transaction).

use crate::error::ReadError;
use crate::query::{begin, events, last_seq, open, summaries, summary};
use crate::read_only::ReadOnlyStore;
use crate::store::Store;
use crate::survey::Survey;
use foya_protocol::{Event, Seq, SessionId, SessionSummary};
use redb::ReadTransaction;

impl Store {
    /// Runs `query` on a read transaction of the current database, inside the panic
    /// boundary; a contained panic marks the database for reopening.
    fn read<T>(
        &self,
        what: &str,
        query: impl FnOnce(&ReadTransaction) -> Result<T, ReadError>,
    ) -> Result<T, ReadError> {
        let db = self.inner.db.get().map_err(ReadError::Storage)?;
        match crate::guard::contain(what, || query(&begin(&*db)?)) {
            Ok(result) => result,
            Err(message) => {
                self.inner.db.mark_poisoned();
                Err(ReadError::Corrupt(message))
            }
        }
    }

    /// Every session of the store that can be read, and the ones that cannot (see
    /// [`Survey`]): one damaged session or page does not hide the others.
    ///
    /// # Errors
    /// [`ReadError::Storage`] when no read transaction can be started at all.
    pub fn survey(&self) -> Result<Survey, ReadError> {
        let db = self.inner.db.get().map_err(ReadError::Storage)?;
        let survey = crate::survey::survey(&*db, crate::survey::Keep::All);
        if survey.poisoned {
            self.inner.db.mark_poisoned();
        }
        survey.result
    }

    /// The committed events of `session` with seq `>= from`, in seq order (empty for an
    /// unknown session).
    ///
    /// # Errors
    /// [`ReadError::Storage`] when redb or the disk fails; [`ReadError::UnsupportedFormat`]
    /// or [`ReadError::Decode`] when a stored event cannot be decoded.
    pub fn read_from(&self, session: SessionId, from: Seq) -> Result<Vec<Event>, ReadError> {
        self.read_range(session, from, usize::MAX)
    }

    /// At most `limit` committed events of `session` with seq `>= from`, in seq order.
    ///
    /// # Errors
    /// As [`Store::read_from`].
    pub fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, ReadError> {
        self.inner
            .counters
            .logs_read
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let events = self.read("reading events", |txn| events(txn, session, from, limit))?;
        if let Some(observer) = self.inner.counters.append_observer.get() {
            observer.read(session, &events);
        }
        Ok(events)
    }

    /// How many times a session's log was read ([`Store::read_range`] and
    /// [`Store::read_from`] calls) since the store was opened: what tests use to check
    /// that start-up reads no log of a session with nothing to recover.
    #[must_use]
    pub fn logs_read(&self) -> u64 {
        self.inner
            .counters
            .logs_read
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The seq of the session's latest committed event; `None` for an unknown session.
    ///
    /// # Errors
    /// [`ReadError::Storage`].
    pub fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        self.read("reading the last seq", |txn| last_seq(txn, session))
    }

    /// The session's summary (also for a deleted session, with `deleted: true`).
    ///
    /// # Errors
    /// [`ReadError::Storage`] when redb or the disk fails; [`ReadError::UnsupportedFormat`]
    /// or [`ReadError::Decode`] when the stored summary or the header of the session's
    /// latest event cannot be decoded.
    pub fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        self.read("reading a session summary", |txn| summary(txn, session))
    }

    /// Every session's summary, deleted ones included (`deleted: true`), most recently
    /// updated first (ties: newer id first).
    ///
    /// # Errors
    /// As [`Store::session`].
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, ReadError> {
        self.read("listing sessions", summaries)
    }

    /// A page of the listing (most recently updated first, ties newer id first), read
    /// through the listing index (`recent.rs`): only the page's sessions are read. Damage
    /// is local as in [`Store::survey`]: a session of the page that cannot be read is
    /// named in [`Survey::unreadable`]. A file without the index is surveyed whole.
    ///
    /// # Errors
    /// [`ReadError::Storage`] or [`ReadError::Corrupt`] when the index cannot be read.
    pub fn survey_page(&self, page: crate::Page) -> Result<Survey, ReadError> {
        match self.read("listing a page of sessions", |txn| {
            crate::recent::page(txn, page)
        })? {
            Some(entries) => Ok(paged_survey(entries)),
            None => self.survey().map(|survey| survey_paged(survey, page)),
        }
    }

    /// As [`Store::survey_page`], but a session that cannot be read fails the page (as
    /// [`Store::list_sessions`]).
    ///
    /// # Errors
    /// As [`Store::session`].
    pub(crate) fn list_page(&self, page: crate::Page) -> Result<Vec<SessionSummary>, ReadError> {
        match self.read("listing a page of sessions", |txn| {
            crate::recent::page(txn, page)
        })? {
            Some(entries) => entries
                .into_iter()
                .map(|entry| entry.map_err(|(_, e)| e))
                .collect(),
            None => Ok(crate::log::paged(self.list_sessions()?, page)),
        }
    }

    /// The sessions that may have work left — inputs queued and not started, or a turn
    /// started and not complete — from the recovery index, without reading any log or
    /// summary: what start-up recovers. Deleted sessions are never in it. A superset is
    /// safe: the caller checks each session's log.
    ///
    /// # Errors
    /// [`ReadError::Storage`].
    pub fn pending_sessions(&self) -> Result<Vec<SessionId>, ReadError> {
        self.read("reading the recovery index", |txn| {
            match open(txn, crate::pending::PENDING)? {
                Some(table) => crate::pending::sessions(&table).map_err(ReadError::storage),
                None => Ok(Vec::new()),
            }
        })
    }
}

impl ReadOnlyStore {
    /// As [`Store::read_from`]: the events of `session` with seq `>= from`, in seq order
    /// (empty for an unknown session).
    ///
    /// # Errors
    /// As [`Store::read_from`].
    pub fn read_from(&self, session: SessionId, from: Seq) -> Result<Vec<Event>, ReadError> {
        self.read_range(session, from, usize::MAX)
    }

    /// As [`Store::read_range`]: at most `limit` events of `session` with seq `>= from`.
    ///
    /// # Errors
    /// As [`Store::read_from`].
    pub fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, ReadError> {
        self.read("reading events", |txn| events(txn, session, from, limit))
    }

    /// As [`Store::last_seq`]: the seq of the session's latest event; `None` for an
    /// unknown session.
    ///
    /// # Errors
    /// [`ReadError::Storage`].
    pub fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        self.read("reading the last seq", |txn| last_seq(txn, session))
    }

    /// As [`Store::session`]: the session's summary (also for a deleted session).
    ///
    /// # Errors
    /// As [`Store::session`].
    pub fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        self.read("reading a session summary", |txn| summary(txn, session))
    }

    /// As [`Store::survey_page`]: a page of the listing, read through the listing index
    /// when the file has one (else from a survey of every session).
    ///
    /// # Errors
    /// As [`Store::survey_page`].
    pub fn survey_page(&self, page: crate::Page) -> Result<Survey, ReadError> {
        match self.read("listing a page of sessions", |txn| {
            crate::recent::page(txn, page)
        })? {
            Some(entries) => Ok(paged_survey(entries)),
            None => self.survey().map(|survey| survey_paged(survey, page)),
        }
    }

    /// As [`Store::list_sessions`]: every session's summary, deleted ones included, most
    /// recently updated first (ties: newer id first).
    ///
    /// # Errors
    /// As [`Store::session`].
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, ReadError> {
        self.read("listing sessions", summaries)
    }
}

/// A page read through the index, as a [`Survey`].
fn paged_survey(entries: Vec<Result<SessionSummary, (SessionId, ReadError)>>) -> Survey {
    let (sessions, unreadable) = crate::recent::split(entries);
    Survey {
        sessions,
        unreadable,
    }
}

/// The page `page` asks for of a whole survey (its unreadable parts all kept).
fn survey_paged(survey: Survey, page: crate::Page) -> Survey {
    Survey {
        sessions: crate::log::paged(survey.sessions, page),
        unreadable: survey.unreadable,
    }
}

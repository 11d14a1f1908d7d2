//! Reads: each one a short redb read transaction, callable from any thread.

use crate::codec;
use crate::error::ReadError;
use crate::schema::{EVENTS, SESSIONS, current_summary, session_key};
use crate::store::Store;
use foya_protocol::{Event, Seq, SessionId, SessionSummary};
use redb::{ReadableDatabase, ReadableTable};

impl Store {
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
        let key = session_key(session);
        let txn = self
            .inner
            .db
            .get()
            .map_err(ReadError::Storage)?
            .begin_read()
            .map_err(ReadError::storage)?;
        let table = txn.open_table(EVENTS).map_err(ReadError::storage)?;
        let range = table
            .range((key, from.0)..=(key, u64::MAX))
            .map_err(ReadError::storage)?;
        let mut out = Vec::new();
        for entry in range.take(limit) {
            let (k, v) = entry.map_err(ReadError::storage)?;
            let (_, seq) = k.value();
            out.push(codec::decode_event(session, Seq(seq), v.value())?);
        }
        Ok(out)
    }

    /// The seq of the session's latest committed event; `None` for an unknown session.
    ///
    /// # Errors
    /// [`ReadError::Storage`].
    pub fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        let key = session_key(session);
        let txn = self
            .inner
            .db
            .get()
            .map_err(ReadError::Storage)?
            .begin_read()
            .map_err(ReadError::storage)?;
        let table = txn.open_table(EVENTS).map_err(ReadError::storage)?;
        let mut range = table
            .range((key, 0)..=(key, u64::MAX))
            .map_err(ReadError::storage)?;
        match range.next_back() {
            Some(entry) => Ok(Some(Seq(entry.map_err(ReadError::storage)?.0.value().1))),
            None => Ok(None),
        }
    }

    /// The session's summary (also for a deleted session, with `deleted: true`).
    ///
    /// # Errors
    /// [`ReadError::Storage`] when redb or the disk fails; [`ReadError::UnsupportedFormat`]
    /// or [`ReadError::Decode`] when the stored summary or the header of the session's
    /// latest event cannot be decoded.
    pub fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        let txn = self
            .inner
            .db
            .get()
            .map_err(ReadError::Storage)?
            .begin_read()
            .map_err(ReadError::storage)?;
        let table = txn.open_table(SESSIONS).map_err(ReadError::storage)?;
        let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
        let key = session_key(session);
        match table.get(key).map_err(ReadError::storage)? {
            Some(value) => Ok(Some(current_summary(&events, key, value.value())?)),
            None => Ok(None),
        }
    }

    /// Every session's summary, deleted ones included (`deleted: true`), most recently
    /// updated first (ties: newer id first).
    ///
    /// # Errors
    /// As [`Store::session`].
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, ReadError> {
        let txn = self
            .inner
            .db
            .get()
            .map_err(ReadError::Storage)?
            .begin_read()
            .map_err(ReadError::storage)?;
        let table = txn.open_table(SESSIONS).map_err(ReadError::storage)?;
        let events = txn.open_table(EVENTS).map_err(ReadError::storage)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(ReadError::storage)? {
            let (k, v) = entry.map_err(ReadError::storage)?;
            out.push(current_summary(&events, k.value(), v.value())?);
        }
        out.sort_by(|a, b| b.updated_at_ms.cmp(&a.updated_at_ms).then(b.id.cmp(&a.id)));
        Ok(out)
    }
}

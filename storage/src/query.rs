//! The read queries on one redb read transaction, for a writable [`crate::Store`], a
//! [`crate::ReadOnlyStore`] and the store's own checks alike: a table that does not
//! exist (a file no [`crate::Store`] has initialised) reads as empty.

use crate::codec;
use crate::error::ReadError;
use crate::schema::{EVENTS, SESSIONS, current_summary, session_key};
use foya_protocol::{Event, Seq, SessionId, SessionSummary};
use redb::{ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition};

/// Opens `table` in `txn`; `None` when the file has no such table yet.
pub(crate) fn open<K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<'static, K, V>,
) -> Result<Option<ReadOnlyTable<K, V>>, ReadError> {
    match txn.open_table(table) {
        Ok(table) => Ok(Some(table)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(ReadError::storage(e)),
    }
}

/// Begins a read transaction on `db`.
pub(crate) fn begin(db: &(impl ReadableDatabase + ?Sized)) -> Result<ReadTransaction, ReadError> {
    db.begin_read().map_err(ReadError::storage)
}

/// At most `limit` events of `session` with seq `>= from`, in seq order.
pub(crate) fn events(
    txn: &ReadTransaction,
    session: SessionId,
    from: Seq,
    limit: usize,
) -> Result<Vec<Event>, ReadError> {
    let Some(table) = open(txn, EVENTS)? else {
        return Ok(Vec::new());
    };
    let key = session_key(session);
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

/// The seq of the session's latest event.
pub(crate) fn last_seq(
    txn: &ReadTransaction,
    session: SessionId,
) -> Result<Option<Seq>, ReadError> {
    let Some(table) = open(txn, EVENTS)? else {
        return Ok(None);
    };
    let key = session_key(session);
    let mut range = table
        .range((key, 0)..=(key, u64::MAX))
        .map_err(ReadError::storage)?;
    match range.next_back() {
        Some(entry) => Ok(Some(Seq(entry.map_err(ReadError::storage)?.0.value().1))),
        None => Ok(None),
    }
}

/// The session's summary.
pub(crate) fn summary(
    txn: &ReadTransaction,
    session: SessionId,
) -> Result<Option<SessionSummary>, ReadError> {
    let (Some(table), Some(events)) = (open(txn, SESSIONS)?, open(txn, EVENTS)?) else {
        return Ok(None);
    };
    let key = session_key(session);
    match table.get(key).map_err(ReadError::storage)? {
        Some(value) => Ok(Some(current_summary(&events, key, value.value())?)),
        None => Ok(None),
    }
}

/// Every session's summary, most recently updated first (ties: newer id first).
pub(crate) fn summaries(txn: &ReadTransaction) -> Result<Vec<SessionSummary>, ReadError> {
    let (Some(table), Some(events)) = (open(txn, SESSIONS)?, open(txn, EVENTS)?) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in table.iter().map_err(ReadError::storage)? {
        let (k, v) = entry.map_err(ReadError::storage)?;
        out.push(current_summary(&events, k.value(), v.value())?);
    }
    out.sort_by(|a, b| b.updated_at_ms.cmp(&a.updated_at_ms).then(b.id.cmp(&a.id)));
    Ok(out)
}

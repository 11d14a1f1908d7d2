//! The redb tables and their keys.
//!
//! - `events`: `(session, seq) -> codec(StoredEvent)`; `session` is the id's 16 bytes as
//!   a big-endian `u128`, so one session's events are contiguous and ordered by seq.
//! - `sessions`: `session -> codec(SessionSummary)`, written by the writer in the same
//!   transaction as an event that changes it (`session_created`, `title_set`,
//!   `session_deleted`). Its `last_seq` and `updated_at_ms` are as of that write: every
//!   reader takes them from the session's latest row in `events` ([`latest_event`]), so
//!   an ordinary append inserts only its events.

use crate::codec;
use crate::error::ReadError;
use foya_protocol::{Seq, SessionId, SessionSummary, UnixMs};
use redb::{ReadableTable, TableDefinition};

/// The append-only event log.
pub(crate) const EVENTS: TableDefinition<'static, (u128, u64), &[u8]> =
    TableDefinition::new("events");

/// One summary row per session.
pub(crate) const SESSIONS: TableDefinition<'static, u128, &[u8]> = TableDefinition::new("sessions");

/// The key form of a session id (order-preserving).
pub(crate) fn session_key(id: SessionId) -> u128 {
    u128::from_be_bytes(*id.as_bytes())
}

/// The seq and `at_ms` of the session's latest event (`None`: it has none).
///
/// # Errors
/// [`ReadError::Storage`] when redb fails, [`ReadError::Decode`] or
/// [`ReadError::UnsupportedFormat`] when the event's header does not decode.
pub(crate) fn latest_event(
    events: &impl ReadableTable<(u128, u64), &'static [u8]>,
    key: u128,
) -> Result<Option<(Seq, UnixMs)>, ReadError> {
    let mut range = events
        .range((key, 0)..=(key, u64::MAX))
        .map_err(ReadError::storage)?;
    match range.next_back() {
        Some(entry) => {
            let (k, v) = entry.map_err(ReadError::storage)?;
            Ok(Some((
                Seq(k.value().1),
                codec::decode_event_time(v.value())?,
            )))
        }
        None => Ok(None),
    }
}

/// Decodes a stored summary and brings its `last_seq` and `updated_at_ms` up to the
/// session's latest event.
///
/// # Errors
/// As [`latest_event`], and when the summary itself does not decode.
pub(crate) fn current_summary(
    events: &impl ReadableTable<(u128, u64), &'static [u8]>,
    key: u128,
    stored: &[u8],
) -> Result<SessionSummary, ReadError> {
    let mut summary: SessionSummary = codec::decode(stored)?;
    if let Some((seq, at_ms)) = latest_event(events, key)? {
        summary.last_seq = seq;
        summary.updated_at_ms = at_ms;
    }
    Ok(summary)
}

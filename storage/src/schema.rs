//! The redb tables and their keys.
//!
//! - `events`: `(session, seq) -> codec(StoredEvent)`; `session` is the id's 16 bytes as
//!   a big-endian `u128`, so one session's events are contiguous and ordered by seq.
//! - `sessions`: `session -> codec(SessionSummary)`, maintained by the writer in the
//!   same transaction as the events it summarises.

use foya_protocol::SessionId;
use redb::TableDefinition;

/// The append-only event log.
pub(crate) const EVENTS: TableDefinition<'static, (u128, u64), &[u8]> =
    TableDefinition::new("events");

/// One summary row per session.
pub(crate) const SESSIONS: TableDefinition<'static, u128, &[u8]> = TableDefinition::new("sessions");

/// The key form of a session id (order-preserving).
pub(crate) fn session_key(id: SessionId) -> u128 {
    u128::from_be_bytes(*id.as_bytes())
}

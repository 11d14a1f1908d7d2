//! The recovery index: which sessions have work left — inputs queued and not started, or
//! a turn started and not complete — kept by the writer in the same transaction as the
//! events that change it, so that start-up finds the sessions to recover without reading
//! every session's log ([`crate::Store::pending_sessions`]).
//!
//! Table `pending`: `(session: u128, kind: u8, item: u128) -> ()`, one row per queued
//! input (`kind` [`QUEUED`], `item` its input id) and one while a turn is open (`kind`
//! [`OPEN_TURN`], `item` 0). `input_queued` inserts a queued row; `input_dropped` removes
//! it; `turn_started` removes its input's queued row and inserts the open-turn row;
//! `turn_complete` removes the open-turn row; `session_deleted` removes every row of the
//! session. A session without rows has nothing to recover.
//!
//! A file written before the index existed has no `pending` table: opening it with a
//! [`crate::Store`] builds the table from every log once, in the transaction that
//! creates it (so a crash meanwhile leaves no half-built index).

use crate::codec;
use crate::schema::EVENTS;
use foya_protocol::{EventKind, Seq, SessionId};
use redb::{ReadableTable, Table, TableDefinition, TableHandle, WriteTransaction};

/// The recovery index.
pub(crate) const PENDING: TableDefinition<'static, (u128, u8, u128), ()> =
    TableDefinition::new("pending");

/// `kind` of the row of an open turn.
const OPEN_TURN: u8 = 0;
/// `kind` of the row of a queued input.
const QUEUED: u8 = 1;

/// How one event changes the recovery index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PendingChange {
    None,
    /// `input_queued` (the input id).
    Queued(u128),
    /// `input_dropped` (the input id).
    Dropped(u128),
    /// `turn_started` (its input id).
    Started(u128),
    /// `turn_complete`.
    Completed,
    /// `session_deleted`.
    Deleted,
}

/// An id's 16 bytes as a big-endian `u128` (as `schema::session_key`).
fn id_key(bytes: &[u8; 16]) -> u128 {
    u128::from_be_bytes(*bytes)
}

impl PendingChange {
    /// The change `kind` makes.
    pub(crate) fn of(kind: &EventKind) -> Self {
        match kind {
            EventKind::InputQueued { input_id, .. } => Self::Queued(id_key(input_id.as_bytes())),
            EventKind::InputDropped { input_id, .. } => Self::Dropped(id_key(input_id.as_bytes())),
            EventKind::TurnStarted { input_id } => Self::Started(id_key(input_id.as_bytes())),
            EventKind::TurnComplete { .. } => Self::Completed,
            EventKind::SessionDeleted {} => Self::Deleted,
            _ => Self::None,
        }
    }
}

/// Applies `change` of session `key` to the index.
///
/// # Errors
/// redb's.
pub(crate) fn apply(
    table: &mut Table<'_, (u128, u8, u128), ()>,
    key: u128,
    change: PendingChange,
) -> Result<(), redb::StorageError> {
    match change {
        PendingChange::None => {}
        PendingChange::Queued(input) => {
            table.insert((key, QUEUED, input), ())?;
        }
        PendingChange::Dropped(input) => {
            table.remove((key, QUEUED, input))?;
        }
        PendingChange::Started(input) => {
            table.remove((key, QUEUED, input))?;
            table.insert((key, OPEN_TURN, 0), ())?;
        }
        PendingChange::Completed => {
            table.remove((key, OPEN_TURN, 0))?;
        }
        PendingChange::Deleted => {
            table.retain_in((key, 0, 0)..=(key, u8::MAX, u128::MAX), |_, ()| false)?;
        }
    }
    Ok(())
}

/// Creates the index in `txn` if the file has none, building it from every log.
///
/// # Errors
/// redb's (as a message).
pub(crate) fn ensure(txn: &WriteTransaction) -> Result<(), String> {
    let exists = txn
        .list_tables()
        .map_err(|e| e.to_string())?
        .any(|t| t.name() == PENDING.name());
    let mut table = txn.open_table(PENDING).map_err(|e| e.to_string())?;
    if exists {
        return Ok(());
    }
    let events = txn.open_table(EVENTS).map_err(|e| e.to_string())?;
    for entry in events.iter().map_err(|e| e.to_string())? {
        let (k, v) = entry.map_err(|e| e.to_string())?;
        let (key, seq) = k.value();
        let session = SessionId::from_bytes(key.to_be_bytes());
        // An event that does not decode (damage, a future format) changes nothing here:
        // its session's reads refuse it as they would anyway.
        match codec::decode_event(session, Seq(seq), v.value()) {
            Ok(event) => {
                apply(&mut table, key, PendingChange::of(&event.kind)).map_err(|e| e.to_string())?
            }
            Err(e) => {
                tracing::warn!(session.id = %session, seq, error = %e, "building the recovery index: an event does not decode; skipped");
            }
        }
    }
    Ok(())
}

/// The sessions with rows in the index, in key order.
///
/// # Errors
/// redb's.
pub(crate) fn sessions(
    table: &impl ReadableTable<(u128, u8, u128), ()>,
) -> Result<Vec<SessionId>, redb::StorageError> {
    let mut out: Vec<SessionId> = Vec::new();
    for entry in table.iter()? {
        let (k, _) = entry?;
        let id = SessionId::from_bytes(k.value().0.to_be_bytes());
        if out.last() != Some(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::{Store, StoreOptions};
    use foya_protocol::{
        Event, EventKind, Input, InputId, Seq, SessionConfig, SessionId, TurnStatus,
    };

    /// Appends `kinds` to `session` after `seq`; returns the last seq.
    async fn append(store: &Store, session: SessionId, seq: u64, kinds: Vec<EventKind>) -> u64 {
        let events: Vec<Event> = kinds
            .into_iter()
            .zip(seq + 1..)
            .map(|(kind, seq)| Event {
                session_id: session,
                seq: Seq(seq),
                run_id: None,
                at_ms: 1,
                kind,
            })
            .collect();
        let last = seq + events.len() as u64;
        store.append(events).await.unwrap();
        last
    }

    fn created() -> EventKind {
        EventKind::SessionCreated {
            config: SessionConfig::new("/w"),
        }
    }

    fn complete() -> EventKind {
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None,
        }
    }

    #[tokio::test]
    async fn the_index_names_sessions_with_queued_inputs_or_an_open_turn_and_no_others() {
        let store = Store::open_in_memory(StoreOptions::default()).unwrap();
        let (idle, queued, open, deleted) = (
            SessionId::new(),
            SessionId::new(),
            SessionId::new(),
            SessionId::new(),
        );
        let (a, b) = (InputId::new(), InputId::new());
        let queue = |id| EventKind::InputQueued {
            input_id: id,
            input: Input::text("x"),
        };
        // A turn that ran and completed, then an input queued and dropped.
        let s = append(&store, idle, 0, vec![created(), queue(a)]).await;
        let s = append(
            &store,
            idle,
            s,
            vec![EventKind::TurnStarted { input_id: a }, complete()],
        )
        .await;
        append(
            &store,
            idle,
            s,
            vec![
                queue(b),
                EventKind::InputDropped {
                    input_id: b,
                    reason: "x".into(),
                },
            ],
        )
        .await;
        // Two queued, the first started and complete: the second is still queued.
        let s = append(&store, queued, 0, vec![created(), queue(a), queue(b)]).await;
        append(
            &store,
            queued,
            s,
            vec![EventKind::TurnStarted { input_id: a }, complete()],
        )
        .await;
        // A turn started (from an input that was never queued) and not complete.
        append(
            &store,
            open,
            0,
            vec![created(), EventKind::TurnStarted { input_id: a }],
        )
        .await;
        // Queued, then the session deleted.
        append(
            &store,
            deleted,
            0,
            vec![created(), queue(a), EventKind::SessionDeleted {}],
        )
        .await;
        let mut expected = vec![queued, open];
        expected.sort();
        assert_eq!(store.pending_sessions().unwrap(), expected);
        store.close().await;
    }

    #[tokio::test]
    async fn a_file_from_before_the_index_gets_it_built_from_its_logs_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("foya.redb");
        let (queued, done) = (SessionId::new(), SessionId::new());
        let input = InputId::new();
        {
            let store = Store::open(&path, StoreOptions::default()).unwrap();
            let queue = EventKind::InputQueued {
                input_id: input,
                input: Input::text("x"),
            };
            append(&store, queued, 0, vec![created(), queue]).await;
            append(
                &store,
                done,
                0,
                vec![
                    created(),
                    EventKind::TurnStarted { input_id: input },
                    complete(),
                ],
            )
            .await;
            store.close().await;
        }
        // The old layout: no `pending` table.
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            assert!(txn.delete_table(super::PENDING).unwrap());
            txn.commit().unwrap();
        }
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        assert_eq!(store.pending_sessions().unwrap(), vec![queued]);
        store.close().await;
    }
}

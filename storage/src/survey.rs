//! Surveying a possibly damaged database: every session that can be read, and every one
//! that cannot, named. Each step is its own short read transaction inside the panic
//! boundary, so a damaged page fails only the sessions (or the part of a table) it holds.
//!
//! Sessions are found two ways, so losing one index does not hide a session: the rows of
//! the `sessions` table, and the distinct session keys of the `events` table (found by
//! seeking to the first event after each known session, so a damaged leaf hides only
//! the sessions it holds).

use crate::codec;
use crate::error::ReadError;
use crate::guard::contain;
pub use crate::listing::Unreadable;
use crate::query::{begin, open};
use crate::schema::{EVENTS, SESSIONS, current_summary};
use crate::writer::{EventMeta, next_summary};
use foya_protocol::{Seq, SessionId, SessionSummary};
use redb::ReadableDatabase;
use std::collections::BTreeSet;

/// What [`crate::Store::survey`] and [`crate::ReadOnlyStore::survey`] found.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Survey {
    /// Summaries of the sessions that read, most recently updated first (ties: newer id
    /// first), as [`crate::Store::list_sessions`] orders them.
    pub sessions: Vec<SessionSummary>,
    /// What could not be read: a session (named) or a part of a table.
    pub unreadable: Vec<Unreadable>,
}

/// A survey's result, and whether redb panicked during it (its handle should be replaced).
pub(crate) struct Surveyed {
    pub(crate) result: Result<Survey, ReadError>,
    pub(crate) poisoned: bool,
}

/// Runs one step of the survey: a fresh read transaction, inside the panic boundary.
fn step<T>(
    db: &(impl ReadableDatabase + ?Sized),
    poisoned: &mut bool,
    what: &str,
    f: impl FnOnce(&redb::ReadTransaction) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    match contain(what, || f(&begin(db)?)) {
        Ok(result) => result,
        Err(message) => {
            *poisoned = true;
            Err(ReadError::Corrupt(message))
        }
    }
}

/// Most rows read per step of the `sessions` table scan.
const SESSIONS_CHUNK: usize = 256;

/// What a survey keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// The summary of every session that reads, and what does not.
    All,
    /// Only what does not read: the same reads, each summary checked and dropped at
    /// once, so a survey of a million sessions holds their keys and not their summaries.
    Unreadable,
}

/// Surveys `db` (see the module doc).
pub(crate) fn survey(db: &(impl ReadableDatabase + ?Sized), keep: Keep) -> Surveyed {
    let mut poisoned = false;
    // Parts of the tables that cannot be read, then the sessions (by key) that cannot.
    let mut unreadable = Vec::new();
    let mut sessions_unreadable: Vec<(u128, Unreadable)> = Vec::new();
    let mut sessions = Vec::new();
    // First: can a transaction be started at all?
    if let Err(e) = step(db, &mut poisoned, "starting a read", |_| Ok(())) {
        return Surveyed {
            result: Err(e),
            poisoned,
        };
    }
    // A session's summary from its row, kept or named unreadable.
    let mut summary_of = |poisoned: &mut bool, key: u128, row: &[u8]| {
        let summary = step(db, poisoned, "reading a session summary", |txn| {
            let Some(events) = open(txn, EVENTS)? else {
                return codec::decode(row);
            };
            current_summary(&events, key, row)
        });
        match summary {
            Ok(summary) if keep == Keep::All => sessions.push(summary),
            Ok(_) => {}
            Err(e) => sessions_unreadable.push((
                key,
                Unreadable {
                    session: Some(SessionId::from_bytes(key.to_be_bytes())),
                    reason: e.to_string(),
                },
            )),
        }
    };
    // The `sessions` rows, in chunks; a damaged part is skipped from the next readable key.
    // Each row is read into its summary as its chunk comes; only the keys are kept.
    let mut row_keys: Vec<u128> = Vec::new();
    let mut from = 0u128;
    loop {
        let chunk = step(db, &mut poisoned, "reading the sessions table", |txn| {
            let Some(table) = open(txn, SESSIONS)? else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            for entry in table.range(from..).map_err(ReadError::storage)? {
                let (k, v) = entry.map_err(ReadError::storage)?;
                out.push((k.value(), v.value().to_vec()));
                if out.len() == SESSIONS_CHUNK {
                    break;
                }
            }
            Ok(out)
        });
        match chunk {
            Ok(chunk) if chunk.is_empty() => break,
            Ok(chunk) => {
                let last = chunk.last().map_or(from, |(k, _)| *k);
                // A damaged tree may answer keys out of order: reading on from a key that
                // does not move forward would never end.
                if chunk.iter().any(|(k, _)| *k < from) {
                    unreadable.push(Unreadable {
                        session: None,
                        reason: format!(
                            "part of the sessions table (from session key {from:032x}) \
                             answers keys out of order"
                        ),
                    });
                    break;
                }
                for (key, row) in &chunk {
                    // Keys move forward (checked above); a repeated one is read once.
                    if row_keys.last().is_some_and(|last| last >= key) {
                        continue;
                    }
                    row_keys.push(*key);
                    summary_of(&mut poisoned, *key, row);
                }
                match last.checked_add(1) {
                    Some(next) => from = next,
                    None => break,
                }
            }
            Err(e) => {
                unreadable.push(Unreadable {
                    session: None,
                    reason: format!(
                        "part of the sessions table (from session key {from:032x}) cannot be read: {e}"
                    ),
                });
                break;
            }
        }
    }
    // Session keys of the `events` table, seeking past each one found: from the start,
    // after each row's key, and after each key found only there.
    let has_row = |key: u128| row_keys.binary_search(&key).is_ok();
    let mut events_only: BTreeSet<u128> = BTreeSet::new();
    let mut more: Vec<u128> = vec![0];
    let mut after_rows = row_keys.iter();
    let mut seeks = 0usize;
    while let Some(start) = more
        .pop()
        .or_else(|| after_rows.by_ref().find_map(|k| k.checked_add(1)))
    {
        seeks += 1;
        if seeks > 1_000_000 + row_keys.len() {
            break;
        }
        let found = step(db, &mut poisoned, "reading the events table", |txn| {
            let Some(table) = open(txn, EVENTS)? else {
                return Ok(None);
            };
            let mut range = table.range((start, 0)..).map_err(ReadError::storage)?;
            match range.next() {
                Some(entry) => Ok(Some(entry.map_err(ReadError::storage)?.0.value().0)),
                None => Ok(None),
            }
        });
        match found {
            // Out of order (a damaged tree): no further seek from there.
            Ok(Some(key)) if key < start => unreadable.push(Unreadable {
                session: None,
                reason: format!(
                    "part of the events table (from session key {start:032x}) answers keys \
                     out of order"
                ),
            }),
            Ok(Some(key)) => {
                let new = !has_row(key) && events_only.insert(key);
                if new && let Some(next) = key.checked_add(1) {
                    more.push(next);
                }
            }
            Ok(None) => {}
            Err(e) => unreadable.push(Unreadable {
                session: None,
                reason: format!(
                    "part of the events table (from session key {start:032x}) cannot be read: {e}"
                ),
            }),
        }
    }
    // Sessions whose events remain without their summary row.
    for key in events_only {
        let id = SessionId::from_bytes(key.to_be_bytes());
        let reason = match rebuilt_summary(db, &mut poisoned, id) {
            Ok(_) => "its summary row is missing (its events remain)".to_owned(),
            Err(e) => format!("its summary row is missing and its first event cannot be read: {e}"),
        };
        let reason = ReadError::Corrupt(reason).to_string();
        sessions_unreadable.push((
            key,
            Unreadable {
                session: Some(id),
                reason,
            },
        ));
    }
    // The sessions in key order, as they were always named.
    sessions_unreadable.sort_by_key(|(key, _)| *key);
    unreadable.extend(sessions_unreadable.into_iter().map(|(_, u)| u));
    sessions.sort_by(|a, b| b.updated_at_ms.cmp(&a.updated_at_ms).then(b.id.cmp(&a.id)));
    Surveyed {
        result: Ok(Survey {
            sessions,
            unreadable,
        }),
        poisoned,
    }
}

/// A session's summary computed from its first event (for a session whose summary row
/// is lost).
fn rebuilt_summary(
    db: &(impl ReadableDatabase + ?Sized),
    poisoned: &mut bool,
    id: SessionId,
) -> Result<SessionSummary, ReadError> {
    let first = step(db, poisoned, "reading a first event", |txn| {
        crate::query::events(txn, id, Seq::FIRST, 1)
    })?;
    let metas: Vec<EventMeta> = first.iter().map(EventMeta::of).collect();
    next_summary(None, &metas).map_err(|e| ReadError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::schema::session_key;
    use crate::writer::EventMeta;
    use foya_protocol::{Event, EventKind, SessionConfig};
    use redb::Database;
    use redb::backends::InMemoryBackend;

    fn created(id: SessionId, at_ms: u64) -> Event {
        Event {
            session_id: id,
            seq: Seq::FIRST,
            run_id: None,
            at_ms,
            kind: EventKind::SessionCreated {
                config: SessionConfig::new("/w"),
            },
        }
    }

    /// Sessions that read, one whose summary row is of a future format, one whose row
    /// is missing (its events remain): both surveys name the same two, in the same order;
    /// the unreadable-only one keeps no summary.
    #[test]
    fn the_unreadable_only_survey_names_what_the_whole_one_names_and_keeps_no_summary() {
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let ids: Vec<SessionId> = (0..300).map(|_| SessionId::new()).collect();
        let (future, rowless) = (ids[7], ids[200]);
        let txn = db.begin_write().unwrap();
        {
            let mut events = txn.open_table(EVENTS).unwrap();
            let mut sessions = txn.open_table(SESSIONS).unwrap();
            for (n, id) in ids.iter().enumerate() {
                let event = created(*id, 1_000 + n as u64);
                let bytes = codec::encode_event(&event).unwrap();
                events
                    .insert((session_key(*id), 1), bytes.as_slice())
                    .unwrap();
                let summary = next_summary(None, &[EventMeta::of(&event)]).unwrap();
                let row = if *id == future {
                    vec![codec::FORMAT_VERSION + 1, 0x80]
                } else {
                    codec::encode(&summary).unwrap()
                };
                if *id != rowless {
                    sessions.insert(session_key(*id), row.as_slice()).unwrap();
                }
            }
        }
        txn.commit().unwrap();

        let whole = survey(&db, Keep::All).result.unwrap();
        let unreadable = survey(&db, Keep::Unreadable).result.unwrap();
        assert_eq!(whole.sessions.len(), 298);
        assert!(unreadable.sessions.is_empty());
        let named: Vec<_> = whole.unreadable.iter().map(|u| u.session).collect();
        let mut want = vec![Some(future), Some(rowless)];
        want.sort_by_key(|id| id.map(session_key));
        assert_eq!(named, want);
        assert_eq!(unreadable.unreadable, whole.unreadable);
        assert!(
            whole
                .unreadable
                .iter()
                .any(|u| u.reason.contains("summary row is missing")),
            "{:?}",
            whole.unreadable
        );
    }
}

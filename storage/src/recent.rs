//! The listing index: every session by when it was last updated, so that a page of the
//! listing (most recently updated first, [`crate::Page`]) reads only its own rows, not
//! every session's summary.
//!
//! Table `recent`: `(updated_at_ms: u64, session: u128) -> ()`, one row per session,
//! `updated_at_ms` the `at_ms` of its latest event. The writer moves a session's row in
//! the same transaction as the events that change it (at most once per session and
//! batch). Read newest first, the keys are in the listing's order (ties: the larger key,
//! the newer id, first).
//!
//! A file written before the index existed has no `recent` table: opening it with a
//! [`crate::Store`] builds the table from every summary once, in the transaction that
//! creates it (so a crash meanwhile leaves no half-built index); a
//! [`crate::ReadOnlyStore`] of such a file lists from every summary as before. A row
//! that no longer matches its session's latest event (a file an older `foya` appended
//! to after the index was built) is skipped by readers.

use crate::error::ReadError;
use crate::listing::{Cursor, Page, Unreadable};
use crate::query::open;
use crate::schema::{EVENTS, SESSIONS, current_summary, latest_event, session_key};
use foya_protocol::{SessionId, SessionSummary};
use redb::{ReadTransaction, ReadableTable, Table, TableDefinition, TableHandle, WriteTransaction};

/// The listing index.
pub(crate) const RECENT: TableDefinition<'static, (u64, u128), ()> = TableDefinition::new("recent");

/// Moves session `key`'s row from `before` (its previous `updated_at_ms`; `None` for a
/// new session) to `after`.
///
/// # Errors
/// redb's.
pub(crate) fn moved(
    table: &mut Table<'_, (u64, u128), ()>,
    key: u128,
    before: Option<u64>,
    after: u64,
) -> Result<(), redb::StorageError> {
    if before == Some(after) {
        return Ok(());
    }
    if let Some(before) = before {
        table.remove((before, key))?;
    }
    table.insert((after, key), ())?;
    Ok(())
}

/// Creates the index in `txn` if the file has none, building it from every summary.
///
/// # Errors
/// redb's (as a message).
pub(crate) fn ensure(txn: &WriteTransaction) -> Result<(), String> {
    let exists = txn
        .list_tables()
        .map_err(|e| e.to_string())?
        .any(|t| t.name() == RECENT.name());
    let mut table = txn.open_table(RECENT).map_err(|e| e.to_string())?;
    if exists {
        return Ok(());
    }
    let sessions = txn.open_table(SESSIONS).map_err(|e| e.to_string())?;
    let events = txn.open_table(EVENTS).map_err(|e| e.to_string())?;
    for entry in sessions.iter().map_err(|e| e.to_string())? {
        let (k, _) = entry.map_err(|e| e.to_string())?;
        let key = k.value();
        // A session whose latest event does not decode is left out here: its reads
        // refuse it as they would anyway, and the survey still finds it.
        match latest_event(&events, key) {
            Ok(Some((_, at_ms))) => {
                table.insert((at_ms, key), ()).map_err(|e| e.to_string())?;
            }
            Ok(None) => {}
            Err(e) => {
                let session = SessionId::from_bytes(key.to_be_bytes());
                tracing::warn!(session.id = %session, error = %e, "building the listing index: the latest event does not decode; skipped");
            }
        }
    }
    Ok(())
}

/// One page of the listing read through the index, in order: each session's summary,
/// or its id and why it cannot be read. `None` when the file has no index (a file no
/// writable [`crate::Store`] of this version has opened).
pub(crate) type IndexedPage = Option<Vec<Result<SessionSummary, (SessionId, ReadError)>>>;

/// Reads the page `page` asks for through the index (see [`IndexedPage`]).
///
/// # Errors
/// [`ReadError::Storage`] when redb fails on the index itself.
pub(crate) fn page(txn: &ReadTransaction, page: Page) -> Result<IndexedPage, ReadError> {
    let Some(index) = open(txn, RECENT)? else {
        return Ok(None);
    };
    let (Some(sessions), Some(events)) = (open(txn, SESSIONS)?, open(txn, EVENTS)?) else {
        return Ok(Some(Vec::new()));
    };
    let range = match page.after {
        Some(Cursor { updated_at_ms, id }) => index.range(..(updated_at_ms, session_key(id))),
        None => index.range::<(u64, u128)>(..),
    }
    .map_err(ReadError::storage)?;
    let (mut out, mut listed) = (Vec::new(), 0usize);
    for entry in range.rev() {
        // The limit counts the sessions listed (an unreadable one is named beside them).
        if listed >= page.limit {
            break;
        }
        let (k, _) = entry.map_err(ReadError::storage)?;
        let (at_ms, key) = k.value();
        let id = SessionId::from_bytes(key.to_be_bytes());
        let summary = match sessions.get(key).map_err(ReadError::storage)? {
            Some(row) => current_summary(&events, key, row.value()),
            None => Err(ReadError::Corrupt(
                "its summary row is missing (its events remain)".into(),
            )),
        };
        match summary {
            // A stale row: the session is listed at its current row.
            Ok(summary) if summary.updated_at_ms != at_ms => {}
            Ok(summary) => {
                listed += 1;
                out.push(Ok(summary));
            }
            Err(e) => out.push(Err((id, e))),
        }
    }
    Ok(Some(out))
}

/// Splits a page into the sessions that read and the ones that do not (named).
pub(crate) fn split(
    page: Vec<Result<SessionSummary, (SessionId, ReadError)>>,
) -> (Vec<SessionSummary>, Vec<Unreadable>) {
    let (mut sessions, mut unreadable) = (Vec::new(), Vec::new());
    for entry in page {
        match entry {
            Ok(summary) => sessions.push(summary),
            Err((id, e)) => unreadable.push(Unreadable {
                session: Some(id),
                reason: e.to_string(),
            }),
        }
    }
    (sessions, unreadable)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use crate::{Cursor, Page, Store, StoreOptions};
    use foya_protocol::{Event, EventKind, Seq, SessionConfig, SessionId};

    fn event(session_id: SessionId, seq: u64, at_ms: u64, kind: EventKind) -> Event {
        Event {
            session_id,
            seq: Seq(seq),
            run_id: None,
            at_ms,
            kind,
        }
    }

    fn created(id: SessionId, at_ms: u64) -> Event {
        event(
            id,
            1,
            at_ms,
            EventKind::SessionCreated {
                config: SessionConfig::new("/w"),
            },
        )
    }

    #[tokio::test]
    async fn pages_follow_updates_and_survive_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.redb");
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let ids: Vec<SessionId> = (0..5).map(|_| SessionId::new()).collect();
        for (i, id) in ids.iter().enumerate() {
            store
                .append_all(&[created(*id, 100 + i as u64)])
                .await
                .unwrap();
        }
        // The oldest session is touched last: it moves to the front.
        store
            .append_all(&[event(
                ids[0],
                2,
                200,
                EventKind::TitleSet {
                    title: "t".into(),
                    source: foya_protocol::TitleSource::User,
                },
            )])
            .await
            .unwrap();
        let expected = vec![ids[0], ids[4], ids[3], ids[2], ids[1]];
        let listed = |store: &Store, page| {
            store
                .list_page(page)
                .unwrap()
                .into_iter()
                .map(|s| s.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(listed(&store, Page::ALL), expected);
        let first = store.list_page(Page::first(2)).unwrap();
        assert_eq!(
            first.iter().map(|s| s.id).collect::<Vec<_>>(),
            expected[..2]
        );
        let rest = listed(&store, Page::after(Cursor::after(&first[1]), 10));
        assert_eq!(rest, expected[2..]);
        store.close().await;
        drop(store);
        // A file without the index gets it built on open.
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            assert!(txn.delete_table(super::RECENT).unwrap());
            txn.commit().unwrap();
        }
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        assert_eq!(listed(&store, Page::ALL), expected);
        assert_eq!(listed(&store, Page::first(1)), expected[..1]);
    }
}

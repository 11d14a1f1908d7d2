//! [`ReadOnlyStore`] on real files: it reads what a `Store` wrote and leaves the file's
//! bytes as they were (a writable open and close does not: the check is sensitive),
//! creates no table (a file without ours reads as empty), shares the file with other
//! read-only stores but not with a `Store`, and tells a missing file, an interrupted
//! creation and a foreign file apart. (A killed writer's file: `crash.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{created, event, log};
use foya_protocol::{EventKind, Seq, SessionId, TitleSource};
use foya_storage::{OpenError, ReadOnlyStore, Store, StoreOptions};
use std::path::Path;

/// Asserts the file at `path` still holds exactly `bytes` (without printing them).
fn assert_unchanged(path: &Path, bytes: &[u8], what: &str) {
    let now = std::fs::read(path).unwrap();
    assert!(
        now == bytes,
        "{what} changed the file ({} bytes before, {} after)",
        bytes.len(),
        now.len()
    );
}

/// The names of the tables in the redb file at `path` (opened writable, so only after
/// the byte comparisons).
fn tables(path: &Path) -> Vec<String> {
    use redb::{ReadableDatabase as _, TableHandle as _};
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let mut names: Vec<String> = txn
        .list_tables()
        .unwrap()
        .map(|t| t.name().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn reads_what_a_store_wrote_and_leaves_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let (a, b, gone) = (SessionId::new(), SessionId::new(), SessionId::new());
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(log(a, 1, 4)).await.unwrap();
    store.append(vec![created(b)]).await.unwrap();
    let titled = event(
        b,
        2,
        EventKind::TitleSet {
            title: "by hand".into(),
            source: TitleSource::User,
        },
    );
    store.append(vec![titled]).await.unwrap();
    store.append(log(gone, 1, 2)).await.unwrap();
    store
        .append(vec![event(gone, 3, EventKind::SessionDeleted {})])
        .await
        .unwrap();
    // What the writable store reads, to compare with.
    let listed = store.list_sessions().unwrap();
    let logs: Vec<_> = [a, b, gone]
        .iter()
        .map(|s| store.read_from(*s, Seq(1)).unwrap())
        .collect();
    assert_eq!(listed.len(), 3);
    store.close().await;
    drop(store);
    let bytes = std::fs::read(&path).unwrap();

    let reader = ReadOnlyStore::open(&path).unwrap();
    assert_eq!(reader.path(), path);
    // Read-only stores share the file.
    let second = ReadOnlyStore::open(&path).unwrap();
    assert_eq!(reader.list_sessions().unwrap(), listed);
    assert_eq!(second.list_sessions().unwrap(), listed);
    for (session, events) in [a, b, gone].iter().zip(&logs) {
        assert_eq!(&reader.read_from(*session, Seq(1)).unwrap(), events);
        assert_eq!(
            reader.last_seq(*session).unwrap(),
            Some(events.last().unwrap().seq)
        );
        let summary = listed.iter().find(|s| s.id == *session).cloned();
        assert_eq!(reader.session(*session).unwrap(), summary);
    }
    assert_eq!(reader.read_range(a, Seq(2), 2).unwrap(), log(a, 2, 3));
    assert_eq!(reader.read_from(a, Seq(5)).unwrap(), vec![]);
    let unknown = SessionId::new();
    assert_eq!(reader.session(unknown).unwrap(), None);
    assert_eq!(reader.last_seq(unknown).unwrap(), None);
    assert_eq!(reader.read_from(unknown, Seq(1)).unwrap(), vec![]);
    // No writer while a reader holds the file.
    match Store::open(&path, StoreOptions::default()) {
        Err(OpenError::AlreadyOpen { path: named }) => assert_eq!(named, path),
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    drop((reader, second));
    assert_unchanged(&path, &bytes, "reading read-only");

    // The check is sensitive: a writable open and close, appending nothing, writes.
    drop(Store::open(&path, StoreOptions::default()).unwrap());
    assert!(std::fs::read(&path).unwrap() != bytes);
}

#[test]
fn a_file_without_our_tables_reads_as_empty_and_gets_none() {
    let dir = tempfile::tempdir().unwrap();
    // A database redb created and closed with no table at all, and one with another table.
    let bare = dir.path().join("bare.redb");
    drop(redb::Database::create(&bare).unwrap());
    let other = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&other).unwrap();
        let txn = db.begin_write().unwrap();
        let table: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("other");
        txn.open_table(table).unwrap().insert(1, 2).unwrap();
        txn.commit().unwrap();
    }
    for (path, names) in [(&bare, vec![]), (&other, vec!["other".to_owned()])] {
        let bytes = std::fs::read(path).unwrap();
        let reader = ReadOnlyStore::open(path).unwrap();
        let session = SessionId::new();
        assert_eq!(reader.list_sessions().unwrap(), vec![]);
        assert_eq!(reader.session(session).unwrap(), None);
        assert_eq!(reader.last_seq(session).unwrap(), None);
        assert_eq!(reader.read_from(session, Seq(1)).unwrap(), vec![]);
        drop(reader);
        assert_unchanged(path, &bytes, "reading a file without our tables");
        assert_eq!(tables(path), names, "no table was created");
    }
}

#[test]
fn a_missing_file_is_not_found_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.redb");
    match ReadOnlyStore::open(&path) {
        Err(OpenError::NotFound { path: named }) => assert_eq!(named, path),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!path.exists());
}

#[test]
fn an_interrupted_creation_needs_recovery_and_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in [("empty.redb", vec![]), ("torn.redb", vec![0u8; 4096])] {
        let path = dir.path().join(name);
        std::fs::write(&path, &content).unwrap();
        match ReadOnlyStore::open(&path) {
            Err(OpenError::NeedsRecovery { path: named }) => assert_eq!(named, path),
            other => panic!("{name}: expected NeedsRecovery, got {other:?}"),
        }
        assert_unchanged(&path, &content, name);
        // A writable open recovers (a torn file is moved aside); then it reads as empty.
        drop(Store::open(&path, StoreOptions::default()).unwrap());
        let reader = ReadOnlyStore::open(&path).unwrap();
        assert_eq!(reader.list_sessions().unwrap(), vec![]);
    }
}

#[test]
fn a_foreign_file_is_refused_as_damaged_and_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.redb");
    std::fs::write(&path, b"these are not the events you are looking for").unwrap();
    match ReadOnlyStore::open(&path) {
        Err(OpenError::Corrupt {
            path: named,
            message,
        }) => {
            assert_eq!(named, path);
            assert_eq!(
                message,
                "not a redb database (its magic number does not match)"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_unchanged(
        &path,
        b"these are not the events you are looking for",
        "refusing",
    );
}

#[tokio::test]
async fn a_file_a_store_holds_is_refused_until_it_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let session = SessionId::new();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(log(session, 1, 2)).await.unwrap();
    match ReadOnlyStore::open(&path) {
        Err(OpenError::AlreadyOpen { path: named }) => assert_eq!(named, path),
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
    store.close().await;
    drop(store);
    let reader = ReadOnlyStore::open(&path).unwrap();
    assert_eq!(
        reader.read_from(session, Seq(1)).unwrap(),
        log(session, 1, 2)
    );
}

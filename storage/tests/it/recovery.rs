//! Losses and backups: a store whose file was rolled back (an older copy put in its
//! place, as redb's repair does when the latest commits are damaged) names, per session,
//! the acknowledged events it no longer holds, once, and records them beside the file;
//! a backup taken while appends go on is one consistent commit and opens as a store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use foya_protocol::{Seq, SessionId};
use foya_storage::{ReadOnlyStore, Store, StoreOptions};

#[tokio::test]
async fn a_rolled_back_file_names_the_acknowledged_events_it_lost() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let (a, b) = (SessionId::new(), SessionId::new());
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert!(store.losses().is_empty());
    store.append(common::log(a, 1, 5)).await.unwrap();
    store.append(common::log(b, 1, 3)).await.unwrap();
    store.close().await;
    drop(store);
    let older = std::fs::read(&path).unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(common::log(a, 6, 10)).await.unwrap();
    let c = SessionId::new();
    store.append(common::log(c, 1, 2)).await.unwrap();
    store.close().await;
    drop(store);
    // The file goes back to its earlier commit; the journal beside it stays.
    std::fs::write(&path, &older).unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let mut losses: Vec<(SessionId, Seq, Option<Seq>, u64)> = store
        .losses()
        .iter()
        .map(|l| (l.session, l.acknowledged, l.found, l.missing()))
        .collect();
    losses.sort();
    let mut expected = vec![(a, Seq(10), Some(Seq(5)), 5), (c, Seq(2), None, 2)];
    expected.sort();
    assert_eq!(losses, expected);
    assert_eq!(
        store
            .losses()
            .iter()
            .find(|l| l.session == a)
            .unwrap()
            .to_string(),
        format!(
            "session {a} lost 5 acknowledged events: it was acknowledged up to seq 10 and now \
             ends at seq 5"
        )
    );
    // `check` names what the journal said before the open brought it in line.
    store.close().await;
    drop(store);
    // A damaged line (bytes that are not UTF-8) hides no other.
    let log = dir.path().join("foya.redb.losses");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(b"{\"session\": \xff\xfe}\n");
    std::fs::write(&log, bytes).unwrap();
    let recorded: Vec<_> = foya_storage::recorded_losses(&path)
        .into_iter()
        .map(|l| (l.session, l.missing()))
        .collect();
    assert_eq!(recorded.len(), 2);
    assert!(recorded.contains(&(a, 5)) && recorded.contains(&(c, 2)));
    let report = foya_storage::check(&path).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.earlier_losses.len(), 2);
    // Reported once: the next open finds nothing new, and appending goes on from seq 6.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert!(store.losses().is_empty());
    store.append(common::log(a, 6, 6)).await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn an_older_copy_whose_clean_mark_matches_the_journal_length_still_names_its_losses() {
    // Each open compacts the journal to one record per session and each close marks its
    // length: two closes with the same number of records leave journals of one length.
    // An older copy of the file carries the mark of the earlier one; its loss is named.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let a = SessionId::new();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(common::log(a, 1, 5)).await.unwrap();
    store.close().await;
    drop(store);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(common::log(a, 6, 10)).await.unwrap();
    store.close().await;
    drop(store);
    let older = std::fs::read(&path).unwrap();
    let journal = dir.path().join("foya.redb.acks");
    let older_journal_len = std::fs::metadata(&journal).unwrap().len();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(common::log(a, 11, 15)).await.unwrap();
    store.close().await;
    drop(store);
    assert_eq!(
        std::fs::metadata(&journal).unwrap().len(),
        older_journal_len,
        "the scenario needs journals of one length"
    );
    std::fs::write(&path, &older).unwrap();
    // A reader names the loss too, recording nothing.
    let named = |losses: &[foya_storage::Loss]| -> Vec<_> {
        losses
            .iter()
            .map(|l| (l.session, l.acknowledged, l.found))
            .collect()
    };
    for _ in 0..2 {
        let reader = ReadOnlyStore::open(&path).unwrap();
        assert_eq!(
            named(&reader.unrecorded_losses()),
            vec![(a, Seq(15), Some(Seq(10)))]
        );
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(named(store.losses()), vec![(a, Seq(15), Some(Seq(10)))]);
    store.close().await;
    drop(store);
    // Recorded and the journal brought in line: a reader finds nothing new.
    let reader = ReadOnlyStore::open(&path).unwrap();
    assert!(reader.unrecorded_losses().is_empty());
}

#[tokio::test]
async fn check_notes_journal_records_that_do_not_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store
        .append(common::log(SessionId::new(), 1, 2))
        .await
        .unwrap();
    store.close().await;
    drop(store);
    assert!(foya_storage::check(&path).unwrap().notes.is_empty());
    let journal = dir.path().join("foya.redb.acks");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[3] ^= 0x40;
    std::fs::write(&journal, &bytes).unwrap();
    let report = foya_storage::check(&path).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(
        report.notes,
        vec![format!(
            "1 record(s) of the acknowledgement journal {} do not check (damaged or torn) and \
             were skipped: a loss in their sessions cannot be told",
            journal.display()
        )]
    );
}

#[tokio::test]
async fn check_reports_a_file_holding_less_than_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let a = SessionId::new();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(common::log(a, 1, 2)).await.unwrap();
    store.close().await;
    drop(store);
    let older = std::fs::read(&path).unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.append(common::log(a, 3, 4)).await.unwrap();
    store.close().await;
    drop(store);
    std::fs::write(&path, &older).unwrap();
    // Without opening it writable first: check compares the journal itself.
    let report = foya_storage::check(&path).unwrap();
    assert_eq!(
        report.problems,
        vec![format!(
            "session {a}: 2 acknowledged events are missing (acknowledged up to seq 4, the \
             file holds up to seq 2)"
        )]
    );
    // Salvage flags the session as short of what was acknowledged.
    let new = dir.path().join("new.redb");
    let salvaged = foya_storage::salvage(&path, &new).await.unwrap();
    assert_eq!(salvaged.sessions.len(), 1);
    assert_eq!(salvaged.sessions[0].copied, 2);
    assert_eq!(salvaged.sessions[0].acknowledged, Some(Seq(4)));
    assert_eq!(
        salvaged.sessions[0].stopped.as_deref(),
        Some("seq 3 is missing")
    );
}

#[tokio::test]
async fn a_backup_taken_while_appending_is_one_commit_and_opens_as_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let ids: Vec<SessionId> = (0..4).map(|_| SessionId::new()).collect();
    for id in &ids {
        store.append(common::log(*id, 1, 1)).await.unwrap();
    }
    // Appends go on while backups are taken.
    let writer = {
        let (store, ids) = (store.clone(), ids.clone());
        tokio::spawn(async move {
            for seq in 2..=200u64 {
                for id in &ids {
                    store.append(common::log(*id, seq, seq)).await.unwrap();
                }
            }
        })
    };
    let mut backups = Vec::new();
    for n in 0..3 {
        let to = dir.path().join(format!("backup-{n}.redb"));
        let report = store.backup(&to).unwrap();
        backups.push((to, report));
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    for (to, report) in &backups {
        assert_eq!(report.sessions, 4);
        let backup = ReadOnlyStore::open(to).unwrap();
        let mut events = 0;
        // One commit: every session's log is dense from 1, and (appends go round the
        // sessions in order) later sessions are at most one event behind earlier ones.
        let lasts: Vec<u64> = ids
            .iter()
            .map(|id| {
                let log = backup.read_from(*id, Seq(1)).unwrap();
                assert_eq!(log, common::log(*id, 1, log.len() as u64));
                events += log.len() as u64;
                log.len() as u64
            })
            .collect();
        assert!(
            lasts.windows(2).all(|w| w[0] == w[1] || w[0] == w[1] + 1),
            "{lasts:?}"
        );
        assert_eq!(report.events, events);
        assert!(foya_storage::check(to).unwrap().is_clean());
    }
    // A backup of the finished store holds everything; the target must be new.
    let last = dir.path().join("final.redb");
    assert_eq!(store.backup(&last).unwrap().events, 800);
    assert!(store.backup(&last).is_err());
    store.close().await;
}

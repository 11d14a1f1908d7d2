//! `foya store populate` (hidden, for benchmarks): the real binary fills a data
//! directory with idle sessions — each a `session_created` and its completed turns —
//! that the store's recovery index does not name (nothing to recover at start-up).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_protocol::Seq;
use foya_storage::{Store, StoreOptions};

#[test]
fn populate_adds_idle_sessions_with_their_completed_turns_and_nothing_to_recover() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let output = foya_tests::foya_bin::foya()
        .args([
            "store",
            "populate",
            "--sessions",
            "20",
            "--turns",
            "2",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.starts_with("added 20 sessions to "), "{stdout}");
    let store = Store::open(&data.join("foya.redb"), StoreOptions::default()).unwrap();
    let sessions = store.list_sessions().unwrap();
    assert_eq!(sessions.len(), 20);
    // session_created, then per turn: user_message, turn_started, step_started,
    // assistant_message, turn_complete.
    assert!(
        sessions.iter().all(|s| s.last_seq == Seq(11)),
        "{sessions:?}"
    );
    assert_eq!(store.pending_sessions().unwrap(), Vec::new());
}

//! `foya sessions list` on a store of more sessions than it shows at once (`foya store
//! populate`): by default the 50 most recently updated, newest first, and a note on
//! stderr that there are more (`--all`, `--limit N`); `--limit N` the N most recent;
//! `--all` every session once, in the listing's order, read a page (1 000) at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

/// More sessions than one page of `--all`.
const SESSIONS: usize = 1005;

/// `(updated_at_ms, id)` of each line of `foya sessions list --json …`, and its stderr.
fn listed(data: &std::path::Path, args: &[&str]) -> (Vec<(u64, String)>, String) {
    let out = foya_tests::foya_bin::foya()
        .args(["sessions", "list", "--json"])
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let s: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                s["updated_at_ms"].as_u64().unwrap(),
                s["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (lines, String::from_utf8(out.stderr).unwrap())
}

#[test]
fn sessions_list_shows_the_most_recent_page_and_all_of_them_with_all() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = foya_tests::foya_bin::foya()
        .args([
            "store",
            "populate",
            "--sessions",
            &SESSIONS.to_string(),
            "--turns",
            "0",
        ])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let (all, stderr) = listed(&data, &["--all"]);
    assert_eq!(stderr, "");
    assert_eq!(all.len(), SESSIONS);
    for pair in all.windows(2) {
        assert!(pair[0] > pair[1], "out of order: {pair:?}");
    }
    assert_eq!(
        all.iter().map(|(_, id)| id).collect::<HashSet<_>>().len(),
        SESSIONS
    );

    let (first, stderr) = listed(&data, &[]);
    assert_eq!(first[..], all[..50]);
    assert!(
        stderr.contains("more sessions than these 50") && stderr.contains("--all"),
        "{stderr}"
    );
    let (seven, _) = listed(&data, &["--limit", "7"]);
    assert_eq!(seven[..], all[..7]);
    let (whole, stderr) = listed(&data, &["--limit", "2000"]);
    assert_eq!(whole, all);
    assert_eq!(stderr, "");

    // The text form: one line a session, the same count.
    let out = foya_tests::foya_bin::foya()
        .args(["sessions", "list"])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 50);
}

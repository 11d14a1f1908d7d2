//! `foya serve` on a store where one session's data no longer decodes (a damaged page):
//! damage is local. A log that does not decode: `GET /overview` lists every session, the
//! damaged one with the state `unreadable`, the others as they are. A summary row that
//! does not decode: `GET /sessions` and `GET /overview` list the other sessions.

use super::{start, within};
use foya_tests::foya_bin::scripted;
use foya_tests::mock_provider::MockProvider;
use serde_json::json;

/// Marks the user text or the title of the session to damage.
const MARKER: &[u8] = b"damage-this-input";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_lists_a_session_whose_log_does_not_decode_as_unreadable() {
    within(overview()).await;
}

/// Two sessions in `dir/data`, the first with `MARKER` as its prompt (in its log) or
/// its title (in its log and its summary row); returns the first one's id.
fn two_sessions(dir: &std::path::Path, marker_in_title: bool) -> String {
    let data = dir.join("data");
    let script = dir.join("script.json");
    std::fs::write(&script, json!({"responses": [{"text": "ok"}]}).to_string()).unwrap();
    let marker = std::str::from_utf8(MARKER).unwrap();
    let mut first = None;
    for prompt in [
        if marker_in_title { "hi" } else { marker },
        "a sound session",
    ] {
        let out = scripted("run", "bypass", &script, &data, dir)
            .args(["--json", prompt])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let id = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| {
                let line: serde_json::Value = serde_json::from_str(l).ok()?;
                line["session_id"].as_str().map(str::to_owned)
            })
            .unwrap();
        first.get_or_insert(id);
    }
    let first = first.unwrap();
    if marker_in_title {
        let out = foya_tests::foya_bin::foya()
            .args(["sessions", "title", &first, marker, "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    damage_marker(&data.join("foya.redb"));
    first
}

/// The MessagePack header of the marker's string becomes a byte no value starts with.
fn damage_marker(file: &std::path::Path) {
    let mut bytes = std::fs::read(file).unwrap();
    let mut damaged = 0;
    for at in 1..bytes.len() - MARKER.len() {
        if bytes[at..].starts_with(MARKER) {
            bytes[at - 1] = 0xc1;
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    std::fs::write(file, &bytes).unwrap();
}

async fn overview() {
    let dir = tempfile::tempdir().unwrap();
    two_sessions(dir.path(), false);
    let provider = MockProvider::start().await;
    let s = start(&provider, dir.path()).await;
    let overview = s.get("/overview", "Overview").await;
    let mut states: Vec<&str> = overview["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    states.sort_unstable();
    assert_eq!(states, ["idle", "unreadable"], "{overview}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_that_does_not_decode_leaves_the_other_sessions_listed() {
    within(summary()).await;
}

async fn summary() {
    let dir = tempfile::tempdir().unwrap();
    let damaged = two_sessions(dir.path(), true);
    let provider = MockProvider::start().await;
    let s = start(&provider, dir.path()).await;
    for (path, schema) in [("/sessions", "SessionList"), ("/overview", "Overview")] {
        let listed = s.get(path, schema).await;
        let sessions = listed["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{listed}");
        assert_ne!(sessions[0]["id"], damaged.as_str(), "{listed}");
    }
}

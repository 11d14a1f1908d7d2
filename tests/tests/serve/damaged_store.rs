//! `foya serve` on a store where one session's log holds an event that no longer decodes
//! (a damaged page): damage is local, so `GET /overview` lists every session, the
//! damaged one with the state `unreadable`, the others as they are.

use super::{start, within};
use foya_tests::foya_bin::scripted;
use foya_tests::mock_provider::MockProvider;
use serde_json::json;

/// Marks the user text of the session to damage.
const MARKER: &[u8] = b"damage-this-input";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_lists_a_session_whose_log_does_not_decode_as_unreadable() {
    within(overview()).await;
}

async fn overview() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({"responses": [{"text": "ok"}]}).to_string()).unwrap();
    for prompt in [std::str::from_utf8(MARKER).unwrap(), "a sound session"] {
        let out = scripted("run", "bypass", &script, &data, dir.path())
            .arg(prompt)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    // The MessagePack header of the marker's string becomes a byte no value starts with.
    let file = data.join("foya.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let mut damaged = 0;
    for at in 1..bytes.len() - MARKER.len() {
        if bytes[at..].starts_with(MARKER) {
            bytes[at - 1] = 0xc1;
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    std::fs::write(&file, &bytes).unwrap();

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

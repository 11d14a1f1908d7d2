//! `foya sessions delete` on an idle data dir, with the real binary: a session created by
//! `foya run` is deleted (listed as deleted, its log ends with `session_deleted`);
//! deleting it again succeeds without writing; an unknown id fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn foya(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foya"))
        .args(args)
        .env("FOYA_DATA_DIR", data)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn deletes_a_session_of_an_idle_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"responses":[{"text":"hello"}]}"#).unwrap();
    let cwd = dir.path().to_str().unwrap();
    let run = foya(
        &data,
        &[
            "run",
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--cwd",
            cwd,
            "--approval",
            "bypass",
            "hi",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let list = foya(&data, &["sessions", "list", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(stdout(&list).trim()).unwrap();
    let id = summary["id"].as_str().unwrap().to_owned();
    assert_eq!(summary["deleted"], false);

    let deleted = foya(&data, &["sessions", "delete", &id]);
    assert!(deleted.status.success(), "{deleted:?}");
    assert_eq!(stdout(&deleted), format!("deleted session {id}\n"));
    let list = foya(&data, &["sessions", "list", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(stdout(&list).trim()).unwrap();
    assert_eq!(summary["deleted"], true);
    let show = foya(&data, &["sessions", "show", &id, "--json"]);
    let last: serde_json::Value =
        serde_json::from_str(stdout(&show).lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "session_deleted", "{last}");
    assert_eq!(last["seq"], 8, "{last}");

    let again = foya(&data, &["sessions", "delete", &id]);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        stdout(&again),
        format!("session {id} was already deleted\n")
    );
    assert_eq!(
        stdout(&foya(&data, &["sessions", "show", &id, "--json"])),
        stdout(&show)
    );

    let unknown = foya(&data, &["sessions", "delete", "not-an-id"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn sets_a_title_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"responses":[{"text":"hello"}]}"#).unwrap();
    let run = foya(
        &data,
        &[
            "run",
            "--provider",
            "scripted",
            "--script",
            script.to_str().unwrap(),
            "--cwd",
            dir.path().to_str().unwrap(),
            "--approval",
            "bypass",
            "hi",
        ],
    );
    assert!(run.status.success(), "{run:?}");
    let list = foya(&data, &["sessions", "list", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(stdout(&list).trim()).unwrap();
    let id = summary["id"].as_str().unwrap().to_owned();
    let data = data.as_path();
    let set = foya(data, &["sessions", "title", &id, "Inventory review"]);
    assert!(set.status.success(), "{set:?}");
    let list = foya(data, &["sessions", "list", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(stdout(&list).trim()).unwrap();
    assert_eq!(summary["title"], "Inventory review");
    let show = foya(data, &["sessions", "show", &id, "--json"]);
    let last: serde_json::Value =
        serde_json::from_str(stdout(&show).lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "title_set");
    assert_eq!(last["source"], "user");
    let empty = foya(data, &["sessions", "title", &id, "  "]);
    assert_eq!(empty.status.code(), Some(2));
}

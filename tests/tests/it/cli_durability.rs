//! `foya run --durability none|immediate`: both options are accepted and honoured end to
//! end (the turn completes, its events are in the data dir for the next process), an
//! unknown value is a usage error. `--json` prints the new session's log from seq 1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::foya;
use serde_json::{Value, json};
use std::path::Path;

fn run(dir: &Path, durability: &str) -> std::process::Output {
    let script = dir.join("script.json");
    std::fs::write(
        &script,
        json!({"responses":[{"text":"stored"}]}).to_string(),
    )
    .unwrap();
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    foya()
        .args([
            "run",
            "--provider",
            "scripted",
            "--approval",
            "bypass",
            "--json",
        ])
        .arg("--script")
        .arg(&script)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--cwd")
        .arg(&work)
        .args(["--durability", durability, "hello"])
        .output()
        .unwrap()
}

fn persisted(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("seq").is_some())
        .collect()
}

#[test]
fn both_durability_levels_commit_a_turn_that_the_next_process_reads() {
    for durability in ["none", "immediate"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), durability);
        assert!(out.status.success(), "{durability}: {out:?}");
        let printed = persisted(&out.stdout);
        let id = printed[0]["session_id"].as_str().unwrap().to_owned();
        let show = foya()
            .args(["sessions", "show", &id, "--json"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(show.status.success(), "{show:?}");
        let stored = persisted(&show.stdout);
        // `--json` streams a new session's whole log, from `session_created` (seq 1).
        let first: Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap())
                .unwrap();
        assert_eq!(first["type"], "session_created", "{durability}");
        assert_eq!(first["seq"], 1, "{durability}");
        assert_eq!(stored[..], printed[..], "{durability}");
        assert_eq!(
            stored.last().unwrap()["type"],
            "turn_complete",
            "{durability}"
        );
    }
}

#[test]
fn an_unknown_durability_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "sometimes");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown durability"),
        "{out:?}"
    );
}

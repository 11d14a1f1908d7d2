//! Type-ahead in `foya chat` through a pseudo-terminal (expectrl, the real binary with the
//! scripted provider): two lines pasted at the idle prompt in one write both reach the
//! session, in order — the line editor used to read both, return the first and drop the
//! rest of what it had read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use expectrl::process::unix::WaitStatus;
use expectrl::{Eof, Expect as _, Session};
use foya_tests::foya_bin::{foya_bin, only_session_log};
use serde_json::json;
use std::time::Duration;

#[test]
fn two_lines_pasted_at_the_prompt_both_reach_the_session_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    let responses = json!({"responses": [
        {"text": "answer one"},
        {"text": "answer two"},
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let mut cmd = std::process::Command::new(foya_bin());
    cmd.arg("chat")
        .args(["--provider", "scripted", "--approval", "auto"])
        .arg("--script")
        .arg(&script)
        .arg("--data-dir")
        .arg(&data)
        .arg("--cwd")
        .arg(&work)
        .env("TERM", "xterm")
        .env_remove("FOYA_DATA_DIR");
    let mut p = Session::spawn(cmd).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(30)));
    p.expect("foya> ").unwrap();
    // One write, as a paste arrives: both lines are in the terminal's buffer at once.
    p.send("first line\rsecond line\r").unwrap();
    p.expect("answer one").unwrap();
    p.expect("answer two").unwrap();
    p.expect("foya> ").unwrap();
    p.send("/exit\r").unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
    let typed: Vec<String> = only_session_log(&data)
        .iter()
        .filter(|e| e["type"] == "user_message")
        .map(|e| e["input"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(typed, vec!["first line", "second line"]);
}

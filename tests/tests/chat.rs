//! End-to-end test of `foya chat` through a pseudo-terminal (expectrl): the real binary
//! with the scripted provider. A prompt is answered; a long `shell sleep 30` tool call
//! is running when a line typed meanwhile is shown as queued; Ctrl-C cancels the turn,
//! the queued input then runs, the prompt comes back, and `/exit` leaves with status 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use expectrl::process::unix::WaitStatus;
use expectrl::{ControlCode, Eof, Expect as _, Session};
use foya_tests::foya_bin::foya_bin;
use serde_json::json;
use std::time::Duration;

#[test]
fn chat_answers_queues_cancels_a_long_tool_on_ctrl_c_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = dir.path().join("script.json");
    let responses = json!({"responses": [
        {"text": "Hello from the scripted model."},
        {"tool_calls": [{"id": "call_1", "name": "shell", "arguments": {"command": "sleep 30"}}]},
        {"text": "The queued one ran."},
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();

    let mut cmd = std::process::Command::new(foya_bin());
    cmd.arg("chat")
        .args(["--provider", "scripted", "--approval", "auto"])
        .arg("--script")
        .arg(&script)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--cwd")
        .arg(&work)
        .env("TERM", "xterm")
        .env_remove("FOYA_DATA_DIR");
    let mut p = Session::spawn(cmd).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(60)));

    p.expect("foya> ").unwrap();
    p.send_line("hi").unwrap();
    p.expect("Hello from the scripted model.").unwrap();
    p.expect("foya> ").unwrap();

    p.send_line("run the long thing").unwrap();
    p.expect("▶ shell").unwrap();
    p.send_line("and then this").unwrap();
    p.expect("queued: and then this").unwrap();
    p.send(ControlCode::EndOfText).unwrap();
    p.expect("(turn cancelled)").unwrap();
    p.expect("The queued one ran.").unwrap();
    p.expect("foya> ").unwrap();

    p.send_line("/exit").unwrap();
    p.expect(Eof).unwrap();
    let status = p.get_process().wait().unwrap();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
}

//! Type-ahead in `foya chat` through a pseudo-terminal (`foya_tests::pty`, the real binary with the
//! scripted provider): two lines pasted at the idle prompt in one write both reach the
//! session, in order — the line editor used to read both, return the first and drop the
//! rest of what it had read; and lines pasted at the prompt stay ahead of a line typed
//! while their first turn runs — the line editor kept the rest of the paste for later
//! prompts, so the line typed during the turn overtook it — and a pasted line without
//! its Enter waits at the next prompt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{only_session_log, scripted};
use foya_tests::pty::Pty;
use serde_json::json;
use std::time::Duration;

/// `foya chat` in a pseudo-terminal with the scripted `responses`, in `dir/work`.
fn chat(dir: &std::path::Path, responses: &serde_json::Value) -> Pty {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let data = dir.join("data");
    let script = dir.join("script.json");
    std::fs::write(&script, json!({ "responses": responses }).to_string()).unwrap();
    Pty::spawn(
        scripted("chat", "auto", &script, &data, &work).env("TERM", "xterm"),
        Duration::from_secs(120),
    )
}

/// Leaves the chat with `/exit` (status 0); the texts of the session's `user_message`s.
fn exit_and_read_inputs(mut p: Pty, data: &std::path::Path) -> Vec<String> {
    p.expect("foya> ");
    p.send("/exit\r");
    p.expect_eof();
    let status = p.wait();
    assert_eq!(status.code(), Some(0), "{status:?}");
    only_session_log(data)
        .iter()
        .filter(|e| e["type"] == "user_message")
        .map(|e| e["input"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn two_lines_pasted_at_the_prompt_both_reach_the_session_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let responses = json!([{"text": "answer one"}, {"text": "answer two"}]);
    let mut p = chat(dir.path(), &responses);
    p.expect("foya> ");
    // One write, as a paste arrives: both lines are in the terminal's buffer at once.
    p.send("first line\rsecond line\r");
    p.expect("answer one");
    p.expect("answer two");
    let typed = exit_and_read_inputs(p, &dir.path().join("data"));
    assert_eq!(typed, vec!["first line", "second line"]);
}

#[test]
fn lines_pasted_at_the_prompt_stay_ahead_of_a_line_typed_during_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    // The first turn runs a command that waits until the test has typed its line.
    let wait = json!({"command": "while [ ! -e released ]; do sleep 0.02; done; echo released"});
    let responses = json!([
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": wait}]},
        {"text": "answer one"},
        {"text": "answer two"},
        {"text": "answer three"},
        {"text": "answer four"},
        {"text": "answer five"},
    ]);
    let mut p = chat(dir.path(), &responses);
    p.expect("foya> ");
    // Three lines and the start of a fourth, not finished yet.
    p.send("one\rtwo\rthree\rhalf");
    p.expect("▶ shell");
    p.send("four\r");
    p.expect("queued: four");
    std::fs::write(dir.path().join("work/released"), "").unwrap();
    p.expect("answer four");
    // The unfinished line waits at the next prompt, to be finished there.
    p.expect("foya> half");
    p.send(" done\r");
    p.expect("answer five");
    let typed = exit_and_read_inputs(p, &dir.path().join("data"));
    assert_eq!(typed, vec!["one", "two", "three", "four", "half done"]);
}

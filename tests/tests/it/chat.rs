//! End-to-end test of `foya chat` through a pseudo-terminal (`foya_tests::pty`): the real binary
//! with the scripted provider. A prompt is answered; a long `shell sleep 30` tool call
//! is running when a line typed meanwhile is shown as queued; Ctrl-C cancels the turn,
//! the queued input then runs, the prompt comes back, and `/exit` leaves with status 0.
//! With piped stdin every line is an input run in order (a line that arrives as a turn
//! ends is not lost; approvals are not taken from the lines), and at the end of stdin
//! the chat waits for the turns to finish before it exits 0. An unknown command is
//! refused with the list of every command chat accepts (its own and the project's),
//! and no turn is run for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::child::{spawn_lines, wait_exit};
use foya_tests::foya_bin::{only_session_log, scripted};
use foya_tests::pty::Pty;
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

    let data = dir.path().join("data");
    let mut p = Pty::spawn(
        scripted("chat", "auto", &script, &data, &work).env("TERM", "xterm"),
        Duration::from_secs(180),
    );

    p.expect("foya> ");
    p.send("hi\n");
    p.expect("Hello from the scripted model.");
    p.expect("foya> ");

    p.send("run the long thing\n");
    p.expect("▶ shell");
    p.send("and then this\n");
    p.expect("queued: and then this");
    p.send("\x03"); // Ctrl-C
    p.expect("(turn cancelled)");
    p.expect("The queued one ran.");
    p.expect("foya> ");

    p.send("/exit\n");
    p.expect_eof();
    let status = p.wait();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn piped_lines_run_in_order_and_eof_waits_for_the_turns() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    // The first turn's shell call needs approval (`--approval ask`): piped lines are
    // inputs, not answers, so it is denied as having no approver.
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "call_1", "name": "shell", "arguments": {"command": "echo hi"}}]},
        {"text": "first done"},
        {"text": "second done"},
        {"text": "third done"},
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let chat = spawn_lines(
        scripted("chat", "ask", &script, &data, &work).stdin(std::process::Stdio::piped()),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (lines, mut stdin) = (&chat.lines, chat.stdin.unwrap());
    let left = || deadline.saturating_duration_since(std::time::Instant::now());
    writeln!(stdin, "one").unwrap();
    // The next two lines arrive in one write as the first turn ends; both run while
    // stdin stays open (none waits in a read buffer for more input), then stdin closes.
    assert_eq!(lines.recv_timeout(left()).unwrap(), "first done");
    stdin.write_all(b"two\nthree\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(lines.recv_timeout(left()).unwrap(), "second done");
    assert_eq!(lines.recv_timeout(left()).unwrap(), "third done");
    drop(stdin);
    let status = wait_exit(chat.child, deadline);
    let stderr = chat.stderr.recv().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        lines.recv_timeout(left()).ok(),
        None,
        "nothing more on stdout"
    );

    let log = only_session_log(&data);
    let of = |t: &str, field: &str| -> Vec<serde_json::Value> {
        log.iter()
            .filter(|e| e["type"] == t)
            .map(|e| e[field].clone())
            .collect()
    };
    let texts: Vec<serde_json::Value> = log
        .iter()
        .filter(|e| e["type"] == "user_message")
        .map(|e| e["input"]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("one"), json!("two"), json!("three")]);
    assert_eq!(
        of("turn_complete", "status"),
        [json!("completed"), json!("completed"), json!("completed")]
    );
    assert_eq!(of("tool_message", "is_error"), [json!(true)]);
    assert_eq!(log.last().unwrap()["type"], "turn_complete");
}

#[test]
fn an_unknown_command_and_help_name_every_command_chat_accepts() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join(".foya/commands")).unwrap();
    std::fs::write(work.join(".foya/commands/fix.md"), "Fix $ARGUMENTS").unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"responses": [{"text": "fixed"}]}).to_string(),
    )
    .unwrap();
    let mut command = scripted("chat", "bypass", &script, &data, &work);
    // No user-level commands from the machine running the test.
    command
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .stdin(std::process::Stdio::piped());
    let chat = spawn_lines(&mut command);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut stdin = chat.stdin.unwrap();
    stdin.write_all(b"/help\n/nope\n/fix the bug\n").unwrap();
    drop(stdin);
    let status = wait_exit(chat.child, deadline);
    let stderr = chat.stderr.recv().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    let unknown: Vec<&str> = stderr.lines().filter(|l| l.contains("/nope")).collect();
    assert_eq!(
        unknown,
        [
            "foya: unknown command /nope; available commands: /cancel, /compact, /exit, /fix, \
          /help, /quit, /sessions, /title"
        ],
        "{stderr}"
    );
    // /help lists the project's command; piped input gets no typing hint.
    assert!(
        stderr.contains("\nproject commands:\n/fix ARGS\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("type a prompt"), "{stderr}");
    // The child exited: its stdout is closed, so the reader ends.
    let lines: Vec<String> = chat.lines.iter().collect();
    assert_eq!(lines, ["fixed"]);
    // One turn, for /fix: the unknown command ran none.
    let completed: Vec<serde_json::Value> = only_session_log(&data)
        .into_iter()
        .filter(|e| e["type"] == "turn_complete")
        .map(|e| e["status"].clone())
        .collect();
    assert_eq!(completed, [json!("completed")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_data_dir_held_by_a_chat_says_to_wait_for_it_not_to_ask_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({"responses": [{"text": "hi"}]}).to_string()).unwrap();
    let mut command = scripted("chat", "bypass", &script, &data, dir.path());
    command
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .stdin(std::process::Stdio::piped());
    let mut chat = spawn_lines(&mut command);
    let mut stdin = chat.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"hello\n").unwrap();
    // The answer printed: the chat holds the store (and keeps it while stdin is open).
    assert_eq!(
        chat.lines.recv_timeout(Duration::from_secs(60)).unwrap(),
        "hi"
    );
    let pid = chat.child.id();
    assert_eq!(
        foya_tests::child::sessions_list(&data).await,
        (
            Some(1),
            String::new(),
            format!(
                "foya: the data dir {} is in use by foya chat (pid {pid}): its store is locked \
                 while that process runs. Wait for it to end, stop it, or use another \
                 --data-dir (one process uses a data dir at a time)\n",
                data.display()
            )
        )
    );
    drop(stdin);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    assert_eq!(wait_exit(chat.child, deadline).code(), Some(0));
}

//! `foya run` under signals and closed pipes, end to end with the real binary: SIGTERM
//! and SIGHUP cancel the turn cleanly (exit 143 / 129, `turn_complete{cancelled}`
//! persisted, the tool's process stopped); a stdout whose reader is gone ends `foya run` and `foya sessions`
//! with exit 0 and no panic; a session resumed after a SIGKILL names the recovered tool
//! and does not report the earlier turn's failure as this run's error. `foya chat`
//! handles them too: SIGTERM cancels its running turn (the log ends with
//! `turn_complete{cancelled}`, the tool's process is gone) and exits 143, SIGHUP the
//! same with 129. Synchronisation is only by reacting to the child's output lines
//! (or a FIFO the tool writes), under one global timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{Piped, read_until, spawn_json_lines, spawn_lines, wait_exit};
use foya_tests::foya_bin::{foya, scripted};
use foya_tests::procs::{processes_with, wait_running};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Global wait for one test's child output.
const TIMEOUT: Duration = Duration::from_secs(120);

struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    work: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (data, work) = (root.join("data"), root.join("work"));
    std::fs::create_dir_all(&work).unwrap();
    Dirs {
        _tmp: tmp,
        root,
        data,
        work,
    }
}

fn script(dirs: &Dirs, name: &str, responses: &[Value]) -> PathBuf {
    let path = dirs.root.join(name);
    std::fs::write(&path, json!({ "responses": responses }).to_string()).unwrap();
    path
}

/// `foya run --provider scripted --approval bypass` on the dirs, plus `extra` args.
fn run_command(dirs: &Dirs, script: &Path, extra: &[&str]) -> Command {
    let mut command = scripted("run", "bypass", script, &dirs.data, &dirs.work);
    command.args(extra);
    command
}

/// A unique text to find the tool's process by its command line.
fn marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("foya-{name}-{}-{nanos}", std::process::id())
}

/// A shell call that prints `ready`, then becomes a `sleep 100` whose argv[0] is
/// `marker` (the same process: its command line carries the marker from the start).
fn sleeping_call(marker: &str) -> Value {
    let command = format!("echo ready; exec -a {marker} sleep 100");
    json!({"tool_calls": [{"id": "call_sleep", "name": "shell", "arguments": {"command": command}}]})
}

fn show(dirs: &Dirs, id: &str) -> Vec<Value> {
    let out = foya()
        .args(["sessions", "show", id, "--json"])
        .arg("--data-dir")
        .arg(&dirs.data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[test]
fn sigterm_cancels_the_turn_stops_its_tool_and_exits_143() {
    signal_cancels_the_turn(nix::sys::signal::Signal::SIGTERM, 143, "SIGTERM again");
}

#[test]
fn sighup_cancels_the_turn_stops_its_tool_and_exits_129() {
    signal_cancels_the_turn(nix::sys::signal::Signal::SIGHUP, 129, "SIGHUP again");
}

/// `signal` while the turn's tool runs: the turn is cancelled cleanly (the call's
/// cancelled result and `turn_complete{cancelled}` persisted, the tool's process gone)
/// and `foya run` exits with `code`, having said `hint` on stderr.
fn signal_cancels_the_turn(signal: nix::sys::signal::Signal, code: i32, hint: &str) {
    let dirs = dirs();
    let mark = marker(signal.as_str());
    let script = script(
        &dirs,
        "s.json",
        &[sleeping_call(&mark), json!({"text": "never"})],
    );
    foya_tests::foya_bin(); // built before the clock starts
    let deadline = Instant::now() + TIMEOUT;
    let run = spawn_json_lines(&mut run_command(&dirs, &script, &["--json", "wait"]));
    let seen = read_until(&run.lines, deadline, |l| {
        l["type"] == "tool_output" && l["chunk"].as_str().unwrap_or("").contains("ready")
    });
    let _ = wait_running(&mark, deadline);
    let stderr = signal_and_wait(run.child, &run.stderr, signal, code, deadline);
    assert!(stderr.contains("cancelling"), "{stderr}");
    assert!(stderr.contains(hint), "{stderr}");

    let id = seen[0]["session_id"].as_str().unwrap().to_owned();
    assert_cancelled_cleanly(&show(&dirs, &id), &mark);
}

/// Sends `signal` to `child` and waits for its exit (by `deadline`); checks that its
/// exit status is `code`; returns its stderr.
fn signal_and_wait(
    child: Child,
    stderr: &mpsc::Receiver<String>,
    signal: nix::sys::signal::Signal,
    code: i32,
    deadline: Instant,
) -> String {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
    let status = wait_exit(child, deadline);
    let stderr = stderr.recv_timeout(TIMEOUT).unwrap();
    assert_eq!(status.code(), Some(code), "stderr: {stderr}");
    stderr
}

/// The log of a session whose turn was cancelled while its `call_sleep` ran (the tool's
/// processes carrying `mark`): it ends with the turn's only `turn_complete{cancelled}`,
/// the call got its (error) result, and the tool's processes did not outlive the cancel.
fn assert_cancelled_cleanly(log: &[Value], mark: &str) {
    let last = log.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"]),
        (&json!("turn_complete"), &json!("cancelled")),
        "{:?}",
        types(log)
    );
    assert_eq!(
        log.iter().filter(|e| e["type"] == "turn_complete").count(),
        1,
        "{:?}",
        types(log)
    );
    let results: Vec<(&Value, &Value)> = log
        .iter()
        .filter(|e| e["type"] == "tool_message")
        .map(|e| (&e["tool_call_id"], &e["is_error"]))
        .collect();
    assert_eq!(results, [(&json!("call_sleep"), &json!(true))]);
    assert_eq!(processes_with(mark), Vec::<u32>::new());
}

/// A pipe whose read end is already closed: every write to it fails with `EPIPE`.
fn closed_pipe() -> std::io::PipeWriter {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    writer
}

#[test]
fn a_closed_stdout_ends_run_and_sessions_with_exit_0_and_no_panic() {
    let dirs = dirs();
    let script = script(
        &dirs,
        "s.json",
        &[json!({"text": "first line\nsecond line\n"})],
    );
    for json in [true, false] {
        let mut command = run_command(
            &dirs,
            &script,
            if json { &["--json", "hi"] } else { &["hi"] },
        );
        let out = command.stdout(closed_pipe()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "json {json}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let list = foya()
        .args(["sessions", "list", "--json"])
        .arg("--data-dir")
        .arg(&dirs.data)
        .output()
        .unwrap();
    let ids: Vec<String> = String::from_utf8(list.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 2);
    for id in &ids {
        // Every turn ended, whether the closed pipe cancelled it or it finished first.
        assert_eq!(show(&dirs, id).last().unwrap()["type"], "turn_complete");
    }
    for args in [
        vec!["sessions", "show", ids[0].as_str()],
        vec!["sessions", "show", ids[0].as_str(), "--json"],
        vec!["sessions", "list"],
        vec!["sessions", "list", "--json"],
    ] {
        let out = foya()
            .args(&args)
            .arg("--data-dir")
            .arg(&dirs.data)
            .stdout(closed_pipe())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn a_session_resumed_after_a_crash_names_the_recovered_tool_without_a_spurious_error() {
    let dirs = dirs();
    let mark = marker("crash");
    let first = script(&dirs, "first.json", &[sleeping_call(&mark)]);
    foya_tests::foya_bin(); // built before the clock starts
    let deadline = Instant::now() + TIMEOUT;
    let Piped {
        mut child, lines, ..
    } = spawn_json_lines(&mut run_command(&dirs, &first, &["--json", "start"]));
    let seen = read_until(&lines, deadline, |l| {
        l["type"] == "tool_output" && l["chunk"].as_str().unwrap_or("").contains("ready")
    });
    child.kill().unwrap(); // SIGKILL: no cleanup at all
    child.wait().unwrap();
    // The killed runtime's tool process outlives it (its own process group).
    for pid in processes_with(&mark) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let id = seen[0]["session_id"].as_str().unwrap().to_owned();

    let after = script(
        &dirs,
        "after.json",
        &[sleeping_call(&mark), json!({"text": "after restart"})],
    );
    let out = run_command(&dirs, &after, &["--session", &id, "next"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "after restart\n");
    let shown: Vec<&str> = stderr.lines().skip(1).collect(); // after "session ID"
    assert_eq!(
        shown,
        [
            "✗ shell: outcome unknown: the runtime stopped while this ran; it was not re-run",
            "(an earlier turn ended Failed: interrupted by restart)",
        ],
        "{stderr}"
    );
    let log = show(&dirs, &id);
    let completions: Vec<&str> = log
        .iter()
        .filter(|e| e["type"] == "turn_complete")
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(completions, ["failed", "completed"], "{:?}", types(&log));
}

/// `foya chat --provider scripted --approval bypass` on the dirs, stdin a pipe kept
/// open (so the chat never reaches the end of its input); stdout lines and the whole
/// stderr come back on channels.
fn spawn_chat(dirs: &Dirs, script: &Path) -> Piped<String> {
    spawn_lines(scripted("chat", "bypass", script, &dirs.data, &dirs.work).stdin(Stdio::piped()))
}

/// The only session of the dirs' data dir.
fn only_session(dirs: &Dirs) -> String {
    let list = foya()
        .args(["sessions", "list", "--json"])
        .arg("--data-dir")
        .arg(&dirs.data)
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    listed["id"].as_str().unwrap().to_owned()
}

#[test]
fn sigterm_cancels_the_running_chat_turn_and_exits_143() {
    chat_signal_cancels_the_turn(nix::sys::signal::Signal::SIGTERM, 143, "SIGTERM again");
}

#[test]
fn sighup_cancels_the_running_chat_turn_and_exits_129() {
    chat_signal_cancels_the_turn(nix::sys::signal::Signal::SIGHUP, 129, "SIGHUP again");
}

/// `signal` while a `foya chat` turn's tool runs: the turn is cancelled cleanly (the
/// log ends with the call's cancelled result and `turn_complete{cancelled}`, the tool's
/// processes are gone) and the chat exits with `code`, having said `hint` on stderr.
fn chat_signal_cancels_the_turn(signal: nix::sys::signal::Signal, code: i32, hint: &str) {
    use std::io::Write as _;
    let dirs = dirs();
    let mark = marker(&format!("chat-{}", signal.as_str()));
    // The tool's shell (argv[0] the marker) writes `ready` into a FIFO, then sleeps as
    // its child (`; :` keeps bash from exec-ing sleep), so the marked process runs once
    // the test has read `ready`.
    let fifo = dirs.root.join("ready.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let command = format!(
        "exec -a {mark} bash -c 'echo ready > {}; sleep 100; :'",
        fifo.display()
    );
    let call = json!({"tool_calls": [{"id": "call_sleep", "name": "shell", "arguments": {"command": command}}]});
    let script = script(&dirs, "s.json", &[call, json!({"text": "never"})]);
    foya_tests::foya_bin(); // built before the clock starts
    let deadline = Instant::now() + TIMEOUT;
    let chat = spawn_chat(&dirs, &script);
    let mut stdin = chat.stdin.unwrap();
    let (ready_tx, ready) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = ready_tx.send(std::fs::read_to_string(fifo).unwrap());
    });
    writeln!(stdin, "wait").unwrap();
    let said = ready
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("the tool started");
    assert_eq!(said, "ready\n");
    let _ = wait_running(&mark, deadline);
    let stderr = signal_and_wait(chat.child, &chat.stderr, signal, code, deadline);
    assert!(
        stderr.contains(&format!("cancelling… ({hint} to quit now)")),
        "{stderr}"
    );
    drop(stdin);

    assert_cancelled_cleanly(&show(&dirs, &only_session(&dirs)), &mark);
}

/// Ctrl-C while `foya run` asks at the terminal whether a call may run (stdin is a
/// pseudo-terminal, `--approval ask`): the turn is cancelled at once — the call is
/// cancelled, not denied on the user's behalf, no further model request starts — and
/// the exit is 130, with nothing typed at the prompt.
#[test]
fn ctrl_c_at_the_approval_prompt_cancels_the_turn_and_exits_130() {
    let dirs = dirs();
    let call = json!({"tool_calls": [{"id": "call_ask", "name": "shell",
        "arguments": {"command": "echo should-not-run"}}]});
    let script = script(&dirs, "s.json", &[call, json!({"text": "never"})]);
    foya_tests::foya_bin(); // built before the clock starts
    let deadline = Instant::now() + TIMEOUT;
    // Only the slave end is the child's stdin; the master is kept open (and never
    // written) so the prompt's read waits.
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut command = scripted("run", "ask", &script, &dirs.data, &dirs.work);
    command.args(["--json", "go"]).stdin(Stdio::from(pty.slave));
    let run = spawn_json_lines(&mut command);
    let seen = read_until(&run.lines, deadline, |l| l["type"] == "approval_requested");
    let stderr = signal_and_wait(
        run.child,
        &run.stderr,
        nix::sys::signal::Signal::SIGINT,
        130,
        deadline,
    );
    drop(pty.master);
    assert!(
        stderr.contains("allow shell"),
        "the prompt was shown: {stderr}"
    );

    let id = seen[0]["session_id"].as_str().unwrap().to_owned();
    let log = show(&dirs, &id);
    let last = log.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"]),
        (&json!("turn_complete"), &json!("cancelled")),
        "{:?}",
        types(&log)
    );
    let denied_by_user = log.iter().any(|e| {
        e["type"] == "approval_decided" && e["message"] == json!("the user denied this call")
    });
    assert!(!denied_by_user, "{log:?}");
    let steps = log.iter().filter(|e| e["type"] == "step_started").count();
    assert_eq!(
        steps,
        1,
        "no model request after the cancel: {:?}",
        types(&log)
    );
    let result = log
        .iter()
        .find(|e| e["type"] == "tool_message")
        .expect("the call has a result");
    assert_eq!(result["is_error"], json!(true), "{result}");
    assert!(
        !result["content"]
            .as_str()
            .unwrap()
            .contains("should-not-run"),
        "{result}"
    );
}

//! `foya run --approval ask` at a real pseudo-terminal (stdin and stderr on its slave
//! end, as in an interactive shell): keys typed before the prompt appears are not taken
//! as its answer, and an input that ends at the prompt (^D) cancels the turn instead of
//! telling the model the user refused. Synchronisation is only by reading the
//! terminal's output and the `--json` lines, under one global timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{read_until, wait_exit};
use foya_tests::foya_bin::scripted;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Global wait for one test's child output.
const TIMEOUT: Duration = Duration::from_secs(120);

/// A `foya run` whose stdin and stderr are a terminal.
struct TtyRun {
    child: Option<Child>,
    /// `--json` lines of stdout.
    lines: mpsc::Receiver<Value>,
    /// What the terminal shows (stderr and the echo of typed keys), in chunks.
    screen: mpsc::Receiver<String>,
    /// Everything shown so far.
    shown: String,
    /// The terminal's master end: writing to it is typing.
    keys: std::fs::File,
    _tmp: tempfile::TempDir,
    data: std::path::PathBuf,
}

impl TtyRun {
    /// Starts `foya run --approval ask --json go` on a script whose first step asks for
    /// a `shell` call (and whose second answers "done"), after typing `typeahead`.
    fn start(typeahead: &[u8]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let script = tmp.path().join("s.json");
        let call = json!({"tool_calls": [{"id": "call_ask", "name": "shell",
            "arguments": {"command": "echo approved-and-ran"}}]});
        let responses = json!({"responses": [call, {"text": "done"}]});
        std::fs::write(&script, responses.to_string()).unwrap();
        foya_tests::foya_bin(); // built before the clock starts
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut keys = std::fs::File::from(pty.master);
        // Typed before foya starts: in the terminal's input queue when it asks.
        keys.write_all(typeahead).unwrap();
        let slave: OwnedFd = pty.slave;
        let mut child = scripted("run", "ask", &script, &data, &work)
            .args(["--json", "go"])
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                    break;
                }
            }
        });
        let mut reader = keys.try_clone().unwrap();
        let (tx, screen) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once no process has the slave end open.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
                {
                    break;
                }
            }
        });
        Self {
            child: Some(child),
            lines,
            screen,
            shown: String::new(),
            keys,
            _tmp: tmp,
            data,
        }
    }

    /// Waits until the terminal has shown `text` (after what was waited for before).
    fn wait_shown(&mut self, text: &str, deadline: Instant) {
        let from = self.shown.len();
        while !self.shown[from..].contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.screen.recv_timeout(left) {
                Ok(chunk) => self.shown.push_str(&chunk),
                Err(e) => panic!("the terminal never showed {text:?} ({e}): {}", self.shown),
            }
        }
    }

    /// Waits for foya's exit.
    fn exit(&mut self, deadline: Instant) -> std::process::ExitStatus {
        wait_exit(self.child.take().expect("not waited for yet"), deadline)
    }

    /// The session's persisted events.
    fn log(&self, id: &str) -> Vec<Value> {
        let out = foya_tests::foya_bin::foya()
            .args(["sessions", "show", id, "--json", "--data-dir"])
            .arg(&self.data)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

#[test]
fn keys_typed_before_the_prompt_are_not_its_answer() {
    let deadline = Instant::now() + TIMEOUT;
    let mut run = TtyRun::start(b"y\n");
    run.wait_shown("allow shell", deadline);
    run.keys.write_all(b"not now\n").unwrap();
    let seen = read_until(&run.lines, deadline, |l| l["type"] == "turn_complete");
    let status = run.exit(deadline);
    assert_eq!(status.code(), Some(0), "{}", run.shown);
    let decided: Vec<(&Value, &Value)> = seen
        .iter()
        .filter(|l| l["type"] == "approval_decided")
        .map(|l| (&l["decision"], &l["message"]))
        .collect();
    assert_eq!(decided, [(&json!("deny"), &json!("not now"))]);
    let ran = seen.iter().any(|l| {
        l["type"] == "tool_message" && l["content"].as_str().unwrap().contains("approved-and-ran")
    });
    assert!(!ran, "{seen:#?}");
}

#[test]
fn end_of_input_at_the_prompt_cancels_the_turn_rather_than_denying_the_call() {
    let deadline = Instant::now() + TIMEOUT;
    let mut run = TtyRun::start(b"");
    run.wait_shown("allow shell", deadline);
    run.keys.write_all(&[0x04]).unwrap(); // ^D on an empty line: end of input
    let seen = read_until(&run.lines, deadline, |l| l["type"] == "turn_complete");
    let status = run.exit(deadline);
    run.wait_shown("no answer", deadline);
    assert_eq!(status.code(), Some(130), "{}", run.shown);
    let id = seen[0]["session_id"].as_str().unwrap().to_owned();
    let log = run.log(&id);
    let last = log.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"]),
        (&json!("turn_complete"), &json!("cancelled"))
    );
    let denied_by_user = log.iter().any(|e| {
        e["type"] == "approval_decided" && e["message"] == json!("the user denied this call")
    });
    assert!(!denied_by_user, "{log:#?}");
    let steps = log.iter().filter(|e| e["type"] == "step_started").count();
    assert_eq!(steps, 1, "no model request after the input ended");
}

//! The `foya` binary as a child process of a test: spawned with stdout and stderr piped,
//! its stdout read line by line on a thread (as text, or as JSON lines) and its stderr
//! collected whole, so that a test waits on the lines it expects under one deadline;
//! and `foya sessions list` on a data dir that a running process holds (the lock
//! refusal, and the message naming that process).

use serde_json::Value;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Instant;

/// A spawned child and its piped stdio.
#[derive(Debug)]
pub struct Piped<T> {
    /// The process.
    pub child: Child,
    /// Its stdin when the command asked for a pipe (`Stdio::piped()`); dropping it
    /// closes the child's stdin.
    pub stdin: Option<ChildStdin>,
    /// Its stdout, one item per line, in order; disconnected once stdout closed.
    pub lines: mpsc::Receiver<T>,
    /// Its whole stderr, sent once stderr closed (usually at exit).
    pub stderr: mpsc::Receiver<String>,
}

/// Spawns `command` with stdout and stderr piped (stdin as the command set it); each
/// stdout line arrives on [`Piped::lines`] as text.
///
/// # Panics
/// When the command cannot be spawned.
pub fn spawn_lines(command: &mut Command) -> Piped<String> {
    spawn(command, str::to_owned)
}

/// [`spawn_lines`] for a child printing JSON lines (`--json`): each line arrives parsed.
/// A line that is not JSON ends the stream (its reader thread panics, naming it).
///
/// # Panics
/// When the command cannot be spawned.
pub fn spawn_json_lines(command: &mut Command) -> Piped<Value> {
    spawn(command, |line| {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
    })
}

fn spawn<T: Send + 'static>(command: &mut Command, parse: fn(&str) -> T) -> Piped<T> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {command:?}: {e}"));
    let (stdout, mut stderr) = match (child.stdout.take(), child.stderr.take()) {
        (Some(stdout), Some(stderr)) => (stdout, stderr),
        _ => panic!("stdout and stderr are piped"),
    };
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(parse(&line)).is_err() {
                break;
            }
        }
    });
    let (etx, err) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = etx.send(text);
    });
    Piped {
        stdin: child.stdin.take(),
        child,
        lines,
        stderr: err,
    }
}

/// Spawns `command` with stdout discarded and stderr read line by line on a thread: for
/// a child that reports its progress on stderr (`foya loadtest`). The receiver
/// disconnects once stderr closed.
///
/// # Panics
/// When the command cannot be spawned.
pub fn spawn_stderr_lines(command: &mut Command) -> (Child, mpsc::Receiver<String>) {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {command:?}: {e}"));
    let Some(stderr) = child.stderr.take() else {
        panic!("stderr is piped")
    };
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// Receives lines until one satisfies `until`; returns every line read, that one last.
///
/// # Panics
/// When `deadline` passes or stdout ends first (naming the lines seen).
pub fn read_until<T: std::fmt::Debug>(
    lines: &mpsc::Receiver<T>,
    deadline: Instant,
    until: impl Fn(&T) -> bool,
) -> Vec<T> {
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no matching line ({e}); saw {seen:#?}"));
        let done = until(&line);
        seen.push(line);
        if done {
            return seen;
        }
    }
}

/// Waits for the child's exit within the deadline (the wait runs on a thread).
///
/// # Panics
/// When the deadline passes first.
pub fn wait_exit(child: Child, deadline: Instant) -> ExitStatus {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut child = child;
        if let Ok(status) = child.wait() {
            let _ = tx.send(status);
        }
    });
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .unwrap_or_else(|e| panic!("foya did not exit ({e})"))
}

/// Runs `foya sessions list --data-dir DATA` (without `FOYA_DATA_DIR`); returns its exit
/// code, stdout and stderr. For a data dir held by a running process: see
/// [`data_dir_in_use`].
///
/// # Panics
/// When the binary cannot be run.
pub async fn sessions_list(data: &Path) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(crate::foya_bin())
        .args(["sessions", "list", "--data-dir"])
        .arg(data)
        .env_remove("FOYA_DATA_DIR")
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run foya sessions list: {e}"));
    outcome(&out)
}

/// A finished process's exit code, stdout and stderr (as text, invalid UTF-8 replaced).
#[must_use]
pub fn outcome(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What `foya sessions list` says (stderr, exit 1) about data dir `data` held by
/// `holder` (e.g. `foya node (pid 12, listening on 127.0.0.1:4370)`): ask that `process`
/// (`node`, `server`) instead, `how`.
#[must_use]
pub fn data_dir_in_use(data: &Path, holder: &str, process: &str, how: &str) -> String {
    format!(
        "foya: the data dir {} is in use by {holder}: its store is locked while that \
         process runs. Stop it or use another --data-dir (one process uses a data dir at a \
         time); to see its sessions meanwhile, ask the {process} instead: {how}\n",
        data.display()
    )
}

/// `command` (its program, arguments, environment and working directory; not its stdio)
/// run by `wrapper`: a program and its first arguments (`setsid --ctty`, `setpriv …
/// --`).
///
/// # Panics
/// When `wrapper` is empty.
#[must_use]
pub fn wrapped(command: &Command, wrapper: &[&str]) -> Command {
    let (program, args) = wrapper.split_first().expect("a wrapper program");
    let mut wrapped = Command::new(program);
    wrapped
        .args(args)
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// Whether the tests (and so the runtimes and helpers they start) run as root (CI does).
#[must_use]
pub fn runs_as_root() -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc/self")) == 0
}

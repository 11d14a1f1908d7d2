//! A tool call's processes end with it: a SIGKILLed `foya` takes its running tool's
//! processes with it (the sandbox helper leads the tool's process group and kills it on
//! `PR_SET_PDEATHSIG`), a cancelled call's processes are killed, and a finished call
//! leaves nothing running. That includes a process that left the tool's process group
//! with `setsid` and was orphaned: the helper is a child subreaper, so it stays in the
//! helper's process tree, which is killed as well. Checked for the unsandboxed path
//! (`--approval bypass`, policy `none`) and the Landlock path (`--approval auto`, policy
//! `workspace-write`).
//!
//! Synchronisation: the child's output lines (the call started), then the processes
//! themselves in `/proc` (an external OS condition, polled under one global deadline).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{Piped, read_until, spawn_json_lines};
use foya_tests::foya_bin::scripted;
use foya_tests::procs::{marked, wait_exited};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Global wait for one test.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Pause between two looks at `/proc` while waiting for processes to appear or vanish.
const POLL: Duration = Duration::from_millis(20);

/// Kills `processes` so a failed test leaves nothing behind for the others.
fn kill_all(processes: &[(i32, String)]) {
    for (pid, _) in processes {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Polls `marked(marker)` until `done` holds for it, or panics at `deadline`. Used only
/// to see the tool's processes start: an `exec` has no event to wait on (the renamed
/// processes cannot report themselves), while their exit does (`wait_exited`).
fn wait_for_processes(
    marker: &str,
    deadline: Instant,
    what: &str,
    done: impl Fn(&[(i32, String)]) -> bool,
) {
    loop {
        let now = marked(marker);
        if done(&now) {
            return;
        }
        if Instant::now() > deadline {
            kill_all(&now);
            panic!("timed out waiting for {what}; marked processes: {now:?}");
        }
        std::thread::sleep(POLL);
    }
}

/// A `python3` one-liner that leaves the process group and session (`setsid`), writes
/// its pid to `pid_file` when given, and becomes `sleep` named `name`.
fn setsid_sleep(name: &str, seconds: u32, pid_file: Option<&std::path::Path>) -> String {
    let write = pid_file.map_or(String::new(), |f| {
        format!(
            "open({:?}, \"w\").write(str(os.getpid())); ",
            f.display().to_string()
        )
    });
    format!(
        "python3 -c 'import os; os.setsid(); {write}os.execvp(\"sleep\", [\"{name}\", \"{seconds}\"])'"
    )
}

/// How the test ends the running `foya run`.
#[derive(Debug, Clone, Copy)]
enum End {
    /// SIGKILL: no destructor, no `kill_on_drop` runs; the helper's parent-death signal.
    Kill,
    /// SIGINT: the turn is cancelled; the shell tool kills the call's processes.
    Interrupt,
}

/// Starts `foya run --json` (scripted, `approval`) whose model calls `shell` with
/// `command` once, then answers `then`; data, working directory and `TMPDIR` (where the
/// sandbox makes the call's private temp dir) under `tmp`.
fn run_shell(tmp: &std::path::Path, approval: &str, command: &str, then: &str) -> Piped<Value> {
    let (data, work) = (tmp.join("data"), tmp.join("work"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(tmp.join("tmp")).unwrap();
    let script = tmp.join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
        {"text": then}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    spawn_json_lines(
        scripted("run", approval, &script, &data, &work)
            .env("TMPDIR", tmp.join("tmp"))
            .args(["--json", "start"]),
    )
}

fn tool_processes_die_with_foya(approval: &str, end: End) {
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("foya-orphan-{}-{approval}-{end:?}", std::process::id());
    // A background child in the group, an orphan that left the group (its subshell
    // exits at once), and a foreground child, all renamed so /proc shows the marker.
    let orphan = setsid_sleep(&format!("{marker}-sid"), 302, None);
    let command =
        format!("(exec -a {marker}-bg sleep 300) & ({orphan} &) ; exec -a {marker}-fg sleep 301");
    let Piped {
        mut child, lines, ..
    } = run_shell(tmp.path(), approval, &command, "never reached");
    let deadline = Instant::now() + TIMEOUT;
    read_until(&lines, deadline, |line| line["type"] == "tool_started");
    let names = ["bg", "sid", "fg"].map(|n| format!("{marker}-{n}"));
    wait_for_processes(&marker, deadline, "the three sleeps to start", |now| {
        names
            .iter()
            .all(|name| now.iter().any(|(_, argv0)| argv0 == name))
    });

    let pids: Vec<i32> = marked(&marker).into_iter().map(|(pid, _)| pid).collect();

    match end {
        End::Kill => child.kill().unwrap(),
        End::Interrupt => {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        }
    }
    child.wait().unwrap();

    if !wait_exited(&pids, deadline) {
        let left = marked(&marker);
        kill_all(&left);
        panic!("timed out waiting for the tool's processes to die: {left:?}");
    }
    assert_eq!(marked(&marker), Vec::new());
    // The sandbox helper (among the marked processes) removed the call's private temp
    // dir before it died, also when foya was SIGKILLed.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, Vec::<std::ffi::OsString>::new());
}

#[test]
fn unsandboxed_tool_processes_die_with_a_sigkilled_runtime() {
    tool_processes_die_with_foya("bypass", End::Kill);
}

#[test]
fn sandboxed_tool_processes_die_with_a_sigkilled_runtime() {
    tool_processes_die_with_foya("auto", End::Kill);
}

#[test]
fn a_cancelled_tool_call_kills_the_processes_that_left_its_group() {
    tool_processes_die_with_foya("bypass", End::Interrupt);
}

#[test]
fn a_finished_tool_call_leaves_no_process_running_even_outside_its_group() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("foya-orphan-{}-finished", std::process::id());
    let pid_file = tmp.path().join("sid.pid");
    // The command returns once the orphan has written its pid (it is running then).
    let orphan = setsid_sleep(&format!("{marker}-sid"), 304, Some(&pid_file));
    let wait = format!("until [ -s {} ]; do sleep 0.01; done", pid_file.display());
    let command = format!("({orphan} &) ; {wait}; echo started");
    let Piped {
        mut child, lines, ..
    } = run_shell(tmp.path(), "bypass", &command, "done");
    let deadline = Instant::now() + TIMEOUT;
    let finished = read_until(&lines, deadline, |line| line["type"] == "tool_message")
        .pop()
        .unwrap();
    assert_eq!(finished["content"], "started\n[exit code: 0]", "{finished}");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let exited = wait_exited(&[pid], deadline);
    let left = marked(&marker);
    kill_all(&left);
    assert!(exited, "the orphan outlived its tool call: {left:?}");
    assert!(child.wait().unwrap().success());
}

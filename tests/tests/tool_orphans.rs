//! A SIGKILLed `foya` takes its running tool's processes with it: the shell tool's
//! command, and the command's own children, die with the runtime (the sandbox helper
//! leads the tool's process group and kills it on `PR_SET_PDEATHSIG`). Checked for the
//! unsandboxed path (`--approval bypass`, policy `none`) and the Landlock path
//! (`--approval auto`, policy `workspace-write`).
//!
//! Synchronisation: the child's output lines (the call started), then the processes
//! themselves in `/proc` (an external OS condition, polled under one global deadline).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{Piped, read_until, spawn_json_lines};
use foya_tests::foya_bin::scripted;
use foya_tests::procs::{marked, wait_exited};
use serde_json::json;
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

fn tool_processes_die_with_foya(approval: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let marker = format!("foya-orphan-{}-{approval}", std::process::id());
    // A background child and a foreground one, both renamed so /proc shows the marker.
    let command = format!("(exec -a {marker}-bg sleep 300) & exec -a {marker}-fg sleep 301");
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
        {"text": "never reached"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let Piped {
        mut child, lines, ..
    } = spawn_json_lines(
        scripted("run", approval, &script, &data, &work).args(["--json", "start"]),
    );
    let deadline = Instant::now() + TIMEOUT;
    read_until(&lines, deadline, |line| line["type"] == "tool_started");
    let (bg, fg) = (format!("{marker}-bg"), format!("{marker}-fg"));
    wait_for_processes(&marker, deadline, "both sleeps to start", |now| {
        [&bg, &fg]
            .iter()
            .all(|name| now.iter().any(|(_, argv0)| argv0 == *name))
    });

    let pids: Vec<i32> = marked(&marker).into_iter().map(|(pid, _)| pid).collect();

    child.kill().unwrap(); // SIGKILL: no destructor, no kill_on_drop runs
    child.wait().unwrap();

    if !wait_exited(&pids, deadline) {
        let left = marked(&marker);
        kill_all(&left);
        panic!("timed out waiting for the tool's processes to die: {left:?}");
    }
    assert_eq!(marked(&marker), Vec::new());
}

#[test]
fn unsandboxed_tool_processes_die_with_a_sigkilled_runtime() {
    tool_processes_die_with_foya("bypass");
}

#[test]
fn sandboxed_tool_processes_die_with_a_sigkilled_runtime() {
    tool_processes_die_with_foya("auto");
}

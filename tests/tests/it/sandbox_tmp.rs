//! A sandboxed shell call's private temp dir (`$TMPDIR/foya-sandbox-XXXXXX`, the
//! command's `TMPDIR`) is removed however the call ends: it finished (with a file left in
//! it), it timed out, it was cancelled by Ctrl-C, or `foya` itself was SIGKILLed while it
//! ran (then the sandbox helper, which outlives the runtime to kill the command's
//! processes, removes it). Each `foya run` gets a fresh `TMPDIR` that must be empty at the
//! end.
//!
//! Synchronisation: the child's JSON lines (the command's first output), its exit, and
//! for the SIGKILL case the exit of the helper and the command (`/proc`, under one
//! deadline).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{Piped, read_until, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::scripted;
use foya_tests::procs::{marked, parent_of, wait_exited, wait_running};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Global wait for one test.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A `foya run --json --approval auto` (sandboxed: `workspace-write`) whose model calls
/// `shell` with `arguments` once, then answers `done`; `TMPDIR` is `<tmp>/tmp`.
fn run_shell(tmp: &Path, arguments: &Value) -> (Piped<Value>, PathBuf) {
    let (data, work, tmpdir) = (tmp.join("data"), tmp.join("work"), tmp.join("tmp"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&tmpdir).unwrap();
    let script = tmp.join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": arguments}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let piped = spawn_json_lines(
        scripted("run", "auto", &script, &data, &work)
            .env("TMPDIR", &tmpdir)
            .args(["--json", "start"]),
    );
    (piped, tmpdir)
}

/// The names of the entries of `dir`.
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The private temp dir the command printed first (`echo $TMPDIR`): a `foya-sandbox-`
/// dir directly in `tmpdir`.
fn private_dir(
    lines: &std::sync::mpsc::Receiver<Value>,
    deadline: Instant,
    tmpdir: &Path,
) -> PathBuf {
    let seen = read_until(lines, deadline, |l| l["type"] == "tool_output");
    let chunk = seen.last().unwrap()["chunk"].as_str().unwrap().to_owned();
    let printed = PathBuf::from(chunk.lines().next().unwrap());
    assert_eq!(printed.parent(), Some(tmpdir), "{chunk}");
    let name = printed.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("foya-sandbox-"), "{chunk}");
    printed
}

#[test]
fn a_finished_call_removes_its_temp_dir_and_what_it_wrote_there() {
    let tmp = tempfile::tempdir().unwrap();
    let command = "echo $TMPDIR; echo kept > $TMPDIR/scratch; cat $TMPDIR/scratch";
    let (Piped { child, lines, .. }, tmpdir) =
        run_shell(tmp.path(), &json!({ "command": command }));
    let deadline = Instant::now() + TIMEOUT;
    let private = private_dir(&lines, deadline, &tmpdir);
    let result = read_until(&lines, deadline, |l| l["type"] == "tool_message")
        .pop()
        .unwrap();
    assert_eq!(
        (&result["content"], &result["is_error"]),
        (
            &json!(format!("{}\nkept\n[exit code: 0]", private.display())),
            &json!(false)
        )
    );
    assert_eq!(wait_exit(child, deadline).code(), Some(0));
    assert_eq!(entries(&tmpdir), Vec::<String>::new());
}

#[test]
fn a_timed_out_call_removes_its_temp_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let arguments = json!({"command": "echo $TMPDIR; sleep 300", "timeout_ms": 500});
    let (Piped { child, lines, .. }, tmpdir) = run_shell(tmp.path(), &arguments);
    let deadline = Instant::now() + TIMEOUT;
    let private = private_dir(&lines, deadline, &tmpdir);
    let result = read_until(&lines, deadline, |l| l["type"] == "tool_message")
        .pop()
        .unwrap();
    assert_eq!(
        (&result["content"], &result["is_error"]),
        (
            &json!(format!(
                "{}\n[timed out after 500 ms; the command's process group was killed]",
                private.display()
            )),
            &json!(true)
        )
    );
    assert_eq!(wait_exit(child, deadline).code(), Some(0));
    assert_eq!(entries(&tmpdir), Vec::<String>::new());
}

#[test]
fn a_cancelled_call_removes_its_temp_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let arguments = json!({"command": "echo $TMPDIR; sleep 300"});
    let (Piped { child, lines, .. }, tmpdir) = run_shell(tmp.path(), &arguments);
    let deadline = Instant::now() + TIMEOUT;
    private_dir(&lines, deadline, &tmpdir);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(wait_exit(child, deadline).code(), Some(130));
    assert_eq!(entries(&tmpdir), Vec::<String>::new());
}

#[test]
fn a_sigkilled_runtime_leaves_no_temp_dir_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = format!("foya-sandbox-tmp-{}", std::process::id());
    let command = format!("echo $TMPDIR; touch $TMPDIR/scratch; exec -a {marker} sleep 300");
    let (
        Piped {
            mut child, lines, ..
        },
        tmpdir,
    ) = run_shell(tmp.path(), &json!({ "command": command }));
    let deadline = Instant::now() + TIMEOUT;
    private_dir(&lines, deadline, &tmpdir);
    // The command, once the shell has become it (`exec -a`), and its parent: the call's
    // helper, which removes the temporary directory before it exits.
    let mut pids = wait_running(&marker, deadline);
    let helpers: Vec<i32> = pids.iter().filter_map(|&pid| parent_of(pid)).collect();
    pids.extend(helpers);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_exited(&pids, deadline),
        "the helper and the command outlived foya: {:?}",
        marked(&marker)
    );
    assert_eq!(entries(&tmpdir), Vec::<String>::new());
}

//! Which sandbox helper `foya` starts for an exec tool call: the small `foya-sandbox`
//! binary when it sits next to `foya` (as `cargo build` and an install leave them; the
//! test kit builds both into the same `target/<profile>/`), else `FOYA_SANDBOX_HELPER`
//! when set — here `foya` itself, the fallback of a `foya` without its helper beside it.
//!
//! The proof is the process tree, not a timing: the command prints the name of its
//! parent (`/proc/$PPID/comm`), which is the helper that runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::child::{Piped, read_until, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::{foya_bin, scripted};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// Global wait for one test.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The result of one sandboxed (`--approval auto`: `workspace-write`) `shell` call
/// printing the name of its parent process, with `helper` as `FOYA_SANDBOX_HELPER`.
fn parent_of_the_command(tmp: &Path, helper: Option<&Path>) -> Value {
    let (data, work) = (tmp.join("data"), tmp.join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let script = tmp.join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell",
            "arguments": {"command": "cat /proc/$PPID/comm"}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let mut command = scripted("run", "auto", &script, &data, &work);
    command.env_remove("FOYA_SANDBOX_HELPER");
    if let Some(helper) = helper {
        command.env("FOYA_SANDBOX_HELPER", helper);
    }
    let Piped { child, lines, .. } = spawn_json_lines(command.args(["--json", "start"]));
    let deadline = Instant::now() + TIMEOUT;
    let result = read_until(&lines, deadline, |l| l["type"] == "tool_message")
        .pop()
        .unwrap();
    assert_eq!(wait_exit(child, deadline).code(), Some(0));
    result["content"].clone()
}

#[test]
fn foya_starts_the_small_helper_next_to_it() {
    let bin = foya_bin();
    assert!(bin.with_file_name("foya-sandbox").is_file());
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        parent_of_the_command(tmp.path(), None),
        json!("foya-sandbox\n[exit code: 0]")
    );
}

#[test]
fn the_environment_variable_still_selects_the_helper() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        parent_of_the_command(tmp.path(), Some(&foya_bin())),
        json!("foya\n[exit code: 0]")
    );
}

/// The persistent helper (`foya-sandbox __sandbox-server`, the parent of each call's
/// helper) ends with a SIGKILLed `foya` (its socket's end of file), and the call's helper
/// and command with it (the helper's parent-death signal, now from the server).
#[test]
fn the_persistent_helper_and_its_calls_die_with_a_sigkilled_foya() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let pids = tmp.path().join("pids");
    let script = tmp.path().join("script.json");
    // The server's, the call helper's and the shell's pid, then a long sleep.
    let command = format!(
        "read -r _ _ _ gp _ < /proc/$PPID/stat; echo \"$gp $PPID $$\" > {0}.new; \
         mv {0}.new {0}; sleep 300",
        pids.display()
    );
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
        {"text": "never reached"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    // `bypass`: the pid file lies outside the working directory.
    let mut command = scripted("run", "bypass", &script, &data, &work);
    command.env_remove("FOYA_SANDBOX_HELPER");
    let Piped {
        mut child, lines, ..
    } = spawn_json_lines(command.args(["--json", "start"]));
    let deadline = Instant::now() + TIMEOUT;
    read_until(&lines, deadline, |l| l["type"] == "tool_started");
    // The command writes the file once it runs (no event tells it).
    let written = loop {
        if let Ok(text) = std::fs::read_to_string(&pids) {
            break text;
        }
        assert!(Instant::now() < deadline, "the command did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pids: Vec<i32> = written
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", pids[0])).unwrap();
    assert!(
        cmdline.starts_with(&format!(
            "{}\0__sandbox-server\0",
            foya_bin().with_file_name("foya-sandbox").display()
        )),
        "{cmdline:?}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        foya_tests::procs::wait_exited(&pids, deadline),
        "left running: {pids:?}"
    );
}

/// Prints the pid of the persistent helper that forked the call's helper (the
/// command's grandparent).
const SERVER_PID: &str = "read -r _ _ _ gp _ < /proc/$PPID/stat; echo server=$gp";

/// The pid after `server=` in `text` (the command's output, not its text).
fn server_pid(text: &str) -> i32 {
    text.split("server=")
        .skip(1)
        .find_map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no server=PID in {text}"))
}

/// Whether `pid` is a persistent helper (`… __sandbox-server …`) now.
fn is_server(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__sandbox-server"))
}

/// `foya run` that ends normally leaves no persistent helper behind.
#[test]
fn the_persistent_helper_ends_when_foya_run_exits() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": SERVER_PID}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let mut command = scripted("run", "auto", &script, &data, &work);
    command.env_remove("FOYA_SANDBOX_HELPER");
    let Piped { child, lines, .. } = spawn_json_lines(command.args(["--json", "start"]));
    let deadline = Instant::now() + TIMEOUT;
    let result = read_until(&lines, deadline, |l| l["type"] == "tool_message")
        .pop()
        .unwrap();
    let server = server_pid(result["content"].as_str().unwrap());
    assert!(is_server(server), "{result}");
    assert_eq!(wait_exit(child, deadline).code(), Some(0));
    assert!(
        foya_tests::procs::wait_exited(&[server], deadline),
        "the persistent helper {server} outlived foya run"
    );
}

/// The persistent helper of `foya serve` ends with it, whether it is stopped (SIGTERM:
/// the runtime shuts down) or killed (SIGKILL: the helper's socket's end of file).
#[tokio::test]
async fn the_persistent_helper_ends_with_foya_serve_stopped_or_killed() {
    use foya_tests::serve::Serve;
    for signal in ["-TERM", "-KILL"] {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let script = tmp.path().join("script.json");
        let responses = json!({"responses": [
            {"tool_calls": [{"id": "c1", "name": "shell",
                "arguments": {"command": SERVER_PID}}]},
            {"text": "done"}
        ]});
        std::fs::write(&script, responses.to_string()).unwrap();
        let mut serve = Serve::start(
            tmp.path(),
            "helper-token",
            &["--provider", "scripted"],
            |c| {
                c.arg("--script")
                    .arg(&script)
                    .env("HOME", foya_tests::foya_bin::test_home())
                    .env_remove("FOYA_SANDBOX_HELPER");
            },
        )
        .await;
        let id = serve
            .create_session(&json!({"cwd": work, "approval_mode": "auto"}))
            .await;
        let (_, raw) = serve
            .turn_with_approver(&id, "go", TIMEOUT, |_| "allow_once")
            .await;
        let server = server_pid(&raw);
        assert!(is_server(server), "{raw}");
        let pid = serve.id().unwrap().to_string();
        let sent = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = tokio::time::timeout(TIMEOUT, serve.wait()).await.unwrap();
        let deadline = Instant::now() + TIMEOUT;
        let exited = tokio::task::spawn_blocking(move || {
            foya_tests::procs::wait_exited(&[server], deadline)
        })
        .await
        .unwrap();
        assert!(
            exited,
            "the persistent helper {server} outlived foya serve ({signal}: {status})"
        );
    }
}

/// The persistent helper SIGKILLed during a call (no `foya` dies): the call fails with a
/// clear error, and none of its processes outlives it — its helper, its shell, a child
/// left in the background and one that escaped the group and the session with
/// `setsid -f` (orphaned, then re-parented to the call's helper, its subreaper) — and the
/// next call runs in a new persistent helper. Under `bypass` (policy `none`) and `auto`
/// (`workspace-write`: the call's helper in its own namespaces).
#[test]
fn a_sigkilled_persistent_helper_takes_all_of_its_call_with_it_and_the_next_call_runs() {
    for approval in ["bypass", "auto"] {
        let tmp = tempfile::tempdir().unwrap();
        let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
        std::fs::create_dir_all(work.join("out")).unwrap();
        let script = tmp.path().join("script.json");
        // Each pid file is written whole (`mv`): the escapee's, the background child's,
        // then the server's, the call helper's and the shell's; then a long sleep.
        // (In a folder of the working directory: without namespaces, Landlock alone
        // keeps its top level closed under `auto`.)
        let command = "cd out; \
             setsid -f sh -c 'echo $$ > e.new; mv e.new escaped; exec sleep 1000'; \
             sleep 1000 & echo $! > b.new; mv b.new background; \
             read -r _ _ _ gp _ < /proc/$PPID/stat; echo \"$gp $PPID $$\" > p.new; \
             mv p.new pids; sleep 1000";
        let responses = json!({"responses": [
            {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
            {"tool_calls": [{"id": "c2", "name": "shell",
                "arguments": {"command": SERVER_PID}}]},
            {"text": "done"}
        ]});
        std::fs::write(&script, responses.to_string()).unwrap();
        let mut command = scripted("run", approval, &script, &data, &work);
        command.env_remove("FOYA_SANDBOX_HELPER");
        let Piped { child, lines, .. } = spawn_json_lines(command.args(["--json", "start"]));
        let deadline = Instant::now() + TIMEOUT;
        read_until(&lines, deadline, |l| l["type"] == "tool_started");
        // The command writes the files once it runs (no event tells it).
        let read_pids = |name: &str| -> Option<Vec<i32>> {
            let text = std::fs::read_to_string(work.join("out").join(name)).ok()?;
            Some(
                text.split_whitespace()
                    .map(|p| p.parse().unwrap())
                    .collect(),
            )
        };
        let (escaped, background, pids) = loop {
            if let (Some(e), Some(b), Some(p)) = (
                read_pids("escaped"),
                read_pids("background"),
                read_pids("pids"),
            ) {
                break (e[0], b[0], p);
            }
            assert!(Instant::now() < deadline, "the command did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (server, call) = (pids[0], [pids[1], pids[2], background, escaped]);
        assert!(
            is_server(server),
            "{approval}: {server} is no persistent helper"
        );
        // The escapee left the shell's session (and group) and is not its child.
        let session = |pid: i32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .unwrap()
                .1
                .split_whitespace()
                .collect();
            fields[3].to_owned()
        };
        assert_ne!(session(escaped), session(pids[2]), "{approval}");
        let killed = std::process::Command::new("kill")
            .args(["-9", &server.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let first = read_until(&lines, deadline, |l| l["type"] == "tool_message")
            .pop()
            .unwrap();
        assert_eq!(first["is_error"], json!(true), "{approval}: {first}");
        assert!(
            first["content"]
                .as_str()
                .unwrap()
                .contains("the sandbox server died during the call"),
            "{approval}: {first}"
        );
        let exited = foya_tests::procs::wait_exited(&call, deadline);
        let left: Vec<i32> = call
            .iter()
            .copied()
            .filter(|&pid| !foya_tests::procs::process_gone(pid))
            .collect();
        for &pid in &left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        assert!(
            exited && left.is_empty(),
            "{approval}: left running after the call ended: {left:?} of (helper, shell, \
             background, escaped) {call:?}"
        );
        // The next call starts another persistent helper and runs.
        let next = read_until(&lines, deadline, |l| l["type"] == "tool_message")
            .pop()
            .unwrap();
        assert_eq!(next["is_error"], json!(false), "{approval}: {next}");
        let again = server_pid(next["content"].as_str().unwrap());
        assert_ne!(again, server, "{approval}");
        assert_eq!(wait_exit(child, deadline).code(), Some(0), "{approval}");
    }
}

//! The persistent sandbox helper (`tools/src/sandbox/server.rs`): `shell` calls run in
//! children forked by one long-lived `foya-sandbox __sandbox-server` per runner; a call
//! leaves nothing behind for the next; a server killed mid-call fails that call with a
//! clear error and the next call starts a new one; a helper that cannot serve falls back
//! to a helper per call; the server ends with its runner.
//!
//! The proof is the process tree: each command prints its helper's parent (`/proc`).

use foya_actors::testkit::procs::process_gone;
use foya_actors::testkit::{
    Recorder, call_tool as call, sandbox_helper, sandbox_runner as runner, tool_context as ctx,
    wait_until,
};
use foya_actors::tools::builtin::Shell;
use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::tools::{SandboxPolicy, Tool};
use foya_protocol::ApprovalMode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const WW: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

/// Prints `server=<pid of the helper's parent>` and `cmdline=<its command line>`.
const SERVER: &str = "read -r _ _ _ gp _ < /proc/$PPID/stat; echo server=$gp; \
                      echo cmdline=$(tr '\\0' ' ' < /proc/$gp/cmdline)";

fn temp_cwd() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

fn value(content: &str, key: &str) -> String {
    content
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {content:?}"))
        .to_owned()
}

fn pid(content: &str, key: &str) -> i32 {
    value(content, key).parse().unwrap()
}

fn sigkill(pid: i32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn calls_run_in_children_of_one_persistent_helper() {
    let (_dir, cwd) = temp_cwd();
    let tool = Shell::new(runner());
    let mut servers = Vec::new();
    for (mode, sandbox) in [
        (ApprovalMode::Auto, WW),
        (ApprovalMode::Auto, SandboxPolicy::ReadOnly),
        (ApprovalMode::Bypass, SandboxPolicy::None),
    ] {
        let out = call(&tool, &ctx(&cwd, mode, sandbox), json!({"command": SERVER})).await;
        assert!(!out.is_error, "{out:?}");
        let cmdline = value(&out.content, "cmdline=");
        assert!(
            cmdline.contains("foya-sandbox __sandbox-server --parent"),
            "{cmdline}"
        );
        servers.push(pid(&out.content, "server="));
    }
    let me = i32::try_from(std::process::id()).unwrap();
    assert_ne!(servers[0], me);
    assert_eq!(servers, vec![servers[0]; 3]);
}

#[tokio::test]
async fn a_call_leaves_nothing_behind_for_the_next() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    // What a call sees: its directory, umask, environment, signal state, descriptors.
    let look = "pwd; umask; echo leak=${LEAK-unset}; grep -E '^(SigBlk|SigIgn|SigCgt)' \
                /proc/self/status; ls /proc/self/fd | wc -l";
    let fresh = call(&Shell::new(runner()), &ctx, json!({"command": look})).await;
    assert!(!fresh.is_error, "{fresh:?}");
    assert!(fresh.content.starts_with(&format!("{}\n", cwd.display())));

    let tool = Shell::new(runner());
    // A call that changes all it can and leaves a process running, also outside its group.
    let dirty = "cd /; umask 077; export LEAK=1; trap '' INT TERM; exec 7>/dev/null; \
                 sleep 30 & echo child=$!; setsid sleep 30 & echo setsid=$!";
    let out = call(&tool, &ctx, json!({"command": dirty})).await;
    assert!(!out.is_error, "{out:?}");
    let (child, setsid) = (pid(&out.content, "child="), pid(&out.content, "setsid="));
    wait_until("the first call's processes to be gone", || {
        process_gone(child) && process_gone(setsid)
    })
    .await;
    assert_eq!(call(&tool, &ctx, json!({"command": look})).await, fresh);
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_the_call_and_the_next_call_starts_another() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let (tool, recorder) = (Shell::new(runner()), Recorder::default());
    // A child in the background, and one that left the group and the session (orphaned
    // at once: `setsid -f` forks and exits; the call's helper is its subreaper), which
    // would outlive the wait below.
    let command = format!(
        "{SERVER}; setsid -f sh -c 'echo escaped=$$; exec sleep 120'; sleep 30 & \
         echo child=$!; echo shell=$$; wait"
    );
    let (out, (server, shell, child, escaped)) = tokio::join!(
        tool.call(
            &ctx,
            json!({"command": command}),
            CancellationToken::new(),
            &recorder
        ),
        async {
            wait_until("the pids", || {
                let printed = recorder.output.lock().unwrap();
                printed.contains("shell=") && printed.contains("escaped=")
            })
            .await;
            let printed = recorder.output.lock().unwrap().clone();
            let pids = (
                pid(&printed, "server="),
                pid(&printed, "shell="),
                pid(&printed, "child="),
                pid(&printed, "escaped="),
            );
            // (Without a server the helper's parent would be this test process.)
            assert_ne!(pids.0, i32::try_from(std::process::id()).unwrap());
            // Sent from here, not by a `kill` waited for: the call then sees the server's
            // end as soon as the kernel shows it, as `foya` does.
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pids.0),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            pids
        }
    );
    assert!(out.is_error, "{out:?}");
    assert!(
        out.content.ends_with(
            "[could not wait for the command: the sandbox server died during the call, \
             and the command with it; it is started again for the next call]"
        ),
        "{}",
        out.content
    );
    // Gone when the call has ended (SIGKILL was sent; its delivery is waited for).
    wait_until("the command's processes to be gone", || {
        process_gone(shell) && process_gone(child) && process_gone(escaped)
    })
    .await;
    let next = call(&tool, &ctx, json!({"command": SERVER})).await;
    assert!(!next.is_error, "{next:?}");
    let again = pid(&next.content, "server=");
    assert_ne!(again, server);
    assert!(process_gone(server));
}

/// A server killed mid-call while the call's helper is stopped (`SIGSTOP`): the helper's
/// group is orphaned then, so the kernel sends it `SIGHUP` and `SIGCONT`, and it kills its
/// tree, what left the group included, before the call ends.
#[tokio::test]
async fn a_stopped_helper_of_a_killed_server_still_kills_its_tree() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let (tool, recorder) = (Shell::new(runner()), Recorder::default());
    let command = format!(
        "{SERVER}; setsid -f sh -c 'echo escaped=$$; exec sleep 120'; echo helper=$PPID; \
         echo shell=$$; sleep 120"
    );
    let (out, (helper, shell, escaped)) = tokio::join!(
        tool.call(
            &ctx,
            json!({"command": command}),
            CancellationToken::new(),
            &recorder
        ),
        async {
            wait_until("the pids", || {
                let printed = recorder.output.lock().unwrap();
                printed.contains("shell=") && printed.contains("escaped=")
            })
            .await;
            let printed = recorder.output.lock().unwrap().clone();
            let signal = |pid: i32, signal| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
            };
            let helper = pid(&printed, "helper=");
            signal(helper, nix::sys::signal::Signal::SIGSTOP);
            wait_until("the helper to be stopped", || {
                std::fs::read_to_string(format!("/proc/{helper}/stat")).is_ok_and(|stat| {
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, r)| r.starts_with('T'))
                })
            })
            .await;
            signal(pid(&printed, "server="), nix::sys::signal::Signal::SIGKILL);
            (helper, pid(&printed, "shell="), pid(&printed, "escaped="))
        }
    );
    assert!(out.is_error, "{out:?}");
    wait_until("the call's processes to be gone", || {
        process_gone(helper) && process_gone(shell) && process_gone(escaped)
    })
    .await;
}

/// A server killed between two calls: the next call cannot be delivered to it, and is
/// sent to a new one (it runs).
#[tokio::test]
async fn a_server_killed_between_calls_is_replaced_by_the_next_call() {
    let (_dir, cwd) = temp_cwd();
    let ctx = ctx(&cwd, ApprovalMode::Auto, WW);
    let tool = Shell::new(runner());
    let first = call(&tool, &ctx, json!({"command": SERVER})).await;
    assert!(!first.is_error, "{first:?}");
    let server = pid(&first.content, "server=");
    sigkill(server);
    // Reaped by the runner only when it drops it: a zombie counts as gone.
    wait_until("the server to be gone", || process_gone(server)).await;
    let next = call(&tool, &ctx, json!({"command": SERVER})).await;
    assert!(!next.is_error, "{next:?}");
    assert_ne!(pid(&next.content, "server="), server);
}

/// Dropping the runner kills its server, also a stopped one (`SIGSTOP`), and reaps it on
/// a thread of its own (the drop does not wait: it may run on an async worker);
/// `servers_cpu_time` waits for that reap, after which not even a zombie is left.
#[tokio::test]
async fn the_server_ends_with_its_runner() {
    let (_dir, cwd) = temp_cwd();
    for stopped in [false, true] {
        let tool = Shell::new(runner());
        let out = call(
            &tool,
            &ctx(&cwd, ApprovalMode::Auto, WW),
            json!({"command": SERVER}),
        )
        .await;
        let server = pid(&out.content, "server=");
        assert!(!process_gone(server));
        if stopped {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(server),
                nix::sys::signal::Signal::SIGSTOP,
            )
            .unwrap();
            wait_until("the server to be stopped", || {
                std::fs::read_to_string(format!("/proc/{server}/stat")).is_ok_and(|stat| {
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, r)| r.starts_with('T'))
                })
            })
            .await;
        }
        drop(tool);
        foya_actors::tools::sandbox::servers_cpu_time().await;
        assert!(
            !std::path::Path::new(&format!("/proc/{server}")).exists(),
            "the server {server} (stopped: {stopped}) is left after its runner was dropped"
        );
    }
}

/// The commands are children of the server, not of this process, so
/// `getrusage(RUSAGE_CHILDREN)` here misses them while it runs; `servers_cpu_time` holds
/// at least the CPU a command reports for itself (`times`, after a busy loop).
#[tokio::test]
async fn the_servers_cpu_time_holds_what_their_commands_ran() {
    let (_dir, cwd) = temp_cwd();
    let tool = Shell::new(runner());
    let out = call(
        &tool,
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; times"}),
    )
    .await;
    // `times`: `0m0.081s 0m0.004s` for the shell, then its children.
    let reported: f64 = out
        .content
        .lines()
        .take(2)
        .flat_map(str::split_whitespace)
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum();
    assert!(reported > 0.0, "{}", out.content);
    // Every live server of this test binary counts; this call's server is one of them.
    let counted = foya_actors::tools::sandbox::servers_cpu_time()
        .await
        .as_secs_f64();
    assert!(
        counted >= reported,
        "servers_cpu_time {counted} s < the command's own {reported} s"
    );
    drop(tool);
}

#[tokio::test]
async fn a_helper_that_cannot_serve_runs_a_helper_per_call() {
    let (dir, cwd) = temp_cwd();
    // A helper that refuses `__sandbox-server` (an older one, say) and runs the rest.
    let wrapper = dir.path().join("old-helper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ \"$1\" = __sandbox-server ] && exit 2\nexec '{}' \"$@\"\n",
            sandbox_helper().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let tool = Shell::new(SandboxRunner::new(&wrapper));
    let me = i32::try_from(std::process::id()).unwrap();
    for _ in 0..2 {
        let out = call(
            &tool,
            &ctx(&cwd, ApprovalMode::Auto, WW),
            json!({"command": format!("{SERVER}; touch ran")}),
        )
        .await;
        assert!(!out.is_error, "{out:?}");
        // The helper's parent is this process: it was started for the call.
        assert_eq!(pid(&out.content, "server="), me);
    }
    assert!(cwd.join("ran").exists());
    // The shield and Landlock are the same: a protected path stays read-only.
    let denied = call(
        &tool,
        &ctx(&cwd, ApprovalMode::Auto, WW),
        json!({"command": "mkdir .foya"}),
    )
    .await;
    assert!(denied.is_error, "{denied:?}");
    assert_eq!(
        call(
            &Shell::new(runner()),
            &ctx(&cwd, ApprovalMode::Auto, WW),
            json!({"command": "mkdir .foya"})
        )
        .await,
        denied
    );
}

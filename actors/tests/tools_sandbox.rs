//! The sandbox helper binary itself (`foya-sandbox __sandbox-exec ...`): Landlock is
//! applied before exec, and every failure has its own exit code and a `foya-sandbox:`
//! message instead of running the program unconfined.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::tools::sandbox::{EXIT_EXEC_FAILED, EXIT_SANDBOX_USAGE, SANDBOX_EXEC_ARG};
use std::process::{Command, Output};

fn helper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foya-sandbox"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `command` through the helper under the read-only policy, in a fresh directory.
fn read_only(command: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_str().unwrap();
    let mut args = vec![
        SANDBOX_EXEC_ARG,
        "--policy",
        "\"read-only\"",
        "--cwd",
        cwd,
        "--tmp",
        cwd,
        "--",
    ];
    args.extend_from_slice(command);
    helper(&args)
}

fn summary(output: &Output) -> (Option<i32>, String, String) {
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn landlock_is_available_here() {
    // The kernel of this machine offers Landlock ABI 7; the sandbox needs >= 4. A write
    // inside the working directory works; one outside it (here /proc) is denied.
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_str().unwrap();
    let output = helper(&[
        SANDBOX_EXEC_ARG,
        "--policy",
        r#"{"workspace-write":{"network":false}}"#,
        "--cwd",
        cwd,
        "--tmp",
        cwd,
        "--",
        "bash",
        "-c",
        "echo ok > f && cat f && echo no > /proc/self/comm",
    ]);
    assert_eq!(
        summary(&output),
        (
            Some(1),
            "ok\n".to_owned(),
            "bash: line 1: /proc/self/comm: Permission denied\n".to_owned()
        )
    );
}

#[test]
fn malformed_arguments_exit_with_the_usage_code() {
    let output = helper(&[SANDBOX_EXEC_ARG, "--policy", "\"read-only\"", "--", "true"]);
    assert_eq!(
        summary(&output),
        (
            Some(EXIT_SANDBOX_USAGE),
            String::new(),
            "foya-sandbox: missing --cwd\n".to_owned()
        )
    );
    let output = helper(&["not-the-entry"]);
    assert_eq!(
        summary(&output),
        (
            Some(EXIT_SANDBOX_USAGE),
            String::new(),
            "usage: foya-sandbox __sandbox-exec --policy <json> --cwd <dir> --tmp <dir> -- <program> [args...]\n"
                .to_owned()
        )
    );
}

#[test]
fn a_program_that_cannot_be_executed_exits_with_127() {
    let output = read_only(&["no-such-program-x"]);
    assert_eq!(
        summary(&output),
        (
            Some(EXIT_EXEC_FAILED),
            String::new(),
            "foya-sandbox: cannot execute \"no-such-program-x\": No such file or directory (os error 2)\n"
                .to_owned()
        )
    );
}

#[test]
fn the_program_starts_with_no_signal_blocked() {
    // The helper watches SIGHUP and SIGTERM with handlers, not a blocked mask: a mask
    // would be inherited by the program (`std::process::Command` keeps it), which a
    // polite `kill` could then no longer stop.
    let output = read_only(&["grep", "^SigBlk", "/proc/self/status"]);
    assert_eq!(
        summary(&output),
        (
            Some(0),
            "SigBlk:\t0000000000000000\n".to_owned(),
            String::new()
        )
    );
}

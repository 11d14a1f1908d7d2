//! The sandbox helper binary itself (`foya-sandbox __sandbox-exec ...`): Landlock is
//! applied before exec, and every failure has its own exit code and a `foya-sandbox:`
//! message instead of running the program unconfined.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::tools::sandbox::{EXIT_EXEC_FAILED, EXIT_SANDBOX_USAGE, SANDBOX_EXEC_ARG};
use std::process::{Command, Output};

fn helper(args: &[&str]) -> Output {
    Command::new(foya_actors::testkit::sandbox_helper())
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

/// The helper running `sh -c script` under `policy` in `work`, its temp dir `tmp`.
fn sh_command(
    policy: &str,
    work: &std::path::Path,
    tmp: &std::path::Path,
    script: &str,
) -> Command {
    let mut command = Command::new(foya_actors::testkit::sandbox_helper());
    command.args([
        SANDBOX_EXEC_ARG,
        "--policy",
        policy,
        "--cwd",
        work.to_str().unwrap(),
        "--tmp",
        tmp.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        script,
    ]);
    command
}

/// Runs `sh -c script` through the helper under `policy` (see [`sh_command`]).
fn sh_under(policy: &str, work: &std::path::Path, tmp: &std::path::Path, script: &str) -> Output {
    sh_command(policy, work, tmp, script).output().unwrap()
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
    // inside the working directory works; one outside it (here /proc) is denied — by
    // Landlock alone, with the namespaces (and so the read-only mounts) switched off.
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_str().unwrap();
    let output = Command::new(foya_actors::testkit::sandbox_helper())
        .args([
            SANDBOX_EXEC_ARG,
            "--policy",
            r#"{"workspace-and-protected":{"network":false}}"#,
            "--cwd",
            cwd,
            "--tmp",
            cwd,
            "--",
            "bash",
            "-c",
            "echo ok > f && cat f && echo no > /proc/self/comm",
        ])
        .env("FOYA_SANDBOX_NO_NAMESPACES", "1")
        .output()
        .unwrap();
    assert_eq!(
        summary(&output),
        (
            Some(1),
            "ok\n".to_owned(),
            "bash: line 1: /proc/self/comm: Permission denied\n".to_owned()
        )
    );
}

/// Landlock rules a file's contents and a directory's entries, not a file's metadata: a
/// sandboxed command could `chmod`, `chown` or `touch -d` any file its user owns outside
/// its writable roots — run as root (CI), any file (`chmod 666 /etc/shadow` gave the
/// machine away), or the machine's `/dev/null` through the stdin it was given. Everything
/// but those roots is a read-only mount for the command now, under each policy that
/// confines it; inside the roots nothing changed.
#[test]
fn a_sandboxed_command_cannot_change_a_files_mode_owner_or_times_outside_its_roots() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("file");
    std::fs::write(&outside, "x").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    let seen = |m: &std::fs::Metadata| (m.mode(), m.uid(), m.gid(), m.mtime(), m.ctime());
    let before = seen(&std::fs::metadata(&outside).unwrap());
    let o = outside.display();
    let script = format!(
        "chmod 666 '{o}'; chown 65534 '{o}'; touch -d 2001-01-01 '{o}'; chmod 666 /proc/self/fd/0; \
         chmod 600 mine && echo mine; echo t > \"$TMPDIR/t\" && chmod 600 \"$TMPDIR/t\" && echo tmp"
    );
    for (policy, writes) in [
        (r#"{"workspace-write":{"network":false}}"#, true),
        (r#"{"workspace-and-protected":{"network":false}}"#, true),
        ("\"read-only\"", false),
    ] {
        let (work, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(work.path().join("mine"), "y").unwrap();
        std::fs::set_permissions(
            work.path().join("mine"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let output = sh_under(policy, work.path(), tmp.path(), &script);
        let (_, stdout, stderr) = summary(&output);
        for refused in [
            format!("chmod: changing permissions of '{o}': Read-only file system"),
            format!("chown: changing ownership of '{o}': Read-only file system"),
            format!("touch: cannot touch '{o}': Read-only file system"),
            // Its stdin, the machine's `/dev/null` opened by the runtime (here: by the
            // test), is opened again on the read-only mounts (666: its mode already, in
            // case this fails).
            "chmod: changing permissions of '/proc/self/fd/0': Read-only file system".to_owned(),
        ] {
            assert!(stderr.contains(&refused), "{policy}: {refused} in {stderr}");
        }
        let mine = std::fs::metadata(work.path().join("mine")).unwrap().mode() & 0o777;
        if writes {
            assert_eq!(stdout, "mine\ntmp\n", "{policy}: {stderr}");
            assert_eq!(mine, 0o600, "{policy}");
        } else {
            // Read-only: the working directory's metadata is read-only too.
            assert_eq!(stdout, "", "{policy}: {stderr}");
            assert!(
                stderr.contains("chmod: changing permissions of 'mine': Read-only file system"),
                "{stderr}"
            );
            assert_eq!(mine, 0o644, "{policy}");
        }
        assert_eq!(
            seen(&std::fs::metadata(&outside).unwrap()),
            before,
            "{policy}"
        );
    }
    // The helper's and the runtime's mounts are their own: still writable here.
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A sandboxed command shares the runtime's controlling terminal: through `/dev/tty` or
/// its `/dev/pts` node it read what the user typed while it ran, took the terminal's
/// foreground from the TUI and changed its line discipline (an attack round, with a
/// pseudo-terminal standing in for the TUI's). Under each confining policy `/dev/tty` is
/// the null device now (character device 1:3) and `/dev/pts` an empty folder; without a
/// sandbox (`none`) both are as they were.
#[test]
fn a_sandboxed_command_cannot_reach_the_runtimes_terminal() {
    let script = "stat -c %t:%T /dev/tty; ls -A /dev/pts | wc -l";
    for (policy, confined) in [
        (r#"{"workspace-write":{"network":false}}"#, true),
        (r#"{"workspace-and-protected":{"network":true}}"#, true),
        ("\"read-only\"", true),
        ("\"none\"", false),
    ] {
        let (work, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let output = sh_under(policy, work.path(), tmp.path(), script);
        let (code, stdout, stderr) = summary(&output);
        assert_eq!(code, Some(0), "{policy}: {stderr}");
        if confined {
            assert_eq!(stdout, "1:3\n0\n", "{policy}: {stderr}");
        } else {
            assert!(!stdout.starts_with("1:3"), "{policy}: {stdout}");
        }
    }
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

/// A `workspace-write` helper running `script` (`sh -c`) in `cwd`, its stdin and stdout
/// piped.
fn workspace_write(
    cwd: &std::path::Path,
    tmp: &std::path::Path,
    script: &str,
) -> std::process::Child {
    sh_command(r#"{"workspace-write":{"network":false}}"#, cwd, tmp, script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn read_line(child: &mut std::process::Child) -> String {
    use std::io::BufRead as _;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

/// Two sandboxes in one directory share the placeholder of a missing `.foya`: when the
/// one that made it ends first, the other's command still cannot create `.foya`, and the
/// last one removes the placeholder.
#[test]
fn a_placeholder_stays_while_a_later_sandbox_still_uses_it() {
    let (work, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let script = "echo ready; read go; mkdir .foya 2>/dev/null && echo made; echo end";
    let mut first = workspace_write(work.path(), tmp.path(), script);
    assert_eq!(read_line(&mut first), "ready\n");
    let mut second = workspace_write(work.path(), tmp.path(), script);
    assert_eq!(read_line(&mut second), "ready\n");
    // The first ends (its placeholder mount goes with it) while the second still runs.
    drop(first.stdin.take());
    let out = first.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "end\n");
    drop(second.stdin.take());
    let out = second.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "end\n");
    let left: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A placeholder left behind (its helper was SIGKILLed from outside) is removed by the
/// next sandbox in that directory.
#[test]
fn the_next_sandbox_removes_a_placeholder_left_behind() {
    use std::os::unix::fs::DirBuilderExt as _;
    let (work, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::DirBuilder::new()
        .mode(foya_actors::tools::sandbox::PLACEHOLDER_MODE)
        .create(work.path().join(".foya"))
        .unwrap();
    let mut next = workspace_write(
        work.path(),
        tmp.path(),
        "mkdir .foya 2>/dev/null && echo made; echo end",
    );
    drop(next.stdin.take());
    let out = next.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "end\n");
    assert!(!work.path().join(".foya").exists());
}

/// A shielded command cannot kill its helper (Landlock's signal scoping, Linux ≥ 6.12):
/// else it would outlive it, and create a protected name once the placeholder went.
#[test]
fn a_shielded_command_cannot_kill_its_helper() {
    let (work, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut command = workspace_write(
        work.path(),
        tmp.path(),
        "kill -9 $PPID 2>/dev/null; echo $?; sleep 0.1 & kill $! && echo own",
    );
    drop(command.stdin.take());
    let out = command.wait_with_output().unwrap();
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
        ),
        (Some(0), "1\nown\n".to_owned())
    );
    assert_eq!(std::fs::read_dir(work.path()).unwrap().count(), 0);
}

/// A shielded command cannot lower its helper's limits (`prlimit --pid $PPID`): with no
/// file descriptor left the helper could not list the command's process tree to kill it,
/// and what the command left running would outlive the sandbox.
#[test]
fn a_shielded_command_cannot_blind_its_helper_with_prlimit() {
    let (work, tmp) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut command = workspace_write(
        work.path(),
        tmp.path(),
        "prlimit --pid $PPID --nofile=0:0 2>/dev/null; echo $?; sleep 30 & echo $!; ulimit -n 64 && echo own",
    );
    drop(command.stdin.take());
    let out = command.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    let left = format!("/proc/{}", lines[1]);
    let survived = std::path::Path::new(&left).exists();
    if survived {
        let _ = Command::new("kill").args(["-9", lines[1]]).status();
    }
    assert_eq!(
        (out.status.code(), lines[0], lines[2]),
        (Some(0), "1", "own")
    );
    assert!(!survived, "the command's `sleep 30` outlived its helper");
}

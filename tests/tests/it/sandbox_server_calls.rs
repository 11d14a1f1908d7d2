//! One persistent sandbox helper (`foya-sandbox __sandbox-server`) serving calls under
//! different policies, one after the other: each call's child gets its own policy's
//! rules — `read-only`'s ruleset is built once by the server and enforced by each call
//! that needs it, so a call under another policy in between must neither get it nor
//! take it from the next `read-only` call — and nothing of the server: the command holds
//! no descriptor of the server's or its helper's (a socket, the prebuilt ruleset, a
//! pidfd), and it starts with an empty signal mask; nor can a sandboxed command signal
//! the server or its own call's helper (Landlock's signal scope).
//!
//! The real helper binary, real Landlock and namespaces; synchronisation: each call's
//! end (its exit status), under one global timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::tools::SandboxPolicy;
use foya_actors::tools::sandbox::SandboxRunner;
use foya_tests::foya_bin::foya_bin;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Global wait for one test.
const TIMEOUT: Duration = Duration::from_secs(60);

/// What one call printed and how it ended.
struct Ran {
    /// The helper's exit code.
    code: Option<i32>,
    /// Whether the call ran in a child of the runner's persistent helper.
    served: bool,
    /// Its stdout: the command's open descriptors, the server's pid, its signal mask,
    /// whether it could signal the server and its helper, then whether it could write
    /// `name` in the working directory.
    out: String,
}

/// Runs `sh -c <report>` in `work` under `policy` through `runner`.
async fn run(runner: &SandboxRunner, policy: SandboxPolicy, work: &Path, name: &str) -> Ran {
    let out_path = work.parent().unwrap().join(format!("{name}.out"));
    let stdout = OwnedFd::from(std::fs::File::create(&out_path).unwrap());
    let stderr = stdout.try_clone().unwrap();
    // First, before the shell opens anything, the descriptors it was given (`ls`'s are
    // the shell's plus its own of /proc/self/fd); then the server, the grandparent of
    // the shell (the call's helper's parent).
    let report = format!(
        "ls -l /proc/self/fd; \
         read -r _ _ _ server _ < /proc/$PPID/stat; echo \"server $server\"; \
         grep SigBlk /proc/self/status; \
         if kill -0 $server 2>/dev/null; then echo 'server signalled'; \
         else echo 'server out of reach'; fi; \
         if kill -0 $PPID 2>/dev/null; then echo 'helper signalled'; \
         else echo 'helper out of reach'; fi; \
         if echo x > {name} 2>/dev/null; then echo wrote; else echo denied; fi"
    );
    let args: Vec<OsString> = vec!["-c".into(), report.into()];
    let mut call = runner
        .start(policy, work, &[], "/bin/sh", &args, (stdout, stderr))
        .await
        .unwrap();
    let status = tokio::time::timeout(TIMEOUT, call.process.wait())
        .await
        .expect("the call ended in time")
        .unwrap();
    Ran {
        code: status.code(),
        served: call.process.is_served(),
        out: std::fs::read_to_string(&out_path).unwrap(),
    }
}

#[tokio::test]
async fn one_persistent_helper_gives_each_call_its_own_policy_and_nothing_of_its_own() {
    let helper = foya_bin().with_file_name("foya-sandbox");
    let runner = SandboxRunner::new(helper);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let read_only = SandboxPolicy::ReadOnly;
    let plan = [
        (read_only, "a", false),
        (
            SandboxPolicy::WorkspaceAndProtected { network: false },
            "b",
            true,
        ),
        (read_only, "c", false),
        (SandboxPolicy::None, "d", true),
        (read_only, "e", false),
        (SandboxPolicy::WorkspaceWrite { network: false }, "f", true),
        (read_only, "g", false),
    ];
    let mut servers = Vec::new();
    for (policy, name, writes) in plan {
        let ran = run(&runner, policy, &work, name).await;
        let out = &ran.out;
        assert!(ran.served, "{policy:?}: not served: {out}");
        assert_eq!(ran.code, Some(0), "{policy:?}: {out}");
        let expected = if writes { "wrote" } else { "denied" };
        assert_eq!(out.lines().last(), Some(expected), "{policy:?}: {out}");
        assert_eq!(work.join(name).exists(), writes, "{policy:?}: {out}");
        // Nothing of the server's or the helper's: no socket (the server's control
        // socket, a call's reply socket), no ruleset or pidfd.
        let targets: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" -> ").map(|(_, target)| target))
            .collect();
        assert!(targets.len() >= 4, "{policy:?}: {out}");
        assert!(
            !targets
                .iter()
                .any(|t| t.starts_with("socket:") || t.starts_with("anon_inode:")),
            "{policy:?}: {out}"
        );
        assert!(
            out.lines().any(|l| l == "SigBlk:\t0000000000000000"),
            "{policy:?}: {out}"
        );
        // A sandboxed command cannot signal the server every call shares (a SIGSTOP
        // would hang every later call); only `None`, no sandbox at all, can.
        let reach = if policy == SandboxPolicy::None {
            "server signalled"
        } else {
            "server out of reach"
        };
        assert!(out.lines().any(|l| l == reach), "{policy:?}: {out}");
        // Nor its own call's helper, which kills the command's whole tree when the call
        // ends (a command that stopped or killed it would leave a daemon behind).
        let reach = if policy == SandboxPolicy::None {
            "helper signalled"
        } else {
            "helper out of reach"
        };
        assert!(out.lines().any(|l| l == reach), "{policy:?}: {out}");
        let server = out.lines().find(|l| l.starts_with("server "));
        servers.push(server.unwrap().to_owned());
    }
    servers.dedup();
    assert_eq!(servers.len(), 1, "one server for every call: {servers:?}");
}

/// Unmounts its folder when dropped (also when an assertion failed).
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Runs `sh -c command` in `work` under `workspace-write` through `runner`, in a child of
/// its persistent helper; what it printed (stdout and stderr, written to `out`).
async fn sh(
    runner: &SandboxRunner,
    work: &Path,
    protect: &[PathBuf],
    command: String,
    out: PathBuf,
) -> String {
    let stdout = OwnedFd::from(std::fs::File::create(&out).unwrap());
    let stderr = stdout.try_clone().unwrap();
    let args: Vec<OsString> = vec!["-c".into(), command.into()];
    let policy = SandboxPolicy::WorkspaceWrite { network: false };
    let mut call = runner
        .start(policy, work, protect, "/bin/sh", &args, (stdout, stderr))
        .await
        .unwrap();
    tokio::time::timeout(TIMEOUT, call.process.wait())
        .await
        .expect("the call ended in time")
        .unwrap();
    assert!(call.process.is_served());
    std::fs::read_to_string(&out).unwrap()
}

/// The shield's read-only binds of the protected paths keep their mount's other flags,
/// as the rest of the file system does: on a working directory mounted `nosymfollow`, a
/// symlink inside `.git` is not followed in the sandbox either (the shield's remount
/// cleared the flag it did not name). Run as root (CI), which may mount.
#[tokio::test]
async fn the_protected_paths_keep_their_mounts_flags() {
    if !foya_tests::child::runs_as_root() {
        return;
    }
    let runner = SandboxRunner::new(foya_bin().with_file_name("foya-sandbox"));
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "nosymfollow", "foya-test"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success());
    let _guard = Mounted(mnt.clone());
    let work = mnt.join("work");
    std::fs::create_dir_all(work.join(".git")).unwrap();
    std::fs::write(work.join("target"), "followed\n").unwrap();
    std::os::unix::fs::symlink("../target", work.join(".git/link")).unwrap();
    assert!(
        std::fs::read_to_string(work.join(".git/link")).is_err(),
        "nosymfollow holds outside the sandbox"
    );
    let out = sh(
        &runner,
        &work,
        &[],
        "cat .git/link; cat .git/link > copy; echo x > .git/new; touch made; echo end".to_owned(),
        tmp.path().join("out"),
    )
    .await;
    assert!(!out.contains("followed"), "{out}");
    assert!(out.contains("Too many levels of symbolic links"), "{out}");
    assert!(
        out.contains("Read-only file system"),
        "the shield holds: {out}"
    );
    assert!(out.ends_with("end\n"), "{out}");
    assert!(
        work.join("made").exists(),
        "the working directory is writable: {out}"
    );
    assert!(!work.join(".git/new").exists(), "{out}");
}

/// A protected name that is a symlink (`AGENTS.md -> middle.md -> CLAUDE.md`, `.foya ->
/// conf`, `FOYA.md -> d/../CLAUDE.md` with `d -> sub/deep`, which the kernel reads as
/// `sub/CLAUDE.md`) and a symlink on the way to a hook script the runtime protects
/// (`tools -> scripts`) can be neither removed, renamed nor replaced by a sandboxed
/// command: each still leads where it led, to what it held, while the command creates
/// files at the working directory's top level as ever. A link loop at a protected name
/// (`docs/AGENTS.md -> AGENTS.md`) stops nothing from running.
#[tokio::test]
async fn links_to_the_protected_paths_cannot_be_replaced() {
    let runner = SandboxRunner::new(foya_bin().with_file_name("foya-sandbox"));
    let tmp = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
    for dir in ["conf", "scripts", "sub/deep", "docs"] {
        std::fs::create_dir_all(work.join(dir)).unwrap();
    }
    std::fs::write(work.join("CLAUDE.md"), "Be careful.\n").unwrap();
    std::fs::write(work.join("sub/CLAUDE.md"), "Be brief.\n").unwrap();
    std::os::unix::fs::symlink("AGENTS.md", work.join("docs/AGENTS.md")).unwrap();
    std::fs::write(work.join("conf/config.toml"), "# project\n").unwrap();
    std::fs::write(work.join("scripts/check.sh"), "#!/bin/sh\n").unwrap();
    let links = [
        ("AGENTS.md", "middle.md", "AGENTS.md"),
        ("middle.md", "CLAUDE.md", "middle.md"),
        (".foya", "conf", ".foya/config.toml"),
        ("tools", "scripts", "tools/check.sh"),
        ("FOYA.md", "d/../CLAUDE.md", "FOYA.md"),
        ("d", "sub/deep", "d/../CLAUDE.md"),
    ];
    for (name, target, _) in links {
        std::os::unix::fs::symlink(target, work.join(name)).unwrap();
    }
    let seen = |work: &Path| -> Vec<(PathBuf, Option<String>)> {
        links
            .iter()
            .map(|(name, _, through)| {
                let target = std::fs::read_link(work.join(name)).unwrap_or_default();
                (target, std::fs::read_to_string(work.join(through)).ok())
            })
            .collect()
    };
    let before = seen(&work);
    let command = "rm -f AGENTS.md middle.md .foya tools; echo evil > AGENTS.md; \
                   echo evil > middle.md; mkdir .foya tools; echo evil > .foya/config.toml; \
                   echo evil > tools/check.sh; mv tools elsewhere; ln -sfn /tmp .foya; \
                   rm -f d; mkdir d; echo evil > sub/CLAUDE.md; touch made; echo end";
    let protect = [work.join("tools/check.sh")];
    let out = sh(
        &runner,
        &work,
        &protect,
        command.to_owned(),
        tmp.path().join("out"),
    )
    .await;
    assert!(out.contains("Device or resource busy"), "{out}");
    assert!(out.ends_with("end\n"), "{out}");
    assert_eq!(seen(&work), before, "{out}");
    assert!(
        work.join("made").exists(),
        "the top level is writable: {out}"
    );
}

/// A workspace whose `.git` is a file (`git init --separate-git-dir`, a worktree, a
/// submodule): the repository it points to inside the workspace is read-only for a
/// sandboxed command as a `.git` directory is (a `core.fsmonitor` written to its config
/// would run at the user's next `git status`), a repository a `.git` file names but
/// that does not exist yet cannot be made, and the rest stays writable.
#[tokio::test]
async fn the_repository_a_git_file_points_to_cannot_be_written() {
    let runner = SandboxRunner::new(foya_bin().with_file_name("foya-sandbox"));
    let tmp = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
    std::fs::create_dir_all(work.join("repo-data")).unwrap();
    std::fs::create_dir_all(work.join("lib")).unwrap();
    std::fs::write(work.join("repo-data/config"), "[core]\n").unwrap();
    std::fs::write(work.join("repo-data/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(work.join(".git"), "gitdir: repo-data\n").unwrap();
    // A repository not made yet: its name is held.
    std::fs::write(work.join("lib/.git"), "gitdir: ../lib-data\n").unwrap();
    let command = "printf '\\tfsmonitor = ./evil\\n' >> repo-data/config; \
                   mv repo-data elsewhere; mkdir lib-data; touch made; echo end";
    let out = sh(
        &runner,
        &work,
        &[],
        command.to_owned(),
        tmp.path().join("out"),
    )
    .await;
    assert!(out.ends_with("end\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(work.join("repo-data/config")).unwrap(),
        "[core]\n",
        "{out}"
    );
    assert!(
        std::fs::read_dir(work.join("lib-data"))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound),
        "{out}"
    );
    assert!(
        work.join("made").exists(),
        "the top level is writable: {out}"
    );
}

/// A repository the user had in a subfolder stays read-only after a command planted
/// what hides it from a call's own listing: a `CACHEDIR.TAG` beside it (the listing skips
/// cache folders; more folders than it reads would do as well, in an order the test
/// cannot fix). Before, the next call could write its config (`core.fsmonitor`), which
/// the user's next `git status` runs. A repository removed since is not held: a command
/// can make one there again.
#[tokio::test]
async fn a_planted_cache_tag_does_not_unshield_a_nested_repository() {
    let runner = SandboxRunner::new(foya_bin().with_file_name("foya-sandbox"));
    let tmp = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
    let config = work.join("vendor/lib/.git/config");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "[core]\n").unwrap();
    let out = |name: &str| tmp.path().join(name);
    let plant = "touch vendor/CACHEDIR.TAG && echo planted";
    let first = sh(&runner, &work, &[], plant.to_owned(), out("1")).await;
    assert!(first.ends_with("planted\n"), "{first}");
    let write = "printf '\\tfsmonitor = ./evil\\n' >> vendor/lib/.git/config; \
                 touch made; echo end";
    let second = sh(&runner, &work, &[], write.to_owned(), out("2")).await;
    assert!(second.ends_with("end\n"), "{second}");
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "[core]\n",
        "{second}"
    );
    assert!(work.join("made").exists(), "{second}");
    // A tag already there when the runtime starts (planted in an earlier run, or come
    // with a clone) hides nothing from its first listing either.
    let later = tmp.path().join("later");
    let hidden = later.join("vendor/lib/.git/config");
    std::fs::create_dir_all(hidden.parent().unwrap()).unwrap();
    std::fs::write(&hidden, "[core]\n").unwrap();
    std::fs::write(later.join("vendor/CACHEDIR.TAG"), "Signature: x\n").unwrap();
    let fourth = sh(&runner, &later, &[], write.to_owned(), out("4")).await;
    assert!(fourth.ends_with("end\n"), "{fourth}");
    assert_eq!(
        std::fs::read_to_string(&hidden).unwrap(),
        "[core]\n",
        "{fourth}"
    );
    // The user removes it; a command may make a repository there again.
    std::fs::remove_dir_all(work.join("vendor/lib")).unwrap();
    let again = "git init -q vendor/lib && echo made-again";
    let third = sh(&runner, &work, &[], again.to_owned(), out("3")).await;
    assert!(third.ends_with("made-again\n"), "{third}");
}

/// What the runtime's own listing finds in cache folders and `node_modules` holds them
/// only for their `.git` files (a submodule's pointer): `cargo clean` after a `cargo
/// package` (which leaves `target/package/<crate>/AGENTS.md`) or a build script that
/// cloned a repository into its `OUT_DIR`, and `npm ci` over a package shipping an
/// `AGENTS.md` or a git dependency that kept its `.git`, remove those folders (a
/// shielded path in them made `rm -rf` fail with "Device or resource busy" or
/// "Read-only file system").
#[tokio::test]
async fn cache_folders_and_node_modules_can_still_be_removed() {
    let runner = SandboxRunner::new(foya_bin().with_file_name("foya-sandbox"));
    let tmp = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
    std::fs::create_dir_all(work.join("target/package/foo-0.1.0")).unwrap();
    std::fs::write(work.join("target/CACHEDIR.TAG"), "Signature: x\n").unwrap();
    std::fs::write(work.join("target/package/foo-0.1.0/AGENTS.md"), "x\n").unwrap();
    std::fs::create_dir_all(work.join("target/debug/build/foo-1/out/src/.git/refs")).unwrap();
    std::fs::create_dir_all(work.join("node_modules/pkg")).unwrap();
    std::fs::write(work.join("node_modules/pkg/AGENTS.md"), "x\n").unwrap();
    std::fs::create_dir_all(work.join("node_modules/dep/.git/refs")).unwrap();
    let command = "rm -rf target node_modules && echo removed";
    let out = sh(
        &runner,
        &work,
        &[],
        command.to_owned(),
        tmp.path().join("out"),
    )
    .await;
    assert!(out.ends_with("removed\n"), "{out}");
    assert!(!work.join("target").exists() && !work.join("node_modules").exists());
}

/// A helper started for one call (local MCP servers, and calls when the persistent
/// helper cannot start) reads its own mount table, which holds the shield's mounts: a
/// folder whose name is not UTF-8 holding a protected file (`\xff/AGENTS.md`) made every
/// such call fail before its command started.
#[test]
fn a_helper_for_one_call_runs_beside_a_name_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
    let odd = work.join(std::ffi::OsStr::from_bytes(b"\xff"));
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::write(odd.join("AGENTS.md"), "Be brief.\n").unwrap();
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let out = std::process::Command::new(foya_bin().with_file_name("foya-sandbox"))
        .arg("__sandbox-exec")
        .args(["--policy", r#"{"workspace-write":{"network":false}}"#])
        .arg("--cwd")
        .arg(&work)
        .arg("--tmp")
        .arg(&scratch)
        .args([
            "--",
            "sh",
            "-c",
            "echo x >> */AGENTS.md; touch made; echo end",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.ends_with("end\n"), "{stdout}{stderr}");
    assert!(work.join("made").exists(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(odd.join("AGENTS.md")).unwrap(),
        "Be brief.\n",
        "{stderr}"
    );
}

/// The persistent helper keeps the machine's mount table for the calls it forks (reading
/// it is most of what making the rest of the file system read-only costs a call), and
/// reads it again when the mounts changed: a file system mounted after the server
/// started is read-only for the next call too, so its files' modes cannot be changed.
/// Run as root (CI), which may mount; an ordinary user cannot mount anything new.
#[tokio::test]
async fn a_file_system_mounted_after_the_helper_started_is_read_only_for_the_next_call() {
    use std::os::unix::fs::PermissionsExt as _;
    if !foya_tests::child::runs_as_root() {
        return;
    }
    let helper = foya_bin().with_file_name("foya-sandbox");
    let runner = SandboxRunner::new(helper);
    let tmp = tempfile::tempdir().unwrap();
    let (work, mnt) = (tmp.path().join("work"), tmp.path().join("mnt"));
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let call = |command: String, name: &'static str| {
        sh(&runner, &work, &[], command, tmp.path().join(name))
    };
    // The server starts (and reads the table) with the first call.
    assert_eq!(call("echo first".to_owned(), "first.out").await, "first\n");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "foya-test"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(mounted.success());
    let _guard = Mounted(mnt.clone());
    let file = mnt.join("f");
    std::fs::write(&file, "x").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = call(
        format!("chmod 600 '{}'; echo done", file.display()),
        "second.out",
    )
    .await;
    assert!(out.contains("Read-only file system"), "{out}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "{out}");
}

//! The sandbox lets work happen, end to end through the real binary, real commands and
//! the real kernel: under `--approval auto` (`foya run`) and under `ask` with an approver
//! that allows each command once (`foya serve`, the SSE approver), sandboxed commands
//! create, change, move and delete anything in the working directory — top level
//! included (`touch`, `mkdir -p`, `git init`, python, `cargo init` and `cargo build`) —
//! while no spelling changes a protected path (`.git`, `.foya`, `AGENTS.md`, a nested
//! `AGENTS.md`), whether it exists or not, checked on disk afterwards, and nothing is
//! left behind (no placeholder). Writes outside the working directory and TCP connects
//! stay blocked. Also as an unprivileged user (the helper then enters a user namespace),
//! and with namespaces switched off (`FOYA_SANDBOX_NO_NAMESPACES`): the protected paths
//! stay shut by Landlock alone and the command's output says why the top level is
//! closed.
//!
//! Synchronisation: the run's JSON lines (`turn_complete`), the SSE stream, and the
//! child's exit, under one deadline per run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{read_until, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::{foya_bin, scripted, test_home};
use foya_tests::serve::Serve;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Global wait for one run.
const TIMEOUT: Duration = Duration::from_secs(180);

const TOKEN: &str = "sandbox-workspace-token";

/// Builds the protected names from pieces, so the gateway's check of the words does not
/// see them and the sandbox is what stops the write.
const NAMES: &str = "p=.gi; p=${p}t; f=.fo; f=${f}ya; a=AGEN; a=${a}TS.md;";

/// Work a sandboxed command must be able to do, each checked on disk afterwards.
fn work_commands() -> Vec<String> {
    let mut commands: Vec<String> = [
        "touch top.txt",
        "mkdir -p new/deeper && echo x > new/deeper/f",
        "git init -q sub",
        "python3 -c \"open('py.txt','w').write('x')\"",
        "echo x > made.txt && mv made.txt moved.txt && echo y > gone.txt",
        "rm gone.txt && mkdir tmpdir && rm -r tmpdir",
    ]
    .iter()
    .map(|c| (*c).to_owned())
    .collect();
    if cargo_available() {
        commands.push("cargo init -q --vcs none --name demo crate".to_owned());
        commands.push("cd crate && cargo build -q --offline".to_owned());
    }
    commands
}

fn check_work(work: &Path) {
    for file in [
        "top.txt",
        "new/deeper/f",
        "sub/.git/HEAD",
        "py.txt",
        "moved.txt",
    ] {
        assert!(work.join(file).exists(), "{file} was not made");
    }
    for gone in ["made.txt", "gone.txt", "tmpdir"] {
        assert!(!work.join(gone).exists(), "{gone} is still there");
    }
    if cargo_available() {
        assert!(work.join("crate/Cargo.toml").exists());
        assert!(work.join("crate/target/debug/demo").exists());
    }
}

/// Attacks on the protected paths (none names one in its words), then a write outside
/// the working directory and a TCP connect to `port`.
fn attacks(port: u16) -> Vec<String> {
    [
        "echo evil >> $p/config",
        "echo evil > $p/hooks/pre-commit",
        "mkdir -p $f && echo evil > $f/config.toml",
        "echo evil >> $a",
        "sh -c \"echo evil >> $a\"",
        "bash -c \"echo evil >> $p/config\"",
        "env sh -c \"echo evil > $f/config.toml\"",
        "python3 -c \"open('$p/hooks/pre-commit','w').write('evil')\"",
        "python3 -c \"open('$a','a').write('evil')\"",
        "echo evil | tee -a $a",
        "echo evil > e1 && cp e1 $p/hooks/pre-commit",
        "echo evil > e2 && mv e2 $a",
        "mv $a away.md",
        "echo evil > e3 && ln -s e3 $p/hooks/pre-commit",
        "echo evil > e4 && ln e4 $a",
        "echo evil > e5 && ln e5 $f",
        "rm -rf $p",
        "echo evil >> nested/$a",
        "mv nested elsewhere && mkdir nested && echo evil > nested/$a",
        // A folder replaced by a symlink to `.git`, written through by the next command.
        "rm -rf docs && ln -s $p docs",
        "echo evil >> docs/config",
    ]
    .iter()
    .map(|c| format!("{NAMES} {c}"))
    .chain([
        "echo evil > ../outside.txt".to_owned(),
        format!("echo evil > /dev/tcp/127.0.0.1/{port}"),
    ])
    .collect()
}

/// What the attacks must not change: (path, content; `None`: absent).
type Snapshot = Vec<(String, Option<String>)>;

const WATCHED: &[&str] = &[
    ".git/config",
    ".git/HEAD",
    ".git/hooks/pre-commit",
    ".foya",
    ".foya/config.toml",
    "AGENTS.md",
    "FOYA.md",
    ".mcp.json",
    "away.md",
    "nested/AGENTS.md",
    "elsewhere",
    "../outside.txt",
];

fn snapshot(work: &Path) -> Snapshot {
    WATCHED
        .iter()
        .map(|f| {
            let path = work.join(f);
            let seen = if path.is_dir() {
                Some("(directory)".to_owned())
            } else {
                std::fs::read_to_string(&path).ok()
            };
            ((*f).to_owned(), seen)
        })
        .collect()
}

/// A workspace with a repository, a nested instruction file and a `docs/` folder; with
/// `present`, also `.foya/config.toml` and `AGENTS.md`.
fn workspace(tmp: &Path, present: bool) -> PathBuf {
    let work = tmp.join("work");
    for dir in [".git/hooks", "nested", "docs"] {
        std::fs::create_dir_all(work.join(dir)).unwrap();
    }
    std::fs::write(work.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(work.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(work.join("nested/AGENTS.md"), "Nested rules.\n").unwrap();
    std::fs::write(work.join("docs/readme.md"), "docs\n").unwrap();
    if present {
        std::fs::create_dir_all(work.join(".foya")).unwrap();
        std::fs::write(work.join(".foya/config.toml"), "# project\n").unwrap();
        std::fs::write(work.join("AGENTS.md"), "Be careful.\n").unwrap();
    }
    std::fs::write(tmp.join("outside.txt"), "outside\n").unwrap();
    work
}

fn cargo_available() -> bool {
    std::process::Command::new("cargo")
        .arg("--version")
        .envs(toolchain_env())
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Where rustup and cargo keep their toolchains: the tests run `foya` with a `HOME` of
/// their own, in which `cargo` (a rustup proxy) would find none.
fn toolchain_env() -> Vec<(String, PathBuf)> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let dir = |var: &str, default: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(default))
    };
    vec![
        ("RUSTUP_HOME".to_owned(), dir("RUSTUP_HOME", ".rustup")),
        ("CARGO_HOME".to_owned(), dir("CARGO_HOME", ".cargo")),
    ]
}

/// One step per command, then `done`.
fn script(tmp: &Path, commands: &[String]) -> PathBuf {
    let mut responses: Vec<Value> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"tool_calls": [{"id": format!("c{i}"), "name": "shell",
                "arguments": {"command": c}}]})
        })
        .collect();
    responses.push(json!({"text": "done"}));
    let path = tmp.join("script.json");
    std::fs::write(&path, json!({ "responses": responses }).to_string()).unwrap();
    path
}

/// `foya run --approval auto --json`; the turn's events. `prefix` runs another program
/// instead (`setpriv … /path/to/foya`), with the same arguments; `env` is added to the
/// environment.
fn run_auto(
    tmp: &Path,
    work: &Path,
    commands: &[String],
    prefix: &[&str],
    env: &[(&str, &str)],
) -> Vec<Value> {
    let script = script(tmp, commands);
    let mut command = scripted("run", "auto", &script, &tmp.join("data"), work);
    command.args(["--json", "go"]).envs(toolchain_env());
    for (key, value) in env {
        command.env(key, value);
    }
    if let Some((program, args)) = prefix.split_first() {
        // The prefix ends with the `foya` binary to run.
        let mut wrapped = std::process::Command::new(program);
        wrapped.args(args).args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        command = wrapped;
    }
    let piped = spawn_json_lines(&mut command);
    let deadline = Instant::now() + TIMEOUT;
    let events = read_until(&piped.lines, deadline, |l| l["type"] == "turn_complete");
    let status = wait_exit(piped.child, deadline);
    assert_eq!(status.code(), Some(0), "{:?}", events.last());
    events
}

/// `foya serve`, a session in `work` under `ask`, and an approver that allows each
/// command once unless the gateway says it names a protected path; the turn's events.
async fn run_ask(tmp: &Path, work: &Path, commands: &[String]) -> Vec<Value> {
    run_serve(tmp, work, commands, "ask", &[]).await
}

/// As [`run_ask`], the session under `mode`, `env` added to the server's environment.
async fn run_serve(
    tmp: &Path,
    work: &Path,
    commands: &[String],
    mode: &str,
    env: &[(&str, &str)],
) -> Vec<Value> {
    let script = script(tmp, commands);
    let serve = Serve::start(tmp, TOKEN, &["--provider", "scripted"], |c| {
        c.arg("--script")
            .arg(&script)
            .env("HOME", test_home())
            .envs(toolchain_env())
            .envs(env.iter().copied());
    })
    .await;
    let id = serve
        .create_session(&json!({"cwd": work, "approval_mode": mode}))
        .await;
    let (seen, _) = serve
        .turn_with_approver(&id, "go", TIMEOUT, |data| {
            let reason = data["reason"].as_str().unwrap_or_default();
            // Not the question of a sandbox without namespaces (it names the
            // protected paths as a whole, not one of them).
            let protected = reason.contains("protected path")
                && !reason.contains("cannot keep the protected paths");
            if protected { "deny" } else { "allow_once" }
        })
        .await;
    seen
}

/// The result of call `i`.
fn result(events: &[Value], i: usize) -> &Value {
    let id = format!("c{i}");
    events
        .iter()
        .find(|e| e["type"] == "tool_message" && e["tool_call_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// Every command of `commands` ran (was not refused) and succeeded.
fn all_succeeded(events: &[Value], commands: &[String]) {
    for (i, command) in commands.iter().enumerate() {
        let result = result(events, i);
        assert_eq!(result["is_error"], false, "{command}: {result}");
    }
}

/// No attack changed anything; each one ran (it was allowed, once, or in auto) and
/// failed; no placeholder was left; the listener saw no connection.
fn nothing_landed(
    events: &[Value],
    commands: &[String],
    before: &Snapshot,
    work: &Path,
    listener: &std::net::TcpListener,
) {
    assert_eq!(
        &snapshot(work),
        before,
        "a protected or outside path changed"
    );
    for (i, command) in commands.iter().enumerate() {
        let result = result(events, i);
        let refused = events.iter().any(|e| {
            e["type"] == "approval_decided"
                && e["tool_call_id"] == format!("c{i}").as_str()
                && e["decision"] == "deny"
        });
        assert!(
            !refused,
            "{command} was refused, not stopped by the sandbox"
        );
        // The symlink is made (the next command is the attack).
        if !command.ends_with("ln -s $p docs") {
            assert_eq!(result["is_error"], true, "{command}: {result}");
        }
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "a TCP connect got through");
    let names: Vec<String> = std::fs::read_dir(work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for placeholder in [".foya", "FOYA.md", ".mcp.json"] {
        let made = work.join(placeholder);
        assert!(
            !made.exists() || before.iter().any(|(f, v)| f == placeholder && v.is_some()),
            "{placeholder} was left behind: {names:?}"
        );
    }
}

fn attack_workspace(
    tmp: &Path,
    present: bool,
) -> (PathBuf, Snapshot, Vec<String>, std::net::TcpListener) {
    let work = workspace(tmp, present);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let before = snapshot(&work);
    (work, before, attacks(port), listener)
}

#[test]
fn under_auto_commands_work_anywhere_in_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let work = workspace(tmp.path(), false);
    let commands = work_commands();
    let events = run_auto(tmp.path(), &work, &commands, &[], &[]);
    all_succeeded(&events, &commands);
    check_work(&work);
}

#[test]
fn under_auto_no_spelling_changes_a_protected_path() {
    for present in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (work, before, commands, listener) = attack_workspace(tmp.path(), present);
        let events = run_auto(tmp.path(), &work, &commands, &[], &[]);
        nothing_landed(&events, &commands, &before, &work, &listener);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn under_ask_an_allowed_once_command_works_anywhere_in_the_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let work = workspace(tmp.path(), false);
    let commands = work_commands();
    let events = run_ask(tmp.path(), &work, &commands).await;
    all_succeeded(&events, &commands);
    check_work(&work);
}

#[tokio::test(flavor = "multi_thread")]
async fn under_ask_an_allowed_once_command_changes_no_protected_path() {
    for present in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let (work, before, commands, listener) = attack_workspace(tmp.path(), present);
        let events = run_ask(tmp.path(), &work, &commands).await;
        nothing_landed(&events, &commands, &before, &work, &listener);
    }
}

/// As an unprivileged user the helper enters a user namespace first: the same work
/// succeeds and the same attacks fail.
#[test]
fn as_an_unprivileged_user_the_same_holds() {
    if !foya_tests::child::runs_as_root() {
        // Already unprivileged: the other tests cover it.
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("foya-unpriv-")
        .tempdir()
        .unwrap();
    let (work, before, mut commands, listener) = attack_workspace(tmp.path(), true);
    let attacks = commands.len();
    commands.extend(work_without_cargo());
    // Everything the run touches belongs to the unprivileged user, the binaries too (hard
    // links, else copies: the build directory's parents may be closed to it).
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let foya = foya_bin();
    for name in ["foya", "foya-sandbox"] {
        let from = foya.with_file_name(name);
        if std::fs::hard_link(&from, bin.join(name)).is_err() {
            std::fs::copy(&from, bin.join(name)).unwrap();
        }
    }
    chown_tree(tmp.path(), "65534");
    let events = run_auto(
        tmp.path(),
        &work,
        &commands,
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            bin.join("foya").to_str().unwrap(),
        ],
        &[("HOME", tmp.path().to_str().unwrap())],
    );
    nothing_landed(&events, &commands[..attacks], &before, &work, &listener);
    for (i, command) in commands.iter().enumerate().skip(attacks) {
        let result = result(&events, i);
        assert_eq!(result["is_error"], false, "{command}: {result}");
    }
    for file in ["top.txt", "new/deeper/f", "sub/.git/HEAD", "py.txt"] {
        assert!(work.join(file).exists(), "{file}");
    }
}

fn work_without_cargo() -> Vec<String> {
    work_commands()
        .into_iter()
        .filter(|c| !c.contains("cargo"))
        .collect()
}

fn chown_tree(dir: &Path, owner: &str) {
    let status = std::process::Command::new("chown")
        .args(["-R", &format!("{owner}:{owner}")])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Without namespaces (switched off the way a test can), the protected paths stay shut
/// by Landlock alone, the working directory's top level is closed to new entries (its
/// subfolders are not), and the output says why, once.
#[test]
fn without_namespaces_protected_paths_stay_shut_and_the_output_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, before, mut commands, listener) = attack_workspace(tmp.path(), false);
    let attacks = commands.len();
    commands.push("touch top.txt".to_owned());
    commands.push("echo x > docs/inside.txt".to_owned());
    let events = run_auto(
        tmp.path(),
        &work,
        &commands,
        &[],
        &[("FOYA_SANDBOX_NO_NAMESPACES", "1")],
    );
    // The symlink swap cannot even start (the top level is closed): its second command
    // writes a plain `docs/config`.
    let shut: Vec<String> = commands[..attacks]
        .iter()
        .filter(|c| !c.ends_with("ln -s $p docs") && !c.ends_with("docs/config"))
        .cloned()
        .collect();
    assert_eq!(&snapshot(&work), &before);
    for (i, command) in commands[..attacks].iter().enumerate() {
        if shut.contains(command) {
            assert_eq!(result(&events, i)["is_error"], true, "{command}");
        }
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err());
    let top = result(&events, attacks);
    assert_eq!(top["is_error"], true, "{top}");
    assert!(!work.join("top.txt").exists());
    assert_eq!(result(&events, attacks + 1)["is_error"], false);
    let said: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_message")
        .filter_map(|e| e["content"].as_str())
        .filter(|c| c.contains("namespaces are switched off"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0]
            .contains("cannot create, delete or rename entries directly in the working directory"),
        "{}",
        said[0]
    );
}

/// Without namespaces, `auto` falls back to asking for a command it would have run
/// unasked, saying why; allowed once, the command runs with the whole working directory
/// writable (as the question said), so the top level takes new entries.
#[tokio::test(flavor = "multi_thread")]
async fn without_namespaces_auto_asks_and_an_allowed_command_works_at_the_top_level() {
    let tmp = tempfile::tempdir().unwrap();
    let work = workspace(tmp.path(), false);
    let commands = vec!["touch top.txt".to_owned()];
    let events = run_serve(
        tmp.path(),
        &work,
        &commands,
        "auto",
        &[("FOYA_SANDBOX_NO_NAMESPACES", "1")],
    )
    .await;
    let asked = events
        .iter()
        .find(|e| e["type"] == "approval_requested" && e["tool_call_id"] == "c0")
        .unwrap_or_else(|| panic!("not asked: {events:?}"));
    let reason = asked["reason"].as_str().unwrap();
    assert!(
        reason.contains("cannot keep the protected paths")
            && reason.contains("NOT shielded")
            && !reason.contains("protected path ("),
        "{reason}"
    );
    all_succeeded(&events, &commands);
    assert!(work.join("top.txt").exists());
}

/// Without namespaces and without anyone to ask (`foya run` without a terminal), `auto`
/// keeps the Landlock-only rules: the protected paths stay shut, the top level takes no
/// new entry, and the first command's output says why.
#[test]
fn without_namespaces_or_an_approver_auto_keeps_the_protected_paths_shut() {
    let tmp = tempfile::tempdir().unwrap();
    let work = workspace(tmp.path(), false);
    let before = snapshot(&work);
    let commands = vec![
        "touch top.txt".to_owned(),
        format!("{NAMES} echo evil >> $p/config"),
        "echo x > docs/inside.txt".to_owned(),
    ];
    let events = run_auto(
        tmp.path(),
        &work,
        &commands,
        &[],
        &[("FOYA_SANDBOX_NO_NAMESPACES", "1")],
    );
    assert_eq!(&snapshot(&work), &before);
    assert!(!work.join("top.txt").exists());
    let top = result(&events, 0);
    assert_eq!(top["is_error"], true, "{top}");
    let said = top["content"].as_str().unwrap();
    assert!(
        said.contains("namespaces are switched off")
            && said.contains("cannot create, delete or rename entries directly"),
        "{said}"
    );
    assert_eq!(result(&events, 1)["is_error"], true);
    assert_eq!(result(&events, 2)["is_error"], false);
}

/// `foya` SIGKILLed while a sandboxed command runs: the helper (which outlives it to kill
/// the command) removes the placeholders it made; nothing is left in the workspace.
#[test]
fn a_sigkilled_runtime_leaves_no_placeholder_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let work = workspace(tmp.path(), false);
    let before = names(&work);
    let marker = format!("foya-sandbox-placeholder-{}", std::process::id());
    let command = format!("echo started; exec -a {marker} sleep 300");
    let script = script(tmp.path(), &[command]);
    let mut piped = spawn_json_lines(
        scripted("run", "auto", &script, &tmp.path().join("data"), &work).args(["--json", "go"]),
    );
    let deadline = Instant::now() + TIMEOUT;
    read_until(&piped.lines, deadline, |l| {
        l["type"] == "tool_output" && l["chunk"].as_str().is_some_and(|c| c.contains("started"))
    });
    // While it runs, the missing protected names are held by placeholders.
    let during = names(&work);
    for held in [".foya", "AGENTS.md", "FOYA.md", ".mcp.json"] {
        assert!(during.contains(&held.to_owned()), "{held}: {during:?}");
    }
    let pids = foya_tests::procs::wait_running(&marker, deadline);
    // The helper: the command's parent.
    let helper: Vec<i32> = pids
        .iter()
        .filter_map(|&pid| foya_tests::procs::parent_of(pid))
        .collect();
    piped.child.kill().unwrap();
    piped.child.wait().unwrap();
    let all: Vec<i32> = pids.iter().chain(&helper).copied().collect();
    assert!(
        foya_tests::procs::wait_exited(&all, deadline),
        "the helper or the command outlived foya"
    );
    assert_eq!(names(&work), before);
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

//! Untrusted text never widens permissions, in process: file tools refuse protected
//! paths (also through symlinks) and hard links when confined; the Landlock sandbox of
//! `WorkspaceWrite` keeps the protected paths read-only for every spelling of a shell
//! command while the rest of the workspace stays writable; `read_file` and `grep` refuse
//! FIFOs, sockets and devices without blocking, and cancels leave no thread behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::testkit::{
    Recorder, TIMEOUT, call_tool as call, confined, sandbox_runner as runner, tool_context as ctx,
    wait_until,
};
use foya_actors::tools::builtin::{Shell, edit_file, grep, read_file, write_file};
use foya_actors::tools::protected::Protected;
use foya_actors::tools::{SandboxPolicy, Tool, ToolContext};
use foya_protocol::ApprovalMode;
use serde_json::json;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// A workspace with control files, a hook script and ordinary files.
fn workspace() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path();
    for dir in [".git/hooks", ".foya", "src", "scripts"] {
        std::fs::create_dir_all(w.join(dir)).unwrap();
    }
    for (file, text) in [
        (".git/config", "[core]\n"),
        (".foya/config.toml", "# project\n"),
        ("AGENTS.md", "be careful\n"),
        ("README.md", "readme\n"),
        ("src/lib.rs", "fn a() {}\n"),
        ("scripts/stop.sh", "#!/bin/sh\n"),
    ] {
        std::fs::write(w.join(file), text).unwrap();
    }
    tmp
}

fn with_hooks(mut ctx: ToolContext) -> ToolContext {
    ctx.protected = Protected::new(&ctx.cwd, &["./scripts/stop.sh".to_owned()]);
    ctx
}

/// Every protected file's content, for before/after comparison.
fn snapshot(w: &Path) -> Vec<(String, Option<String>)> {
    [
        ".git/config",
        ".git/hooks/pre-commit",
        ".foya/config.toml",
        ".foya/hooks.toml",
        "AGENTS.md",
        "FOYA.md",
        "scripts/stop.sh",
    ]
    .iter()
    .map(|f| ((*f).to_owned(), std::fs::read_to_string(w.join(f)).ok()))
    .collect()
}

#[tokio::test]
async fn file_tools_refuse_protected_paths_unless_a_person_approved_the_write() {
    let tmp = workspace();
    let w = tmp.path();
    std::os::unix::fs::symlink(w.join(".git/config"), w.join("notes.txt")).unwrap();
    let confined = with_hooks(confined(w));
    let before = snapshot(w);
    let attempts = [
        (
            json!({"path": ".foya/config.toml", "content": "[profiles.openai]\n"}),
            true,
        ),
        (json!({"path": "AGENTS.md", "content": "ALWAYS run"}), true),
        (json!({"path": "sub/FOYA.md", "content": "x"}), true),
        (
            json!({"path": ".git/hooks/pre-commit", "content": "evil"}),
            true,
        ),
        (json!({"path": "scripts/stop.sh", "content": "evil"}), true),
        (json!({"path": "notes.txt", "content": "evil"}), true),
    ];
    for (args, _) in &attempts {
        let out = call(&write_file(), &confined, args.clone()).await;
        assert!(out.is_error, "{args}: {}", out.content);
        assert!(out.content.contains("protected path"), "{}", out.content);
    }
    let edit = json!({"path": "AGENTS.md", "old_string": "careful", "new_string": "reckless"});
    let out = call(&edit_file(), &confined, edit.clone()).await;
    assert!(
        out.is_error && out.content.contains("protected path"),
        "{}",
        out.content
    );
    assert_eq!(snapshot(w), before);
    // Approved by a person: the same write goes through.
    let approved = with_hooks(ctx(
        w,
        ApprovalMode::Auto,
        SandboxPolicy::WorkspaceAndProtected { network: false },
    ));
    let out = call(&edit_file(), &approved, edit).await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        std::fs::read_to_string(w.join("AGENTS.md")).unwrap(),
        "be reckless\n"
    );
}

#[tokio::test]
async fn file_tools_refuse_to_write_through_a_hard_link_when_confined() {
    let tmp = workspace();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("victim.txt");
    std::fs::write(&target, "outside\n").unwrap();
    std::fs::hard_link(&target, tmp.path().join("link.txt")).unwrap();
    let confined = confined(tmp.path());
    std::os::unix::fs::symlink("link.txt", tmp.path().join("via")).unwrap();
    // The link itself, and a symlink to it (the check once looked at the symlink alone).
    for path in ["link.txt", "via"] {
        let out = call(
            &write_file(),
            &confined,
            json!({"path": path, "content": "changed"}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("2 hard links"),
            "{path}: {}",
            out.content
        );
        let out = call(
            &edit_file(),
            &confined,
            json!({"path": path, "old_string": "outside", "new_string": "changed"}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains("hard links"),
            "{path}: {}",
            out.content
        );
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "outside\n");
    // Unconfined (bypass): the write is the person's business.
    let bypass = ctx(tmp.path(), ApprovalMode::Bypass, SandboxPolicy::None);
    let out = call(
        &write_file(),
        &bypass,
        json!({"path": "link.txt", "content": "x"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
}

/// Runs `command` with `shell` under `policy` in `w`.
async fn shell(w: &Path, policy: SandboxPolicy, command: &str) -> String {
    let ctx = with_hooks(ctx(w, ApprovalMode::Auto, policy));
    let out = call(&Shell::new(runner()), &ctx, json!({"command": command})).await;
    out.content
}

#[tokio::test]
async fn no_spelling_of_a_sandboxed_command_changes_a_protected_path() {
    let tmp = workspace();
    let w = tmp.path();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim.txt"), "outside\n").unwrap();
    std::fs::hard_link(outside.path().join("victim.txt"), w.join("link.txt")).unwrap();
    let before = snapshot(w);
    let ww = SandboxPolicy::WorkspaceWrite { network: false };
    let spellings = [
        "echo '[profiles.openai]' > .foya/config.toml",
        "echo x >> AGENTS.md",
        "echo x | tee -a .git/config",
        "sh -c 'echo x > .git/hooks/pre-commit'",
        "bash -c 'printf x > FOYA.md'",
        "env sh -c 'echo x >> .foya/hooks.toml'",
        "python3 -c \"open('.git/config','a').write('x')\"",
        "d=.fo; d=${d}ya; echo x > $d/config.toml",
        "echo evil > README.md && mv README.md AGENTS.md",
        "ln src/lib.rs FOYA.md",
        "rm -f AGENTS.md; echo x > AGENTS.md",
        "mv .foya .foya-old && mkdir .foya && echo x > .foya/config.toml",
        "cp README.md scripts/stop.sh",
        "echo x >> link.txt",
        "cd .git && echo x > config",
    ];
    for command in spellings {
        let _ = shell(w, ww, command).await;
        assert_eq!(snapshot(w), before, "after {command:?}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("victim.txt")).unwrap(),
        "outside\n"
    );
    // The rest of the workspace stays writable.
    let out = shell(
        w,
        ww,
        "echo y >> src/lib.rs && mkdir -p src/new && echo z > src/new/f && cat src/new/f",
    )
    .await;
    assert!(out.ends_with("z\n[exit code: 0]"), "{out}");
    // A command a person approved may change them.
    let out = shell(
        w,
        SandboxPolicy::WorkspaceAndProtected { network: false },
        "echo approved >> AGENTS.md",
    )
    .await;
    assert!(out.ends_with("[exit code: 0]"), "{out}");
    assert_eq!(
        std::fs::read_to_string(w.join("AGENTS.md")).unwrap(),
        "be careful\napproved\n"
    );
}

/// The name of the threads of the FIFO test's own tokio runtime (at most 15 bytes, the
/// kernel's `comm`).
const FIFO_THREADS: &str = "fifo-cancels";

/// Threads of the FIFO test's runtime: the tests share this process, so the count is of
/// the threads named [`FIFO_THREADS`], not of every thread the other tests start and end.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == FIFO_THREADS)
        })
        .count()
}

/// 200 cancelled `read_file` calls on a FIFO leave no thread behind: the runtime's idle
/// blocking threads retire after 50 ms, so the thread count comes back to where it was;
/// a read blocked on the FIFO would keep its thread forever.
#[test]
fn fifo_reads_are_refused_and_200_cancels_leave_no_thread_behind() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(FIFO_THREADS)
        .thread_keep_alive(std::time::Duration::from_millis(50))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(fifo_reads());
}

async fn fifo_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let ctx = confined(tmp.path());
    let out = call(&read_file(), &ctx, json!({"path": "pipe"})).await;
    assert!(out.is_error, "{}", out.content);
    assert!(out.content.contains("FIFO"), "{}", out.content);
    let out = call(&read_file(), &ctx, json!({"path": "/dev/zero"})).await;
    assert!(out.is_error, "{}", out.content);
    let grep = call(&grep(), &ctx, json!({"pattern": "x", "path": "pipe"})).await;
    assert!(!grep.content.contains("panicked"), "{}", grep.content);
    let before = threads();
    for _ in 0..200 {
        let cancel = CancellationToken::new();
        let recorder = Recorder::default();
        let call = read_file();
        let running = call.call(&ctx, json!({"path": "pipe"}), cancel.clone(), &recorder);
        let cancelling = async {
            tokio::task::yield_now().await;
            cancel.cancel();
        };
        let (out, ()) = tokio::time::timeout(TIMEOUT, async { tokio::join!(running, cancelling) })
            .await
            .expect("a cancelled FIFO read returns");
        assert!(out.is_error, "{}", out.content);
    }
    wait_until("the blocking threads to retire", || threads() <= before + 1).await;
}

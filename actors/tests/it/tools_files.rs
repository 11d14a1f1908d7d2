//! The built-in file tools against real files in temp dirs: happy paths, errors the
//! model can act on, and confinement to the working directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::testkit::{call_tool as call, confined, tool_context as ctx};
use foya_actors::tools::builtin::{edit_file, glob, grep, list_dir, read_file, write_file};
use foya_actors::tools::{SandboxPolicy, ToolOutput};
use foya_protocol::ApprovalMode;
use serde_json::json;
use std::fs;

fn ok(content: &str) -> ToolOutput {
    ToolOutput::ok(content)
}

fn err(content: &str) -> ToolOutput {
    ToolOutput::error(content)
}

#[tokio::test]
async fn read_file_numbers_lines_and_windows() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    let ctx = confined(dir.path());
    let tool = read_file();
    assert_eq!(
        call(&tool, &ctx, json!({"path": "a.txt"})).await,
        ok("     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n")
    );
    assert_eq!(
        call(
            &tool,
            &ctx,
            json!({"path": "a.txt", "offset": 2, "limit": 2})
        )
        .await,
        ok(
            "     2\ttwo\n     3\tthree\n[showing lines 2-3 of 4; call read_file with offset 4 to read more]\n"
        )
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "a.txt", "offset": 9})).await,
        err("offset 9 is past the end of \"a.txt\", which has 4 lines")
    );
}

#[tokio::test]
async fn read_file_errors() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("bin.dat"),
        [0x7f, b'E', b'L', b'F', 0, 1, 2],
    )
    .unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("empty.txt"), "").unwrap();
    let ctx = confined(dir.path());
    let tool = read_file();
    assert_eq!(
        call(&tool, &ctx, json!({"path": "bin.dat"})).await,
        err("\"bin.dat\" is a binary file (7 bytes); not shown")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "sub"})).await,
        err("\"sub\" is a directory; use list_dir to list it")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "empty.txt"})).await,
        ok("(\"empty.txt\" is empty)")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "missing.txt"})).await,
        err("cannot read \"missing.txt\": No such file or directory (os error 2)")
    );
}

#[tokio::test]
async fn file_tools_refuse_paths_outside_the_working_directory() {
    let root = tempfile::tempdir().unwrap();
    let cwd = root.path().join("work");
    let outside = root.path().join("outside");
    fs::create_dir_all(&cwd).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, cwd.join("link")).unwrap();
    let ctx = confined(&cwd);
    let (cwd_s, out_s) = (cwd.display().to_string(), outside.display().to_string());

    assert_eq!(
        call(&read_file(), &ctx, json!({"path": "../outside/secret.txt"})).await,
        err(&format!(
            "path \"../outside/secret.txt\" resolves to {out_s}/secret.txt which is outside the working \
             directory {cwd_s}; file tools only access paths inside the working directory"
        ))
    );
    let absolute = format!("{out_s}/new.txt");
    assert_eq!(
        call(
            &write_file(),
            &ctx,
            json!({"path": absolute, "content": "x"})
        )
        .await,
        err(&format!(
            "path \"{absolute}\" resolves to {absolute} which is outside the working \
             directory {cwd_s}; file tools only access paths inside the working directory"
        ))
    );
    assert_eq!(
        call(
            &write_file(),
            &ctx,
            json!({"path": "link/new.txt", "content": "x"})
        )
        .await,
        err(&format!(
            "path \"link/new.txt\" leads through a symlink to {out_s}/new.txt which is outside the \
             working directory {cwd_s}; file tools only access paths inside the working directory"
        ))
    );
    assert!(!outside.join("new.txt").exists());

    // Bypass mode (or a call approved to leave the sandbox) may reach outside.
    let bypass = ctx_with(&cwd, ApprovalMode::Bypass, SandboxPolicy::None);
    assert_eq!(
        call(&read_file(), &bypass, json!({"path": "link/secret.txt"})).await,
        ok("     1\tsecret\n")
    );
    let approved = ctx_with(&cwd, ApprovalMode::AutoEdit, SandboxPolicy::None);
    assert_eq!(
        call(
            &write_file(),
            &approved,
            json!({"path": "../outside/ok.txt", "content": "y"})
        )
        .await,
        ok("created \"../outside/ok.txt\" (1 bytes)")
    );
    assert_eq!(fs::read_to_string(outside.join("ok.txt")).unwrap(), "y");
}

fn ctx_with(
    cwd: &std::path::Path,
    mode: ApprovalMode,
    sandbox: SandboxPolicy,
) -> foya_actors::tools::ToolContext {
    ctx(cwd, mode, sandbox)
}

#[tokio::test]
async fn list_dir_lists_sorted_entries() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("b.txt"), "").unwrap();
    fs::write(dir.path().join(".hidden"), "").unwrap();
    fs::create_dir(dir.path().join("a")).unwrap();
    fs::create_dir(dir.path().join("empty")).unwrap();
    std::os::unix::fs::symlink("b.txt", dir.path().join("c")).unwrap();
    let ctx = confined(dir.path());
    let tool = list_dir();
    assert_eq!(
        call(&tool, &ctx, json!({"path": "."})).await,
        ok(".hidden\na/\nb.txt\nc@\nempty/\n")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "empty"})).await,
        ok("(\"empty\" is empty)")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "nope"})).await,
        err("cannot list \"nope\": No such file or directory (os error 2)")
    );
}

/// A tree with ignored, hidden and nested files.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join("src/nested")).unwrap();
    fs::create_dir_all(p.join("target")).unwrap();
    fs::write(p.join(".gitignore"), "target/\n*.log\n").unwrap();
    fs::write(
        p.join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    fs::write(
        p.join("src/nested/lib.rs"),
        "pub fn hi() {}\n// TODO: more\n",
    )
    .unwrap();
    fs::write(p.join("README.md"), "TODO: docs\n").unwrap();
    fs::write(p.join("run.log"), "TODO in a log\n").unwrap();
    fs::write(p.join("target/out.rs"), "TODO built\n").unwrap();
    fs::write(p.join(".env.rs"), "TODO hidden\n").unwrap();
    fs::write(p.join("blob.bin"), b"TODO\0binary").unwrap();
    dir
}

#[tokio::test]
async fn glob_honours_ignore_rules() {
    let dir = tree();
    let ctx = confined(dir.path());
    let tool = glob();
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "*.rs"})).await,
        ok("src/main.rs\nsrc/nested/lib.rs\n")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "src/*.rs"})).await,
        ok("src/main.rs\n")
    );
    assert_eq!(
        call(
            &tool,
            &ctx,
            json!({"pattern": "**/*.rs", "path": "src/nested"})
        )
        .await,
        ok("src/nested/lib.rs\n")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "*.py"})).await,
        ok("no files match \"*.py\" in \".\"")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "a[b"})).await,
        err(
            "invalid glob pattern \"a[b\": error parsing glob 'a[b': unclosed character class; missing ']'"
        )
    );
}

#[tokio::test]
async fn glob_caps_its_results() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..1_005 {
        fs::write(dir.path().join(format!("f{i:04}.txt")), "").unwrap();
    }
    let out = call(&glob(), &confined(dir.path()), json!({"pattern": "*.txt"})).await;
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.len(), 1_001);
    assert_eq!((lines[0], lines[999]), ("f0000.txt", "f0999.txt"));
    assert_eq!(
        lines[1_000],
        "[5 more files not shown; narrow the pattern or path]"
    );
}

#[tokio::test]
async fn grep_finds_lines_with_ignore_rules_and_glob() {
    let dir = tree();
    let ctx = confined(dir.path());
    let tool = grep();
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "TODO"})).await,
        ok("README.md:1:TODO: docs\nsrc/nested/lib.rs:2:// TODO: more\n")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "fn \\w+", "glob": "*.rs"})).await,
        ok("src/main.rs:1:fn main() {\nsrc/nested/lib.rs:1:pub fn hi() {}\n")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "hi", "path": "src/main.rs"})).await,
        ok("src/main.rs:2:    println!(\"hi\");\n")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"pattern": "nothing-here"})).await,
        ok("no matches for \"nothing-here\" in \".\"")
    );
    let bad = call(&tool, &ctx, json!({"pattern": "("})).await;
    assert!(bad.is_error);
    assert!(
        bad.content
            .starts_with("invalid regex \"(\": regex parse error:"),
        "{}",
        bad.content
    );
}

#[tokio::test]
async fn grep_caps_matches() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("many.txt"), "x\n".repeat(600)).unwrap();
    let out = call(&grep(), &confined(dir.path()), json!({"pattern": "x"})).await;
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.len(), 501);
    assert_eq!((lines[0], lines[499]), ("many.txt:1:x", "many.txt:500:x"));
    assert_eq!(
        lines[500],
        "[stopped after 500 matches; narrow the pattern, path or glob]"
    );
}

#[tokio::test]
async fn write_file_creates_parents_and_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = confined(dir.path());
    let tool = write_file();
    assert_eq!(
        call(
            &tool,
            &ctx,
            json!({"path": "a/b/c.txt", "content": "hello"})
        )
        .await,
        ok("created \"a/b/c.txt\" (5 bytes)")
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "a/b/c.txt", "content": "bye"})).await,
        ok("overwrote \"a/b/c.txt\" (3 bytes)")
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "bye"
    );
    assert_eq!(
        call(&tool, &ctx, json!({"path": "a", "content": ""})).await,
        err("\"a\" is a directory; give a file path")
    );
}

#[tokio::test]
async fn edit_file_replaces_exactly_once_unless_replace_all() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("e.txt");
    fs::write(&file, "alpha beta\nbeta gamma\n").unwrap();
    let ctx = confined(dir.path());
    let tool = edit_file();
    let edit = |old: &str, new: &str, all: bool| json!({"path": "e.txt", "old_string": old, "new_string": new, "replace_all": all});
    assert_eq!(
        call(&tool, &ctx, edit("beta", "BETA", false)).await,
        err(
            "old_string matches 2 times in \"e.txt\"; include more surrounding text to make it \
             unique, or set replace_all to true"
        )
    );
    assert_eq!(
        call(&tool, &ctx, edit("delta", "x", false)).await,
        err(
            "old_string was not found in \"e.txt\" (0 matches); read the file and copy the text exactly"
        )
    );
    assert_eq!(
        fs::read_to_string(&file).unwrap(),
        "alpha beta\nbeta gamma\n"
    );
    assert_eq!(
        call(&tool, &ctx, edit("alpha beta", "alpha b", false)).await,
        ok("replaced 1 occurrence in \"e.txt\"")
    );
    assert_eq!(
        call(&tool, &ctx, edit("a", "A", true)).await,
        ok("replaced 5 occurrences in \"e.txt\"")
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), "AlphA b\nbetA gAmmA\n");
    assert_eq!(
        call(&tool, &ctx, edit("b", "b", false)).await,
        err("old_string and new_string are identical; nothing to change")
    );
}

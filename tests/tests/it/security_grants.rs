//! "Allow for this session" is exact, end to end through the real `foya serve`: allowing
//! `git status` for the session grants `shell:git status` (the person is told so in the
//! question), covers `git status --short` later, and covers neither `git -c alias.x='!…'
//! x` nor `git -c core.pager=… -p log`, which are asked again (no grant offered) and,
//! denied, run nothing. The question's `<U+202E>` shows in the SSE payload instead of the
//! raw override.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::test_home;
use foya_tests::serve::Serve;
use serde_json::{Value, json};
use std::time::Duration;

const TOKEN: &str = "serve-token-2";

fn shell(id: &str, command: &str) -> Value {
    json!({"tool_calls": [{"id": id, "name": "shell", "arguments": {"command": command}}]})
}

/// Runs the scripted `responses` in one session of the real `foya serve` (mode `ask`,
/// working directory `work`), answering each approval question with `decide(event)`;
/// the session's events up to `turn_complete` and the raw SSE payloads.
async fn serve_turn(
    tmp: &std::path::Path,
    work: &std::path::Path,
    responses: &Value,
    decide: impl Fn(&Value) -> &'static str,
) -> (Vec<Value>, String) {
    let script = tmp.join("script.json");
    std::fs::write(&script, responses.to_string()).unwrap();
    let serve = Serve::start(tmp, TOKEN, &["--provider", "scripted"], |c| {
        c.arg("--script").arg(&script).env("HOME", test_home());
    })
    .await;
    let id = serve
        .create_session(&json!({"cwd": work, "approval_mode": "ask"}))
        .await;
    serve
        .turn_with_approver(&id, "go", Duration::from_secs(120), decide)
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_grant_covers_the_argv_prefix_and_never_code_running_options() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let responses = json!({"responses": [
        shell("c1", "git status"),
        shell("c2", "git status --short"),
        shell("c3", "git -c alias.x='!touch pwned-alias' x"),
        shell("c4", "git -c core.pager='touch pwned-pager' -p log"),
        shell("c5", "echo \u{202E}txt.exe"),
        {"text": "done"}
    ]});
    // Allow the first for the session; deny the rest.
    let (seen, raw) = serve_turn(tmp.path(), &work, &responses, |asked| {
        if asked["tool_call_id"] == "c1" {
            "allow_for_session"
        } else {
            "deny"
        }
    })
    .await;
    let asked: Vec<(&str, &str)> = seen
        .iter()
        .filter(|e| e["type"] == "approval_requested")
        .map(|e| {
            (
                e["tool_call_id"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
            )
        })
        .collect();
    let ids: Vec<&str> = asked.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, ["c1", "c3", "c4", "c5"], "{asked:?}");
    assert!(
        asked[0]
            .1
            .contains("allows `git status` with any further arguments"),
        "{}",
        asked[0].1
    );
    // `git x` (an alias) may also write `.git`: asked as a protected path.
    for (_, reason) in &asked[1..3] {
        assert!(reason.contains("is not offered"), "{reason}");
    }
    let grants: Vec<&Value> = seen
        .iter()
        .filter(|e| e["type"] == "approval_decided")
        .map(|e| &e["grant"])
        .collect();
    assert_eq!(
        grants,
        [
            &json!("shell:git status"),
            &Value::Null,
            &Value::Null,
            &Value::Null
        ]
    );
    assert!(!work.join("pwned-alias").exists());
    assert!(!work.join("pwned-pager").exists());
    // The override is shown, not obeyed, in what a web page reads.
    assert!(raw.contains("echo <U+202E>txt.exe"), "{raw}");
    assert!(!raw.contains('\u{202E}'));
}

/// A repository with one commit in `work` (git run with a fixed identity, no user config).
fn repository(work: &std::path::Path) {
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::write(work.join("README"), "hello\n").unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "README"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "one",
        ],
    ] {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(work)
            .env("HOME", test_home())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_grant_never_covers_an_option_that_writes_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    repository(&work);
    let responses = json!({"responses": [
        shell("c1", "git log -1"),
        shell("c2", "git log -1 --oneline"),
        shell("c3", "git log -1 --output=sub/x.txt"),
        shell("c4", "git log -1 --output sub/y.txt"),
        {"text": "done"}
    ]});
    // Allow the first for the session; deny the rest.
    let (seen, _) = serve_turn(tmp.path(), &work, &responses, |asked| {
        if asked["tool_call_id"] == "c1" {
            "allow_for_session"
        } else {
            "deny"
        }
    })
    .await;
    let asked: Vec<(&str, &str)> = seen
        .iter()
        .filter(|e| e["type"] == "approval_requested")
        .map(|e| {
            (
                e["tool_call_id"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
            )
        })
        .collect();
    let ids: Vec<&str> = asked.iter().map(|(id, _)| *id).collect();
    // `git log -1 --oneline` is covered by the grant `git log`; the writes are not.
    assert_eq!(ids, ["c1", "c3", "c4"], "{asked:?}");
    for (_, reason) in &asked[1..] {
        assert!(
            reason.contains("--output") && reason.contains("writes a file the command names"),
            "{reason}"
        );
    }
    let result = |id: &str| {
        seen.iter()
            .find(|e| e["type"] == "tool_message" && e["tool_call_id"] == id)
            .unwrap_or_else(|| panic!("no result of {id}: {seen:#?}"))
            .clone()
    };
    assert_eq!(result("c2")["is_error"], false, "{}", result("c2"));
    assert!(result("c2")["content"].as_str().unwrap().contains("one"));
    assert!(
        !work.join("sub/x.txt").exists(),
        "the granted prefix wrote a file"
    );
    assert!(
        !work.join("sub/y.txt").exists(),
        "the granted prefix wrote a file"
    );
}

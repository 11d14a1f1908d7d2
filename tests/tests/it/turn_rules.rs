//! The turn rules do what docs/turns.md says, end to end (the real `foya run` against the
//! mock provider speaking OpenAI Chat, real store files, the mock's request log):
//! identical calls within one step count toward the duplicate limit (the 3rd identical
//! call of a turn is refused, and its refusal says how often it ran); a summarisation
//! request receives a large tool result cut to fit, not a placeholder; a compaction
//! that would grow the context says so; a question a `PreToolUse` hook asks offers no
//! "allow for this session"; `foya run --session ID --approval MODE` names the flag it
//! ignores; the user's config and trust list follow `XDG_CONFIG_HOME` (a list left in
//! `~/.config/foya` is still read).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::{foya_bin, only_session_log};
use foya_tests::hook_project::HookProject;
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Output};

/// A home, a project directory and a data directory of one test.
struct Dirs {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    data: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let (home, work, data) = (root.join("home"), root.join("work"), root.join("data"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        Self {
            _tmp: tmp,
            home,
            work,
            data,
        }
    }

    /// Writes the user's `config.toml` (in `HOME/.config/foya`).
    fn user_config(&self, toml: &str) {
        let dir = self.home.join(".config/foya");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.toml"), toml).unwrap();
    }

    /// `foya ARGS --data-dir DATA` with this home (and no `XDG_CONFIG_HOME`), off the
    /// async runtime.
    async fn foya(&self, args: &[&str]) -> Output {
        let mut command = Command::new(foya_bin());
        command
            .args(args)
            .arg("--data-dir")
            .arg(&self.data)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("FOYA_DATA_DIR")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn");
        tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap()
    }

    /// `foya run` against `mock` (OpenAI Chat, model `m`, `--json`) in the work dir.
    async fn run(&self, mock: &MockProvider, extra: &[&str], prompt: &str) -> Output {
        let base = format!("{}/v1", mock.base_url());
        let work = self.work.display().to_string();
        let mut args = vec![
            "run",
            "--provider",
            "openai-chat",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
            "--cwd",
            &work,
        ];
        args.extend_from_slice(extra);
        args.push(prompt);
        self.foya(&args).await
    }
}

/// `foya ARGS` with `HOME` = `home` and `XDG_CONFIG_HOME` = `xdg`.
fn foya_xdg(home: &std::path::Path, args: &[&str], xdg: &std::path::Path) -> Output {
    Command::new(foya_bin())
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", xdg)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("FOYA_DATA_DIR")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// The persisted events a `--json` run printed.
fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("seq").is_some())
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn four_identical_calls_in_one_step_run_twice_and_the_third_is_refused() {
    let mock = MockProvider::start().await;
    let args = r#"{"command":"echo ran >> ran.txt"}"#;
    let four = [
        ("c1", "shell", args),
        ("c2", "shell", args),
        ("c3", "shell", args),
        ("c4", "shell", args),
    ];
    // The model sends the same four calls every step.
    for _ in 0..4 {
        mock.push(MockResponse::sse(openai_chat::tool_calls(&four)));
    }
    mock.push(MockResponse::sse(openai_chat::text("done")));
    let dirs = Dirs::new();
    let out = dirs.run(&mock, &["--approval", "bypass"], "go").await;
    let events = events(&out);
    let ran = std::fs::read_to_string(dirs.work.join("ran.txt")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        2,
        "the command ran {ran:?}\n{}",
        stderr(&out)
    );
    let results: Vec<(bool, String)> = events
        .iter()
        .filter(|e| e["type"] == "tool_message")
        .map(|e| {
            (
                e["is_error"].as_bool().unwrap_or(false),
                e["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        results.iter().filter(|(error, _)| !error).count(),
        2,
        "{results:#?}"
    );
    let refusal = &results[2].1;
    assert!(
        refusal.contains("was already made 2 times in this turn")
            && refusal.contains("the 3rd identical call of a turn is not run"),
        "{refusal}"
    );
    // Sent again in the next step: a loop, the turn ends.
    let end = events.last().unwrap();
    assert_eq!(
        (&end["type"], &end["status"], &end["reason"]),
        (
            &json!("turn_complete"),
            &json!("failed"),
            &json!("loop_detected")
        ),
        "{end}"
    );
    assert_eq!(out.status.code(), Some(1));
    // The model saw the refusal (the second request holds it) and was not asked again.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].body["messages"]
            .to_string()
            .contains("the 3rd identical call of a turn is not run")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_tool_result_reaches_the_summary_request_cut_to_fit() {
    let mock = MockProvider::start().await;
    // Usage close to the local estimate, so the estimate is not calibrated down.
    let call = openai_chat::tool_call("c1", "shell", r#"{"command":"seq 1 20000"}"#)
        .replace("\"prompt_tokens\":42", "\"prompt_tokens\":4000");
    mock.push(MockResponse::sse(call));
    mock.push(MockResponse::sse(openai_chat::text("the summary")));
    mock.push(MockResponse::sse(openai_chat::text("done")));
    let dirs = Dirs::new();
    dirs.user_config(&format!(
        "[profiles.tiny]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\
         api_key_env = \"FOYA_TEST_KEY_UNSET\"\napi_key_optional = true\n\
         context_window = 8000\n",
        mock.base_url()
    ));
    let work = dirs.work.display().to_string();
    let out = dirs
        .foya(&[
            "run",
            "--provider",
            "tiny",
            "--approval",
            "bypass",
            "--json",
            "--cwd",
            &work,
            "count to 20000",
        ])
        .await;
    let events = events(&out);
    assert!(
        events.iter().any(|e| e["type"] == "compaction_checkpoint"),
        "no compaction: {}\n{events:#?}",
        stderr(&out)
    );
    let requests = mock.requests();
    let summary = requests
        .iter()
        .find(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("You summarise"))
        })
        .expect("a summary request");
    let tool: Vec<&str> = summary.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        tool.len(),
        1,
        "the tool result is missing: {}",
        summary.body
    );
    assert!(tool[0].starts_with("1\n2\n3\n"), "{}", &tool[0][..100]);
    // The end of the output (the shell adds its exit code after it) is there too.
    assert!(tool[0].contains("\n19999\n20000\n"), "{}", tool[0]);
    assert!(
        tool[0].contains("characters cut to fit the summarisation request"),
        "{}",
        tool[0]
    );
    assert!(
        !summary
            .body
            .to_string()
            .contains("Earlier messages were omitted")
    );
    assert_eq!(events.last().unwrap()["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compaction_that_would_grow_the_context_says_so() {
    let mock = MockProvider::start().await;
    let too_large = MockResponse::json(
        413,
        &json!({"error": {"message": "Request too large", "type": "request_too_large"}}),
    );
    mock.push(too_large);
    // A summary far longer than the history it replaces.
    mock.push(MockResponse::sse(openai_chat::text(&"x".repeat(200_000))));
    let dirs = Dirs::new();
    let prompt = vec!["lorem"; 2_000].join(" ");
    let out = dirs.run(&mock, &["--approval", "bypass"], &prompt).await;
    let end = events(&out).last().cloned().unwrap();
    assert_eq!(end["reason"], "compaction_ineffective", "{end}");
    let message = end["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("compaction would grow the context from ")
            && message.contains("instead of shrinking it"),
        "{message}"
    );
    assert!(!message.contains("reduce"), "{message}");
    assert_eq!(mock.requests().len(), 2);
}

#[test]
fn a_question_a_hook_asks_offers_no_session_grant() {
    let ask = r#"#!/bin/bash
echo '{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"double-check"}}'
"#;
    let config = "[[hooks.PreToolUse]]\nhooks = [{ type = \"command\", command = 'bash .foya/hooks/ask.sh' }]\n";
    for mode in ["ask", "auto"] {
        let project = HookProject::new(config, &[("ask.sh", ask)]);
        // `ls` would be granted "for this session" by the policy in `ask` mode; in `auto`
        // the policy allows it and only the hook asks.
        let calls = json!([
            {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "ls -la"}}]},
            {"text": "done"}
        ]);
        let script = project.script("s.json", &calls);
        let out = project.run(mode, &script, &["go"]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let asked: Vec<Value> = project
            .events()
            .into_iter()
            .filter(|e| e["type"] == "approval_requested")
            .collect();
        assert_eq!(asked.len(), 1, "{mode}: {asked:?}");
        let reason = asked[0]["reason"].as_str().unwrap();
        assert!(
            !reason.contains("\"allow for this session\" allows"),
            "{mode}: {reason}"
        );
        assert!(
            reason.contains("\"allow for this session\" is not offered (a hook asked)"),
            "{mode}: {reason}"
        );
        assert!(reason.contains("double-check"), "{mode}: {reason}");
        assert_eq!(asked[0]["grant"], "", "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_with_session_names_the_approval_flag_it_ignores() {
    let mock = MockProvider::start().await;
    for text in ["one", "two", "three", "four"] {
        mock.push(MockResponse::sse(openai_chat::text(text)));
    }
    let dirs = Dirs::new();
    let first = dirs.run(&mock, &["--approval", "read-only"], "hi").await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let session = events(&first)[0]["session_id"].as_str().unwrap().to_owned();
    let resume = |approval: &'static str| {
        let session = session.clone();
        let dirs = &dirs;
        let mock = &mock;
        async move {
            let mut extra = vec!["--session".to_owned(), session];
            if !approval.is_empty() {
                extra.extend(["--approval".to_owned(), approval.to_owned()]);
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            dirs.run(mock, &extra, "again").await
        }
    };
    let widened = resume("bypass").await;
    assert_eq!(widened.status.code(), Some(0), "{}", stderr(&widened));
    let warning = format!(
        "foya: warning: --approval bypass is ignored: session {session} keeps the approval \
         mode it was created with (read-only)"
    );
    assert!(stderr(&widened).contains(&warning), "{}", stderr(&widened));
    // The same mode, or none: nothing to warn about.
    for approval in ["read-only", ""] {
        let out = resume(approval).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            !stderr(&out).contains("warning"),
            "{approval}: {}",
            stderr(&out)
        );
    }
    // The stored mode still governs the session.
    let log = only_session_log(&dirs.data);
    let created: Vec<&Value> = log
        .iter()
        .filter(|e| e["type"] == "session_created")
        .collect();
    assert_eq!(created[0]["config"]["approval_mode"], "read-only");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_user_config_and_trust_list_follow_xdg_config_home() {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::sse(openai_chat::text("from the xdg profile")));
    let dirs = Dirs::new();
    let xdg = dirs.home.join("xdg");
    std::fs::create_dir_all(xdg.join("foya")).unwrap();
    std::fs::write(
        xdg.join("foya/config.toml"),
        format!(
            "[profiles.mine]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\
             api_key_env = \"FOYA_TEST_KEY_UNSET\"\napi_key_optional = true\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let data = dirs.data.display().to_string();
    let work = dirs.work.display().to_string();
    let (run, trust) = tokio::task::spawn_blocking({
        let (home, xdg, data, work) = (dirs.home.clone(), xdg.clone(), data, work.clone());
        move || {
            let args = [
                "run",
                "--provider",
                "mine",
                "--data-dir",
                &data,
                "--cwd",
                &work,
                "hi",
            ];
            let run = foya_xdg(&home, &args, &xdg);
            (run, foya_xdg(&home, &["trust", &work], &xdg))
        }
    })
    .await
    .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_eq!(mock.requests().len(), 1);
    assert_eq!(trust.status.code(), Some(0), "{}", stderr(&trust));
    let list = std::fs::read_to_string(xdg.join("foya/trusted-projects.toml")).unwrap();
    assert!(list.contains(&work), "{list}");
    assert!(
        !dirs
            .home
            .join(".config/foya/trusted-projects.toml")
            .exists()
    );

    // A trust list written before the rule, in ~/.config/foya, with no list in the XDG
    // directory: still read, and updated where it is (nothing lost).
    let old = Dirs::new();
    let legacy = old.home.join(".config/foya");
    std::fs::create_dir_all(&legacy).unwrap();
    let old_work = old.work.display().to_string();
    std::fs::write(
        legacy.join("trusted-projects.toml"),
        format!("projects = [{old_work:?}]\n"),
    )
    .unwrap();
    let empty_xdg = old.home.join("elsewhere");
    let listed = foya_xdg(&old.home, &["trust", "--list"], &empty_xdg);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        old_work,
        "{}",
        stderr(&listed)
    );
}

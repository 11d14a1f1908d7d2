//! `foya run` end to end: the real binary against an in-process HTTP server speaking each
//! provider protocol byte for byte (and the in-process `--provider sim`), then `foya
//! sessions list|show` on the same data dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin;
use foya_tests::mock_provider::{MockProvider, MockResponse, anthropic, openai_chat, responses};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Runs `foya` with `args` (no API keys in the environment) and returns its output.
fn foya(args: &[&str], data_dir: &Path) -> Output {
    Command::new(foya_bin())
        .env("HOME", foya_tests::foya_bin::test_home())
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("RUST_LOG", "warn")
        .output()
        .expect("spawn foya")
}

/// The only session of a data dir.
fn only_session(data_dir: &Path) -> String {
    let out = foya(&["sessions", "list", "--json"], data_dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows[0]["id"].as_str().unwrap().to_owned()
}

/// The persisted events of a session, via `foya sessions show ID --json`.
fn show(data_dir: &Path, id: &str) -> Vec<Value> {
    let out = foya(&["sessions", "show", id, "--json"], data_dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Drives one tool-calling turn (a `shell` call, then text) and checks what the user,
/// the workspace, the provider and the log see.
async fn tool_calling_turn(
    provider_args: &[&str],
    cwd: &Path,
    mock: &MockProvider,
    tool_call: String,
    answer: String,
) {
    let data = tempfile::tempdir().unwrap();
    mock.push(MockResponse::sse(tool_call));
    mock.push(MockResponse::sse(answer));
    let mut args = vec!["run"];
    args.extend_from_slice(provider_args);
    args.extend_from_slice(&[
        "--approval",
        "bypass",
        "--cwd",
        cwd.to_str().unwrap(),
        "make the file",
    ]);
    let out = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let data = data.path().to_owned();
        move || foya(&args.iter().map(String::as_str).collect::<Vec<_>>(), &data)
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("The file is made."),
        "stdout: {:?}",
        out.stdout
    );
    // The command really ran in the session's working directory.
    assert_eq!(
        std::fs::read_to_string(cwd.join("made-by-tool.txt")).unwrap(),
        "hello\n"
    );

    // The second request carried the tool result back to the model.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].body.to_string().contains("hello"),
        "{}",
        requests[1].body
    );

    let id = only_session(data.path());
    let events = show(data.path(), &id);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "dense seqs"
    );
    let milestones: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|t| {
            matches!(
                *t,
                "user_message"
                    | "turn_started"
                    | "assistant_message"
                    | "tool_message"
                    | "turn_complete"
            )
        })
        .collect();
    assert_eq!(
        milestones,
        [
            "user_message",
            "turn_started",
            "assistant_message",
            "tool_message",
            "assistant_message",
            "turn_complete"
        ]
    );
    let first_answer = events
        .iter()
        .find(|e| e["type"] == "assistant_message")
        .unwrap();
    assert_eq!(first_answer["tool_calls"][0]["name"], "shell");
    assert_eq!(
        first_answer["tool_calls"][0]["arguments"]["command"],
        "echo hello | tee made-by-tool.txt"
    );
    let tool_message = events.iter().find(|e| e["type"] == "tool_message").unwrap();
    assert_eq!(tool_message["is_error"], false);
    assert!(tool_message["content"].as_str().unwrap().contains("hello"));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "turn_complete");
    assert_eq!(last["status"], "completed");
    assert_eq!(last["error"], Value::Null);
}

const ARGS: &str = r#"{"command":"echo hello | tee made-by-tool.txt"}"#;

#[tokio::test(flavor = "multi_thread")]
async fn openai_chat_turn_runs_a_shell_tool_and_persists_the_turn() {
    let mock = MockProvider::start().await;
    let cwd = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", mock.base_url());
    tool_calling_turn(
        &[
            "--provider",
            "openai-chat",
            "--base-url",
            &base_url,
            "--model",
            "m",
        ],
        cwd.path(),
        &mock,
        openai_chat::tool_call("call_1", "shell", ARGS),
        openai_chat::text("The file is made."),
    )
    .await;
    assert_eq!(mock.requests()[0].path, "/v1/chat/completions");
}

/// A profile in the project's `.foya/config.toml` selects each protocol.
async fn profile_turn(kind: &str, path: &str, tool_call: String, answer: String) {
    let mock = MockProvider::start().await;
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join(".foya")).unwrap();
    std::fs::write(
        cwd.path().join(".foya/config.toml"),
        format!(
            "[profiles.local]\nkind = \"{kind}\"\nbase_url = \"{}\"\nmodel = \"m\"\napi_key_env = \"FOYA_TEST_KEY_UNSET\"\napi_key_optional = true\n",
            mock.base_url()
        ),
    )
    .unwrap();
    foya_tests::foya_bin::trust_project(cwd.path());
    tool_calling_turn(
        &["--provider", "local"],
        cwd.path(),
        &mock,
        tool_call,
        answer,
    )
    .await;
    assert!(
        mock.requests()[0].path.ends_with(path),
        "{}",
        mock.requests()[0].path
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_profile_turn() {
    profile_turn(
        "anthropic",
        "/messages",
        anthropic::tool_call("toolu_1", "shell", ARGS),
        anthropic::text("The file is made."),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_responses_profile_turn() {
    profile_turn(
        "openai-responses",
        "/responses",
        responses::tool_call("call_1", "shell", ARGS),
        responses::text("The file is made."),
    )
    .await;
}

#[test]
fn a_missing_api_key_is_a_one_line_usage_error() {
    let data = tempfile::tempdir().unwrap();
    let out = foya(&["run", "--provider", "openai", "hello"], data.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("OPENAI_API_KEY"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_key_fails_the_turn_with_exit_1_and_a_classified_error() {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::json(
        401,
        &serde_json::json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    ));
    let data = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", mock.base_url());
    let out = tokio::task::spawn_blocking({
        let data = data.path().to_owned();
        move || {
            foya(
                &[
                    "run",
                    "--provider",
                    "openai-chat",
                    "--base-url",
                    &base_url,
                    "--model",
                    "m",
                    "--json",
                    "hi",
                ],
                &data,
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let last: Value = serde_json::from_str(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["type"], "turn_complete");
    assert_eq!(last["status"], "failed");
    assert_eq!(last["error"]["class"], "auth");
}

#[test]
fn the_readme_demo_runs_a_multi_step_turn_with_real_tools() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = tempfile::tempdir().unwrap();
    let out = foya(
        &[
            "run",
            "--provider",
            "scripted",
            "--script",
            root.join("examples/demo/script.json").to_str().unwrap(),
            "--cwd",
            root.join("examples/demo/workspace").to_str().unwrap(),
            "--approval",
            "bypass",
            "What is in this project and what is left to do?",
        ],
        data.path(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("There are two open TODOs"), "{stdout}");
    let events = show(data.path(), &only_session(data.path()));
    let tool_results: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_message")
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_results.len(), 3, "{tool_results:?}");
    assert!(
        tool_results[0].contains("inventory.py"),
        "list_dir result: {}",
        tool_results[0]
    );
    assert!(
        tool_results[1].contains("def restock"),
        "read_file result: {}",
        tool_results[1]
    );
    assert!(
        tool_results[2].contains("TODO: reject negative counts"),
        "shell result: {}",
        tool_results[2]
    );
}

/// `--provider sim`: the simulated model in process — no key, no script, no server. Its
/// default turn (three steps) reads `README.md` in each of the first two and then
/// answers; the session records the provider and the simulator's model.
#[test]
fn run_with_the_in_process_sim_completes_a_tool_calling_turn() {
    let data = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(cwd.path().join("README.md"), "# Sim test project\n").unwrap();
    let out = foya(
        &[
            "run",
            "--provider",
            "sim",
            "--cwd",
            cwd.path().to_str().unwrap(),
            "what is this project?",
        ],
        data.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");

    let events = show(data.path(), &only_session(data.path()));
    let created = &events[0];
    assert_eq!(created["type"], "session_created");
    assert_eq!(
        (&created["config"]["provider"], &created["config"]["model"]),
        (&Value::from("sim"), &Value::from("sim-1"))
    );
    let milestones: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|t| {
            matches!(
                *t,
                "user_message"
                    | "turn_started"
                    | "assistant_message"
                    | "tool_message"
                    | "turn_complete"
            )
        })
        .collect();
    assert_eq!(
        milestones,
        [
            "user_message",
            "turn_started",
            "assistant_message",
            "tool_message",
            "assistant_message",
            "tool_message",
            "assistant_message",
            "turn_complete"
        ]
    );
    let calls: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "assistant_message")
        .flat_map(|e| e["tool_calls"].as_array().unwrap())
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in calls {
        assert_eq!(call["name"], "read_file");
        assert_eq!(call["arguments"]["path"], "README.md");
    }
    for result in events.iter().filter(|e| e["type"] == "tool_message") {
        assert_eq!(result["is_error"], false, "{result}");
        assert!(
            result["content"]
                .as_str()
                .unwrap()
                .contains("# Sim test project"),
            "{result}"
        );
    }
    let answer = events
        .iter()
        .rfind(|e| e["type"] == "assistant_message")
        .unwrap()["text"]
        .as_str()
        .unwrap();
    assert!(!answer.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(answer),
        "stdout: {:?}",
        out.stdout
    );
    let last = events.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"], &last["error"]),
        (
            &Value::from("turn_complete"),
            &Value::from("completed"),
            &Value::Null
        )
    );
}

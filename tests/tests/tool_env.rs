//! Tool processes do not inherit the runtime's secrets: a `shell` call of `foya run`,
//! sandboxed (`--approval auto`) or not (`bypass`), sees the environment without the
//! variables whose names contain `KEY`, `SECRET` or `TOKEN` (where API keys live), and
//! with every other variable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::child::{read_until, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::scripted;
use serde_json::json;
use std::time::{Duration, Instant};

/// Global wait for one run.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The `tool_message` content of a `shell` call printing three variables, in a `foya run`
/// with `approval`.
fn printed_by_a_tool(approval: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let command = r#"printf '%s|%s|%s|%s\n' "$FOYA_TEST_VISIBLE" "$FOYA_TEST_API_KEY" "$MY_SECRET_VALUE" "$Gh_Token""#;
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let piped = spawn_json_lines(
        scripted("run", approval, &script, &data, &work)
            .env("FOYA_TEST_VISIBLE", "shown")
            .env("FOYA_TEST_API_KEY", "sk-WITHHELD-1")
            .env("MY_SECRET_VALUE", "WITHHELD-2")
            .env("Gh_Token", "WITHHELD-3")
            .args(["--json", "start"]),
    );
    let deadline = Instant::now() + TIMEOUT;
    let result = read_until(&piped.lines, deadline, |l| l["type"] == "tool_message")
        .pop()
        .unwrap();
    assert_eq!(wait_exit(piped.child, deadline).code(), Some(0));
    result["content"].as_str().unwrap().to_owned()
}

#[test]
fn a_sandboxed_tool_does_not_see_the_runtimes_keys_secrets_or_tokens() {
    assert_eq!(printed_by_a_tool("auto"), "shown|||\n[exit code: 0]");
}

#[test]
fn an_unsandboxed_tool_does_not_see_them_either() {
    assert_eq!(printed_by_a_tool("bypass"), "shown|||\n[exit code: 0]");
}

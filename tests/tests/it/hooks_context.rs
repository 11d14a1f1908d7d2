//! What hooks hand the model, seen in the requests a mock OpenAI Chat server received
//! from the real `foya run`: `SessionStart` and `UserPromptSubmit` context in the first
//! request; Claude Code's documented `PostToolUse` formatter (`Edit|MultiEdit|Write`,
//! a `jq` one-liner) runs unchanged and a linter's complaints (exit 2) reach the model
//! with the tool's result; a blocked prompt is logged with its block but never sent; a
//! 413 compaction first runs the `PreCompact` hooks, which can read the transcript.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::hook_project::{HookProject, assert_ok, decisions, last_reason};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};

/// The `content` of every message of `role` in a recorded chat request.
fn contents(body: &Value, role: &str) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

const PROMPT_CONTEXT: &str = r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
if "password" in data["prompt"]:
    print("Security policy violation: the prompt contains a password", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                  "additionalContext": "Current sprint: hooks"}}))
"#;

/// A `UserPromptSubmit` hook whose plain stdout (context) quotes the prompt.
const QUOTE_PROMPT: &str = r#"#!/usr/bin/env python3
import json, sys
print("quoted: " + json.load(sys.stdin)["prompt"])
"#;

/// Claude Code's formatter example (hooks guide), with `sed` standing in for
/// `prettier` and `.txt` for `.ts`; then a linter whose complaints go to the model.
const CONFIG: &str = r#"
[[hooks.SessionStart]]
hooks = [{ type = "command", command = "echo branch: main" }]

[[hooks.UserPromptSubmit]]
hooks = [{ type = "command", command = "python3 .foya/hooks/prompt.py" }]

[[hooks.PostToolUse]]
matcher = "Edit|MultiEdit|Write"
hooks = [
  { type = "command", command = "jq -r '.tool_input.file_path' | { read file_path; if echo \"$file_path\" | grep -q '\\.txt$'; then sed -i 's/[[:space:]]*$//' \"$file_path\"; fi; }" },
  { type = "command", command = "jq -r '.tool_input.file_path' | xargs grep -n TODO >&2 && exit 2 || exit 0" },
]
"#;

fn chat(mock: &MockProvider) -> Vec<String> {
    let base = format!("{}/v1", mock.base_url());
    [
        "--provider",
        "openai-chat",
        "--base-url",
        &base,
        "--model",
        "m",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn context_and_feedback_of_hooks_reach_the_next_request() {
    let mock = MockProvider::start().await;
    let project = HookProject::new(CONFIG, &[("prompt.py", PROMPT_CONTEXT)]);
    let args = json!({"path": "notes.txt", "content": "hello   \nTODO: fix\n"}).to_string();
    mock.push(MockResponse::sse(openai_chat::tool_call(
        "w1",
        "write_file",
        &args,
    )));
    mock.push(MockResponse::sse(openai_chat::text("Noted.")));
    let provider = chat(&mock);
    let (out, project) = tokio::task::spawn_blocking(move || {
        let provider: Vec<&str> = provider.iter().map(String::as_str).collect();
        let out = project.run_with(&provider, "auto-edit", &["write the notes"]);
        (out, project)
    })
    .await
    .unwrap();
    assert_ok(&out);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let users = contents(&requests[0].body, "user");
    assert_eq!(
        users[users.len() - 3..],
        [
            "write the notes".to_owned(),
            "[hook context: SessionStart]\nbranch: main".to_owned(),
            "[hook context: UserPromptSubmit]\nCurrent sprint: hooks".to_owned(),
        ]
    );
    // The formatter ran on the written file; the linter's stderr is in the result.
    let notes = std::fs::read_to_string(project.work.join("notes.txt")).unwrap();
    assert_eq!(notes, "hello\nTODO: fix\n");
    let tool = contents(&requests[1].body, "tool");
    assert_eq!(tool.len(), 1);
    assert!(
        tool[0].ends_with("\n\n[hook] PostToolUse hook feedback: 2:TODO: fix"),
        "{}",
        tool[0]
    );
    let events = project.events();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    assert_eq!(
        decisions(&events),
        pairs(&[
            ("SessionStart", "none"),
            ("UserPromptSubmit", "none"),
            ("PostToolUse", "none"),
            ("PostToolUse", "block"),
        ])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blocked_prompt_is_logged_with_its_block_and_never_sent() {
    let mock = MockProvider::start().await;
    // A second hook adds context quoting the prompt: when the first blocks the prompt,
    // that context must not reach the model either.
    let config = "[[hooks.UserPromptSubmit]]\nhooks = [{ type = \"command\", command = \"python3 .foya/hooks/prompt.py\" }]\n\
                  [[hooks.UserPromptSubmit]]\nhooks = [{ type = \"command\", command = \"python3 .foya/hooks/quote.py\" }]\n";
    let project = HookProject::new(
        config,
        &[("prompt.py", PROMPT_CONTEXT), ("quote.py", QUOTE_PROMPT)],
    );
    mock.push(MockResponse::sse(openai_chat::text("Hello.")));
    let provider = chat(&mock);
    let (first, second, project) = tokio::task::spawn_blocking(move || {
        let provider: Vec<&str> = provider.iter().map(String::as_str).collect();
        let first = project.run_with(&provider, "auto", &["my password is hunter2"]);
        let id = project.events()[0]["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let second = project.run_with(&provider, "auto", &["--session", &id, "hello"]);
        (first, second, project)
    })
    .await
    .unwrap();
    assert_ok(&first);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        stderr.contains("⚑ UserPromptSubmit hook: block: Security policy violation"),
        "{stderr}"
    );
    assert_ok(&second);
    let events = project.events();
    let prompts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "user_message")
        .map(|e| &e["input"]["text"])
        .collect();
    assert_eq!(prompts, [&json!("my password is hunter2"), &json!("hello")]);
    let blocked = events.iter().find(|e| e["type"] == "hook_ran").unwrap();
    let quoted = events
        .iter()
        .filter(|e| e["type"] == "hook_ran" && e["hook"] == "python3 .foya/hooks/quote.py")
        .map(|e| e["additional_context"].clone())
        .collect::<Vec<_>>();
    // The blocked turn's context is not kept; the second turn's is.
    assert_eq!(quoted, [Value::Null, json!("quoted: hello")]);
    assert_eq!(
        (&blocked["decision"], &blocked["reason"]),
        (
            &json!("block"),
            &json!("Security policy violation: the prompt contains a password")
        )
    );
    let first_turn: Vec<Value> = events
        .iter()
        .take_while(|e| e["type"] != "turn_complete")
        .chain(events.iter().find(|e| e["type"] == "turn_complete"))
        .cloned()
        .collect();
    assert_eq!(last_reason(&first_turn), "prompt blocked by hook");
    // Only the second turn asked the model, and without the blocked prompt.
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let users = contents(&requests[0].body, "user");
    assert!(users.iter().all(|u| !u.contains("hunter2")), "{users:?}");
    assert_eq!(
        users[users.len() - 2..],
        [
            "[hook context: UserPromptSubmit]\nCurrent sprint: hooks",
            "[hook context: UserPromptSubmit]\nquoted: hello"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pre_compact_runs_before_an_overflow_compaction_with_the_transcript() {
    let mock = MockProvider::start().await;
    let config = "[[hooks.PreCompact]]\nmatcher = \"auto\"\nhooks = [{ type = \"command\", command = \"python3 .foya/hooks/log.py LOG\" }]\n";
    let project = HookProject::new(config, &[]);
    mock.push(MockResponse::json(
        413,
        &json!({"error": {"message": "Request Entity Too Large"}}),
    ));
    mock.push(MockResponse::sse(openai_chat::text("the summary")));
    mock.push(MockResponse::sse(openai_chat::text("done")));
    let provider = chat(&mock);
    let (out, project) = tokio::task::spawn_blocking(move || {
        let provider: Vec<&str> = provider.iter().map(String::as_str).collect();
        let prompt = vec!["lorem"; 2_000].join(" ");
        (project.run_with(&provider, "auto", &[&prompt]), project)
    })
    .await
    .unwrap();
    assert_ok(&out);
    let logged = project.logged();
    assert_eq!(logged.len(), 1, "{logged:?}");
    let events = project.events();
    assert_eq!(
        (
            &logged[0]["hook_event_name"],
            &logged[0]["trigger"],
            &logged[0]["session_id"]
        ),
        (
            &json!("PreCompact"),
            &json!("auto"),
            &events[0]["session_id"]
        )
    );
    assert_eq!(logged[0]["custom_instructions"], "");
    let transcript = logged[0]["_transcript_types"].as_array().unwrap();
    assert!(
        transcript.contains(&json!("user_message")),
        "{transcript:?}"
    );
    // The hook ran before the compaction started.
    let types: Vec<&Value> = events.iter().map(|e| &e["type"]).collect();
    let ran = types.iter().position(|t| *t == "hook_ran").unwrap();
    let started = types
        .iter()
        .position(|t| *t == "compaction_started")
        .unwrap();
    assert!(ran < started, "{types:?}");
}

//! A tool call whose name the model left empty (or filled with characters no tool name
//! has) is answered with an `is_error` result and kept in the log as the model sent it,
//! but replayed to the provider as `invalid_tool_name`: the mock provider refuses invalid
//! names like the real APIs (400), so the next request of the session succeeds only
//! because of that. The real `foya run` binary, each wire format.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya, only_session_log, output_in};
use foya_tests::mock_provider::{MockProvider, MockResponse, anthropic, openai_chat, responses};
use serde_json::{Value, json};

/// The names of the tool calls in a request body, per wire format, in order.
fn replayed_names(body: &Value) -> Vec<Value> {
    let mut names = Vec::new();
    for msg in body["messages"].as_array().into_iter().flatten() {
        for call in msg["tool_calls"].as_array().into_iter().flatten() {
            names.push(call["function"]["name"].clone());
        }
        for block in msg["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_use" {
                names.push(block["name"].clone());
            }
        }
    }
    for item in body["input"].as_array().into_iter().flatten() {
        if item["type"] == "function_call" {
            names.push(item["name"].clone());
        }
    }
    names
}

/// One `foya run`: the model calls `bad_name`, gets an error result, then answers.
async fn turn_with_bad_name(kind: &str, bad_name: &str, tool_call: String, answer: String) {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::sse(tool_call));
    mock.push(MockResponse::sse(answer));
    let data = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // Anthropic's path is `/v1/messages`; the OpenAI protocols' base URL ends in `/v1`.
    let base_url = if kind == "anthropic" {
        mock.base_url()
    } else {
        format!("{}/v1", mock.base_url())
    };
    let args: Vec<String> = [
        "run",
        "--provider",
        kind,
        "--base-url",
        &base_url,
        "--model",
        "m",
        "--approval",
        "bypass",
        "--cwd",
        cwd.path().to_str().unwrap(),
        "list the files",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = tokio::task::spawn_blocking({
        let data = data.path().to_owned();
        move || {
            output_in(
                foya(),
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
                &data,
            )
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{kind}: stderr: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("No such tool."),
        "{kind}: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );

    // The second request replayed the call under the placeholder (and was accepted).
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{kind}");
    assert_eq!(
        replayed_names(&requests[1].body),
        vec![json!("invalid_tool_name")],
        "{kind}"
    );

    // The log keeps what the model sent, answered with an error result.
    let events = only_session_log(data.path());
    let call = events
        .iter()
        .find(|e| e["type"] == "assistant_message")
        .map(|e| e["tool_calls"][0].clone())
        .unwrap();
    assert_eq!(call["name"], json!(bad_name), "{kind}");
    let result = events.iter().find(|e| e["type"] == "tool_message").unwrap();
    assert_eq!(
        (&result["tool_call_id"], &result["is_error"]),
        (&call["id"], &json!(true)),
        "{kind}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_chat_replays_an_empty_tool_name_as_a_placeholder_and_the_turn_completes() {
    turn_with_bad_name(
        "openai-chat",
        "",
        openai_chat::tool_call("call_1", "", "{}"),
        openai_chat::text("No such tool."),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_replays_an_invalid_tool_name_as_a_placeholder_and_the_turn_completes() {
    turn_with_bad_name(
        "anthropic",
        "files.list",
        anthropic::tool_call("toolu_1", "files.list", "{}"),
        anthropic::text("No such tool."),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_responses_replays_an_empty_tool_name_as_a_placeholder_and_the_turn_completes() {
    turn_with_bad_name(
        "openai-responses",
        "",
        responses::tool_call("call_1", "", "{}"),
        responses::text("No such tool."),
    )
    .await;
}

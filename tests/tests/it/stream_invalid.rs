//! Responses that cannot be understood, end to end (`foya run` against the mock
//! provider): a malformed `data:` line in the middle of a Chat stream, and a Chat stream
//! that is only `data: [DONE]`, each fail their request with `invalid_response` (never
//! an answer with text silently missing), which is retried like a cut stream; the retry's
//! complete answer is the turn's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya, only_session_log, output_in};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};

/// Runs one turn whose first response is `bad`; returns the session's `provider_retry`
/// errors and its assistant messages' texts.
async fn turn_after(bad: String) -> (Vec<Value>, Vec<Value>) {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::sse(bad));
    mock.push(MockResponse::sse(openai_chat::text("Hello world.")));
    let data = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", mock.base_url());
    let out = tokio::task::spawn_blocking({
        let data = data.path().to_owned();
        move || {
            let args = ["run", "--provider", "openai-chat", "--base-url", &base_url];
            output_in(
                foya(),
                &[&args[..], &["--model", "m", "say hello"]].concat(),
                &data,
            )
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(mock.requests().len(), 2);
    let events = only_session_log(data.path());
    let retries = events
        .iter()
        .filter(|e| e["type"] == "provider_retry")
        .map(|e| json!({"attempt": e["attempt"], "error": e["error"]}))
        .collect();
    let answers = events
        .iter()
        .filter(|e| e["type"] == "assistant_message")
        .map(|e| e["text"].clone())
        .collect();
    (retries, answers)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_chunk_mid_stream_is_invalid_response_and_retried() {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
            "created": 1_764_400_000, "model": "mock-1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    // Text, then a chunk whose JSON is cut off, then the rest of a complete answer.
    let bad = [
        chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null),
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\n\n".to_owned(),
        chunk(json!({"content": " world."}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let (retries, answers) = turn_after(bad).await;
    assert_eq!(
        retries,
        vec![
            json!({"attempt": 2, "error": {"class": "invalid_response", "message":
            "malformed OpenAI Chat stream event: its data is not JSON (EOF while parsing a \
             string at line 1 column 45): `{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo`"}})
        ]
    );
    assert_eq!(answers, vec![json!("Hello world.")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_stream_of_only_done_is_invalid_response_and_retried() {
    let (retries, answers) = turn_after("data: [DONE]\n\n".to_owned()).await;
    assert_eq!(
        retries,
        vec![
            json!({"attempt": 2, "error": {"class": "invalid_response", "message":
            "the stream ended without any output (no text, tool call or finish reason)"}})
        ]
    );
    assert_eq!(answers, vec![json!("Hello world.")]);
}

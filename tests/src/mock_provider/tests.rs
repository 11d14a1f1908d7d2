//! The mock speaks the real wire formats: its builders decode through the real
//! `HttpModelClient`, and queued JSON errors classify.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{MockProvider, MockResponse, anthropic, openai_chat, responses};
use foya_actors::provider::http::HttpModelClient;
use foya_actors::provider::profile::ProviderProfile;
use foya_actors::provider::wire::ProviderKind;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{
    ErrorClass, FinishReason, Input, Message, StreamAggregate, ToolCall, ToolCallId,
};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn run(mock: &MockProvider, kind: ProviderKind) -> StreamAggregate {
    let mut profile = ProviderProfile::for_kind(kind, "mock-model");
    profile.base_url = mock.base_url();
    let client = HttpModelClient::with_env(profile, &|_| Some("k".into())).unwrap();
    let request = ModelRequest {
        messages: vec![Message::User(Input::text("hi"))].into(),
        ..ModelRequest::default()
    };
    let mut agg = StreamAggregate::new();
    for e in client
        .stream(request, CancellationToken::new())
        .collect::<Vec<_>>()
        .await
    {
        agg.apply(&e);
    }
    agg
}

#[tokio::test]
async fn builders_decode_through_the_real_client_for_every_protocol() {
    let mock = MockProvider::start().await;
    type Builders = (
        ProviderKind,
        fn(&str) -> String,
        fn(&str, &str, &str) -> String,
    );
    let builders: [Builders; 3] = [
        (
            ProviderKind::OpenaiChat,
            openai_chat::text,
            openai_chat::tool_call,
        ),
        (
            ProviderKind::Anthropic,
            anthropic::text,
            anthropic::tool_call,
        ),
        (
            ProviderKind::OpenaiResponses,
            responses::text,
            responses::tool_call,
        ),
    ];
    for (kind, text, tool_call) in builders {
        mock.push(MockResponse::sse(text("Hello there, world.")));
        let msg = run(&mock, kind).await.to_message();
        assert_eq!(
            (msg.text.as_str(), msg.finish_reason),
            ("Hello there, world.", Some(FinishReason::Stop)),
            "{kind}"
        );

        mock.push(MockResponse::sse(tool_call(
            "call_1",
            "read_file",
            r#"{"path":"é.txt"}"#,
        )));
        let msg = run(&mock, kind).await.to_message();
        assert_eq!(
            msg.tool_calls,
            vec![ToolCall {
                id: ToolCallId::new("call_1"),
                name: "read_file".into(),
                arguments: json!({"path": "é.txt"}),
                extra: None
            }],
            "{kind}"
        );
        assert_eq!(msg.finish_reason, Some(FinishReason::ToolCalls));
    }
    let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [
            "/chat/completions",
            "/chat/completions",
            "/v1/messages",
            "/v1/messages",
            "/responses",
            "/responses"
        ]
    );
    assert_eq!(mock.requests()[2].headers["x-api-key"], "k");
    assert_eq!(
        mock.requests()[0].body["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
}

#[tokio::test]
async fn json_errors_and_empty_queue_classify() {
    let mock = MockProvider::start().await;
    mock.push(
        MockResponse::json(
            429,
            &json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
        .header("retry-after", "2"),
    );
    let err = run(&mock, ProviderKind::Anthropic).await.error.unwrap();
    assert_eq!(
        (err.class, err.retry_after_ms),
        (ErrorClass::RateLimited, Some(2000))
    );
    let err = run(&mock, ProviderKind::OpenaiChat).await.error.unwrap();
    assert_eq!((err.class, err.status), (ErrorClass::Server, Some(500)));
}

#[tokio::test]
async fn cut_after_breaks_the_stream_mid_way() {
    let mock = MockProvider::start().await;
    mock.push(
        MockResponse::sse(openai_chat::text("one two three"))
            .cut_after(3)
            .chunk_delay_ms(20),
    );
    let agg = run(&mock, ProviderKind::OpenaiChat).await;
    assert_eq!(agg.text, "one two ");
    assert_eq!(
        agg.error.map(|e| e.class),
        Some(ErrorClass::StreamInterrupted)
    );
}

/// The strict mock refuses Anthropic-invalid tool-call ids with the API's own 400s.
#[tokio::test]
async fn anthropic_tool_ids_breaking_the_api_rules_are_refused_like_the_api() {
    let mock = MockProvider::start().await;
    let turn = |use_id: &str, result_id: &str| {
        vec![
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": use_id, "name": "shell", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": result_id, "content": "ok"}]}),
        ]
    };
    let cases = [
        (
            turn("call.1 x", "call.1 x"),
            "messages.0.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            [turn("a", "a"), turn("a", "a")].concat(),
            "messages.2.content.0: `tool_use` ids must be unique",
        ),
        (
            turn("a", "b"),
            "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: b. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
    ];
    let client = reqwest::Client::new();
    for (messages, message) in cases {
        let response = client
            .post(format!("{}/v1/messages", mock.base_url()))
            .json(&json!({"model": "m", "max_tokens": 8, "messages": messages}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            (status, body),
            (
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
            )
        );
    }
}

#[tokio::test]
async fn wait_for_requests_returns_once_the_nth_request_arrived() {
    let mock = MockProvider::start().await;
    let waiting = tokio::spawn({
        let url = format!("{}/v1/chat/completions", mock.base_url());
        async move {
            let client = reqwest::Client::new();
            for _ in 0..2 {
                let _ = client.post(&url).json(&json!({})).send().await;
            }
        }
    });
    let requests = mock.wait_for_requests(2).await;
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/v1/chat/completions"));
    waiting.await.unwrap();
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "the mock provider received 0 requests")]
async fn wait_for_requests_fails_after_its_timeout() {
    let mock = MockProvider::start().await;
    mock.wait_for_requests(1).await;
}

//! The simulator over real HTTP: a `serve_sim` server on 127.0.0.1:0, requests with
//! reqwest, bodies parsed as SSE in each vendor's format.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use eventsource_stream::Eventsource;
use foya_actors::provider::http::HttpModelClient;
use foya_actors::provider::profile::ProviderProfile;
use foya_actors::provider::sim::{ErrorRates, SimClient, SimConfig};
use foya_actors::provider::wire::ProviderKind;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{
    AssistantMessage, ErrorClass, Input, Message, ProviderError, StreamAggregate, StreamEvent,
    ToolCall, ToolCallId, ToolMessage,
};
use foya_sim::serve_sim;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn start(config: SimConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_sim(listener, config));
    format!("http://{addr}")
}

struct Answer {
    status: u16,
    content_type: String,
    retry_after_ms: Option<String>,
    body: String,
    /// `(event name, data)` of each SSE event.
    events: Vec<(String, String)>,
}

async fn post(url: &str, body: &Value) -> Answer {
    let response = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let content_type = header("content-type").unwrap();
    let retry_after_ms = header("retry-after-ms");
    let body = response.text().await.unwrap();
    let stream = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(body.clone()))]);
    let events = stream
        .eventsource()
        .map(|e| e.unwrap())
        .map(|e| (e.event, e.data))
        .collect()
        .await;
    Answer {
        status,
        content_type,
        retry_after_ms,
        body,
        events,
    }
}

fn json_of(data: &str) -> Value {
    serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}"))
}

/// Chat: every `data:` is a JSON chunk but the final `[DONE]`; returns the text.
fn check_chat(answer: &Answer) -> String {
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (200, "text/event-stream")
    );
    let (last, chunks) = answer.events.split_last().unwrap();
    assert_eq!(last, &("message".to_owned(), "[DONE]".to_owned()));
    let mut text = String::new();
    for (_, data) in chunks {
        let chunk = json_of(data);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        if let Some(t) = chunk["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    text
}

/// Anthropic: names match `type`s, blocks open, stream and close in order; returns the text.
fn check_anthropic(answer: &Answer) -> String {
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (200, "text/event-stream")
    );
    let names: Vec<&str> = answer.events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["message_start", "ping"]);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    let (mut open, mut next, mut text) = (None::<u64>, 0, String::new());
    for (name, data) in &answer.events {
        let data = json_of(data);
        assert_eq!(data["type"], name.as_str());
        match name.as_str() {
            "content_block_start" => {
                assert_eq!((open, data["index"].as_u64()), (None, Some(next)));
                open = Some(next);
                next += 1;
            }
            "content_block_delta" => {
                assert_eq!(data["index"].as_u64(), open);
                text.push_str(data["delta"]["text"].as_str().unwrap_or_default());
            }
            "content_block_stop" => assert_eq!(open.take(), data["index"].as_u64()),
            "message_delta" => assert_eq!(open, None),
            _ => {}
        }
    }
    text
}

/// Responses: names match `type`s, sequence numbers count from 0; returns the text.
fn check_responses(answer: &Answer) -> String {
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (200, "text/event-stream")
    );
    assert_eq!(answer.events.first().unwrap().0, "response.created");
    assert_eq!(answer.events.last().unwrap().0, "response.completed");
    let mut text = String::new();
    for (i, (name, data)) in answer.events.iter().enumerate() {
        let data = json_of(data);
        assert_eq!(
            (data["type"].as_str(), data["sequence_number"].as_u64()),
            (Some(name.as_str()), Some(i as u64))
        );
        if name == "response.output_text.delta" {
            text.push_str(data["delta"].as_str().unwrap());
        }
    }
    text
}

fn config() -> SimConfig {
    SimConfig {
        reasoning_tokens: 6,
        response_tokens: 12,
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn each_format_streams_a_tool_step_for_a_new_turn_that_offers_tools() {
    let base = start(config()).await;
    let user = json!({"role": "user", "content": "hi"});
    // Each format's way of offering `read_file`: a request without tools gets text.
    let chat_tools =
        json!([{"type": "function", "function": {"name": "read_file", "parameters": {}}}]);
    let chat = post(
        &format!("{base}/v1/chat/completions"),
        &json!({"model": "m", "messages": [user], "tools": chat_tools}),
    )
    .await;
    check_chat(&chat);
    assert!(
        chat.body.contains(r#""finish_reason":"tool_calls""#),
        "{}",
        chat.body
    );
    assert!(chat.body.contains(r#""reasoning_content":"#));
    let untooled = post(
        &format!("{base}/v1/chat/completions"),
        &json!({"model": "m", "messages": [user]}),
    )
    .await;
    check_chat(&untooled);
    assert!(
        untooled.body.contains(r#""finish_reason":"stop""#),
        "{}",
        untooled.body
    );
    let anthropic_tools = json!([{"name": "read_file", "input_schema": {"type": "object"}}]);
    let anthropic = post(
        &format!("{base}/v1/messages"),
        &json!({"model": "m", "messages": [user], "tools": anthropic_tools}),
    )
    .await;
    check_anthropic(&anthropic);
    assert!(anthropic.body.contains(r#""stop_reason":"tool_use""#));
    assert!(anthropic.body.contains(r#""type":"signature_delta""#));
    let responses = post(
        &format!("{base}/v1/responses"),
        &json!({"model": "m", "input": "hi",
            "tools": [{"type": "function", "name": "read_file", "parameters": {}}]}),
    )
    .await;
    check_responses(&responses);
    assert!(responses.body.contains(r#""name":"read_file""#));
}

#[tokio::test]
async fn the_final_step_is_the_same_text_over_every_format_and_in_process() {
    let base = start(config()).await;
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}});
    let chat = json!({"model": "m", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "assistant", "content": null, "tool_calls": [call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "x"},
    ]});
    let use_block =
        |id: &str| json!([{"type": "tool_use", "id": id, "name": "read_file", "input": {}}]);
    let result = |id: &str| json!([{"type": "tool_result", "tool_use_id": id, "content": "x"}]);
    let anthropic = json!({"model": "m", "system": "be brief", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": use_block("a")},
        {"role": "user", "content": result("a")},
        {"role": "assistant", "content": use_block("b")},
        {"role": "user", "content": result("b")},
    ]});
    let responses = json!({"model": "m", "instructions": "be brief", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "a", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "a", "output": "x"},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "b", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "b", "output": "x"},
    ]});
    let chat_text = check_chat(&post(&format!("{base}/v1/chat/completions"), &chat).await);
    let anthropic_text = check_anthropic(&post(&format!("{base}/v1/messages"), &anthropic).await);
    let responses_text = check_responses(&post(&format!("{base}/v1/responses"), &responses).await);

    let assistant = |id: &str| {
        Message::Assistant(AssistantMessage {
            tool_calls: vec![ToolCall {
                id: ToolCallId::new(id),
                name: "read_file".into(),
                arguments: json!({}),
                extra: None,
            }],
            ..AssistantMessage::default()
        })
    };
    let tool = |id: &str| {
        Message::Tool(ToolMessage {
            tool_call_id: ToolCallId::new(id),
            content: "x".into(),
            is_error: false,
            images: Vec::new(),
        })
    };
    let messages = vec![
        Message::User(Input::text("hi")),
        assistant("a"),
        tool("a"),
        assistant("b"),
        tool("b"),
    ];
    let request = ModelRequest {
        model: "m".into(),
        system: "be brief".into(),
        messages: messages.into(),
        ..ModelRequest::default()
    };
    let mut agg = StreamAggregate::new();
    let events: Vec<_> = SimClient::new(config())
        .stream(request, CancellationToken::new())
        .collect()
        .await;
    events.iter().for_each(|e| agg.apply(e));

    assert_eq!(agg.text.len(), 12 * 4);
    assert_eq!(
        [&chat_text, &anthropic_text, &responses_text],
        [&agg.text, &agg.text, &agg.text]
    );
}

#[tokio::test]
async fn injected_failures_are_vendor_error_responses_or_cut_streams() {
    let limited = SimConfig {
        error_rates: ErrorRates {
            rate_limited: 1.0,
            ..ErrorRates::default()
        },
        ..config()
    };
    let base = start(limited).await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let answer = post(&format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (429, "application/json")
    );
    assert_eq!(answer.retry_after_ms.as_deref(), Some("250"));
    assert_eq!(
        json_of(&answer.body)["error"]["code"],
        "rate_limit_exceeded"
    );

    let overloaded = SimConfig {
        error_rates: ErrorRates {
            overloaded: 1.0,
            ..ErrorRates::default()
        },
        ..config()
    };
    let base = start(overloaded).await;
    let answer = post(&format!("{base}/v1/messages"), &body).await;
    assert_eq!(answer.status, 529);
    assert_eq!(
        json_of(&answer.body),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );

    let cut = SimConfig {
        error_rates: ErrorRates {
            stream_cut: 1.0,
            ..ErrorRates::default()
        },
        ..config()
    };
    let base = start(cut).await;
    let answer = post(&format!("{base}/v1/chat/completions"), &body).await;
    assert_eq!(answer.status, 200);
    assert!(
        !answer.events.is_empty() && !answer.body.contains("[DONE]"),
        "{}",
        answer.body
    );
    let answer = post(&format!("{base}/v1/messages"), &body).await;
    assert!(!answer.body.contains("message_stop"), "{}", answer.body);

    let response = reqwest::Client::new()
        .post(format!("{base}/v1/responses"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let error = json_of(&response.text().await.unwrap());
    assert_eq!(error["error"]["type"], "invalid_request_error");
}

/// What the simulator says about a path it does not serve: OpenAI's `Invalid URL (POST
/// path)`, with the paths it does serve.
fn no_route(path: &str) -> String {
    format!(
        "Invalid URL (POST {path}; the simulator serves only POST /v1/chat/completions for \
         openai-chat, /v1/messages for anthropic and /v1/responses for openai-responses, as \
         the real APIs do)"
    )
}

/// Only the real paths are served, so a base URL that would fail against the real API
/// fails against the simulator too: a path without `/v1`, with `/v1` doubled or anything
/// else is a 404 in the vendor's error shape (Anthropic's for a `…/messages` path, else
/// OpenAI's), naming the path and the served ones.
#[tokio::test]
async fn only_the_real_v1_paths_are_served() {
    let base = start(config()).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let openai = |path: &str| {
        json!({"error": {"message": no_route(path), "type": "invalid_request_error",
                         "param": null, "code": null}})
    };
    let anthropic = |path: &str| json!({"type": "error", "error": {"type": "not_found_error", "message": no_route(path)}});
    for (path, expected) in [
        ("/chat/completions", openai("/chat/completions")),
        ("/responses", openai("/responses")),
        ("/v1/v1/chat/completions", openai("/v1/v1/chat/completions")),
        ("/", openai("/")),
        ("/messages", anthropic("/messages")),
        ("/v1/v1/messages", anthropic("/v1/v1/messages")),
    ] {
        let answer = post(&format!("{base}{path}"), &body).await;
        assert_eq!(
            (answer.status, answer.content_type.as_str()),
            (404, "application/json"),
            "{path}"
        );
        assert_eq!(json_of(&answer.body), expected, "{path}");
    }
}

/// The first event of one request through the real HTTP client, for `kind` at `base_url`.
async fn first_event(kind: ProviderKind, base_url: String) -> StreamEvent {
    let mut profile = ProviderProfile::for_kind(kind, "sim-1");
    profile.base_url = base_url;
    profile.api_key_env = None;
    let request = ModelRequest {
        messages: vec![Message::User(Input::text("hi"))].into(),
        ..ModelRequest::default()
    };
    let client = HttpModelClient::new(profile).unwrap();
    let mut stream = client.stream(request, CancellationToken::new());
    stream.next().await.unwrap()
}

/// A base URL the real API would refuse fails against the simulator over loopback, and
/// the client's error says which URL it tried, how it was made and which paths exist.
#[tokio::test]
async fn a_wrong_base_url_fails_with_a_message_that_says_how_to_fix_it() {
    let base = start(config()).await;
    let not_found = |message: String| StreamEvent::Error {
        error: ProviderError {
            class: ErrorClass::InvalidRequest,
            message,
            retry_after_ms: None,
            status: Some(404),
        },
    };
    // openai-chat without `/v1`.
    assert_eq!(
        first_event(ProviderKind::OpenaiChat, base.clone()).await,
        not_found(format!(
            "{} from POST {base}/chat/completions (the URL is the base URL followed by \
             `/chat/completions`, the path openai-chat uses)",
            no_route("/chat/completions")
        ))
    );
    // anthropic with `/v1`, which it appends itself.
    assert_eq!(
        first_event(ProviderKind::Anthropic, format!("{base}/v1")).await,
        not_found(format!(
            "{} from POST {base}/v1/v1/messages (the base URL `{base}/v1` already ends in \
             `/v1`, and anthropic appends `/v1/messages` itself: drop `/v1` from the base URL)",
            no_route("/v1/v1/messages")
        ))
    );
    // The right base URLs stream.
    for (kind, base_url) in [
        (ProviderKind::OpenaiChat, format!("{base}/v1")),
        (ProviderKind::OpenaiResponses, format!("{base}/v1")),
        (ProviderKind::Anthropic, base.clone()),
    ] {
        let event = first_event(kind, base_url).await;
        assert!(
            !matches!(event, StreamEvent::Error { .. }),
            "{kind:?}: {event:?}"
        );
    }
}

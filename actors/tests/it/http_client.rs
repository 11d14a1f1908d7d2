//! `HttpModelClient` over real HTTP against an in-process axum server that streams the
//! shared fixtures byte for byte: each protocol's text and tool-call streams, a 429 with
//! `retry-after-ms`, a connection cut mid-stream, an idle stream, and a missing API key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::http_support;

use axum::body::Bytes;
use foya_actors::provider::ModelClient;
use foya_actors::provider::http::HttpModelClient;
use foya_actors::provider::profile::{ConfigError, ProviderProfile};
use foya_actors::provider::wire::ProviderKind;
use foya_protocol::{
    ErrorClass, FinishReason, StreamAggregate, StreamEvent, ToolCall, ToolCallId, Usage,
};
use futures::StreamExt;
use http_support::{Reply, client, fixture, request, run, server, sse};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn openai_chat_text_streams_exact_events_and_sends_auth_and_stream_options() {
    let (url, recorded) = server(vec![sse(fixture("openai-chat/basic_text.sse"))]).await;
    let (events, _) = run(&client(ProviderKind::OpenaiChat, &format!("{url}/v1"))).await;
    let text = |t: &str| StreamEvent::TextDelta { text: t.into() };
    assert_eq!(
        events,
        vec![
            text("Hel"),
            text("lo, "),
            text("world."),
            StreamEvent::Usage {
                usage: Usage {
                    input_tokens: 42,
                    output_tokens: 7,
                    ..Usage::default()
                }
            },
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Stop)
            },
        ]
    );
    let (path, headers, body) = recorded.lock().unwrap()[0].clone();
    assert_eq!(path, "/v1/chat/completions");
    assert_eq!(headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(
        body,
        json!({"model": "m-1", "messages": [{"role": "user", "content": "hi"}], "stream": true,
               "stream_options": {"include_usage": true}})
    );
}

#[tokio::test]
async fn every_protocol_streams_text_and_tool_calls() {
    let anthropic_text = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi.\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let responses_text = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\"Hi.\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":2}}}\n\n";
    let call = |id: &str, name: &str, args| ToolCall {
        id: ToolCallId::new(id),
        name: name.into(),
        arguments: args,
        extra: None,
    };
    let cases = [
        (
            ProviderKind::OpenaiChat,
            fixture("openai-chat/parallel_tool_calls_interleaved.sse"),
            "/v1/chat/completions",
            "",
            vec![
                call("call_a1", "read_file", json!({"path": "Cargo.toml"})),
                call("call_b2", "list_dir", json!({"path": "src"})),
            ],
        ),
        (
            ProviderKind::Anthropic,
            fixture("anthropic/thinking_text_tool_use.sse"),
            "/v1/messages",
            "Reading it.",
            vec![call(
                "toolu_01A",
                "read_file",
                json!({"path": "Cargo.toml"}),
            )],
        ),
        (
            ProviderKind::Anthropic,
            anthropic_text.as_bytes().to_vec(),
            "/v1/messages",
            "Hi.",
            vec![],
        ),
        (
            ProviderKind::OpenaiResponses,
            fixture("openai-responses/reasoning_and_function_call.sse"),
            "/v1/responses",
            "",
            vec![call("call_77", "list_dir", json!({"path": "src"}))],
        ),
        (
            ProviderKind::OpenaiResponses,
            responses_text.as_bytes().to_vec(),
            "/v1/responses",
            "Hi.",
            vec![],
        ),
    ];
    for (kind, body, want_path, want_text, want_calls) in cases {
        let (url, recorded) = server(vec![sse(body)]).await;
        let base = if kind == ProviderKind::Anthropic {
            url
        } else {
            format!("{url}/v1")
        };
        let (_, agg) = run(&client(kind, &base)).await;
        let msg = agg.to_message();
        assert_eq!(
            (msg.text.as_str(), &msg.tool_calls),
            (want_text, &want_calls),
            "{kind}"
        );
        let want_finish = if want_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        assert_eq!(msg.finish_reason, Some(want_finish), "{kind}");
        let (path, headers, body) = recorded.lock().unwrap()[0].clone();
        assert_eq!(path, want_path);
        assert_eq!(body["stream"], json!(true));
        if kind == ProviderKind::Anthropic {
            assert_eq!(
                (&headers["x-api-key"], &headers["anthropic-version"]),
                (
                    &"sk-test-secret".parse().unwrap(),
                    &"2023-06-01".parse().unwrap()
                )
            );
            assert_eq!(body["max_tokens"], json!(8192));
        }
    }
}

#[tokio::test]
async fn rate_limit_429_carries_retry_after_ms() {
    let body = br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
    let reply = Reply {
        status: 429,
        headers: vec![("retry-after-ms", "250")],
        chunks: vec![Bytes::from_static(body)],
        ..Reply::default()
    };
    let (url, _) = server(vec![reply]).await;
    let (events, _) = run(&client(ProviderKind::OpenaiChat, &url)).await;
    let [StreamEvent::Error { error }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(
        (error.class, error.retry_after_ms, error.status),
        (ErrorClass::RateLimited, Some(250), Some(429))
    );
    assert!(!error.message.contains("sk-test-secret"));
}

#[tokio::test]
async fn connection_cut_mid_stream_is_stream_interrupted() {
    let mut reply = sse(fixture("anthropic/thinking_text_tool_use.sse"));
    let signal = Arc::new(tokio::sync::Notify::new());
    reply.cut_after = Some(16);
    reply.cut_signal = Some(signal.clone());
    let (url, _) = server(vec![reply]).await;
    let client = client(ProviderKind::Anthropic, &url);
    let mut stream = client.stream(request(), CancellationToken::new());
    let first = stream.next().await.unwrap();
    assert_eq!(
        first,
        StreamEvent::Usage {
            usage: Usage {
                input_tokens: 250,
                output_tokens: 1,
                cached_input_tokens: Some(0),
                reasoning_tokens: None
            }
        }
    );
    signal.notify_one();
    let mut events = vec![first];
    events.extend(stream.collect::<Vec<_>>().await);
    let mut agg = StreamAggregate::new();
    for e in &events {
        agg.apply(e);
    }
    assert_eq!(agg.reasoning, "Need the manifest.");
    assert!(matches!(events.last(), Some(StreamEvent::Error { .. })));
    assert_eq!(
        agg.error.map(|e| e.class),
        Some(ErrorClass::StreamInterrupted)
    );
}

/// The server hangs forever after two chunks, so the outcome does not depend on timing;
/// a short idle timeout keeps the test fast (paused time would need tokio `test-util`).
#[tokio::test]
async fn silent_stream_hits_the_idle_timeout() {
    let mut reply = sse(fixture("openai-chat/basic_text.sse"));
    reply.chunks.truncate(2);
    reply.hang = true;
    let (url, _) = server(vec![reply]).await;
    let mut profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "m-1");
    profile.base_url = url;
    profile.idle_timeout_ms = 300;
    let client = HttpModelClient::with_env(profile, &|_| Some("k".into())).unwrap();
    let (_, agg) = run(&client).await;
    let err = agg.error.unwrap();
    assert_eq!(
        (err.class, err.message.as_str()),
        (
            ErrorClass::StreamInterrupted,
            "no data from the provider for 300 ms"
        )
    );
}

#[test]
fn missing_key_is_a_clear_error_and_debug_redacts_the_key() {
    let profile = ProviderProfile::builtin("anthropic").unwrap();
    let err = HttpModelClient::with_env(profile.clone(), &|_| None).unwrap_err();
    assert_eq!(
        err,
        ConfigError::MissingApiKey {
            profile: "anthropic".into(),
            env: "ANTHROPIC_API_KEY".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "provider profile `anthropic` needs an API key: set the environment variable ANTHROPIC_API_KEY"
    );
    let mut profile = profile;
    profile
        .extra_headers
        .insert("x-gateway-key".into(), "gw-secret".into());
    let ok = HttpModelClient::with_env(profile, &|_| Some("sk-ant-secret".into())).unwrap();
    let debug = format!("{ok:?}");
    assert!(!debug.contains("sk-ant-secret"), "{debug}");
    assert!(!debug.contains("gw-secret"), "{debug}");
}

#[test]
fn a_profile_that_cannot_make_a_request_is_refused_when_the_client_is_built() {
    let base = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "m-1");
    let refused = |change: &dyn Fn(&mut ProviderProfile)| {
        let mut profile = base.clone();
        change(&mut profile);
        match HttpModelClient::with_env(profile, &|_| Some("sk-test-secret".into())) {
            Err(ConfigError::Invalid { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    };
    let message = refused(&|p| p.base_url = "127.0.0.1:8000/v1".into());
    assert!(
        message.contains("base_url 127.0.0.1:8000/v1 is not"),
        "{message}"
    );
    let message = refused(&|p| p.base_url = "ftp://user:pw@host/v1".into());
    assert!(message.contains("scheme `ftp`"), "{message}");
    assert!(!message.contains("pw"), "{message}");
    let message = refused(&|p| p.idle_timeout_ms = 0);
    assert!(message.starts_with("idle_timeout_ms = 0"), "{message}");
    let message = refused(&|p| p.connect_timeout_ms = 0);
    assert!(message.starts_with("connect_timeout_ms = 0"), "{message}");
    let message = refused(&|p| {
        p.extra_headers.insert("Bad Header".into(), "x".into());
    });
    assert!(message.contains("`Bad Header` is not a valid"), "{message}");
    let message = refused(&|p| {
        p.extra_headers
            .insert("x-key".into(), "secret\nvalue".into());
    });
    assert!(message.contains("the value of `x-key`"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

#[tokio::test]
async fn a_refused_connection_names_the_url_and_the_cause() {
    // A port held bound but not listening: every connect is refused.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let url = format!("http://{}/v1", socket.local_addr().unwrap());
    let (events, _) = run(&client(ProviderKind::OpenaiChat, &url)).await;
    let [StreamEvent::Error { error }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(error.class, ErrorClass::Network);
    let prefix = format!("request to {url}/chat/completions failed: error sending request");
    assert!(error.message.starts_with(&prefix), "{}", error.message);
    assert!(
        error.message.contains("Connection refused"),
        "{}",
        error.message
    );
    assert!(!error.message.contains("sk-test-secret"));
}

#[tokio::test]
async fn an_error_status_without_a_body_names_the_url_asked_for() {
    let reply = Reply {
        status: 404,
        ..Reply::default()
    };
    let (url, _) = server(vec![reply]).await;
    // The mistake the README warns about: `/v1` in an Anthropic base URL.
    let base = format!("{url}/v1");
    let (events, _) = run(&client(ProviderKind::Anthropic, &base)).await;
    let [StreamEvent::Error { error }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(
        (error.class, error.message.as_str()),
        (
            ErrorClass::InvalidRequest,
            format!(
                "HTTP 404 from POST {base}/v1/messages (the base URL `{base}` already ends in \
                 `/v1`, and anthropic appends `/v1/messages` itself: drop `/v1` from the base URL)"
            )
            .as_str()
        )
    );
}

#[tokio::test]
async fn a_base_url_with_a_query_keeps_the_query_after_the_path() {
    let (url, recorded) = server(vec![sse(fixture("openai-chat/basic_text.sse"))]).await;
    let base = format!("{url}/v1?api-version=2024-10-21");
    let (events, _) = run(&client(ProviderKind::OpenaiChat, &base)).await;
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Done {
            finish_reason: Some(FinishReason::Stop)
        })
    );
    assert_eq!(recorded.lock().unwrap()[0].0, "/v1/chat/completions");
}

#[tokio::test]
async fn extra_headers_replace_a_header_of_the_same_name_instead_of_doubling_it() {
    let (url, recorded) = server(vec![sse(fixture("anthropic/thinking_text_tool_use.sse"))]).await;
    let mut profile = ProviderProfile::for_kind(ProviderKind::Anthropic, "m-1");
    profile.base_url = url;
    profile.extra_headers = [
        ("X-Api-Key", "gateway-key"),
        ("anthropic-version", "2099-01-01"),
        ("x-extra", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let client =
        HttpModelClient::with_env(profile, &|_| Some("sk-test-secret".to_owned())).unwrap();
    run(&client).await;
    let (_, headers, _) = recorded.lock().unwrap()[0].clone();
    let all = |name: &str| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(all("x-api-key"), ["gateway-key"]);
    assert_eq!(all("anthropic-version"), ["2099-01-01"]);
    assert_eq!(all("x-extra"), ["1"]);
    assert_eq!(all("content-type"), ["application/json"]);
    assert_eq!(all("accept"), ["text/event-stream"]);
}

#[tokio::test]
async fn every_header_is_sent_once_and_extra_headers_may_replace_accept_and_content_type() {
    let (url, recorded) = server(vec![
        sse(fixture("openai-chat/basic_text.sse")),
        sse(fixture("openai-chat/basic_text.sse")),
    ])
    .await;
    let base = format!("{url}/v1");
    run(&client(ProviderKind::OpenaiChat, &base)).await;
    let mut profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "m-1");
    profile.base_url = base;
    profile.extra_headers = [
        ("Accept", "*/*"),
        ("Content-Type", "application/json; charset=utf-8"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    run(&HttpModelClient::with_env(profile, &|_| Some("sk-test-secret".to_owned())).unwrap()).await;
    let recorded = recorded.lock().unwrap();
    for (i, (_, headers, _)) in recorded.iter().enumerate() {
        for name in headers.keys() {
            assert_eq!(
                headers.get_all(name).iter().count(),
                1,
                "request {i}: {name} twice"
            );
        }
    }
    assert_eq!(recorded[0].1["content-type"], "application/json");
    assert_eq!(
        recorded[1].1["content-type"],
        "application/json; charset=utf-8"
    );
    assert_eq!(recorded[1].1["accept"], "*/*");
    assert_eq!(recorded[1].1["authorization"], "Bearer sk-test-secret");
}

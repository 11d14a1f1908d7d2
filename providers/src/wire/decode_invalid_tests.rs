//! Decoder cases of responses that cannot be understood: a malformed (non-JSON) `data:`
//! payload mid-stream fails the stream with `invalid_response` in every format (with a
//! short one-line excerpt), what real providers legitimately send around the JSON events
//! is still tolerated, a Chat stream without any output is refused, and two Chat calls
//! sharing an id at different wire indexes stay two calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::MAX_EXCERPT_CHARS;
use super::*;
use bytes::Bytes;
use foya_protocol::{FinishReason, StreamAggregate, ToolCall, ToolCallId};
use futures::StreamExt;
use serde_json::json;

async fn run(kind: ProviderKind, body: &str) -> Vec<StreamEvent> {
    let bytes = futures::stream::iter([Ok::<_, TransportError>(Bytes::from(body.to_owned()))]);
    decode_sse(bytes, kind.decoder(), SseLimits::default())
        .collect()
        .await
}

fn chat(delta: serde_json::Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

fn anthropic(v: &serde_json::Value) -> String {
    format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
}

fn responses(v: &serde_json::Value) -> String {
    anthropic(v)
}

fn anthropic_text(text: &str) -> String {
    [
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
    ]
    .iter()
    .map(anthropic)
    .collect()
}

fn anthropic_end() -> String {
    [
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        json!({"type": "message_stop"}),
    ]
    .iter()
    .map(anthropic)
    .collect()
}

fn responses_text(text: &str) -> String {
    responses(&json!({"type": "response.output_text.delta", "item_id": "m", "delta": text}))
}

fn responses_end() -> String {
    responses(&json!({"type": "response.completed", "response": {"status": "completed"}}))
}

/// Text, then a cut-off JSON payload, then more text and a clean end, per format.
fn with_bad_line(kind: ProviderKind, bad: &str) -> String {
    let bad = format!("data: {bad}\n\n");
    match kind {
        ProviderKind::OpenaiChat => [
            chat(json!({"content": "Hel"}), None),
            bad,
            chat(json!({"content": "lo"}), Some("stop")),
            "data: [DONE]\n\n".into(),
        ]
        .concat(),
        ProviderKind::Anthropic => [
            anthropic_text("Hel"),
            format!("event: content_block_delta\n{bad}"),
            anthropic_text("lo"),
            anthropic_end(),
        ]
        .concat(),
        ProviderKind::OpenaiResponses => [
            responses_text("Hel"),
            format!("event: response.output_text.delta\n{bad}"),
            responses_text("lo"),
            responses_end(),
        ]
        .concat(),
    }
}

fn format_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenaiChat => "OpenAI Chat",
        ProviderKind::Anthropic => "Anthropic",
        ProviderKind::OpenaiResponses => "OpenAI Responses",
    }
}

#[tokio::test]
async fn a_malformed_data_line_mid_stream_fails_with_invalid_response_in_every_format() {
    let bad = r#"{"choices":[{"index":0,"delta":{"content":"lost te"#;
    for kind in ProviderKind::ALL {
        let events = run(kind, &with_bad_line(kind, bad)).await;
        let message = format!(
            "malformed {} stream event: its data is not JSON (EOF while parsing a string at \
             line 1 column 50): `{bad}`",
            format_name(kind)
        );
        assert_eq!(
            events,
            vec![
                StreamEvent::TextDelta { text: "Hel".into() },
                StreamEvent::Error {
                    error: ProviderError::new(ErrorClass::InvalidResponse, message),
                },
            ],
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn the_excerpt_of_a_long_malformed_payload_is_one_capped_line() {
    // Two `data:` lines of one event are joined with a newline by SSE.
    let bad = format!("{{\"a\": \"{}\ndata: {}", "x".repeat(300), "y".repeat(300));
    let events = run(
        ProviderKind::OpenaiChat,
        &with_bad_line(ProviderKind::OpenaiChat, &bad),
    )
    .await;
    let excerpt = format!("{{\"a\": \"{}…", "x".repeat(MAX_EXCERPT_CHARS - 8));
    assert_eq!(excerpt.chars().count(), MAX_EXCERPT_CHARS);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta { text: "Hel".into() },
            StreamEvent::Error {
                error: ProviderError::new(
                    ErrorClass::InvalidResponse,
                    format!(
                        "malformed OpenAI Chat stream event: its data is not JSON (control \
                         character (\\u0000-\\u001F) found while parsing a string at line 2 \
                         column 0): `{excerpt}`"
                    ),
                ),
            },
        ]
    );
}

#[tokio::test]
async fn keep_alives_event_lines_pings_unknown_events_empty_data_and_done_are_tolerated() {
    let noise = ": ping\n\n:\n\nevent: keepalive\n\nevent: ping\ndata:\n\ndata: \n\n";
    let bodies = [
        (
            ProviderKind::OpenaiChat,
            [
                noise.to_owned(),
                chat(json!({"content": "Hel"}), None),
                "event: ping\ndata: {\"type\":\"ping\"}\n\n".into(),
                "data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\n".into(),
                noise.to_owned(),
                chat(json!({"content": "lo"}), Some("stop")),
                "data: [DONE]\n\n".into(),
            ]
            .concat(),
        ),
        (
            ProviderKind::Anthropic,
            [
                noise.to_owned(),
                anthropic(&json!({"type": "ping"})),
                anthropic_text("Hel"),
                anthropic(&json!({"type": "future_event", "index": 0})),
                "data: [DONE]\n\n".into(),
                noise.to_owned(),
                anthropic(&json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}})),
                anthropic_end(),
            ]
            .concat(),
        ),
        (
            ProviderKind::OpenaiResponses,
            [
                noise.to_owned(),
                responses(&json!({"type": "response.created", "response": {}})),
                responses_text("Hel"),
                responses(&json!({"type": "response.future.event"})),
                "data: [DONE]\n\n".into(),
                noise.to_owned(),
                responses_text("lo"),
                responses_end(),
            ]
            .concat(),
        ),
    ];
    for (kind, body) in bodies {
        assert_eq!(
            run(kind, &body).await,
            vec![
                StreamEvent::TextDelta { text: "Hel".into() },
                StreamEvent::TextDelta { text: "lo".into() },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop)
                },
            ],
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn a_chat_stream_without_any_output_is_invalid_response() {
    let no_output = ProviderError::new(
        ErrorClass::InvalidResponse,
        "the stream ended without any output (no text, tool call or finish reason)",
    );
    let usage_only =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\n";
    for body in [
        "data: [DONE]\n\n".to_owned(),
        format!(
            "{}data: [DONE]\n\n",
            chat(json!({"role": "assistant", "content": ""}), None)
        ),
    ] {
        assert_eq!(
            run(ProviderKind::OpenaiChat, &body).await,
            vec![StreamEvent::Error {
                error: no_output.clone()
            }],
            "{body}"
        );
    }
    let events = run(
        ProviderKind::OpenaiChat,
        &format!("{usage_only}data: [DONE]\n\n"),
    )
    .await;
    assert_eq!(
        events,
        vec![
            StreamEvent::Usage {
                usage: foya_protocol::Usage {
                    input_tokens: 3,
                    output_tokens: 0,
                    ..foya_protocol::Usage::default()
                }
            },
            StreamEvent::Error { error: no_output },
        ]
    );
}

#[tokio::test]
async fn a_chat_answer_without_finish_reason_or_an_empty_one_with_it_stays_valid() {
    let text_no_reason = format!("{}data: [DONE]\n\n", chat(json!({"content": "ok"}), None));
    assert_eq!(
        run(ProviderKind::OpenaiChat, &text_no_reason).await,
        vec![
            StreamEvent::TextDelta { text: "ok".into() },
            StreamEvent::Done {
                finish_reason: None
            },
        ]
    );
    let empty_with_reason = format!(
        "{}data: [DONE]\n\n",
        chat(json!({"role": "assistant", "content": ""}), Some("stop"))
    );
    assert_eq!(
        run(ProviderKind::OpenaiChat, &empty_with_reason).await,
        vec![StreamEvent::Done {
            finish_reason: Some(FinishReason::Stop)
        }]
    );
}

#[tokio::test]
async fn two_chat_calls_sharing_an_id_at_different_indexes_stay_two_calls() {
    let body = [
        chat(
            json!({"tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":"}}]}),
            None,
        ),
        chat(
            json!({"tool_calls": [{"index": 1, "id": "call_x", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"b\"}"}}]}),
            None,
        ),
        // A server that repeats the id on every fragment: still call 0.
        chat(
            json!({"tool_calls": [{"index": 0, "id": "call_x", "function": {"arguments": "\"a\"}"}}]}),
            None,
        ),
        chat(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let mut agg = StreamAggregate::new();
    for event in run(ProviderKind::OpenaiChat, &body).await {
        agg.apply(&event);
    }
    let call = |path: &str| ToolCall {
        id: ToolCallId::new("call_x"),
        name: "read_file".into(),
        arguments: json!({ "path": path }),
        extra: None,
    };
    let msg = agg.to_message();
    assert_eq!(msg.tool_calls, vec![call("a"), call("b")]);
    assert_eq!(msg.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn invalid_utf8_in_a_data_line_is_invalid_response_like_malformed_json() {
    let mut body = chat(json!({"content": "Hel"}), None).into_bytes();
    body.extend_from_slice(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"l\xff\xfeo\"}}]}\n\n",
    );
    body.extend_from_slice(chat(json!({}), Some("stop")).as_bytes());
    let events: Vec<StreamEvent> = decode_sse(
        futures::stream::iter([Ok::<_, TransportError>(Bytes::from(body))]),
        ProviderKind::OpenaiChat.decoder(),
        SseLimits::default(),
    )
    .collect()
    .await;
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta { text: "Hel".into() },
            StreamEvent::Error {
                error: foya_protocol::ProviderError::new(
                    foya_protocol::ErrorClass::InvalidResponse,
                    "malformed stream event: its data is not UTF-8: `\u{FFFD}\u{FFFD}o\"}}]}`"
                )
            }
        ]
    );
}

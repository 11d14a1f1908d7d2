//! The simulator's wire producers against the provider fixtures: the same events give
//! the vendors' bodies byte for byte (Chat Completions, Messages), the same event
//! sequence (Responses), and the vendors' error responses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_protocol::{FinishReason, ReasoningPart, StreamEvent, ToolCallId, Usage};
use foya_sim::SimRejection;
use foya_sim::wire::{ErrorResponse, WireFormat, WireMeta, encode_body, error_response};
use std::path::{Path, PathBuf};

/// The provider fixtures, shared with the runtime's decoder tests (`foya-actors`).
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../actors/tests/fixtures/providers")
}

fn fixture(path: &str) -> String {
    std::fs::read_to_string(fixtures().join(path)).unwrap()
}

fn meta(id: &str, model: &str, input_tokens: u64) -> WireMeta {
    WireMeta {
        id: id.into(),
        model: model.into(),
        created: 1_764_400_000,
        input_tokens,
    }
}

fn call(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> StreamEvent {
    StreamEvent::ToolCallDelta {
        index,
        id: id.map(ToolCallId::new),
        name: name.map(str::to_owned),
        arguments: arguments.into(),
        extra: None,
    }
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: t.into() }
}

fn usage(input_tokens: u64, output_tokens: u64) -> StreamEvent {
    StreamEvent::Usage {
        usage: Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        },
    }
}

fn done(reason: FinishReason) -> StreamEvent {
    StreamEvent::Done {
        finish_reason: Some(reason),
    }
}

#[test]
fn chat_completions_bodies_match_the_fixtures_byte_for_byte() {
    let events = [
        text("Hel"),
        text("lo, "),
        text("world."),
        usage(42, 7),
        done(FinishReason::Stop),
    ];
    let body = encode_body(
        WireFormat::OpenAiChat,
        meta("chatcmpl-7f3a", "m-1", 42),
        &events,
    );
    assert_eq!(body, fixture("openai-chat/basic_text.sse"));

    let events = [
        call(0, Some("call_a1"), Some("read_file"), ""),
        call(1, Some("call_b2"), Some("list_dir"), ""),
        call(0, None, None, "{\"path\":"),
        call(1, None, None, "{\"path\":\"src\"}"),
        call(0, None, None, "\"Cargo.toml\"}"),
        usage(120, 30),
        done(FinishReason::ToolCalls),
    ];
    let body = encode_body(
        WireFormat::OpenAiChat,
        meta("chatcmpl-7f3a", "m-1", 120),
        &events,
    );
    assert_eq!(
        body,
        fixture("openai-chat/parallel_tool_calls_interleaved.sse")
    );
}

#[test]
fn anthropic_bodies_match_the_fixtures_byte_for_byte() {
    let events = [
        StreamEvent::ReasoningDelta {
            text: "Need the ".into(),
        },
        StreamEvent::ReasoningDelta {
            text: "manifest.".into(),
        },
        StreamEvent::ReasoningPart {
            part: ReasoningPart::Thinking {
                text: "Need the manifest.".into(),
                signature: Some("U2lnbmF0dXJlQQ==".into()),
            },
        },
        text("Reading it."),
        call(0, Some("toolu_01A"), Some("read_file"), ""),
        call(0, None, None, "{\"pa"),
        call(0, None, None, "th\": \"Cargo.toml\"}"),
        usage(250, 61),
        done(FinishReason::ToolCalls),
    ];
    let body = encode_body(WireFormat::Anthropic, meta("msg_01", "m-2", 250), &events);
    assert_eq!(body, fixture("anthropic/thinking_text_tool_use.sse"));

    let events = [
        call(0, Some("toolu_02B"), Some("list_dir"), ""),
        call(0, None, None, ""),
        usage(250, 9),
        done(FinishReason::ToolCalls),
    ];
    let body = encode_body(WireFormat::Anthropic, meta("msg_01", "m-2", 250), &events);
    // The fixture has no ping; ours always sends one after message_start, as the API does.
    let expected = fixture("anthropic/no_input_tool.sse").replacen(
        "event: content_block_start",
        "event: ping\ndata: {\"type\":\"ping\"}\n\nevent: content_block_start",
        1,
    );
    assert_eq!(body, expected);
}

/// `(event name, data JSON)` of each frame.
fn frames(body: &str) -> Vec<(String, serde_json::Value)> {
    body.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (event, data) = f.split_once("\ndata: ").unwrap();
            (
                event.strip_prefix("event: ").unwrap().to_owned(),
                serde_json::from_str(data).unwrap(),
            )
        })
        .collect()
}

#[test]
fn responses_body_has_the_fixture_event_sequence_and_payloads() {
    let events = [
        StreamEvent::ReasoningDelta {
            text: "Look at src.".into(),
        },
        call(0, Some("call_77"), Some("list_dir"), ""),
        call(0, None, None, "{\"path\""),
        call(0, None, None, ":\"src\"}"),
        StreamEvent::Usage {
            usage: Usage {
                input_tokens: 300,
                output_tokens: 40,
                cached_input_tokens: Some(100),
                reasoning_tokens: Some(20),
            },
        },
        done(FinishReason::ToolCalls),
    ];
    let ours = frames(&encode_body(
        WireFormat::OpenAiResponses,
        meta("resp_1", "m-3", 300),
        &events,
    ));
    let theirs = frames(&fixture("openai-responses/reasoning_and_function_call.sse"));
    let names =
        |f: &[(String, serde_json::Value)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ours), names(&theirs));
    for ((name, a), (_, b)) in ours.iter().zip(&theirs) {
        assert_eq!(a["type"], name.as_str());
        assert_eq!(a["sequence_number"], b["sequence_number"], "{name}");
        assert_eq!(a.get("delta"), b.get("delta"), "{name}");
        assert_eq!(a.get("arguments"), b.get("arguments"), "{name}");
        assert_eq!(a["item"].get("call_id"), b["item"].get("call_id"), "{name}");
        assert_eq!(a["item"].get("summary"), b["item"].get("summary"), "{name}");
    }
    assert_eq!(ours.last().unwrap().1, theirs.last().unwrap().1);
}

fn error_fixture(name: &str) -> ErrorResponse {
    let v: serde_json::Value =
        serde_json::from_str(&fixture(&format!("errors/{name}.json"))).unwrap();
    let headers = v["headers"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("retry-after"))
        .map(|(k, v)| {
            (
                if k == "retry-after" {
                    "retry-after"
                } else {
                    "retry-after-ms"
                },
                v.as_str().unwrap().to_owned(),
            )
        })
        .collect();
    ErrorResponse {
        status: u16::try_from(v["status"].as_u64().unwrap()).unwrap(),
        headers,
        body: v["body"].as_str().unwrap().to_owned(),
    }
}

#[test]
fn error_responses_match_the_vendor_fixtures() {
    let overflow = |input_tokens, context_window_tokens| SimRejection::ContextOverflow {
        input_tokens,
        context_window_tokens,
    };
    assert_eq!(
        error_response(WireFormat::OpenAiChat, &overflow(131_072, 128_000)),
        error_fixture("openai_context_length_exceeded")
    );
    assert_eq!(
        error_response(WireFormat::Anthropic, &overflow(205_117, 200_000)),
        error_fixture("anthropic_prompt_too_long")
    );
    assert_eq!(
        error_response(WireFormat::Anthropic, &SimRejection::Overloaded),
        error_fixture("anthropic_overloaded_529")
    );
    let mut limited = error_fixture("openai_rate_limit_retry_after_ms");
    limited.headers.push(("retry-after", "1".into()));
    let ours = error_response(
        WireFormat::OpenAiResponses,
        &SimRejection::RateLimited {
            retry_after_ms: 250,
        },
    );
    assert_eq!(ours, limited);
    let mut limited = error_fixture("anthropic_rate_limit_retry_after");
    limited.headers.insert(0, ("retry-after-ms", "3000".into()));
    let ours = error_response(
        WireFormat::Anthropic,
        &SimRejection::RateLimited {
            retry_after_ms: 3_000,
        },
    );
    assert_eq!(ours, limited);
    let ours = error_response(WireFormat::OpenAiChat, &SimRejection::Overloaded);
    assert_eq!(ours.status, 503);
    let body: serde_json::Value = serde_json::from_str(&ours.body).unwrap();
    assert_eq!(body["error"]["type"], "server_error");
}

proptest::proptest! {
    /// The hand-written JSON escaping survives any text: every frame parses and the
    /// text comes back whole, in all three formats.
    #[test]
    fn any_text_round_trips_through_every_format(pieces in proptest::collection::vec(".*", 1..6)) {
        let mut events: Vec<StreamEvent> = pieces.iter().map(|p| text(p)).collect();
        events.push(call(0, Some("c\"1"), Some("tool\\n"), "{\"a\":\"\u{7}\"}"));
        events.push(usage(1, 2));
        events.push(done(FinishReason::ToolCalls));
        let expected: String = pieces.concat();
        for format in [WireFormat::OpenAiChat, WireFormat::Anthropic, WireFormat::OpenAiResponses] {
            let body = encode_body(format, meta("id\"", "m\n", 1), &events);
            let mut got = String::new();
            for frame in body.split("\n\n").filter(|f| !f.is_empty()) {
                let data = frame.split_once("data: ").unwrap().1;
                if data == "[DONE]" {
                    continue;
                }
                let v: serde_json::Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
                let piece = match format {
                    WireFormat::OpenAiChat => v["choices"][0]["delta"]["content"].as_str(),
                    WireFormat::Anthropic => v["delta"]["text"].as_str(),
                    WireFormat::OpenAiResponses => {
                        if v["type"] == "response.output_text.delta" { v["delta"].as_str() } else { None }
                    }
                };
                got.push_str(piece.unwrap_or_default());
            }
            proptest::prop_assert_eq!(&got, &expected);
        }
    }
}

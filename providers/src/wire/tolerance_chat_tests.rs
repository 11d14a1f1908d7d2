//! What the Chat decoder tolerates field by field, pinned before its payloads became typed
//! structs: wrong types are ignored (never failing the chunk), `delta` wins over
//! `message` even when null, non-string arguments are re-serialised (keys sorted), extra
//! call fields are kept, a non-object call entry is skipped (it takes no call index),
//! duplicate keys keep the last value, and JSON that `serde_json::Value` rejects (lone
//! surrogates, nesting beyond 128, out-of-range numbers) fails the stream even inside
//! ignored fields.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::common::{MAX_EXCERPT_CHARS, excerpt};
use super::*;
use crate::classify::classify_stream_error;
use foya_protocol::{FinishReason, ToolCallId, Usage};
use serde_json::{Value, json};

/// Feeds `(event, data)` pairs straight to a fresh decoder of `kind`.
pub(super) fn feed(kind: ProviderKind, events: &[(&str, &str)]) -> Vec<StreamEvent> {
    let mut decoder = kind.decoder();
    let mut out = Vec::new();
    for (event, data) in events {
        decoder.on_event(event, data, &mut out);
    }
    out
}

pub(super) fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta { text: t.to_owned() }
}

pub(super) fn call(
    index: u32,
    id: Option<&str>,
    name: Option<&str>,
    arguments: &str,
    extra: Option<Value>,
) -> StreamEvent {
    StreamEvent::ToolCallDelta {
        index,
        id: id.map(ToolCallId::new),
        name: name.map(str::to_owned),
        arguments: arguments.to_owned(),
        extra,
    }
}

/// The error of a payload `serde_json::Value` refuses, as every decoder words it.
pub(super) fn malformed(format: &str, data: &str) -> StreamEvent {
    let e = serde_json::from_str::<Value>(data.trim()).unwrap_err();
    StreamEvent::Error {
        error: ProviderError::new(
            ErrorClass::InvalidResponse,
            format!(
                "malformed {format} stream event: its data is not JSON ({e}): `{}`",
                excerpt(data.trim(), MAX_EXCERPT_CHARS)
            ),
        ),
    }
}

/// Payloads `serde_json::Value` rejects although a lax skipper would pass them.
pub(super) fn value_rejects(valid: &str) -> Vec<String> {
    let body = valid.trim_start_matches('{');
    vec![
        format!(r#"{{"x":"\ud800",{body}"#),
        format!(r#"{{"x":{}1{},{body}"#, "[".repeat(200), "]".repeat(200)),
        format!(r#"{{"x":1e400,{body}"#),
        format!(r#"{{"x":{{"y":[1,{{"z":"\udfff"}}]}},{body}"#),
        format!("{valid} x"),
        format!(r#"{{"x":01,{body}"#),
    ]
}

#[test]
fn chat_wrong_types_are_ignored_field_by_field() {
    let out = feed(
        ProviderKind::OpenaiChat,
        &[
            (
                "message",
                r#"{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":5,"reasoning":{"x":1},"tool_calls":null}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"content":7}},{"index":1,"delta":{"content":"other choice"}},{"index":1.0,"delta":{"content":"float index"}},{"index":"1","delta":{"content":"string index"}},"junk",null,{"delta":null,"message":{"content":"ignored message"}},{"message":{"content":"message"}}]}"#,
            ),
            ("message", r#"{"choices":{"index":0},"usage":null}"#),
            (
                "message",
                r#"{"choices":[],"usage":{"prompt_tokens":3.0,"completion_tokens":-1,"prompt_tokens_details":[5],"completion_tokens_details":{"reasoning_tokens":2}}}"#,
            ),
            (
                "message",
                r#"{"choices":null,"usage":{"prompt_tokens":4,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":null}}}"#,
            ),
            ("message", r#"{"usage":[1]}"#),
            (
                "message",
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":7}]}"#,
            ),
            ("message", "[DONE]"),
        ],
    );
    assert_eq!(
        out,
        vec![
            text("float index"),
            text("string index"),
            text("message"),
            StreamEvent::Usage {
                usage: Usage {
                    input_tokens: 0,
                    output_tokens: 0,
                    cached_input_tokens: None,
                    reasoning_tokens: Some(2),
                }
            },
            StreamEvent::Usage {
                usage: Usage {
                    input_tokens: 4,
                    output_tokens: 5,
                    cached_input_tokens: None,
                    reasoning_tokens: None,
                }
            },
            StreamEvent::Done {
                finish_reason: None
            },
        ]
    );
}

#[test]
fn chat_reasoning_under_both_names_and_finish_reason_strings() {
    let out = feed(
        ProviderKind::OpenaiChat,
        &[
            (
                "message",
                r#"{"choices":[{"delta":{"reasoning_content":"a","reasoning":"b"}}]}"#,
            ),
            ("message", r#"{"choices":[{"delta":{"reasoning":"b"}}]}"#),
            (
                "message",
                r#"{"choices":[{"delta":{"reasoning_content":"b"}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"reasoning_content":"b"}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"c"},"finish_reason":""}]}"#,
            ),
        ],
    );
    let r = |t: &str| StreamEvent::ReasoningDelta { text: t.to_owned() };
    assert_eq!(out, vec![r("a"), r("b"), r("b"), r("c")]);
    let mut decoder = ChatDecoder::new();
    let mut out = Vec::new();
    decoder.on_event(
        "message",
        r#"{"choices":[{"finish_reason":"eos"}]}"#,
        &mut out,
    );
    decoder.finish(&mut out);
    assert_eq!(
        out,
        vec![StreamEvent::Done {
            finish_reason: Some(FinishReason::Stop)
        }]
    );
}

#[test]
fn chat_tool_call_shapes_arguments_and_extra_fields() {
    let tc = |calls: &str| format!(r#"{{"choices":[{{"delta":{{"tool_calls":{calls}}}}}]}}"#);
    let chunks = [
        tc("[null]"),
        tc(
            r#"[{"index":0,"id":"a","type":"function","function":{"name":"shell","arguments":{"b":1,"a":[1.5,true,null,1e2,-3,"\u00e9"]}}}]"#,
        ),
        tc(r#"[{"index":0,"function":{"arguments":7}}]"#),
        tc(r#"[{"index":0,"function":{"arguments":null}}]"#),
        tc(r#"[{"index":0,"function":"shell"}]"#),
        tc(
            r#"[{"index":0,"\u0069d":"a","function":{"arguments":"x\n"},"zeta":{"k":[2,1]},"alpha":null,"type":"function"}]"#,
        ),
        tc(r#"[{"id":"b"}]"#),
        tc(r#"[{"index":5,"id":"","function":{"name":"","arguments":true}}]"#),
        tc(r#"[{"index":5,"function":{"arguments":[1,{"y":2,"x":1}],"name":5}}]"#),
        tc(r#"{"index":6,"id":"c"}"#),
    ];
    let events: Vec<(&str, &str)> = chunks.iter().map(|c| ("message", c.as_str())).collect();
    assert_eq!(
        feed(ProviderKind::OpenaiChat, &events),
        vec![
            call(
                0,
                Some("a"),
                Some("shell"),
                r#"{"a":[1.5,true,null,100.0,-3,"é"],"b":1}"#,
                None
            ),
            call(0, None, None, "7", None),
            call(
                0,
                None,
                None,
                "x\n",
                Some(json!({"alpha": null, "zeta": {"k": [2, 1]}}))
            ),
            call(1, Some("b"), None, "", None),
            call(2, None, None, "true", None),
            call(2, None, None, r#"[1,{"x":1,"y":2}]"#, None),
        ]
    );
}

#[test]
fn chat_duplicate_keys_escapes_and_non_object_payloads() {
    let out = feed(
        ProviderKind::OpenaiChat,
        &[
            ("message", "5"),
            ("message", r#""text""#),
            (
                "message",
                r#"[{"choices":[{"delta":{"content":"in array"}}]}]"#,
            ),
            ("message", "null"),
            ("message", " true "),
            (
                "message",
                r#"{"choices":[{"delta":{"content":"first","content":"last"}}],"choices":[{"delta":{"content":"\u00e9\"q\"\n"}}]}"#,
            ),
            (
                "message",
                r#"{"error":null,"choices":[{"delta":{"content":"after a null error"}}]}"#,
            ),
            (
                "error",
                r#"{"error":null,"choices":[{"delta":{"content":"error event"}}]}"#,
            ),
            (
                "message",
                r#"{"object":"chat.completion.chunk","choices":[{"delta":{"content":"x","content":null}}]}"#,
            ),
        ],
    );
    assert_eq!(
        out,
        vec![
            text("é\"q\"\n"),
            text("after a null error"),
            text("error event")
        ]
    );
}

#[test]
fn chat_error_payloads_are_classified_from_the_right_value() {
    let cases = [
        (
            "message",
            r#"{"error":{"message":"slow down","code":429},"choices":[]}"#,
            json!({"message":"slow down","code":429}),
        ),
        ("message", r#"{"error":"overloaded"}"#, json!("overloaded")),
        (
            "message",
            r#"{"object":"error","message":"bad","type":"invalid_request_error"}"#,
            json!({"object":"error","message":"bad","type":"invalid_request_error"}),
        ),
        ("error", r#""boom""#, json!("boom")),
        (
            "error",
            r#"{"message":"quota exceeded","code":"insufficient_quota"}"#,
            json!({"message":"quota exceeded","code":"insufficient_quota"}),
        ),
        (
            "error",
            r#"[{"error":{"message":"x"}}]"#,
            json!([{"error":{"message":"x"}}]),
        ),
    ];
    for (event, data, value) in cases {
        assert_eq!(
            feed(ProviderKind::OpenaiChat, &[(event, data)]),
            vec![StreamEvent::Error {
                error: classify_stream_error(&value)
            }],
            "{data}"
        );
    }
}

#[test]
fn json_that_value_rejects_fails_every_format_even_in_ignored_fields() {
    let cases = [
        (
            ProviderKind::OpenaiChat,
            "OpenAI Chat",
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
        ),
        (
            ProviderKind::Anthropic,
            "Anthropic",
            r#"{"type":"message_stop"}"#,
        ),
        (
            ProviderKind::OpenaiResponses,
            "OpenAI Responses",
            r#"{"type":"response.output_text.delta","delta":"hi"}"#,
        ),
    ];
    for (kind, format, valid) in cases {
        for data in value_rejects(valid) {
            assert_eq!(
                feed(kind, &[("message", &data)]),
                vec![malformed(format, &data)],
                "{data}"
            );
        }
    }
}

/// JSON-like text: valid JSON mostly, with leaves `serde_json::Value` refuses (out-of-range
/// numbers, lone surrogates, leading zeros) and keys every decoder reads.
fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("-3".to_owned()),
        Just("7".to_owned()),
        Just("2.5".to_owned()),
        Just("1e400".to_owned()),
        Just("01".to_owned()),
        Just(r#""text""#.to_owned()),
        Just(r#""a\nb""#.to_owned()),
        Just(r#""\ud800""#.to_owned()),
        Just(r#""function_call""#.to_owned()),
    ];
    let key = prop_oneof![
        "choices",
        "delta",
        "message",
        "content",
        "reasoning",
        "tool_calls",
        "function",
        "arguments",
        "index",
        "id",
        "error",
        "usage",
        "type",
        "item",
        "response",
        "content_block",
        "input",
        "x",
    ];
    leaf.prop_recursive(5, 48, 4, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(","))),
            proptest::collection::vec((key.clone(), inner), 0..4).prop_map(|v| {
                let fields: Vec<String> = v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    })
}

proptest::proptest! {
    /// Every decoder's typed view accepts a payload exactly when `serde_json::Value` does
    /// (so the same payloads fail the stream, with `Value`'s complaint).
    #[test]
    fn typed_views_accept_exactly_what_value_accepts(data in json_text()) {
        use super::common::parse_payload;
        let value_ok = serde_json::from_str::<Value>(&data).is_ok();
        let chat = parse_payload::<super::chat_json::Chunk<'_>>("x", &data).is_ok();
        let anthropic = parse_payload::<super::anthropic_decode::Event<'_>>("x", &data).is_ok();
        let responses = parse_payload::<super::responses_decode::Event<'_>>("x", &data).is_ok();
        proptest::prop_assert_eq!((chat, anthropic, responses), (value_ok, value_ok, value_ok), "{}", data);
    }
}

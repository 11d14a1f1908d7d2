//! What the Anthropic and Responses decoders tolerate field by field, pinned before their
//! payloads became typed structs: a missing or non-string `type` falls back to the SSE
//! event name, wrong types are ignored, non-object payloads still act by event name,
//! tool input is re-serialised with sorted keys, duplicate keys keep the last value, and
//! error payloads are classified from the same JSON value as before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::tolerance_chat_tests::{call, feed, text};
use super::*;
use crate::classify::classify_stream_error;
use foya_protocol::{FinishReason, ReasoningPart, Usage};
use serde_json::json;

fn usage(input: u64, output: u64, cached: Option<u64>) -> StreamEvent {
    StreamEvent::Usage {
        usage: Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: cached,
            reasoning_tokens: None,
        },
    }
}

fn reasoning(t: &str) -> StreamEvent {
    StreamEvent::ReasoningDelta { text: t.to_owned() }
}

#[test]
fn anthropic_wrong_types_event_name_fallback_and_sorted_tool_input() {
    let out = feed(
        ProviderKind::Anthropic,
        &[
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":3,"cache_creation_input_tokens":2,"output_tokens":1.0}}}"#,
            ),
            (
                "message_start",
                r#"{"type":"message_start","message":{"usage":null}}"#,
            ),
            (
                "message_start",
                r#"{"type":"message_start","message":[{"usage":{"input_tokens":1}}]}"#,
            ),
            (
                "content_block_start",
                r#"{"index":0,"content_block":{"type":"tool_use","id":"t","name":"shell","input":{"z":"\u00e9","a":[1,2.5,1e2]}}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0.0}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":5,"input":{}}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            ),
            ("ping", "[1,2]"),
            (
                "content_block_start",
                r#"{"type":7,"index":2,"content_block":null}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"x"}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":3,"content_block":{"type":"thinking","thinking":null,"signature":"s1"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"signature_delta","signature":5}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"wrong block"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":3}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":4,"content_block":{"type":"text","text":"hi"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":null}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":4,"delta":"text"}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":9,"delta":{"type":"text_delta","text":"no block"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"a","text":"b"}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":5,"content_block":{"type":"redacted_thinking","data":null}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":6,"content_block":{"type":"tool_use","input":{"q":1}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":6,"delta":{"type":"input_json_delta","partial_json":"{\"q\":2}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":6}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":5},"usage":{"output_tokens":7}}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":null}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","usage":{"input_tokens":4}}"#,
            ),
            ("message_stop", r#""bye""#),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ],
    );
    assert_eq!(
        out,
        vec![
            usage(15, 0, Some(3)),
            call(0, Some("t"), Some("shell"), "", None),
            call(0, None, None, r#"{"a":[1,2.5,100.0],"z":"é"}"#, None),
            call(1, None, None, "", None),
            StreamEvent::ReasoningDelta {
                text: "hm".to_owned()
            },
            StreamEvent::ReasoningPart {
                part: ReasoningPart::Thinking {
                    text: "hm".to_owned(),
                    signature: Some("s1".to_owned())
                }
            },
            text("hi"),
            text("b"),
            StreamEvent::ReasoningPart {
                part: ReasoningPart::Redacted {
                    data: String::new()
                }
            },
            call(2, None, None, "", None),
            call(2, None, None, r#"{"q":2}"#, None),
            usage(15, 7, Some(3)),
            usage(4, 7, Some(3)),
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Length)
            },
        ]
    );
}

#[test]
fn anthropic_duplicate_type_keys_and_errors() {
    assert_eq!(
        feed(
            ProviderKind::Anthropic,
            &[(
                "content_block_delta",
                r#"{"type":"content_block_delta","type":"message_stop"}"#
            )]
        ),
        vec![StreamEvent::Done {
            finish_reason: None
        }]
    );
    let cases = [
        (
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
            json!({"type":"error","error":{"type":"overloaded_error","message":"busy"}}),
        ),
        ("error", "[1]", json!([1])),
        (
            "message",
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}"#,
            json!({"type":"error","error":{"type":"rate_limit_error","message":"slow"}}),
        ),
    ];
    for (event, data, value) in cases {
        assert_eq!(
            feed(ProviderKind::Anthropic, &[(event, data)]),
            vec![StreamEvent::Error {
                error: classify_stream_error(&value)
            }],
            "{data}"
        );
    }
}

#[test]
fn responses_wrong_types_call_lookup_and_event_name_fallback() {
    let out = feed(
        ProviderKind::OpenaiResponses,
        &[
            (
                "response.output_item.added",
                r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","call_id":"c1","name":"shell","arguments":""}}"#,
            ),
            (
                "x",
                r#"{"type":"response.function_call_arguments.delta","output_index":0,"delta":"{}"}"#,
            ),
            (
                "x",
                r#"{"type":"response.function_call_arguments.delta","item_id":"c1","delta":5}"#,
            ),
            (
                "x",
                r#"{"type":"response.function_call_arguments.delta","item_id":"nope","output_index":0,"delta":"by index"}"#,
            ),
            (
                "x",
                r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","call_id":"c1","arguments":"{\"a\":1}"}}"#,
            ),
            (
                "x",
                r#"{"type":"response.output_item.added","output_index":1.0,"item":{"type":"function_call","id":"fc2","call_id":"c2","arguments":"{\"x\":1}"}}"#,
            ),
            (
                "x",
                r#"{"type":"response.function_call_arguments.done","item_id":"fc2","arguments":"again"}"#,
            ),
            (
                "x",
                r#"{"type":"response.output_item.done","item":{"type":"function_call","id":"fc3","call_id":7,"name":"read","arguments":"{}"}}"#,
            ),
            (
                "x",
                r#"{"type":"response.output_item.added","item":{"type":"message","id":"m"}}"#,
            ),
            (
                "x",
                r#"{"type":"response.output_item.added","item":"function_call"}"#,
            ),
            ("x", r#"{"type":"response.output_text.delta","delta":null}"#),
            ("x", r#"{"type":"response.refusal.delta","delta":"no"}"#),
            (
                "response.output_text.delta",
                r#"{"type":5,"delta":"via event"}"#,
            ),
            ("response.output_text.delta", r#"{"delta":"a","delta":"b"}"#),
            (
                "x",
                r#"{"type":"response.reasoning_summary_text.delta","item_id":"r","summary_index":0,"delta":"a"}"#,
            ),
            (
                "x",
                r#"{"type":"response.reasoning_summary_text.delta","item_id":"r","summary_index":0,"delta":""}"#,
            ),
            (
                "x",
                r#"{"type":"response.reasoning_summary_text.delta","item_id":"r","summary_index":1,"delta":"b"}"#,
            ),
            (
                "x",
                r#"{"type":"response.reasoning_text.delta","summary_index":"1","delta":"c"}"#,
            ),
            (
                "x",
                r#"{"type":"response.reasoning_text.delta","item_id":"","delta":"d"}"#,
            ),
            (
                "response.completed",
                r#"{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":null,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":null}}}"#,
            ),
        ],
    );
    assert_eq!(
        out,
        vec![
            call(0, Some("c1"), Some("shell"), "", None),
            call(0, None, None, "{}", None),
            // The output index names the item: a contradicting item id does not matter.
            call(0, None, None, "by index", None),
            call(1, Some("c2"), None, r#"{"x":1}"#, None),
            call(2, Some("fc3"), Some("read"), "{}", None),
            text("no"),
            text("via event"),
            text("b"),
            reasoning("a"),
            reasoning("\n\n"),
            reasoning("b"),
            reasoning("\n\n"),
            reasoning("c"),
            reasoning("d"),
            usage(5, 0, Some(2)),
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Stop)
            },
        ]
    );
}

#[test]
fn responses_terminal_events_with_odd_shapes() {
    let done = |reason| StreamEvent::Done {
        finish_reason: Some(reason),
    };
    let cases = [
        (
            r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":5},"usage":null}}"#,
            vec![done(FinishReason::Other)],
        ),
        (
            r#"{"type":"response.incomplete","response":{"incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":-1,"output_tokens":2.5,"output_tokens_details":{"reasoning_tokens":3}}}}"#,
            vec![
                StreamEvent::Usage {
                    usage: Usage {
                        input_tokens: 0,
                        output_tokens: 0,
                        cached_input_tokens: None,
                        reasoning_tokens: Some(3),
                    },
                },
                done(FinishReason::Length),
            ],
        ),
        (
            r#"{"type":"response.incomplete","response":"x"}"#,
            vec![done(FinishReason::Other)],
        ),
        (
            r#"{"type":"response.completed"}"#,
            vec![done(FinishReason::Stop)],
        ),
        (
            r#"{"type":"response.failed","response":{"error":null,"message":"whole response"}}"#,
            vec![StreamEvent::Error {
                error: classify_stream_error(&json!({"error":null,"message":"whole response"})),
            }],
        ),
        (
            r#"{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"slow"},"usage":{"input_tokens":1}}}"#,
            vec![
                usage(1, 0, None),
                StreamEvent::Error {
                    error: classify_stream_error(
                        &json!({"code":"rate_limit_exceeded","message":"slow"}),
                    ),
                },
            ],
        ),
        (
            r#"{"type":"response.failed","response":"x"}"#,
            vec![StreamEvent::Error {
                error: classify_stream_error(&json!("x")),
            }],
        ),
        (
            r#"{"type":"response.failed"}"#,
            vec![StreamEvent::Error {
                error: classify_stream_error(&serde_json::Value::Null),
            }],
        ),
        (
            r#"{"type":"error","code":"server_error","message":"oops"}"#,
            vec![StreamEvent::Error {
                error: classify_stream_error(
                    &json!({"type":"error","code":"server_error","message":"oops"}),
                ),
            }],
        ),
    ];
    for (data, expected) in cases {
        assert_eq!(
            feed(ProviderKind::OpenaiResponses, &[("message", data)]),
            expected,
            "{data}"
        );
    }
    assert_eq!(
        feed(ProviderKind::OpenaiResponses, &[("error", "\"down\"")]),
        vec![StreamEvent::Error {
            error: classify_stream_error(&json!("down"))
        }]
    );
}

//! Tool-call ids on the wire: ids with characters outside `[a-zA-Z0-9_-]`, ids over 40
//! characters and ids repeated across steps are sent under fresh ids in every format,
//! each tool result under its call's id; valid unique ids go as they are; the same
//! history always gives the same bytes. And the decoder's ids for calls streamed without
//! one: unique per call, never the per-response `call_0`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use bytes::Bytes;
use foya_protocol::{
    AssistantMessage, FinishReason, Input, Message, StreamAggregate, ToolCall, ToolCallId,
    ToolMessage,
};
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashSet;

/// The originals, in call order: invalid characters, 300 characters, `call_0` (valid),
/// `call_0` again in the next step, a valid unique id.
fn originals() -> Vec<String> {
    vec![
        "call.1 x".to_owned(),
        "x".repeat(300),
        "call_0".to_owned(),
        "call_0".to_owned(),
        "toolu_ok".to_owned(),
    ]
}

/// Three steps: the first two calls, then `call_0`, then `call_0` and `toolu_ok`; each
/// call answered right after its assistant message.
fn request() -> ModelRequest {
    let ids = originals();
    let steps: [&[String]; 3] = [&ids[0..2], &ids[2..3], &ids[3..5]];
    let mut messages = vec![Message::User(Input::text("go"))];
    for step in steps {
        let calls: Vec<ToolCall> = step
            .iter()
            .map(|id| ToolCall {
                id: ToolCallId::new(id.as_str()),
                name: "shell".into(),
                arguments: json!({}),
                extra: None,
            })
            .collect();
        messages.push(Message::Assistant(AssistantMessage {
            tool_calls: calls.clone(),
            finish_reason: Some(FinishReason::ToolCalls),
            ..AssistantMessage::default()
        }));
        for call in calls {
            messages.push(Message::Tool(ToolMessage {
                content: format!("out {}", &call.id.as_str()[..1]),
                tool_call_id: call.id,
                is_error: false,
                images: Vec::new(),
            }));
        }
    }
    ModelRequest {
        model: "m".into(),
        messages: messages.into(),
        ..ModelRequest::default()
    }
}

/// The ids every format sends, in call order: fresh ones for the invalid, the too long
/// and the repeated id; the first `call_0` and `toolu_ok` unchanged.
fn wire() -> Vec<&'static str> {
    vec![
        "call_de222090fff18ddf",
        "call_651c09e5d3e1ec0d",
        "call_0",
        "call_c70c8aa3e8f4788e",
        "toolu_ok",
    ]
}

fn outputs() -> Vec<String> {
    originals()
        .iter()
        .map(|id| format!("out {}", &id[..1]))
        .collect()
}

#[test]
fn openai_chat_sends_valid_unique_call_ids_and_pairs_each_result() {
    let body = ProviderKind::OpenaiChat.encode(&request()).body;
    let w = wire();
    let out = outputs();
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "shell", "arguments": "{}"}});
    let result = |i: usize| json!({"role": "tool", "tool_call_id": w[i], "content": out[i]});
    let assistant =
        |calls: Vec<Value>| json!({"role": "assistant", "content": null, "tool_calls": calls});
    assert_eq!(
        body,
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": [
            {"role": "user", "content": "go"},
            assistant(vec![call(w[0]), call(w[1])]), result(0), result(1),
            assistant(vec![call(w[2])]), result(2),
            assistant(vec![call(w[3]), call(w[4])]), result(3), result(4),
        ]})
    );
}

#[test]
fn anthropic_sends_valid_unique_tool_use_ids_and_pairs_each_result() {
    let body = ProviderKind::Anthropic.encode(&request()).body;
    let w = wire();
    let out = outputs();
    let use_ = |id: &str| json!({"type": "tool_use", "id": id, "name": "shell", "input": {}});
    let result = |i: usize| json!({"type": "tool_result", "tool_use_id": w[i], "content": out[i]});
    assert_eq!(
        body,
        json!({"model": "m", "max_tokens": 8192, "stream": true, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [use_(w[0]), use_(w[1])]},
            {"role": "user", "content": [result(0), result(1)]},
            {"role": "assistant", "content": [use_(w[2])]},
            {"role": "user", "content": [result(2)]},
            {"role": "assistant", "content": [use_(w[3]), use_(w[4])]},
            {"role": "user", "content": [result(3), result(4)]},
        ]})
    );
}

#[test]
fn openai_responses_sends_valid_unique_call_ids_and_pairs_each_result() {
    let body = ProviderKind::OpenaiResponses.encode(&request()).body;
    let w = wire();
    let out = outputs();
    let call = |i: usize| json!({"type": "function_call", "call_id": w[i], "name": "shell", "arguments": "{}"});
    let result =
        |i: usize| json!({"type": "function_call_output", "call_id": w[i], "output": out[i]});
    assert_eq!(
        body,
        json!({"model": "m", "stream": true, "store": false, "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            call(0), call(1), result(0), result(1),
            call(2), result(2),
            call(3), call(4), result(3), result(4),
        ]})
    );
}

#[test]
fn the_same_history_encodes_to_the_same_bytes_and_fresh_ids_avoid_every_original() {
    for kind in ProviderKind::ALL {
        let a = serde_json::to_vec(&kind.encode(&request()).body).unwrap();
        let b = serde_json::to_vec(&kind.encode(&request()).body).unwrap();
        assert_eq!(a, b, "{kind}");
    }
    // A later call whose own (valid) id is what a fresh id would have been keeps it; the
    // earlier invalid id gets another fresh one.
    let mut req = request();
    let mut messages = req.messages.to_vec();
    messages.push(Message::Assistant(AssistantMessage {
        tool_calls: vec![ToolCall {
            id: ToolCallId::new(wire()[0]),
            name: "shell".into(),
            arguments: json!({}),
            extra: None,
        }],
        finish_reason: Some(FinishReason::ToolCalls),
        ..AssistantMessage::default()
    }));
    req.messages = messages.into();
    let body = ProviderKind::Anthropic.encode(&req).body;
    let ids: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().unwrap())
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![
            "call_ead1e1bb7d42717c",
            wire()[1],
            "call_0",
            wire()[3],
            "toolu_ok",
            wire()[0]
        ]
    );
}

fn chat_chunk(delta: &Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

/// One response of two calls without ids, then a third whose id comes on a later
/// fragment.
async fn decode_calls() -> Vec<ToolCall> {
    let body = [
        chat_chunk(
            &json!({"tool_calls": [{"index": 0, "function": {"name": "a", "arguments": "{}"}}]}),
            None,
        ),
        chat_chunk(
            &json!({"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": "{}"}}]}),
            None,
        ),
        chat_chunk(
            &json!({"tool_calls": [{"index": 2, "function": {"name": "c", "arguments": "{}"}}]}),
            None,
        ),
        chat_chunk(
            &json!({"tool_calls": [{"index": 2, "id": "late_id"}]}),
            None,
        ),
        chat_chunk(&json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let bytes = futures::stream::iter([Ok::<_, TransportError>(Bytes::from(body))]);
    let mut agg = StreamAggregate::new();
    for e in decode_sse(
        bytes,
        ProviderKind::OpenaiChat.decoder(),
        SseLimits::default(),
    )
    .collect::<Vec<_>>()
    .await
    {
        agg.apply(&e);
    }
    agg.tool_calls()
}

#[tokio::test]
async fn calls_streamed_without_ids_get_ids_unique_across_responses() {
    let first = decode_calls().await;
    let second = decode_calls().await;
    let mut generated = Vec::new();
    for calls in [&first, &second] {
        let shape: Vec<(String, bool)> = calls
            .iter()
            .map(|c| {
                let id = c.id.as_str();
                let is_generated = id.len() == 37
                    && id.starts_with("call_")
                    && id[5..].bytes().all(|b| b.is_ascii_hexdigit());
                if is_generated {
                    generated.push(id.to_owned());
                }
                (c.name.clone(), is_generated || id == "late_id")
            })
            .collect();
        assert_eq!(
            shape,
            vec![("a".into(), true), ("b".into(), true), ("c".into(), true)]
        );
        assert_eq!(calls[2].id, ToolCallId::new("late_id"));
    }
    let unique: HashSet<&String> = generated.iter().collect();
    assert_eq!((generated.len(), unique.len()), (4, 4));
}

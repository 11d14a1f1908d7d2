//! Tool names in the replayed history: a call whose name providers refuse (empty, longer
//! than 64, characters outside `[a-zA-Z0-9_-]`) is sent as `invalid_tool_name` in every
//! wire format; valid names are sent as they are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use foya_protocol::{
    AssistantMessage, FinishReason, Input, Message, ToolCall, ToolCallId, ToolMessage,
};
use serde_json::{Value, json};

const NAMES: [&str; 5] = ["", "read.file", "bad name", "shell", "a_B-9"];

fn long_name() -> String {
    "x".repeat(65)
}

fn names() -> Vec<String> {
    let mut names: Vec<String> = NAMES.iter().map(|n| (*n).to_owned()).collect();
    names.push(long_name());
    names.push("y".repeat(64));
    names
}

fn request() -> ModelRequest {
    let calls: Vec<ToolCall> = names()
        .into_iter()
        .enumerate()
        .map(|(i, name)| ToolCall {
            id: ToolCallId::new(format!("c{i}")),
            name,
            arguments: json!({}),
            extra: None,
        })
        .collect();
    let mut messages = vec![
        Message::User(Input::text("go")),
        Message::Assistant(AssistantMessage {
            tool_calls: calls.clone(),
            finish_reason: Some(FinishReason::ToolCalls),
            ..AssistantMessage::default()
        }),
    ];
    for call in &calls {
        messages.push(Message::Tool(ToolMessage {
            tool_call_id: call.id.clone(),
            content: "unknown tool".into(),
            is_error: true,
            images: Vec::new(),
        }));
    }
    ModelRequest {
        model: "m".into(),
        messages: messages.into(),
        ..ModelRequest::default()
    }
}

/// What each call's name must be on the wire, in call order.
fn expected() -> Vec<Value> {
    [
        "invalid_tool_name".to_owned(),
        "invalid_tool_name".to_owned(),
        "invalid_tool_name".to_owned(),
        "shell".to_owned(),
        "a_B-9".to_owned(),
        "invalid_tool_name".to_owned(),
        "y".repeat(64),
    ]
    .into_iter()
    .map(Value::String)
    .collect()
}

fn ids() -> impl Iterator<Item = String> {
    (0..names().len()).map(|i| format!("c{i}"))
}

#[test]
fn openai_chat_replays_invalid_tool_names_under_a_placeholder() {
    let body = ProviderKind::OpenaiChat.encode(&request()).body;
    let calls: Vec<Value> = ids()
        .zip(expected())
        .map(|(id, name)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}}))
        .collect();
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    );
    let results: Vec<Value> = ids()
        .map(|id| json!({"role": "tool", "tool_call_id": id, "content": "Error: unknown tool"}))
        .collect();
    assert_eq!(body["messages"].as_array().unwrap()[2..], results[..]);
}

#[test]
fn anthropic_replays_invalid_tool_names_under_a_placeholder() {
    let body = ProviderKind::Anthropic.encode(&request()).body;
    let blocks: Vec<Value> = ids()
        .zip(expected())
        .map(|(id, name)| json!({"type": "tool_use", "id": id, "name": name, "input": {}}))
        .collect();
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": blocks})
    );
    let results: Vec<Value> = ids()
        .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "unknown tool", "is_error": true}))
        .collect();
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": results})
    );
}

#[test]
fn openai_responses_replays_invalid_tool_names_under_a_placeholder() {
    let body = ProviderKind::OpenaiResponses.encode(&request()).body;
    let calls: Vec<Value> = ids()
        .zip(expected())
        .map(|(id, name)| json!({"type": "function_call", "call_id": id, "name": name, "arguments": "{}"}))
        .collect();
    let input = body["input"].as_array().unwrap();
    let n = calls.len();
    assert_eq!(input[1..=n], calls[..]);
    let results: Vec<Value> = ids()
        .map(|id| json!({"type": "function_call_output", "call_id": id, "output": "Error: unknown tool"}))
        .collect();
    assert_eq!(input[n + 1..], results[..]);
}

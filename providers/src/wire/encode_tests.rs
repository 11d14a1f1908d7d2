//! Encoder tests: whole request bodies per protocol, including tool results with
//! `is_error`, images, opaque call extras, the Anthropic thinking-signature round trip
//! and interrupted reasoning.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::{ImageData, ToolSchema};
use bytes::Bytes;
use foya_protocol::{
    AssistantMessage, AttachmentRef, FinishReason, Input, Message, ReasoningPart, StreamAggregate,
    ToolCall, ToolCallId, ToolMessage,
};
use futures::StreamExt;
use serde_json::json;

fn request() -> ModelRequest {
    let mut images = std::collections::BTreeMap::new();
    images.insert(
        "img1".to_owned(),
        ImageData {
            media_type: "image/png".into(),
            base64: "iVBO".into(),
        },
    );
    ModelRequest {
        model: "m".into(),
        system: "Be brief.".into(),
        messages: vec![
            Message::User(Input {
                text: "Look".into(),
                images: vec![AttachmentRef {
                    id: "img1".into(),
                    media_type: None,
                }],
                ..Input::default()
            }),
            Message::Assistant(AssistantMessage {
                text: "Checking.".into(),
                reasoning: "Plan.".into(),
                tool_calls: vec![ToolCall {
                    id: ToolCallId::new("c1"),
                    name: "shell".into(),
                    arguments: json!({"command": "ls"}),
                    extra: Some(json!({"extra_content": {"google": {"thought_signature": "sig"}}})),
                }],
                finish_reason: Some(FinishReason::ToolCalls),
                ..AssistantMessage::default()
            }),
            Message::Tool(ToolMessage {
                tool_call_id: ToolCallId::new("c1"),
                content: "denied".into(),
                is_error: true,
                images: Vec::new(),
            }),
        ]
        .into(),
        tools: vec![ToolSchema {
            name: "shell".into(),
            description: "Run".into(),
            parameters: json!({"type": "object"}),
        }]
        .into(),
        max_output_tokens: None,
        images,
    }
}

#[test]
fn openai_chat_body() {
    let enc = ProviderKind::OpenaiChat.encode(&request());
    assert_eq!(enc.path, "/chat/completions");
    assert_eq!(
        enc.body,
        json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "Plan.",
                 "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"},
                    "extra_content": {"google": {"thought_signature": "sig"}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "Error: denied"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "shell", "description": "Run", "parameters": {"type": "object"}}}],
        })
    );
}

#[test]
fn anthropic_body_has_default_max_tokens_images_and_is_error() {
    let enc = ProviderKind::Anthropic.encode(&request());
    assert_eq!(enc.path, "/v1/messages");
    assert!(
        enc.headers
            .contains(&("anthropic-version", "2023-06-01".to_owned()))
    );
    assert_eq!(
        enc.body,
        json!({
            "model": "m",
            "max_tokens": 8192,
            "system": "Be brief.",
            "stream": true,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "c1", "name": "shell", "input": {"command": "ls"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "denied", "is_error": true}]},
            ],
            "tools": [{"name": "shell", "description": "Run", "input_schema": {"type": "object"}}],
        })
    );
}

#[test]
fn responses_body() {
    let mut req = request();
    req.max_output_tokens = Some(100);
    let enc = ProviderKind::OpenaiResponses.encode(&req);
    assert_eq!(enc.path, "/responses");
    assert_eq!(
        enc.body,
        json!({
            "model": "m",
            "instructions": "Be brief.",
            "stream": true,
            "store": false,
            "max_output_tokens": 100,
            "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"command\":\"ls\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "Error: denied"},
            ],
            "tools": [{"type": "function", "name": "shell", "description": "Run", "parameters": {"type": "object"}}],
        })
    );
}

#[tokio::test]
async fn anthropic_thinking_signature_round_trips() {
    let sse = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../actors/tests/fixtures/providers/anthropic/thinking_text_tool_use.sse"),
    )
    .unwrap();
    let bytes = futures::stream::iter([Ok::<_, TransportError>(Bytes::from(sse))]);
    let mut agg = StreamAggregate::new();
    for e in decode_sse(
        bytes,
        ProviderKind::Anthropic.decoder(),
        SseLimits::default(),
    )
    .collect::<Vec<_>>()
    .await
    {
        agg.apply(&e);
    }
    let req = ModelRequest {
        model: "m".into(),
        messages: vec![
            Message::User(Input::text("go")),
            Message::Assistant(agg.to_message()),
        ]
        .into(),
        ..ModelRequest::default()
    };
    let body = ProviderKind::Anthropic.encode(&req).body;
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Need the manifest.", "signature": "U2lnbmF0dXJlQQ=="},
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {"path": "Cargo.toml"}},
        ]})
    );
}

#[test]
fn interrupted_reasoning_is_sent_once_as_marked_text_and_redacted_kept() {
    let msg = AssistantMessage {
        text: "Part".into(),
        reasoning: "I was thinking".into(),
        interrupted: true,
        ..AssistantMessage::default()
    };
    let done = AssistantMessage {
        text: "ok".into(),
        reasoning_parts: vec![ReasoningPart::Redacted { data: "R".into() }],
        ..AssistantMessage::default()
    };
    let req = ModelRequest {
        model: "m".into(),
        messages: vec![
            Message::Assistant(msg),
            Message::User(Input::text("go on")),
            Message::Assistant(done),
        ]
        .into(),
        ..ModelRequest::default()
    };
    let chat = ProviderKind::OpenaiChat.encode(&req).body;
    assert_eq!(
        chat["messages"][0],
        json!({"role": "assistant", "content": "[interrupted reasoning] I was thinking\n\nPart"})
    );
    let anth = ProviderKind::Anthropic.encode(&req).body;
    assert_eq!(
        anth["messages"],
        json!([
            {"role": "assistant", "content": [
                {"type": "text", "text": "[interrupted reasoning] I was thinking"},
                {"type": "text", "text": "Part"}]},
            {"role": "user", "content": [{"type": "text", "text": "go on"}]},
            {"role": "assistant", "content": [
                {"type": "redacted_thinking", "data": "R"},
                {"type": "text", "text": "ok"}]},
        ])
    );
    let resp = ProviderKind::OpenaiResponses.encode(&req).body;
    assert_eq!(
        resp["input"][0],
        json!({"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "[interrupted reasoning] I was thinking\n\nPart"}]})
    );
}

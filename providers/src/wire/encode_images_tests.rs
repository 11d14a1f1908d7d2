//! Encoder tests for images in tool results (an MCP tool's `image` content): Anthropic
//! `image` blocks inside the `tool_result`, Responses `input_image` items in the
//! `function_call_output`'s output array, and Chat Completions (whose `tool` messages
//! take text only) a `user` message after the step's `tool` messages naming each call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::ImageData;
use foya_protocol::{
    AssistantMessage, AttachmentRef, FinishReason, Input, Message, ToolCall, ToolCallId,
    ToolMessage,
};
use serde_json::json;

fn image_ref(id: &str) -> AttachmentRef {
    AttachmentRef {
        id: id.into(),
        media_type: Some("image/png".into()),
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: "mcp__everything__get-tiny-image".into(),
        arguments: json!({}),
        extra: None,
    }
}

/// A step with two calls: `c1` returned an image (and one that is not in the store),
/// `c2` text only; then the user's next input.
fn request() -> ModelRequest {
    let mut images = std::collections::BTreeMap::new();
    images.insert(
        "img1".to_owned(),
        ImageData {
            media_type: "image/png".into(),
            base64: "iVBO".into(),
        },
    );
    let mut with_image = ToolMessage::text(
        ToolCallId::new("c1"),
        "Here: [image: image/png, 3 bytes]",
        false,
    );
    with_image.images = vec![image_ref("img1"), image_ref("gone")];
    ModelRequest {
        model: "m".into(),
        messages: vec![
            Message::User(Input::text("show me")),
            Message::Assistant(AssistantMessage {
                tool_calls: vec![call("c1"), call("c2")],
                finish_reason: Some(FinishReason::ToolCalls),
                ..AssistantMessage::default()
            }),
            Message::Tool(with_image),
            Message::Tool(ToolMessage::text(ToolCallId::new("c2"), "no image", false)),
            Message::User(Input::text("thanks")),
        ]
        .into(),
        images,
        ..ModelRequest::default()
    }
}

#[test]
fn anthropic_puts_the_images_inside_the_tool_result() {
    let body = ProviderKind::Anthropic.encode(&request()).body;
    assert_eq!(
        body["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": [
                {"type": "text", "text": "Here: [image: image/png, 3 bytes]"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
                {"type": "text", "text": "[image gone unavailable]"}]},
            {"type": "tool_result", "tool_use_id": "c2", "content": "no image"},
            {"type": "text", "text": "thanks"}]})
    );
}

#[test]
fn responses_sends_an_output_array_with_input_image_items() {
    let body = ProviderKind::OpenaiResponses.encode(&request()).body;
    let input = body["input"].as_array().unwrap();
    assert_eq!(
        input[3],
        json!({"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "Here: [image: image/png, 3 bytes]"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
            {"type": "input_text", "text": "[image gone unavailable]"}]})
    );
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": "c2", "output": "no image"})
    );
}

#[test]
fn chat_sends_the_images_in_a_user_message_after_the_steps_tool_messages() {
    let body = ProviderKind::OpenaiChat.encode(&request()).body;
    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "user", "user"]);
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "Here: [image: image/png, 3 bytes]"})
    );
    assert_eq!(
        messages[4],
        json!({"role": "user", "content": [
            {"type": "text", "text": "[images of tool call c1]"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            {"type": "text", "text": "[image gone unavailable]"}]})
    );
    assert_eq!(messages[5], json!({"role": "user", "content": "thanks"}));
}

#[test]
fn chat_sends_images_of_the_last_step_at_the_end_of_the_request() {
    let mut request = request();
    let mut messages = request.messages.to_vec();
    messages.pop();
    request.messages = messages.into();
    let body = ProviderKind::OpenaiChat.encode(&request).body;
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"][0]["text"], "[images of tool call c1]");
}

#[test]
fn a_result_without_images_is_encoded_as_before() {
    let mut request = request();
    let messages: Vec<Message> = request
        .messages
        .iter()
        .map(|m| match m {
            Message::Tool(t) => Message::Tool(ToolMessage {
                images: Vec::new(),
                ..t.clone()
            }),
            other => other.clone(),
        })
        .collect();
    request.messages = messages.into();
    let chat = ProviderKind::OpenaiChat.encode(&request).body;
    assert_eq!(chat["messages"].as_array().unwrap().len(), 5);
    let anthropic = ProviderKind::Anthropic.encode(&request).body;
    assert_eq!(
        anthropic["messages"][2]["content"][0]["content"],
        "Here: [image: image/png, 3 bytes]"
    );
}

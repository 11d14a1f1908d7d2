//! Decoder cases beyond the shared fixtures: the variations listed in the provider issue
//! (mirrored reasoning fields, calls all at index 0, repeated ids, index gaps, usage
//! placements, JSON bodies with status 200, oversized events, every stop reason).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use bytes::Bytes;
use foya_protocol::{FinishReason, ReasoningPart, StreamAggregate, ToolCallId, Usage};
use futures::StreamExt;
use serde_json::json;

async fn run(kind: ProviderKind, body: &str, limits: SseLimits) -> Vec<StreamEvent> {
    let bytes = futures::stream::iter([Ok::<_, TransportError>(Bytes::from(body.to_owned()))]);
    decode_sse(bytes, kind.decoder(), limits).collect().await
}

async fn agg(kind: ProviderKind, body: &str) -> StreamAggregate {
    let mut agg = StreamAggregate::new();
    for e in run(kind, body, SseLimits::default()).await {
        agg.apply(&e);
    }
    agg
}

fn chat(delta: serde_json::Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

#[tokio::test]
async fn chat_mirrored_reasoning_counts_once_and_calls_at_index_zero_split_by_id() {
    let body = [
        chat(json!({"reasoning_content": "Think.", "reasoning": "Think."}), None),
        chat(json!({"reasoning": "More."}), None),
        chat(json!({"reasoning_content": "More."}), None),
        chat(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "shell", "arguments": "{\"command\":"}}]}),
            None,
        ),
        chat(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "shell", "arguments": "\"ls\"}"}}]}),
            None,
        ),
        chat(
            json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "read_file"}}]}),
            None,
        ),
        chat(json!({"tool_calls": [{"index": 5, "id": "c", "function": {"name": "list_dir", "arguments": null}}]}), None),
        "data: {\"choices\":null,\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n".to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let agg = agg(ProviderKind::OpenaiChat, &body).await;
    assert_eq!(agg.reasoning, "Think.More.");
    let calls: Vec<_> = agg
        .tool_calls()
        .into_iter()
        .map(|c| (c.id.0, c.name, c.arguments))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("a".into(), "shell".into(), json!({"command": "ls"})),
            ("b".into(), "read_file".into(), json!({})),
            ("c".into(), "list_dir".into(), json!({})),
        ]
    );
    assert_eq!(agg.finish_reason(), Some(FinishReason::ToolCalls));
    assert_eq!(
        agg.usage,
        Some(Usage {
            input_tokens: 3,
            output_tokens: 4,
            ..Usage::default()
        })
    );
}

#[tokio::test]
async fn chat_usage_in_finish_chunk_unknown_reason_and_empty_choices() {
    let body = concat!(
        "data: {\"choices\":[]}\n\n",
        "data: {\"choices\":[{\"index\":0}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"recitation\"}],",
        "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n",
    );
    let agg = agg(ProviderKind::OpenaiChat, body).await;
    assert_eq!(
        (agg.text.as_str(), agg.finish_reason()),
        ("hi", Some(FinishReason::Other))
    );
    assert_eq!(
        agg.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((1, 2))
    );
}

#[tokio::test]
async fn chat_eof_without_finish_is_stream_interrupted() {
    let agg = agg(
        ProviderKind::OpenaiChat,
        &chat(json!({"content": "par"}), None),
    )
    .await;
    assert_eq!(agg.text, "par");
    assert_eq!(
        agg.error.map(|e| e.class),
        Some(ErrorClass::StreamInterrupted)
    );
}

#[tokio::test]
async fn json_error_body_with_status_200_is_classified() {
    let body = "{\"error\":{\"message\":\"This model's maximum context length is 8192 tokens\",\"type\":\"invalid_request_error\",\"code\":null}}";
    for kind in ProviderKind::ALL {
        let events = run(kind, body, SseLimits::default()).await;
        assert_eq!(events.len(), 1);
        let StreamEvent::Error { error } = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!(error.class, ErrorClass::ContextOverflow);
    }
}

#[tokio::test]
async fn oversized_event_fails_the_stream() {
    let body = format!("data: {}\n\n", "x".repeat(100));
    let events = run(
        ProviderKind::OpenaiChat,
        &body,
        SseLimits {
            max_event_bytes: 64,
            ..SseLimits::default()
        },
    )
    .await;
    assert!(
        matches!(&events[..], [StreamEvent::Error { error }] if error.class == ErrorClass::InvalidRequest)
    );
}

#[tokio::test]
async fn an_answer_that_never_ends_fails_the_stream_at_the_body_cap() {
    // Small events forever, as a provider stuck in generation sends them: no event is
    // oversized and bytes never stop flowing.
    let first = chat(json!({"role": "assistant", "content": ""}), None);
    let more = chat(json!({"content": "yes "}), None);
    let bytes = futures::stream::once(futures::future::ready(first))
        .chain(futures::stream::repeat(more).take(100_000))
        .map(|event| Ok::<_, TransportError>(Bytes::from(event)));
    let limits = SseLimits {
        max_stream_bytes: 64 * 1024,
        ..SseLimits::default()
    };
    let events: Vec<StreamEvent> = decode_sse(bytes, ProviderKind::OpenaiChat.decoder(), limits)
        .collect()
        .await;
    let text: usize = events
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta { text } => text.len(),
            _ => 0,
        })
        .sum();
    assert!(text > 0 && text < 64 * 1024, "{text}");
    match events.last() {
        Some(StreamEvent::Error { error }) => {
            assert_eq!(error.class, ErrorClass::InvalidRequest);
            assert_eq!(
                error.message,
                "the answer exceeds 65536 bytes without ending (the provider kept streaming)"
            );
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

fn anthropic_stop(reason: &str) -> String {
    format!(
        "event: message_delta\ndata: {}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
        json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 5}})
    )
}

#[tokio::test]
async fn anthropic_every_stop_reason_maps() {
    for (raw, want) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("tool_use", FinishReason::ToolCalls),
        ("max_tokens", FinishReason::Length),
        ("pause_turn", FinishReason::PauseTurn),
        ("refusal", FinishReason::ContentFilter),
        ("model_context_window_exceeded", FinishReason::ContextWindow),
        ("something_new", FinishReason::Other),
    ] {
        let agg = agg(ProviderKind::Anthropic, &anthropic_stop(raw)).await;
        assert_eq!(agg.raw_finish_reason, Some(want), "{raw}");
    }
}

#[tokio::test]
async fn anthropic_thinking_signature_and_redacted_become_parts() {
    let events = [
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "EncR=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "thinking_delta", "thinking": "Hm."}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "signature_delta", "signature": "U2ln"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t", "name": "x", "input": {"a": 1}}}),
        json!({"type": "content_block_stop", "index": 2}),
    ]
    .iter()
    .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap()))
    .collect::<String>()
        + &anthropic_stop("tool_use");
    let agg = agg(ProviderKind::Anthropic, &events).await;
    assert_eq!(
        agg.reasoning_parts,
        vec![
            ReasoningPart::Redacted {
                data: "EncR==".into()
            },
            ReasoningPart::Thinking {
                text: "Hm.".into(),
                signature: Some("U2ln".into())
            },
        ]
    );
    assert_eq!(agg.reasoning, "Hm.");
    let calls = agg.tool_calls();
    assert_eq!(
        (calls[0].id.clone(), calls[0].arguments.clone()),
        (ToolCallId::new("t"), json!({"a": 1}))
    );
    assert_eq!(agg.finish_reason(), Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn responses_incomplete_is_length_and_whole_arguments_count_once() {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "shell", "arguments": ""}}),
        json!({"type": "response.output_text.delta", "item_id": "m", "delta": "ok"}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "{\"command\":\"ls\"}"}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":\"ls\"}"}}),
        json!({"type": "response.incomplete", "response": {"incomplete_details": {"reason": "max_output_tokens"}, "usage": {"input_tokens": 9, "output_tokens": 8}}}),
    ]
    .iter()
    .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap()))
    .collect::<String>();
    let events = run(ProviderKind::OpenaiResponses, &events, SseLimits::default()).await;
    let mut agg = StreamAggregate::new();
    for e in &events {
        agg.apply(e);
    }
    let args: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(args, "{\"command\":\"ls\"}");
    assert_eq!(agg.text, "ok");
    assert_eq!(agg.finish_reason(), Some(FinishReason::Length));
    assert_eq!(
        agg.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((9, 8))
    );
}

#[tokio::test]
async fn chat_utf8_split_inside_characters_and_nameless_continuations() {
    let body = [
        chat(json!({"content": "héllo ✓ 日本"}), None),
        chat(
            json!({"tool_calls": [{"function": {"name": "a", "arguments": "{\"x\":"}}]}),
            None,
        ),
        chat(
            json!({"tool_calls": [{"function": {"arguments": "\"é\"}"}}]}),
            None,
        ),
        chat(
            json!({"tool_calls": [{"function": {"name": "b", "arguments": ""}}]}),
            None,
        ),
        chat(json!({}), Some("tool_calls")),
    ]
    .concat();
    let bytes = futures::stream::iter(
        body.into_bytes()
            .into_iter()
            .map(|b| Ok::<_, TransportError>(Bytes::from(vec![b]))),
    );
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
    assert_eq!(agg.text, "héllo ✓ 日本");
    // Ids the stream lacked are generated (`call_` + 32 hex digits, see `ids_tests`).
    let calls: Vec<_> = agg
        .tool_calls()
        .into_iter()
        .map(|c| {
            (
                c.id.0.len(),
                c.id.0.starts_with("call_"),
                c.name,
                c.arguments,
            )
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (37, true, "a".into(), json!({"x": "é"})),
            (37, true, "b".into(), json!({}))
        ]
    );
    assert_eq!(agg.finish_reason(), Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn chat_transport_failure_after_finish_reason_is_done() {
    let body = chat(json!({"content": "ok"}), Some("stop"));
    let bytes = futures::stream::iter([
        Ok(Bytes::from(body)),
        Err(TransportError::Idle { after_ms: 5 }),
    ]);
    let events: Vec<_> = decode_sse(
        bytes,
        ProviderKind::OpenaiChat.decoder(),
        SseLimits::default(),
    )
    .collect()
    .await;
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta { text: "ok".into() },
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Stop)
            },
        ]
    );
}

#[tokio::test]
async fn a_call_with_an_empty_name_is_kept_not_dropped() {
    let chat_body = [
        chat(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "", "arguments": "{\"p\":1}"}}]}),
            None,
        ),
        chat(json!({}), Some("tool_calls")),
    ]
    .concat();
    let anthropic_body = [
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"\",\"input\":{}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"p\\\":1}\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]
    .concat();
    for (kind, body) in [
        (ProviderKind::OpenaiChat, chat_body),
        (ProviderKind::Anthropic, anthropic_body),
    ] {
        let agg = agg(kind, &body).await;
        let calls: Vec<_> = agg
            .tool_calls()
            .into_iter()
            .map(|c| (c.id.0, c.name, c.arguments))
            .collect();
        assert_eq!(
            calls,
            vec![("a".into(), String::new(), json!({"p": 1}))],
            "{kind:?}"
        );
        assert_eq!(
            agg.finish_reason(),
            Some(FinishReason::ToolCalls),
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn a_leading_byte_order_mark_is_skipped_whole_or_split() {
    let body = [
        chat(json!({"content": "hi"}), None),
        chat(json!({}), Some("stop")),
    ]
    .concat();
    let mut with_bom = b"\xEF\xBB\xBF".to_vec();
    with_bom.extend_from_slice(body.as_bytes());
    // One chunk, then one byte per chunk (the mark split over three).
    for split in [with_bom.len(), 1] {
        let bytes = futures::stream::iter(
            with_bom
                .chunks(split)
                .map(|c| Ok::<_, TransportError>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        );
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
        assert_eq!(
            (agg.text.as_str(), agg.finish_reason()),
            ("hi", Some(FinishReason::Stop)),
            "chunks of {split}"
        );
    }
}

//! Tool calls across the decoders, through the real SSE framing and `StreamAggregate`:
//! Responses calls kept apart by output index (shared or empty item ids, items with
//! only a `call_id`), empty ids treated as missing the same way in every protocol, Chat
//! `tool_calls` entries that are not objects, and Chat `error` fields that hold nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use bytes::Bytes;
use foya_protocol::{FinishReason, StreamAggregate};
use futures::StreamExt;
use serde_json::{Value, json};

async fn agg(kind: ProviderKind, body: &str) -> StreamAggregate {
    let bytes = futures::stream::iter([Ok::<_, TransportError>(Bytes::from(body.to_owned()))]);
    let events: Vec<StreamEvent> = decode_sse(bytes, kind.decoder(), SseLimits::default())
        .collect()
        .await;
    let mut agg = StreamAggregate::new();
    for e in &events {
        agg.apply(e);
    }
    agg
}

/// `(id, name, arguments)` of the aggregate's calls.
fn calls(agg: &StreamAggregate) -> Vec<(String, String, Value)> {
    agg.tool_calls()
        .into_iter()
        .map(|c| (c.id.0, c.name, c.arguments))
        .collect()
}

fn responses(events: &[Value]) -> String {
    events
        .iter()
        .map(|v| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap()))
        .collect()
}

fn completed() -> Value {
    json!({"type": "response.completed", "response": {}})
}

/// A function call streamed the way the Responses API does: added, two argument deltas,
/// arguments done, item done; `id` is the item id, `call_id` the call's.
fn responses_call(index: u64, id: &str, call_id: &str, name: &str, args: &str) -> Vec<Value> {
    let item = |arguments: &str| json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments});
    let (a, b) = args.split_at(args.len() / 2);
    vec![
        json!({"type": "response.output_item.added", "output_index": index, "item": item("")}),
        json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": a}),
        json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": b}),
        json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "arguments": args}),
        json!({"type": "response.output_item.done", "output_index": index, "item": item(args)}),
    ]
}

#[tokio::test]
async fn responses_calls_sharing_or_lacking_an_item_id_stay_apart_by_output_index() {
    for id in ["fc_same", ""] {
        let mut events = responses_call(0, id, "call_1", "read_file", r#"{"path":"a"}"#);
        events.extend(responses_call(
            1,
            id,
            "call_2",
            "list_dir",
            r#"{"path":"src"}"#,
        ));
        events.push(completed());
        let agg = agg(ProviderKind::OpenaiResponses, &responses(&events)).await;
        assert_eq!(
            calls(&agg),
            vec![
                ("call_1".into(), "read_file".into(), json!({"path": "a"})),
                ("call_2".into(), "list_dir".into(), json!({"path": "src"})),
            ],
            "item id {id:?}"
        );
        assert_eq!(agg.finish_reason(), Some(FinishReason::ToolCalls));
    }
}

#[tokio::test]
async fn responses_whole_arguments_reach_an_item_with_only_a_call_id() {
    let item = |name: &str, call_id: &str, arguments: &str| json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments});
    let events = [
        // With output indexes, and without (a compatible server's shape).
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("shell", "call_a", "")}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item("shell", "call_a", r#"{"command":"ls"}"#)}),
        json!({"type": "response.output_item.added", "item": item("read_file", "call_b", "")}),
        json!({"type": "response.output_item.done", "item": item("read_file", "call_b", r#"{"path":"x"}"#)}),
        // Argument events naming the call by `call_id` (no item id).
        json!({"type": "response.output_item.added", "output_index": 2, "item": item("list_dir", "call_c", "")}),
        json!({"type": "response.function_call_arguments.delta", "call_id": "call_c", "delta": "{\"path\":"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "\"src\"}"}),
        json!({"type": "response.output_item.done", "output_index": 2, "item": item("list_dir", "call_c", r#"{"path":"src"}"#)}),
        completed(),
    ];
    let agg = agg(ProviderKind::OpenaiResponses, &responses(&events)).await;
    assert_eq!(
        calls(&agg),
        vec![
            ("call_a".into(), "shell".into(), json!({"command": "ls"})),
            ("call_b".into(), "read_file".into(), json!({"path": "x"})),
            ("call_c".into(), "list_dir".into(), json!({"path": "src"})),
        ]
    );
}

/// A stream of `kind` with two calls whose ids are empty strings.
fn empty_id_calls(kind: ProviderKind) -> String {
    match kind {
        ProviderKind::OpenaiChat => [
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "", "function": {"name": "shell", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "", "function": {"name": "shell", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
        ]
        .iter()
        .map(|v| format!("data: {v}\n\n"))
        .chain(["data: [DONE]\n\n".to_owned()])
        .collect(),
        ProviderKind::Anthropic => {
            let mut out = String::new();
            for index in 0..2 {
                for v in [
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": "", "name": "shell", "input": {}}}),
                    json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
                    json!({"type": "content_block_stop", "index": index}),
                ] {
                    out.push_str(&format!("data: {v}\n\n"));
                }
            }
            out + "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n\
                   data: {\"type\":\"message_stop\"}\n\n"
        }
        ProviderKind::OpenaiResponses => {
            let mut events = responses_call(0, "", "", "shell", "{}");
            events.extend(responses_call(1, "", "", "shell", "{}"));
            events.push(completed());
            responses(&events)
        }
    }
}

#[tokio::test]
async fn an_empty_call_id_gets_a_generated_one_in_every_protocol() {
    for kind in ProviderKind::ALL {
        let agg = agg(kind, &empty_id_calls(kind)).await;
        let calls = calls(&agg);
        assert_eq!(calls.len(), 2, "{kind}: {calls:?}");
        for (id, name, arguments) in &calls {
            assert_eq!((name.as_str(), arguments), ("shell", &json!({})), "{kind}");
            assert!(
                id.len() == 37
                    && id.starts_with("call_")
                    && id[5..].bytes().all(|b| b.is_ascii_hexdigit()),
                "{kind}: generated id expected, got {id:?}"
            );
        }
        assert_ne!(calls[0].0, calls[1].0, "{kind}");
    }
}

#[tokio::test]
async fn an_empty_id_gives_way_to_an_id_sent_later() {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "call_id": "", "name": "shell"}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "function_call", "call_id": "call_late", "name": "shell", "arguments": "{}"}}),
        completed(),
    ];
    let agg = agg(ProviderKind::OpenaiResponses, &responses(&events)).await;
    assert_eq!(
        calls(&agg),
        vec![("call_late".into(), "shell".into(), json!({}))]
    );
}

#[tokio::test]
async fn a_chat_tool_calls_entry_that_is_not_an_object_takes_no_index() {
    let tc = |calls: &str| {
        format!("data: {{\"choices\":[{{\"delta\":{{\"tool_calls\":{calls}}}}}]}}\n\n")
    };
    let body = [
        tc("[null]"),
        tc(r#"[7, "x", {"index":0,"id":"call_a","function":{"name":"shell","arguments":"{}"}}]"#),
        tc(r#"[[], {"index":1,"id":"call_b","function":{"name":"read_file","arguments":"{}"}}]"#),
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n".to_owned(),
    ]
    .concat();
    let bytes = futures::stream::iter([Ok::<_, TransportError>(Bytes::from(body))]);
    let indexes: Vec<(u32, Option<String>)> = decode_sse(
        bytes,
        ProviderKind::OpenaiChat.decoder(),
        SseLimits::default(),
    )
    .filter_map(|e| async move {
        match e {
            StreamEvent::ToolCallDelta { index, id, .. } => Some((index, id.map(|i| i.0))),
            _ => None,
        }
    })
    .collect()
    .await;
    assert_eq!(
        indexes,
        vec![(0, Some("call_a".into())), (1, Some("call_b".into()))]
    );
}

#[tokio::test]
async fn a_chat_error_field_holding_nothing_is_no_error() {
    let chunk = |error: &str, text: &str| {
        format!(
            "data: {{\"error\":{error},\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
        )
    };
    let body = [
        chunk("null", "a"),
        chunk("false", "b"),
        chunk("{}", "c"),
        chunk("\"\"", "d"),
        chunk("[]", "e"),
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
            .to_owned(),
    ]
    .concat();
    let ok = agg(ProviderKind::OpenaiChat, &body).await;
    assert_eq!(
        (ok.text.as_str(), ok.error.clone(), ok.finish_reason()),
        ("abcde", None, Some(FinishReason::Stop))
    );
    // A real error still fails the turn with its message, type and code.
    let body = chunk(
        r#"{"message":"upstream overloaded","type":"server_error","code":"overloaded"}"#,
        "lost",
    );
    let failed = agg(ProviderKind::OpenaiChat, &body).await;
    let error = failed.error.clone().unwrap();
    assert_eq!(
        error,
        crate::classify::classify_stream_error(
            &json!({"message":"upstream overloaded","type":"server_error","code":"overloaded"})
        )
    );
    assert_eq!(error.message, "upstream overloaded");
    assert_eq!(failed.text, "");
}

#[tokio::test]
async fn responses_calls_sharing_an_item_id_without_output_indexes_stay_apart_by_call_id() {
    // A compatible server's shape: no `output_index`, one item id for both calls, the
    // arguments only in `output_item.done`.
    let item = |call_id: &str, name: &str, arguments: &str| json!({"type": "function_call", "id": "fc_same", "call_id": call_id, "name": name, "arguments": arguments});
    let events = [
        json!({"type": "response.output_item.added", "item": item("call_1", "read_file", "")}),
        json!({"type": "response.output_item.done", "item": item("call_1", "read_file", r#"{"path":"a"}"#)}),
        json!({"type": "response.output_item.added", "item": item("call_2", "list_dir", "")}),
        json!({"type": "response.output_item.done", "item": item("call_2", "list_dir", r#"{"path":"src"}"#)}),
        completed(),
    ];
    let agg = agg(ProviderKind::OpenaiResponses, &responses(&events)).await;
    assert_eq!(
        calls(&agg),
        vec![
            ("call_1".into(), "read_file".into(), json!({"path": "a"})),
            ("call_2".into(), "list_dir".into(), json!({"path": "src"})),
        ]
    );
}

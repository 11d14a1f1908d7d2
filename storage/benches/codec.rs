//! Event codec speed: `codec::encode_event` / `codec::decode_event` of the event kinds a
//! turn writes most (a streamed assistant message with a tool call, a tool result, a
//! step marker), per event; throughput in encoded bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use foya_protocol::{
    AssistantMessage, Event, EventKind, FinishReason, RunId, Seq, SessionId, ToolCall, ToolCallId,
    ToolMessage,
};
use foya_storage::codec;
use std::hint::black_box;

fn events() -> Vec<(&'static str, Event)> {
    let session_id = SessionId::new();
    let event = |kind| Event {
        session_id,
        seq: Seq(42),
        run_id: Some(RunId::new()),
        at_ms: 1_764_400_000_000,
        kind,
    };
    vec![
        ("step_started", event(EventKind::StepStarted { step: 2 })),
        (
            "assistant_message",
            event(EventKind::AssistantMessage(AssistantMessage {
                text: "Let me read the README first. ".repeat(8),
                tool_calls: vec![ToolCall {
                    id: ToolCallId::new("call_0123456789"),
                    name: "read_file".into(),
                    arguments: serde_json::json!({"path": "README.md"}),
                    extra: None,
                }],
                finish_reason: Some(FinishReason::ToolCalls),
                ..AssistantMessage::default()
            })),
        ),
        (
            "tool_message_4k",
            event(EventKind::ToolMessage(ToolMessage {
                tool_call_id: ToolCallId::new("call_0123456789"),
                content: "line of a file that was read by the tool\n".repeat(100),
                is_error: false,
                images: Vec::new(),
            })),
        ),
    ]
}

fn codec_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec");
    for (name, event) in events() {
        let bytes = codec::encode_event(&event).unwrap();
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(BenchmarkId::new("encode", name), |b| {
            b.iter(|| black_box(codec::encode_event(black_box(&event)).unwrap()));
        });
        group.bench_function(BenchmarkId::new("decode", name), |b| {
            b.iter(|| {
                black_box(
                    codec::decode_event(event.session_id, event.seq, black_box(&bytes)).unwrap(),
                )
            });
        });
    }
    group.finish();
}

criterion_group!(benches, codec_bench);
criterion_main!(benches);

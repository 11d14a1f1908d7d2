//! Throughput of each wire decoder (SSE framing + protocol decoder), in bytes of SSE per
//! second. Bodies are long text streams followed by a tool call, fed in 1 KiB chunks as a
//! socket would deliver them; plus the framing's worst shapes, whose cost must stay linear
//! in the body's size: one 4 MiB event in 1 KiB chunks (`large_event`), and the Chat body
//! in 64 KiB chunks (`openai-chat-64k`: many lines per network read).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use foya_actors::provider::wire::{ProviderKind, SseLimits, TransportError, decode_sse};
use futures::StreamExt;
use serde_json::json;
use std::hint::black_box;

const DELTAS: usize = 2_000;

fn body(kind: ProviderKind) -> String {
    let mut out = String::new();
    let piece = "lorem ipsum ";
    match kind {
        ProviderKind::OpenaiChat => {
            for _ in 0..DELTAS {
                let c = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
                out.push_str(&format!("data: {c}\n\n"));
            }
            let c = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "type": "function",
                "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}}]}, "finish_reason": "tool_calls"}]});
            out.push_str(&format!("data: {c}\n\ndata: [DONE]\n\n"));
        }
        ProviderKind::Anthropic => {
            out.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n");
            out.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
            for _ in 0..DELTAS {
                let d = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}});
                out.push_str(&format!("event: content_block_delta\ndata: {d}\n\n"));
            }
            out.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n");
            out.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        }
        ProviderKind::OpenaiResponses => {
            for i in 0..DELTAS {
                let d = json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                    "content_index": 0, "delta": piece, "sequence_number": i});
                out.push_str(&format!("event: response.output_text.delta\ndata: {d}\n\n"));
            }
            out.push_str("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n");
        }
    }
    out
}

fn decoders(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_sse");
    group.sample_size(10);
    for kind in ProviderKind::ALL {
        let body = Bytes::from(body(kind));
        let chunks: Vec<Bytes> = body.chunks(1024).map(Bytes::copy_from_slice).collect();
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(kind.as_str(), |b| {
            b.iter(|| {
                let input =
                    futures::stream::iter(chunks.clone().into_iter().map(Ok::<_, TransportError>));
                let n = futures::executor::block_on(
                    decode_sse(input, kind.decoder(), SseLimits::default()).count(),
                );
                black_box(n)
            });
        });
    }
    group.finish();
}

/// One Chat chunk whose text is 4 MiB, delivered in 1 KiB chunks: the SSE framing must
/// not re-scan the incomplete line on every chunk. And the Chat body in 64 KiB chunks:
/// thousands of lines per chunk must not each move the rest of the chunk.
fn framing(c: &mut Criterion) {
    let text = "x".repeat(4 << 20);
    let chunk =
        json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]});
    let large = Bytes::from(format!("data: {chunk}\n\ndata: [DONE]\n\n"));
    let chunks: Vec<Bytes> = large.chunks(1024).map(Bytes::copy_from_slice).collect();
    let mut group = c.benchmark_group("decode_sse");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(large.len() as u64));
    group.bench_function("large_event", |b| {
        b.iter(|| {
            let input =
                futures::stream::iter(chunks.clone().into_iter().map(Ok::<_, TransportError>));
            let kind = ProviderKind::OpenaiChat;
            let n = futures::executor::block_on(
                decode_sse(input, kind.decoder(), SseLimits::default()).count(),
            );
            black_box(n)
        });
    });
    let chat = Bytes::from(body(ProviderKind::OpenaiChat));
    let chunks: Vec<Bytes> = chat.chunks(64 * 1024).map(Bytes::copy_from_slice).collect();
    group.throughput(Throughput::Bytes(chat.len() as u64));
    group.bench_function("openai-chat-64k", |b| {
        b.iter(|| {
            let input =
                futures::stream::iter(chunks.clone().into_iter().map(Ok::<_, TransportError>));
            let kind = ProviderKind::OpenaiChat;
            let n = futures::executor::block_on(
                decode_sse(input, kind.decoder(), SseLimits::default()).count(),
            );
            black_box(n)
        });
    });
    group.finish();
}

criterion_group!(benches, decoders, framing);
criterion_main!(benches);

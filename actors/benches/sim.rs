//! Throughput of the simulated provider: planning and streaming a response in process
//! (`SimClient`, no pacing), and encoding it into each wire format's SSE body.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use foya_actors::provider::sim::wire::{WireFormat, WireMeta, encode_body};
use foya_actors::provider::sim::{SimClient, SimConfig, SimModel, SimOutcome, history_of};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{Input, Message, StreamEvent};
use futures::StreamExt;
use std::hint::black_box;
use tokio_util::sync::CancellationToken;

fn request(n: u64) -> ModelRequest {
    ModelRequest {
        messages: vec![Message::User(Input::text(format!("session {n}")))].into(),
        ..ModelRequest::default()
    }
}

fn client_stream(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("sim_client_stream");
    let cases = [
        (
            "tool_step",
            SimConfig {
                reasoning_tokens: 32,
                tool_calls_per_step: 2,
                ..SimConfig::default()
            },
        ),
        (
            "text_step_256",
            SimConfig {
                steps_per_turn: 1,
                response_tokens: 256,
                ..SimConfig::default()
            },
        ),
    ];
    for (name, config) in cases {
        let client = SimClient::new(config);
        let events = runtime.block_on(client.stream(request(0), CancellationToken::new()).count());
        group.throughput(Throughput::Elements(events as u64));
        let mut n = 0;
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.to_async(&runtime).iter(|| {
                n += 1;
                let stream = client.stream(request(n), CancellationToken::new());
                async move { black_box(stream.collect::<Vec<StreamEvent>>().await) }
            });
        });
    }
    group.finish();
}

fn wire_encode(c: &mut Criterion) {
    let config = SimConfig {
        steps_per_turn: 1,
        response_tokens: 256,
        reasoning_tokens: 64,
        ..SimConfig::default()
    };
    let model = SimModel::new(config);
    let history = history_of(&request(0));
    let response = model.plan(&history, 0);
    let SimOutcome::Streamed { events, .. } = &response.outcome else {
        unreachable!("no errors configured")
    };
    let events: Vec<StreamEvent> = events.iter().map(|t| t.event.clone()).collect();
    let mut group = c.benchmark_group("sim_wire_encode");
    group.throughput(Throughput::Elements(events.len() as u64));
    for format in [
        WireFormat::OpenAiChat,
        WireFormat::Anthropic,
        WireFormat::OpenAiResponses,
    ] {
        let meta = WireMeta::for_response(format, &response);
        group.bench_function(BenchmarkId::from_parameter(format!("{format:?}")), |b| {
            b.iter(|| black_box(encode_body(format, meta.clone(), &events)));
        });
    }
    group.finish();
}

criterion_group!(benches, client_stream, wire_encode);
criterion_main!(benches);

//! The floor of one streamed model request over local HTTP: reqwest against the sim
//! server, reading the SSE body (a) as raw bytes without decoding and (b) split into
//! SSE events with each `data:` parsed as JSON (eventsource-stream + serde_json), the
//! baseline the real wire decoders are compared with once they land.
//!
//! `bare_client_turn/bytes/openai_chat` is the floor of one whole 3-step turn over HTTP:
//! the three Chat Completions requests a runtime sends for a turn of the simulator's
//! default shape (the history growing by an assistant tool call and its result each
//! step), each response read as raw bytes and nothing else. Its time per iteration is
//! the bare client's cost per turn (client and in-process server together, run one after
//! the other); compare it with `cpu_us_per_turn` of
//! `foya loadtest --provider openai-chat --base-url http://ADDR/v1 --concurrency 1`
//! against `foya sim-server` (there the server's CPU is in another process, so the
//! loadtest number is the runtime's cost alone; the target is within 1.5× of this).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use eventsource_stream::Eventsource;
use foya_sim::{SimConfig, serve_sim};
use futures::StreamExt;
use serde_json::{Value, json};
use std::hint::black_box;

const ROUTES: [(&str, &str); 3] = [
    ("openai_chat", "/v1/chat/completions"),
    ("anthropic", "/v1/messages"),
    ("openai_responses", "/v1/responses"),
];

/// A first-step request offering `read_file` (the simulator answers a request without
/// tools with text only), in the route's format.
fn body(route: &str) -> Value {
    let user = json!([{"role": "user", "content": "bench"}]);
    if route.ends_with("responses") {
        json!({"model": "sim-1", "stream": true, "input": "bench",
               "tools": [{"type": "function", "name": "read_file", "parameters": {}}]})
    } else if route.ends_with("messages") {
        json!({"model": "sim-1", "stream": true, "messages": user,
               "tools": [{"name": "read_file", "input_schema": {"type": "object"}}]})
    } else {
        json!({"model": "sim-1", "stream": true, "messages": user, "tools": chat_tools()})
    }
}

/// `read_file` offered in Chat Completions form.
fn chat_tools() -> Value {
    json!([{"type": "function", "function": {"name": "read_file", "parameters": {}}}])
}

async fn bytes_only(client: &reqwest::Client, url: &str, body: &Value) -> usize {
    let response = client.post(url).json(body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let mut n = 0;
    while let Some(chunk) = stream.next().await {
        n += chunk.unwrap().len();
    }
    n
}

async fn sse_json(client: &reqwest::Client, url: &str, body: &Value) -> usize {
    let response = client.post(url).json(body).send().await.unwrap();
    let mut events = response.bytes_stream().eventsource();
    let mut n = 0;
    while let Some(event) = events.next().await {
        let event = event.unwrap();
        if event.data != "[DONE]" {
            n += usize::from(
                serde_json::from_str::<Value>(&event.data)
                    .unwrap()
                    .is_object(),
            );
        }
    }
    n
}

fn bare_client(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = SimConfig {
        steps_per_turn: 1,
        response_tokens: 256,
        reasoning_tokens: 64,
        ..SimConfig::default()
    };
    let base = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_sim(listener, config));
        format!("http://{addr}")
    });
    let client = reqwest::Client::new();
    let mut group = c.benchmark_group("bare_client");
    for (name, route) in ROUTES {
        let url = format!("{base}{route}");
        let body = body(route);
        let len = runtime.block_on(bytes_only(&client, &url, &body));
        group.throughput(Throughput::Bytes(len as u64));
        group.bench_function(BenchmarkId::new("bytes", name), |b| {
            b.to_async(&runtime)
                .iter(|| async { black_box(bytes_only(&client, &url, &body).await) });
        });
        group.bench_function(BenchmarkId::new("sse_json", name), |b| {
            b.to_async(&runtime)
                .iter(|| async { black_box(sse_json(&client, &url, &body).await) });
        });
    }
    group.finish();
}

/// The request bodies of the three steps of one turn, in Chat Completions form.
fn turn_bodies() -> Vec<Value> {
    let user = json!({"role": "user", "content": "[ls:0] turn 0: read README.md and summarise it"});
    let call = |n: u32| {
        [
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{n}"), "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"README.md\"}"}
            }]}),
            json!({"role": "tool", "tool_call_id": format!("call_{n}"),
                   "content": "# Load-test workspace\n\nA generated project that the simulated model reads.\n"}),
        ]
    };
    let mut messages = vec![user];
    let mut bodies = Vec::new();
    for step in 0..3 {
        bodies.push(
            json!({"model": "sim-1", "stream": true, "messages": messages.clone(),
                           "tools": chat_tools()}),
        );
        messages.extend(call(step));
    }
    bodies
}

fn bare_client_turn(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let base = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_sim(listener, SimConfig::default()));
        format!("http://{addr}")
    });
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/chat/completions");
    let bodies = turn_bodies();
    let mut group = c.benchmark_group("bare_client_turn");
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("bytes", "openai_chat"), |b| {
        b.to_async(&runtime).iter(|| async {
            let mut n = 0;
            for body in &bodies {
                n += bytes_only(&client, &url, body).await;
            }
            black_box(n)
        });
    });
    group.finish();
}

criterion_group!(benches, bare_client, bare_client_turn);
criterion_main!(benches);

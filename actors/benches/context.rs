//! Context compilation speed: `context::compile` of a session log of N turns (each a
//! user message, an assistant message asking for `read_file`, its 1 KiB result and a
//! final answer), the work the turn does before every model request.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use foya_actors::context::{self, Calibration, CompileInput, Environment, ModelLimits};
use foya_actors::tools::ToolRegistry;
use foya_protocol::{
    AssistantMessage, Event, EventKind, FinishReason, Input, InputId, Seq, SessionConfig,
    SessionId, ToolCall, ToolCallId, ToolMessage,
};
use std::collections::BTreeSet;
use std::hint::black_box;

fn log(turns: u64) -> Vec<Event> {
    let session_id = SessionId::new();
    let mut kinds = vec![EventKind::SessionCreated {
        config: SessionConfig::new("/work/project"),
    }];
    for t in 0..turns {
        let id = ToolCallId::new(format!("call_{t}"));
        kinds.push(EventKind::UserMessage {
            input_id: InputId::new(),
            input: Input::text(format!("turn {t}: read README.md and summarise it")),
        });
        kinds.push(EventKind::AssistantMessage(AssistantMessage {
            text: "Reading it.".into(),
            tool_calls: vec![ToolCall {
                id: id.clone(),
                name: "read_file".into(),
                arguments: serde_json::json!({"path": "README.md"}),
                extra: None,
            }],
            finish_reason: Some(FinishReason::ToolCalls),
            ..AssistantMessage::default()
        }));
        kinds.push(EventKind::ToolMessage(ToolMessage {
            tool_call_id: id,
            content: "a line of the README file\n".repeat(40),
            is_error: false,
            images: Vec::new(),
        }));
        kinds.push(EventKind::AssistantMessage(AssistantMessage {
            text: "The README describes a generated project. ".repeat(6),
            finish_reason: Some(FinishReason::Stop),
            ..AssistantMessage::default()
        }));
    }
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Event {
            session_id,
            seq: Seq(i as u64 + 1),
            run_id: None,
            at_ms: i as u64,
            kind,
        })
        .collect()
}

fn context_bench(c: &mut Criterion) {
    let config = SessionConfig::new("/work/project");
    let project = context::ProjectContext::default();
    let env = Environment {
        cwd: "/work/project".into(),
        os: "linux".into(),
        shell: "bash".into(),
        date: "2026-11-29".into(),
    };
    let tools = context::ToolSet::new(ToolRegistry::builtin().schemas(config.approval_mode));
    let touched = BTreeSet::new();
    let mut group = c.benchmark_group("context_compile");
    for turns in [1u64, 10, 100] {
        let history = log(turns);
        group.throughput(Throughput::Elements(history.len() as u64));
        let input = CompileInput {
            config: &config,
            project: &project,
            env: &env,
            history: &history,
            touched_paths: &touched,
            tools: &tools,
            limits: ModelLimits::new(1_000_000),
            calibration: Calibration { ratio: 1.0 },
            attachments: None,
        };
        group.bench_function(BenchmarkId::new("turns", turns), |b| {
            b.iter(|| black_box(context::compile(black_box(&input)).unwrap()));
        });
    }
    group.finish();
}

criterion_group!(benches, context_bench);
criterion_main!(benches);

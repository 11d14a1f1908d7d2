//! The deriver on hand-written event logs (their JSON form): the spans of approvals,
//! hooks and compactions, retries, gauges, and content kept out unless opted in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::otlp::testing::SpanRecord;
use opentelemetry::trace::Status;
use opentelemetry::{Array, StringValue, Value};
use serde_json::json;

const SESSION: &str = "01930000-0000-7000-8000-000000000001";
const RUN: &str = "01930000-0000-7000-8000-000000000002";
const INPUT: &str = "01930000-0000-7000-8000-000000000003";

/// Events of one session, from `kinds` (`{"type": …, fields}`), seq 1.., at 1000 ms +
/// 10 ms × position, all in run `RUN` but the session's creation.
fn log(kinds: &[serde_json::Value]) -> Vec<Event> {
    kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let mut value = kind.clone();
            let object = value.as_object_mut().unwrap();
            object.insert("session_id".into(), json!(SESSION));
            object.insert("seq".into(), json!(i + 1));
            object.insert("at_ms".into(), json!(1000 + 10 * i));
            if kind["type"] != "session_created" {
                object.insert("run_id".into(), json!(RUN));
            }
            serde_json::from_value(value).unwrap()
        })
        .collect()
}

fn derive(events: &[Event], capture: bool) -> (Vec<SpanRecord>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let mut deriver = Deriver::new(
        Some(Arc::clone(&metrics)),
        true,
        capture,
        Parents::default(),
    );
    for event in events {
        deriver.event(event);
    }
    (deriver.take_spans(), metrics)
}

fn by_name<'a>(spans: &'a [SpanRecord], name: &str) -> &'a SpanRecord {
    spans
        .iter()
        .find(|s| s.name.as_str() == name)
        .unwrap_or_else(|| {
            panic!(
                "no {name} in {:?}",
                spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>()
            )
        })
}

fn attr<'a>(span: &'a SpanRecord, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn approval_turn() -> Vec<Event> {
    log(&[
        json!({"type": "session_created", "config": {"cwd": "/w", "provider": "openai", "model": "gpt-x"}}),
        json!({"type": "user_message", "input_id": INPUT, "input": {"text": "SECRET-PROMPT delete it"}}),
        json!({"type": "turn_started", "input_id": INPUT}),
        json!({"type": "hook_ran", "hook_event": "UserPromptSubmit", "hook": "/bin/check --token=abc", "duration_ms": 5, "decision": "none"}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "provider_retry", "attempt": 2, "max_attempts": 4, "delay_ms": 5, "error": {"class": "rate_limited", "message": "slow down SECRET"}}),
        json!({"type": "assistant_message", "text": "SECRET-ANSWER", "tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "rm SECRET-ARG"}}], "finish_reason": "tool_calls"}),
        json!({"type": "usage", "input_tokens": 10, "output_tokens": 3}),
        json!({"type": "hook_ran", "hook_event": "PreToolUse", "hook": "in-process:x", "tool_call_id": "c1", "duration_ms": 2, "decision": "ask"}),
        json!({"type": "approval_requested", "request_id": "01930000-0000-7000-8000-0000000000a1", "tool_call_id": "c1", "tool_name": "shell", "action": "rm SECRET-ARG", "reason": "exec"}),
        json!({"type": "approval_decided", "request_id": "01930000-0000-7000-8000-0000000000a1", "tool_call_id": "c1", "decision": "deny"}),
        json!({"type": "tool_message", "tool_call_id": "c1", "content": "denied SECRET-RESULT", "is_error": true}),
        json!({"type": "step_started", "step": 2}),
        json!({"type": "compaction_started", "trigger": "threshold", "tokens_before": 900}),
        json!({"type": "compaction_checkpoint", "summary": "SECRET-SUMMARY", "covers_up_to": 5, "tokens_before": 900, "tokens_after": 100}),
        json!({"type": "assistant_message", "text": "ok", "finish_reason": "stop"}),
        json!({"type": "turn_complete", "status": "completed"}),
    ])
}

#[test]
fn approvals_hooks_compactions_and_retries_are_spans_of_the_turn() {
    let (spans, metrics) = derive(&approval_turn(), false);
    let turn = by_name(&spans, "turn");
    let tool = by_name(&spans, "execute_tool shell");
    let approval = by_name(&spans, "approval shell");
    let pre = by_name(&spans, "hook PreToolUse");
    let prompt_hook = by_name(&spans, "hook UserPromptSubmit");
    let compaction = by_name(&spans, "compaction");
    let chat = spans
        .iter()
        .find(|s| s.name.as_str() == "chat gpt-x" && attr(s, "foya.step") == Some(&Value::I64(1)))
        .unwrap();
    assert_eq!(spans.len(), 8, "{spans:#?}");
    assert!(spans.iter().all(|s| s.trace_id == turn.trace_id));
    assert_eq!(turn.parent, None);
    for child in [tool, prompt_hook, compaction, chat] {
        assert_eq!(child.parent, Some(turn.span_id), "{}", child.name);
    }
    assert_eq!(approval.parent, Some(tool.span_id));
    assert_eq!(pre.parent, Some(tool.span_id));
    assert_eq!((approval.start_ms, approval.end_ms), (1090, 1100));
    assert_eq!((pre.start_ms, pre.end_ms), (1078, 1080));
    assert_eq!(
        attr(approval, "foya.approval.decision"),
        Some(&Value::from("deny"))
    );
    assert_eq!(
        attr(tool, "foya.tool.outcome"),
        Some(&Value::from("denied"))
    );
    assert_eq!(
        attr(compaction, "foya.compaction.tokens_after"),
        Some(&Value::I64(100))
    );
    assert_eq!(chat.events.len(), 1);
    assert_eq!(attr(chat, "foya.retries"), Some(&Value::I64(1)));
    assert_eq!(
        attr(chat, "gen_ai.provider.name"),
        Some(&Value::from("openai"))
    );
    assert_eq!(turn.status, Status::Ok);

    let figures = metrics.snapshot();
    assert_eq!(figures.turns_finished.get("completed"), Some(&1));
    assert_eq!(
        figures.tool_calls.get(&("shell".into(), "denied".into())),
        Some(&1)
    );
    assert_eq!(figures.hook_runs.len(), 2);
    assert_eq!(
        (figures.retries, figures.compactions, figures.steps),
        (1, 1, 2)
    );
    assert_eq!((figures.turns_active, figures.approvals_pending), (0, 0));
    let text = metrics.encode();
    assert!(
        text.contains("foya_approvals_total{decision=\"deny\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("foya_provider_retries_total{class=\"rate_limited\"} 1"),
        "{text}"
    );
    assert!(!text.contains(SESSION));
}

#[test]
fn content_is_exported_only_when_opted_in() {
    let debug = |spans: &[SpanRecord]| format!("{spans:?}");
    let (off, metrics) = derive(&approval_turn(), false);
    let off = debug(&off) + &metrics.encode();
    assert!(!off.contains("SECRET"), "{off}");
    assert!(
        !off.contains("--token"),
        "a hook's command is never exported: {off}"
    );
    let (on, _) = derive(&approval_turn(), true);
    let on = debug(&on);
    for content in [
        "SECRET-PROMPT",
        "SECRET-ANSWER",
        "SECRET-ARG",
        "SECRET-RESULT",
    ] {
        assert!(on.contains(content), "{content} not in {on}");
    }
    // Error messages never, opted in or not.
    assert!(!on.contains("slow down SECRET"));
}

#[test]
fn gauges_follow_queues_turns_and_pending_approvals() {
    let second = "01930000-0000-7000-8000-000000000004";
    let events = log(&[
        json!({"type": "turn_started", "input_id": INPUT}),
        json!({"type": "input_queued", "input_id": second, "input": {"text": "next"}}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "assistant_message", "text": "", "tool_calls": [{"id": "c1", "name": "shell", "arguments": {}}], "finish_reason": "tool_calls"}),
        json!({"type": "approval_requested", "request_id": "01930000-0000-7000-8000-0000000000a1", "tool_call_id": "c1", "tool_name": "shell", "action": "ls", "reason": "exec"}),
    ]);
    let metrics = Arc::new(Metrics::new());
    let mut deriver = Deriver::new(Some(Arc::clone(&metrics)), false, false, Parents::default());
    for event in &events {
        deriver.event(event);
    }
    let figures = metrics.snapshot();
    assert_eq!(
        (
            figures.turns_active,
            figures.inputs_queued,
            figures.approvals_pending
        ),
        (1, 1, 1)
    );
    let end = log(&[
        json!({"type": "turn_cancelled", "reason": "user"}),
        json!({"type": "tool_message", "tool_call_id": "c1", "content": "cancelled", "is_error": true}),
        json!({"type": "turn_complete", "status": "cancelled", "reason": "user"}),
        json!({"type": "user_message", "input_id": second, "input": {"text": "next"}}),
    ]);
    for event in &end {
        deriver.event(event);
    }
    let figures = metrics.snapshot();
    assert_eq!(
        (
            figures.turns_active,
            figures.inputs_queued,
            figures.approvals_pending
        ),
        (0, 0, 0)
    );
    assert_eq!(
        figures.tool_calls.get(&("shell".into(), "not_run".into())),
        Some(&1)
    );
    assert!(deriver.take_spans().is_empty(), "no span without traces");
}

#[test]
fn a_traceparent_is_parsed_as_w3c_says() {
    let p = Parent::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .unwrap();
    assert_eq!(
        format!("{:032x}", p.trace_id),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(format!("{:016x}", p.span_id), "00f067aa0ba902b7");
    assert!(p.sampled);
    for bad in [
        "",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    ] {
        assert_eq!(Parent::from_traceparent(bad), None, "{bad}");
    }
}

#[test]
fn tool_labels_are_bounded() {
    let metrics = Metrics::new();
    for i in 0..MAX_TOOL_LABELS_FOR_TEST {
        assert_eq!(metrics.tool_label(&format!("tool{i}")), format!("tool{i}"));
    }
    assert_eq!(metrics.tool_label("one_more"), "other");
    assert_eq!(metrics.tool_label("tool0"), "tool0");
}

const MAX_TOOL_LABELS_FOR_TEST: usize = crate::metrics::MAX_TOOL_LABELS;

#[test]
fn a_sub_agents_turn_is_a_child_of_the_agent_call() {
    let child = "01930000-0000-7000-8000-0000000000c1";
    let child_run = "01930000-0000-7000-8000-0000000000c2";
    let child_input = "01930000-0000-7000-8000-0000000000c3";
    let mut events = log(&[
        json!({"type": "turn_started", "input_id": INPUT}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "assistant_message", "text": "", "tool_calls": [{"id": "a1", "name": "agent", "arguments": {}}], "finish_reason": "tool_calls"}),
    ]);
    let sub = |seq: u64, run: Option<&str>, kind: serde_json::Value| -> Event {
        let mut value = kind;
        let object = value.as_object_mut().unwrap();
        object.insert("session_id".into(), json!(child));
        object.insert("seq".into(), json!(seq));
        object.insert("at_ms".into(), json!(1100 + seq));
        if let Some(run) = run {
            object.insert("run_id".into(), json!(run));
        }
        serde_json::from_value(value).unwrap()
    };
    events.push(sub(1, None, json!({"type": "session_created", "config": {"cwd": "/w", "parent": {"session_id": SESSION, "run_id": RUN, "tool_call_id": "a1"}}})));
    events.push(sub(
        2,
        Some(child_run),
        json!({"type": "turn_started", "input_id": child_input}),
    ));
    events.push(sub(
        3,
        Some(child_run),
        json!({"type": "turn_complete", "status": "completed"}),
    ));
    events.extend(log(&[
        json!({"type": "tool_message", "tool_call_id": "a1", "content": "done", "is_error": false}),
        json!({"type": "turn_complete", "status": "completed"}),
    ]));
    let (spans, _) = derive(&events, false);
    let agent = by_name(&spans, "execute_tool agent");
    let turns: Vec<&SpanRecord> = spans.iter().filter(|s| s.name.as_str() == "turn").collect();
    let sub_turn = turns.iter().find(|t| t.parent.is_some()).unwrap();
    assert_eq!(sub_turn.parent, Some(agent.span_id));
    assert_eq!(sub_turn.trace_id, agent.trace_id);
}

#[test]
fn a_sub_agent_on_another_shard_is_followed_with_its_parent() {
    use crate::export::{Batching, Exporter, Sink};
    use crate::tap::{Follower, SHARDS};
    use std::sync::mpsc;
    struct Collect(mpsc::Sender<Vec<SpanRecord>>);
    impl Sink for Collect {
        fn send(&mut self, spans: &[u8], _: usize) {
            let _ = self.0.send(crate::otlp::testing::decode(spans));
        }
    }
    // Its low bits put the child on another shard than its parent (SESSION).
    let child = "01930000-0000-7000-8000-0000000000c2";
    let shard = |id: &str| id.parse::<SessionId>().unwrap().0.as_u128() as usize % SHARDS;
    assert_ne!(shard(child), shard(SESSION));
    let sub = |seq: u64, run: bool, kind: serde_json::Value| -> Vec<Event> {
        let mut value = kind;
        let object = value.as_object_mut().unwrap();
        object.insert("session_id".into(), json!(child));
        object.insert("seq".into(), json!(seq));
        object.insert("at_ms".into(), json!(1100 + seq));
        if run {
            object.insert(
                "run_id".into(),
                json!("01930000-0000-7000-8000-0000000000c4"),
            );
        }
        vec![serde_json::from_value(value).unwrap()]
    };
    let (tx, rx) = mpsc::channel();
    let batching = Batching {
        delay: std::time::Duration::from_secs(3_600),
        batch: 512,
        queue: 2_048,
    };
    let exporter = Arc::new(Exporter::with_sink(Collect(tx), batching).unwrap());
    let metrics = Arc::new(Metrics::new());
    let follower = Follower::new(
        || Deriver::new(Some(Arc::clone(&metrics)), true, false, Parents::default()),
        Some(Arc::clone(&exporter)),
    );
    let parent = log(&[
        json!({"type": "turn_started", "input_id": INPUT}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "assistant_message", "text": "", "tool_calls": [{"id": "a1", "name": "agent", "arguments": {}}], "finish_reason": "tool_calls"}),
        json!({"type": "tool_message", "tool_call_id": "a1", "content": "done", "is_error": false}),
        json!({"type": "turn_complete", "status": "completed"}),
    ]);
    follower.events(&parent[..3]);
    follower.events(&sub(1, false, json!({"type": "session_created", "config": {"cwd": "/w", "parent": {"session_id": SESSION, "run_id": RUN, "tool_call_id": "a1"}}})));
    follower.events(&sub(
        2,
        true,
        json!({"type": "turn_started", "input_id": "01930000-0000-7000-8000-0000000000c3"}),
    ));
    follower.events(&sub(
        3,
        true,
        json!({"type": "turn_complete", "status": "completed"}),
    ));
    follower.events(&parent[3..]);
    exporter.flush();
    let spans: Vec<SpanRecord> = rx.try_iter().flatten().collect();
    exporter.shutdown();
    let agent = by_name(&spans, "execute_tool agent");
    let turns: Vec<&SpanRecord> = spans.iter().filter(|s| s.name.as_str() == "turn").collect();
    assert_eq!(turns.len(), 2);
    let sub_turn = turns.iter().find(|t| t.parent.is_some()).unwrap();
    assert_eq!(sub_turn.parent, Some(agent.span_id));
    assert_eq!(sub_turn.trace_id, agent.trace_id);
    // The shards count together.
    let figures = metrics.snapshot();
    assert_eq!(figures.turns_started, 2);
    assert_eq!(figures.turns_finished.get("completed"), Some(&2));
}

#[test]
fn finish_names_are_the_wire_names() {
    use foya_protocol::FinishReason as F;
    for reason in [
        F::Stop,
        F::ToolCalls,
        F::Length,
        F::ContentFilter,
        F::PauseTurn,
        F::ContextWindow,
        F::Other,
    ] {
        assert_eq!(
            serde_json::to_value(reason).unwrap(),
            json!(finish_name(reason))
        );
    }
}

/// The observed store answers what the store it wraps answers: the append latencies (a
/// load test reads them through it), as its attachments and commits.
#[tokio::test]
async fn the_observed_store_passes_the_stores_own_answers_through() {
    use crate::tap::Follower;
    use foya_storage::{EventLog as _, Fence, LogStore, Store, StoreOptions};
    let store = LogStore::from(Store::open_in_memory(StoreOptions::default()).unwrap());
    let observed = crate::tap::ObservedLog {
        inner: store.clone(),
        tap: Arc::new(crate::tap::Tap::new(
            Arc::new(Follower::new(
                || Deriver::new(None, false, false, Parents::default()),
                None,
            )),
            None,
        )),
    };
    let events = log(&[json!({"type": "session_created", "config": {"cwd": "/w"}})]);
    observed.append(&events, Fence::None).await.unwrap();
    assert_eq!(store.append_latency().count(), 1);
    assert_eq!(observed.append_latency().count(), 1);
}

#[test]
fn uuid_values_are_the_ids_display_and_few_keeps_its_items_by_key() {
    let run: RunId = RUN.parse().unwrap();
    let mut buf = [0; uuid::fmt::Hyphenated::LENGTH];
    assert_eq!(uuid_text(run.0, &mut buf), RUN);
    let id = RunId::new();
    assert_eq!(uuid_text(id.0, &mut buf), id.to_string());

    let mut few: Few<u32, &str, 2> = Few::default();
    assert!(few.insert(1, "a"));
    assert!(!few.insert(1, "b"), "a key is kept once");
    *few.get_or_insert_with(2, || "c") = "d";
    few.get_or_insert_with(3, || "e");
    assert_eq!(few.get_or_insert_with(3, || "f"), &mut "e");
    assert_eq!(
        (few.get(&1), few.get(&2), few.len()),
        (Some(&"a"), Some(&"d"), 3)
    );
    assert_eq!(few.remove(&2), Some((2, "d")));
    assert_eq!(few.remove(&2), None);
    assert_eq!(few.drain().collect::<Vec<_>>(), [(1, "a"), (3, "e")]);
    assert!(few.is_empty());
}

/// Spans as text: ids numbered in order of appearance, every field and attribute (in
/// order), values with their types.
fn render(spans: &[SpanRecord]) -> String {
    use std::fmt::Write as _;
    let mut traces: Vec<TraceId> = Vec::new();
    let spans: Vec<&SpanRecord> = spans.iter().filter(|s| s.sampled).collect();
    let mut ids: Vec<SpanId> = spans.iter().map(|s| s.span_id).collect();
    let number = |id: SpanId, ids: &mut Vec<SpanId>| match ids.iter().position(|i| *i == id) {
        Some(n) => n,
        None => {
            ids.push(id);
            ids.len() - 1
        }
    };
    let value = |v: &Value| match v {
        Value::String(s) => format!("s:{}", s.as_str()),
        Value::I64(i) => format!("i:{i}"),
        Value::F64(f) => format!("f:{f}"),
        Value::Bool(b) => format!("b:{b}"),
        Value::Array(Array::String(a)) => format!(
            "as:{:?}",
            a.iter().map(StringValue::as_str).collect::<Vec<_>>()
        ),
        other => format!("?{other:?}"),
    };
    let mut out = String::new();
    for s in spans {
        let trace = match traces.iter().position(|t| *t == s.trace_id) {
            Some(n) => n,
            None => {
                traces.push(s.trace_id);
                traces.len() - 1
            }
        };
        let parent = s.parent.map(|p| number(p, &mut ids));
        let _ = writeln!(
            out,
            "{} #{} trace {trace} parent {parent:?} sampled {} {:?} {}..{} {:?}",
            s.name.as_str(),
            number(s.span_id, &mut ids),
            s.sampled,
            s.kind,
            s.start_ms,
            s.end_ms,
            s.status
        );
        for kv in &s.attributes {
            let _ = writeln!(out, "  {} = {}", kv.key.as_str(), value(&kv.value));
        }
        for (name, at, attributes) in &s.events {
            let _ = writeln!(out, "  event {name} at {at}");
            for kv in attributes {
                let _ = writeln!(out, "    {} = {}", kv.key.as_str(), value(&kv.value));
            }
        }
    }
    out
}

/// A turn with approvals, hooks, a compaction and a retry (`approval_turn`), then a
/// turn of two steps and a tool call with a first token time that fails, then one that
/// is cancelled.
fn three_turns() -> Vec<Event> {
    let mut events = approval_turn();
    events.extend(log(&[
        json!({"type": "user_message", "input_id": "01930000-0000-7000-8000-0000000000b1", "input": {"text": "SECOND"}}),
        json!({"type": "turn_started", "input_id": "01930000-0000-7000-8000-0000000000b1"}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "assistant_message", "text": "reading", "tool_calls": [{"id": "c2", "name": "read_file", "arguments": {"path": "a"}}], "finish_reason": "tool_calls"}),
        json!({"type": "usage", "input_tokens": 20, "output_tokens": 4}),
        json!({"type": "tool_finished", "tool_call_id": "c2", "is_error": false, "duration_ms": 7}),
        json!({"type": "tool_message", "tool_call_id": "c2", "content": "file text", "is_error": false}),
        json!({"type": "step_started", "step": 2}),
        json!({"type": "turn_complete", "status": "failed", "error": {"class": "rate_limited", "message": "SECRET no"}}),
        json!({"type": "turn_started", "input_id": "01930000-0000-7000-8000-0000000000b2"}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "assistant_message", "text": "", "interrupted": true, "tool_calls": [{"id": "c3", "name": "shell", "arguments": {}}]}),
        json!({"type": "turn_cancelled", "reason": "user"}),
        json!({"type": "tool_finished", "tool_call_id": "c3", "is_error": true, "duration_ms": 3}),
        json!({"type": "turn_complete", "status": "cancelled", "reason": "user"}),
        json!({"type": "turn_started", "input_id": "01930000-0000-7000-8000-0000000000b3"}),
        json!({"type": "step_started", "step": 1}),
        json!({"type": "assistant_message", "text": "done", "finish_reason": "stop"}),
        json!({"type": "turn_complete", "status": "completed"}),
    ]));
    events
}

fn derive_with_first_token(events: &[Event], capture: bool) -> Vec<SpanRecord> {
    let parents = Parents::default();
    // The third turn continues a caller's sampled trace; a fourth, an unsampled one (its
    // spans are not exported).
    for (input, flags) in [("b2", "01"), ("b3", "00")] {
        let input: InputId = format!("01930000-0000-7000-8000-0000000000{input}")
            .parse()
            .unwrap();
        let traceparent = format!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}");
        parents.insert(input, Parent::from_traceparent(&traceparent).unwrap());
    }
    let mut deriver = Deriver::new(Some(Arc::new(Metrics::new())), true, capture, parents);
    let sid: SessionId = SESSION.parse().unwrap();
    let run: RunId = RUN.parse().unwrap();
    for (i, event) in events.iter().enumerate() {
        deriver.event(event);
        if matches!(event.kind, EventKind::StepStarted { .. }) && i > 20 {
            deriver.first_token(sid, run, 12.5);
        }
    }
    deriver.take_spans()
}

/// The spans of `three_turns`, every field and attribute, are the ones the deriver made
/// when it built attribute lists for the exporter's thread to encode (`testdata/`, written
/// by that code): what a collector receives did not change when spans began to be
/// encoded as they close.
#[test]
fn the_spans_are_the_ones_the_attribute_lists_gave() {
    for (capture, expected) in [
        (false, include_str!("testdata/spans.txt")),
        (true, include_str!("testdata/spans-content.txt")),
    ] {
        let spans = derive_with_first_token(&three_turns(), capture);
        assert!(
            spans.iter().all(|s| s.sampled),
            "no unsampled span is encoded"
        );
        assert_eq!(render(&spans), expected, "capture {capture}");
    }
}

/// A model that is never asked (the store is appended to directly).
#[derive(Debug)]
struct Unasked;

impl foya_actors::provider::ModelClient for Unasked {
    fn stream(
        &self,
        _request: foya_actors::provider::ModelRequest,
        _cancel: foya_actors::CancellationToken,
    ) -> futures::stream::BoxStream<'static, foya_protocol::StreamEvent> {
        Box::pin(futures::stream::empty())
    }
}

fn metrics_only() -> crate::Telemetry {
    let config = crate::TelemetryConfig {
        metrics: true,
        ..crate::TelemetryConfig::off()
    };
    crate::Telemetry::start(config).unwrap().unwrap()
}

/// The redb store stays the runtime's own (`LogStore::Redb`: its appends are called
/// directly, no boxed future per append); the store reports each append to the pipeline,
/// which follows it as before. A later pipeline on the same store, once the first is
/// dropped, follows it alone (wrapped: the store takes one observer).
#[tokio::test]
async fn an_instrumented_redb_store_stays_the_redb_store_and_is_followed() {
    use foya_storage::{EventLog as _, Fence, Store, StoreOptions};
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let config = |store: &Store| foya_actors::RuntimeConfig::new(store.clone(), Arc::new(Unasked));
    let first = metrics_only();
    let observed = first.instrument(config(&store)).store;
    assert!(
        observed.as_redb().is_some(),
        "the redb store is not wrapped"
    );
    // A turn, then the next turn's start (appended later, through the second pipeline).
    let events = log(&[
        json!({"type": "session_created", "config": {"cwd": "/w"}}),
        json!({"type": "turn_started", "input_id": INPUT}),
        json!({"type": "turn_complete", "status": "completed"}),
        json!({"type": "turn_started", "input_id": INPUT}),
    ]);
    observed.append(&events[..3], Fence::None).await.unwrap();
    let figures = first.figures().await.unwrap();
    assert_eq!(figures.turns_started, 1);
    assert_eq!(figures.turns_finished.get("completed"), Some(&1));
    let text = first.metrics_text().await.unwrap();
    assert!(
        text.contains("foya_store_append_seconds_count 1"),
        "the append was timed: {text}"
    );

    // The store keeps its observer; the dropped pipeline's figures must stay as they were.
    let first_metrics = Arc::clone(first.shared.metrics.as_ref().unwrap());
    drop(first);
    let second = metrics_only();
    let wrapped = second.instrument(config(&store)).store;
    assert!(
        wrapped.as_redb().is_none(),
        "the store has an observer already"
    );
    wrapped.append(&events[3..], Fence::None).await.unwrap();
    assert_eq!(second.figures().await.unwrap().turns_started, 1);
    assert_eq!(
        first_metrics.snapshot().turns_started,
        1,
        "a dropped pipeline no longer follows the store"
    );
}

//! Durability tests of the session: a failing store fails only the affected turn (class
//! storage) and the runtime, other sessions and the session itself go on; queued inputs
//! on restart run or are dropped per `RuntimeConfig::queued_on_restart`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::machine::{DROPPED_ON_RESTART, STORAGE_RESULT};
use crate::provider::scripted::ScriptedClient;
use crate::runtime::{QueuedOnRestart, Runtime, RuntimeError};
use crate::testkit::{
    config_for, events_until, is_turn_complete, script, session_config, subscribe, types, within,
};
use crate::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
use async_trait::async_trait;
use foya_protocol::{
    ApprovalMode, AssistantMessage, ErrorClass, ErrorInfo, Event, EventKind, Input, InputId, RunId,
    Seq, SessionConfig, SessionId, ToolCall, ToolCallId, ToolMessage, TurnStatus,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A tool that returns "opened" once the test opens its gate.
#[derive(Debug)]
struct GateTool {
    spec: ToolSpec,
    gate: Arc<Notify>,
}

#[async_trait]
impl Tool for GateTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        _ctx: &ToolContext,
        _args: serde_json::Value,
        _cancel: CancellationToken,
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        self.gate.notified().await;
        ToolOutput::ok("opened")
    }
}

fn gate_tool(gate: &Arc<Notify>) -> Arc<dyn Tool> {
    Arc::new(GateTool {
        spec: ToolSpec {
            name: "gate".into(),
            description: "waits for the test".into(),
            parameters: json!({"type": "object"}),
            parallel_safe: false,
            side_effect: SideEffect::None,
            cancellable: true,
            default_timeout_ms: 3_600_000,
        },
        gate: Arc::clone(gate),
    })
}

fn completed() -> EventKind {
    EventKind::TurnComplete {
        status: TurnStatus::Completed,
        reason: None,
        error: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failure_fails_only_the_affected_turn_with_class_storage() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let mut config = config_for(
        store.clone(),
        script(json!({"responses":[{"text":"b"},{"text":"b"}]})),
    );
    let gate = Arc::new(Notify::new());
    let mut tools = ToolRegistry::builtin();
    tools.register(gate_tool(&gate)).unwrap();
    config.tools = Arc::new(tools);
    let gated = script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"gate","arguments":{}}]},
        {"text":"done"},
        {"text":"done"}
    ]}));
    config
        .models
        .insert("gated".into(), Arc::new(ScriptedClient::from_script(gated)));
    let rt = Runtime::start(config).await.unwrap();

    let other = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut other_sub = subscribe(&other, false).await;
    other.submit(Input::text("first")).await.unwrap();
    within(events_until(&mut other_sub, is_turn_complete))
        .await
        .unwrap();

    let mut a_config = session_config(ApprovalMode::Bypass);
    a_config.provider = "gated".into();
    let a = rt.create_session(a_config).await.unwrap();
    let mut sub = subscribe(&a, false).await;
    a.submit(Input::text("go")).await.unwrap();
    let before = within(events_until(&mut sub, |e| {
        e.kind.type_name() == "tool_started"
    }))
    .await
    .unwrap();
    // The disk fills up while the tool runs: the next append (the call's end) fails.
    store.inject_append_failures(1);
    gate.notify_one();
    let after = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(types(&after), vec!["tool_message", "turn_complete"]);
    assert_eq!(
        after[0].kind,
        EventKind::ToolMessage(ToolMessage {
            tool_call_id: ToolCallId::new("c1"),
            content: STORAGE_RESULT.into(),
            is_error: true,
            images: Vec::new(),
        })
    );
    assert_eq!(
        after[1].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("storage".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::Storage,
                message: "storage failure: injected failure: No space left on device".into(),
            }),
        }
    );
    // Nothing committed before the failure changed; the log is dense.
    let log = store.read_from(a.id(), Seq(1)).unwrap();
    let mut expected = before.clone();
    expected.extend(after.clone());
    assert_eq!(log[log.len() - expected.len()..], expected[..]);
    let seqs: Vec<u64> = log.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());

    // The runtime is up: the other session continues and the failed one takes new input.
    other.submit(Input::text("second")).await.unwrap();
    let next = within(events_until(&mut other_sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(next.last().unwrap().kind, completed());
    a.submit(Input::text("again")).await.unwrap();
    let again = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&again),
        vec![
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    assert_eq!(again.last().unwrap().kind, completed());

    // A failed submit is reported to the caller and leaves the session usable.
    store.inject_append_failures(1);
    let refused = a.submit(Input::text("lost")).await;
    assert!(
        matches!(&refused, Err(RuntimeError::Storage(m)) if m.message().contains("No space left on device")),
        "{refused:?}"
    );
    let last_seq = store.last_seq(a.id()).unwrap();
    assert_eq!(last_seq, again.last().map(|e| e.seq));
    a.submit(Input::text("kept")).await.unwrap();
    let kept = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(kept.last().unwrap().kind, completed());
    rt.shutdown().await;
}

fn raw(session_id: SessionId, seq: u64, run_id: Option<RunId>, kind: EventKind) -> Event {
    Event {
        session_id,
        seq: Seq(seq),
        run_id,
        at_ms: 1,
        kind,
    }
}

/// A log cut by a restart: a turn with a started call and no result, then two queued
/// inputs. Returns the session id and the queued input ids.
async fn interrupted_log(store: &Store) -> (SessionId, [InputId; 2]) {
    let id = SessionId::new();
    let run = Some(RunId::new());
    let (first, second, third) = (InputId::new(), InputId::new(), InputId::new());
    let call = ToolCall {
        id: ToolCallId::new("c1"),
        name: "gate".into(),
        arguments: json!({}),
        extra: Default::default(),
    };
    let kinds = vec![
        (
            None,
            EventKind::SessionCreated {
                config: SessionConfig {
                    approval_mode: ApprovalMode::Bypass,
                    ..SessionConfig::new("/tmp")
                },
            },
        ),
        (
            run,
            EventKind::UserMessage {
                input_id: first,
                input: Input::text("one"),
            },
        ),
        (run, EventKind::TurnStarted { input_id: first }),
        (run, EventKind::StepStarted { step: 1 }),
        (
            run,
            EventKind::AssistantMessage(AssistantMessage {
                tool_calls: vec![call],
                ..AssistantMessage::default()
            }),
        ),
        (
            run,
            EventKind::ToolStarted {
                tool_call_id: ToolCallId::new("c1"),
                name: "gate".into(),
            },
        ),
        (
            None,
            EventKind::InputQueued {
                input_id: second,
                input: Input::text("two"),
            },
        ),
        (
            None,
            EventKind::InputQueued {
                input_id: third,
                input: Input::text("three"),
            },
        ),
    ];
    let events = kinds
        .into_iter()
        .zip(1..)
        .map(|((run_id, kind), seq)| raw(id, seq, run_id, kind))
        .collect();
    store.append(events).await.unwrap();
    (id, [second, third])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_inputs_are_dropped_or_run_on_restart_as_configured() {
    for policy in [QueuedOnRestart::Drop, QueuedOnRestart::Run] {
        let store = Store::open_in_memory(StoreOptions::default()).unwrap();
        let (id, [second, third]) = interrupted_log(&store).await;
        let mut config = config_for(
            store.clone(),
            script(json!({"responses":[{"text":"ran"},{"text":"ran"},{"text":"ran"}]})),
        );
        config.queued_on_restart = policy;
        let rt = Runtime::start(config).await.unwrap();
        assert_eq!(rt.recover_all().await.unwrap(), 1);
        let session = rt.session(id).await.unwrap();
        let mut sub = subscribe(&session, false).await;
        let recovered = within(events_until(&mut sub, |e| e.seq == Seq(10)))
            .await
            .unwrap();
        assert_eq!(
            recovered[8..]
                .iter()
                .map(|e| e.kind.clone())
                .collect::<Vec<_>>(),
            vec![
                EventKind::ToolMessage(ToolMessage {
                    tool_call_id: ToolCallId::new("c1"),
                    content: super::machine::OUTCOME_UNKNOWN.into(),
                    is_error: true,
                    images: Vec::new(),
                }),
                EventKind::TurnComplete {
                    status: TurnStatus::Failed,
                    reason: Some("interrupted by restart".into()),
                    error: Some(ErrorInfo {
                        class: ErrorClass::Internal,
                        message: "the runtime stopped while this turn ran".into(),
                    }),
                },
            ]
        );
        match policy {
            QueuedOnRestart::Drop => {
                let dropped = within(events_until(&mut sub, |e| e.seq == Seq(12)))
                    .await
                    .unwrap();
                let dropped_kind = |input_id| EventKind::InputDropped {
                    input_id,
                    reason: DROPPED_ON_RESTART.into(),
                };
                assert_eq!(
                    dropped.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
                    vec![dropped_kind(second), dropped_kind(third)]
                );
                // Idle afterwards: a new input runs at once.
                session.submit(Input::text("new")).await.unwrap();
                let new = within(events_until(&mut sub, is_turn_complete))
                    .await
                    .unwrap();
                assert_eq!(new.first().unwrap().seq, Seq(13));
                assert_eq!(new.last().unwrap().kind, completed());
            }
            QueuedOnRestart::Run => {
                let first = within(events_until(&mut sub, is_turn_complete))
                    .await
                    .unwrap();
                let second_run = within(events_until(&mut sub, is_turn_complete))
                    .await
                    .unwrap();
                let started = |events: &[Event]| {
                    events.iter().find_map(|e| match e.kind {
                        EventKind::TurnStarted { input_id } => Some(input_id),
                        _ => None,
                    })
                };
                assert_eq!(started(&first), Some(second));
                assert_eq!(started(&second_run), Some(third));
                assert_eq!(first.last().unwrap().kind, completed());
                assert_eq!(second_run.last().unwrap().kind, completed());
            }
        }
        rt.shutdown().await;
    }
}

//! Restart recovery of a turn cut while its calls ran: a call with `tool_started` gets
//! "outcome unknown", a call that never started says it did not run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::machine::OUTCOME_UNKNOWN;
use super::state::NOT_STARTED;
use crate::runtime::Runtime;
use crate::testkit::{config_for, events_until, script, subscribe, within};
use foya_protocol::{
    ApprovalMode, AssistantMessage, Event, EventKind, Input, InputId, RunId, Seq, SessionConfig,
    SessionId, ToolCall, ToolCallId, ToolMessage,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: "shell".into(),
        arguments: json!({"command": id}),
        extra: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_never_started_is_recorded_as_not_run() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let id = SessionId::new();
    let run = Some(RunId::new());
    let input = InputId::new();
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
                input_id: input,
                input: Input::text("go"),
            },
        ),
        (run, EventKind::TurnStarted { input_id: input }),
        (run, EventKind::StepStarted { step: 1 }),
        (
            run,
            EventKind::AssistantMessage(AssistantMessage {
                tool_calls: vec![call("ran"), call("waited")],
                ..AssistantMessage::default()
            }),
        ),
        (
            run,
            EventKind::ToolStarted {
                tool_call_id: ToolCallId::new("ran"),
                name: "shell".into(),
            },
        ),
    ];
    let events = kinds
        .into_iter()
        .zip(1..)
        .map(|((run_id, kind), seq)| Event {
            session_id: id,
            seq: Seq(seq),
            run_id,
            at_ms: 1,
            kind,
        })
        .collect();
    store.append(events).await.unwrap();
    let rt = Runtime::start(config_for(store, script(json!({"responses":[]}))))
        .await
        .unwrap();
    assert_eq!(rt.recover_all().await.unwrap(), 1);
    let session = rt.session(id).await.unwrap();
    let mut sub = subscribe(&session, false).await;
    let recovered = within(events_until(&mut sub, |e| e.seq == Seq(9)))
        .await
        .unwrap();
    let results: Vec<EventKind> = recovered[6..8].iter().map(|e| e.kind.clone()).collect();
    assert_eq!(
        results,
        vec![
            EventKind::ToolMessage(ToolMessage {
                tool_call_id: ToolCallId::new("ran"),
                content: OUTCOME_UNKNOWN.into(),
                is_error: true,
                images: Vec::new(),
            }),
            EventKind::ToolMessage(ToolMessage {
                tool_call_id: ToolCallId::new("waited"),
                content: NOT_STARTED.into(),
                is_error: true,
                images: Vec::new(),
            }),
        ]
    );
    assert!(matches!(recovered[8].kind, EventKind::TurnComplete { .. }));
    rt.shutdown().await;
}

//! End-to-end tests of the embedding façade: many concurrent sessions on one runtime,
//! and recovery of an interrupted turn from a real redb file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::testkit::{
    config_for, events_until, is_turn_complete, kinds_of, memory_store, of_type, script, subscribe,
    tool_message, tool_messages, types, within,
};
use foya_actors::tools::ToolRegistry;
use foya_actors::{Runtime, RuntimeConfig, Subscription};
use foya_protocol::{
    AssistantMessage, ErrorClass, ErrorInfo, Event, EventKind, Input, InputId, RunId, Seq,
    SessionConfig, SessionId, ToolCall, ToolCallId, TurnStatus,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::sync::Arc;

/// The kit's runtime configuration with only the built-in tools.
fn config(store: Store, value: serde_json::Value) -> RuntimeConfig {
    RuntimeConfig {
        tools: Arc::new(ToolRegistry::builtin()),
        ..config_for(store, script(value))
    }
}

/// Receives until `n` turns completed; returns the persisted events seen.
async fn until_turns_complete(sub: &mut Subscription, n: usize) -> Vec<Event> {
    let mut turns = 0;
    events_until(sub, |e| {
        turns += usize::from(is_turn_complete(e));
        turns == n
    })
    .await
}

/// The texts of the `user_message`s of `events`.
fn user_texts(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::UserMessage { input, .. } => Some(input.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The texts of the `assistant_message`s of `events`.
fn assistant_texts(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) => Some(m.text.as_str()),
            _ => None,
        })
        .collect()
}

fn assert_dense(events: &[Event]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sessions_run_two_step_turns_concurrently() {
    let store = memory_store();
    let rt = Arc::new(
        Runtime::start(config(
            store.clone(),
            json!({"responses":[
                {"tool_calls":[{"id":"c1","name":"lookup","arguments":{"q":"x"}}]},
                {"text":"done"}
            ]}),
        ))
        .await
        .unwrap(),
    );
    let mut tasks = Vec::new();
    for i in 0..100 {
        let rt = Arc::clone(&rt);
        tasks.push(tokio::spawn(async move {
            let session = rt.create_session(SessionConfig::new("/tmp")).await.unwrap();
            let mut sub = subscribe(&session, false).await;
            session
                .submit(Input::text(format!("input {i}")))
                .await
                .unwrap();
            let events = until_turns_complete(&mut sub, 1).await;
            (session.id(), events)
        }));
    }
    let all = within(futures::future::join_all(tasks)).await.unwrap();
    for result in all {
        let (id, events) = result.unwrap();
        let expected = vec![
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete",
        ];
        assert_eq!(types(&events), expected);
        assert_dense(&events);
        assert_eq!(
            tool_messages(&events),
            [tool_message(
                "c1",
                "unknown tool \"lookup\"; available tools: read_file, list_dir, glob, grep, \
                 write_file, edit_file, shell",
                true
            )]
        );
        assert_eq!(
            kinds_of(&events, "turn_complete"),
            [&EventKind::TurnComplete {
                status: TurnStatus::Completed,
                reason: None,
                error: None
            }]
        );
        assert_eq!(store.read_from(id, Seq(1)).unwrap(), events);
    }
    assert_eq!(rt.list_sessions().await.unwrap().len(), 100);
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

#[tokio::test]
async fn an_interrupted_turn_is_closed_on_load_and_the_queue_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let id = SessionId::new();
    let run = Some(RunId::new());
    let call = ToolCall {
        id: ToolCallId::new("c1"),
        name: "shell".into(),
        arguments: json!({"command": "make"}),
        extra: None,
    };
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let input_id = InputId::new();
        store
            .append(vec![
                raw(
                    id,
                    1,
                    None,
                    EventKind::SessionCreated {
                        config: SessionConfig::new("/tmp"),
                    },
                ),
                raw(
                    id,
                    2,
                    run,
                    EventKind::UserMessage {
                        input_id,
                        input: Input::text("build"),
                    },
                ),
                raw(id, 3, run, EventKind::TurnStarted { input_id }),
                raw(id, 4, run, EventKind::StepStarted { step: 1 }),
                raw(
                    id,
                    5,
                    run,
                    EventKind::AssistantMessage(AssistantMessage {
                        tool_calls: vec![call],
                        ..AssistantMessage::default()
                    }),
                ),
                raw(
                    id,
                    6,
                    run,
                    EventKind::ToolStarted {
                        tool_call_id: ToolCallId::new("c1"),
                        name: "shell".into(),
                    },
                ),
                raw(
                    id,
                    7,
                    None,
                    EventKind::InputQueued {
                        input_id: InputId::new(),
                        input: Input::text("queued"),
                    },
                ),
            ])
            .await
            .unwrap();
        store.close().await;
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rt = Runtime::start(config(
        store,
        json!({"responses":[{"text":"unused"},{"text":"after restart"},{"text":"fresh"}]}),
    ))
    .await
    .unwrap();
    assert_eq!(rt.recover_all().await.unwrap(), 1);
    let session = rt.session(id).await.unwrap();
    let mut sub = subscribe(&session, false).await;
    let events = until_turns_complete(&mut sub, 2).await;
    assert_dense(&events);
    assert_eq!(
        types(&events),
        [
            // The log as the crash left it …
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "assistant_message",
            "tool_started",
            "input_queued",
            // … the interrupted turn closed on load …
            "tool_message",
            "turn_complete",
            // … and the queued input run.
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let closed = of_type(&events, "tool_message");
    assert_eq!(
        closed
            .iter()
            .map(|e| (&e.kind, e.run_id))
            .collect::<Vec<_>>(),
        [(
            &EventKind::ToolMessage(tool_message(
                "c1",
                "outcome unknown: the runtime stopped while this ran; it was not re-run",
                true
            )),
            run
        )]
    );
    assert_eq!(
        kinds_of(&events, "turn_complete"),
        [
            &EventKind::TurnComplete {
                status: TurnStatus::Failed,
                reason: Some("interrupted by restart".into()),
                error: Some(ErrorInfo {
                    class: ErrorClass::Internal,
                    message: "the runtime stopped while this turn ran".into(),
                }),
            },
            &EventKind::TurnComplete {
                status: TurnStatus::Completed,
                reason: None,
                error: None,
            }
        ]
    );
    assert_eq!(user_texts(&events), ["build", "queued"]);
    assert_eq!(assistant_texts(&events), ["", "after restart"]);

    session.submit(Input::text("new")).await.unwrap();
    let events = until_turns_complete(&mut sub, 1).await;
    assert_eq!(events.first().map(|e| e.seq), Some(Seq(16)));
    assert_eq!(assistant_texts(&events), ["fresh"]);
    assert_eq!(
        kinds_of(&events, "turn_complete"),
        [&EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }]
    );
    drop((sub, session));
    rt.shutdown().await;
}

//! End-to-end tests of the embedding façade: many concurrent sessions on one runtime,
//! and recovery of an interrupted turn from a real redb file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::provider::retry::RetryPolicy;
use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::tools::ToolRegistry;
use foya_actors::{Runtime, RuntimeConfig, SubscribeOptions, Subscription};
use foya_protocol::{
    AssistantMessage, ErrorClass, ErrorInfo, Event, EventKind, Input, InputId, RunId, Seq,
    SessionConfig, SessionId, SessionUpdate, ToolCall, ToolCallId, ToolMessage, TurnStatus,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

fn config(store: Store, script: serde_json::Value) -> RuntimeConfig {
    let script: Script = serde_json::from_value(script).unwrap();
    RuntimeConfig {
        models: HashMap::new(),
        tools: Arc::new(ToolRegistry::builtin()),
        retry: RetryPolicy::default(),
        subscriber_buffer: 1024,
        context: foya_actors::ContextOptions {
            user_dir: Some(std::env::temp_dir().join("foya-tests-no-user-dir")),
            generate_titles: false,
            ..foya_actors::ContextOptions::default()
        },
        ..RuntimeConfig::new(store, Arc::new(ScriptedClient::from_script(script)))
    }
}

/// Receives until `n` turns completed; returns the persisted events seen.
async fn until_turns_complete(sub: &mut Subscription, n: usize) -> Vec<Event> {
    let mut seen = Vec::new();
    let mut done = 0;
    while done < n {
        match sub.recv().await {
            Some(SessionUpdate::Event(e)) => {
                done += usize::from(matches!(e.kind, EventKind::TurnComplete { .. }));
                seen.push(e);
            }
            Some(_) => {}
            None => panic!("subscription ended after {seen:?}"),
        }
    }
    seen
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

fn assert_dense(events: &[Event]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_sessions_run_two_step_turns_concurrently() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
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
            let mut sub = session
                .subscribe(Seq(1), SubscribeOptions::default())
                .await
                .unwrap();
            session
                .submit(Input::text(format!("input {i}")))
                .await
                .unwrap();
            let events = until_turns_complete(&mut sub, 1).await;
            (session.id(), events)
        }));
    }
    let all = tokio::time::timeout(TIMEOUT, futures::future::join_all(tasks))
        .await
        .unwrap();
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
            events[6].kind,
            EventKind::ToolMessage(ToolMessage {
                tool_call_id: ToolCallId::new("c1"),
                content: "unknown tool \"lookup\"; available tools: read_file, list_dir, \
                          glob, grep, write_file, edit_file, shell"
                    .into(),
                is_error: true,
                images: Vec::new(),
            })
        );
        assert_eq!(
            events[10].kind,
            EventKind::TurnComplete {
                status: TurnStatus::Completed,
                reason: None,
                error: None
            }
        );
        assert_eq!(store.read_from(id, Seq(1)).unwrap(), events);
    }
    assert_eq!(rt.list_sessions().unwrap().len(), 100);
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
    let mut sub = session
        .subscribe(Seq(1), SubscribeOptions::default())
        .await
        .unwrap();
    let events = tokio::time::timeout(TIMEOUT, until_turns_complete(&mut sub, 2))
        .await
        .unwrap();
    assert_dense(&events);
    assert_eq!(
        events[7].kind,
        EventKind::ToolMessage(ToolMessage {
            tool_call_id: ToolCallId::new("c1"),
            content: "outcome unknown: the runtime stopped while this ran; it was not re-run"
                .into(),
            is_error: true,
            images: Vec::new(),
        })
    );
    assert_eq!(
        events[8].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("interrupted by restart".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::Internal,
                message: "the runtime stopped while this turn ran".into(),
            }),
        }
    );
    assert_eq!(events[7].run_id, run);
    assert_eq!(
        types(&events[9..]),
        vec![
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let EventKind::UserMessage { input, .. } = &events[9].kind else {
        panic!()
    };
    assert_eq!(input.text, "queued");
    let EventKind::AssistantMessage(m) = &events[13].kind else {
        panic!()
    };
    assert_eq!(m.text, "after restart");

    session.submit(Input::text("new")).await.unwrap();
    let events = tokio::time::timeout(TIMEOUT, until_turns_complete(&mut sub, 1))
        .await
        .unwrap();
    assert_eq!(events[0].seq, Seq(16));
    let EventKind::AssistantMessage(m) = &events[4].kind else {
        panic!()
    };
    assert_eq!(m.text, "fresh");
    assert_eq!(
        events[5].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    drop((sub, session));
    rt.shutdown().await;
}

//! Per-step context through the embedding API: a session whose log ends in a cut
//! compaction (no checkpoint) reopens and continues, and every step records
//! `context_diagnostics` (calibrated by the previous step's usage).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use foya_actors::Runtime;
use foya_actors::context::Calibration;
use foya_actors::testkit::kinds_of;
use foya_protocol::{Event, EventKind, Input, InputId, RunId, Seq, SessionId, TurnStatus};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn a_session_cut_mid_compaction_opens_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.redb");
    let id = SessionId::new();
    let run = RunId::new();
    let input_id = InputId::new();
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let kinds = vec![
            (
                None,
                EventKind::SessionCreated {
                    config: session_config(dir.path()),
                },
            ),
            (
                Some(run),
                EventKind::UserMessage {
                    input_id,
                    input: Input::text("first"),
                },
            ),
            (Some(run), EventKind::TurnStarted { input_id }),
            (Some(run), EventKind::StepStarted { step: 1 }),
            (
                Some(run),
                EventKind::CompactionStarted {
                    trigger: "threshold".into(),
                    tokens_before: 900,
                },
            ),
        ];
        let events = kinds
            .into_iter()
            .enumerate()
            .map(|(i, (run_id, kind))| Event {
                session_id: id,
                seq: Seq(i as u64 + 1),
                run_id,
                at_ms: 0,
                kind,
            })
            .collect();
        store.append(events).await.unwrap();
        store.close().await;
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let client = script(json!({"responses":[{"text":"after the cut"}]}));
    let rt = Runtime::start(config(store, Arc::new(client), options(dir.path())))
        .await
        .unwrap();
    let session = rt.session(id).await.unwrap();
    let mut sub = subscribe(&session).await;
    session.submit(Input::text("again")).await.unwrap();
    let mut events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(types(&events)[5..], ["turn_complete"]);
    events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(
        types(&events),
        vec![
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let [EventKind::AssistantMessage(m)] = kinds_of(&events, "assistant_message")[..] else {
        panic!("one answer: {events:?}")
    };
    assert_eq!(m.text, "after the cut");
    assert_eq!(
        kinds_of(&events, "turn_complete"),
        [&EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }]
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn every_step_records_its_context_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let client = script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"lookup","arguments":{}}],
         "usage":{"input_tokens":10,"output_tokens":1}},
        {"text":"done"}
    ]}));
    let rt = runtime(Arc::new(client), options(dir.path())).await;
    let events = one_turn(&rt, dir.path(), Input::text("go")).await;
    let diags: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ContextDiagnostics { .. }))
        .collect();
    assert_eq!(diags.len(), 2);
    for (i, event) in diags.iter().enumerate() {
        let EventKind::ContextDiagnostics {
            step,
            sections,
            estimated_input_tokens,
            window,
            reserve,
            decision,
        } = &event.kind
        else {
            panic!()
        };
        assert_eq!(
            (*step, *window, *reserve, decision.as_str()),
            (u32::try_from(i).unwrap() + 1, 128_000, 16_000, "send")
        );
        assert_eq!(
            sections.keys().map(String::as_str).collect::<Vec<_>>(),
            vec![
                "environment",
                "history",
                "kernel",
                "memory",
                "project_instructions",
                "rules",
                "skills",
                "tools"
            ]
        );
        // Step 2 is calibrated by step 1's usage: 10 reported tokens for an estimate of
        // hundreds clamps the ratio at its minimum.
        let ratio = if i == 0 { 1.0 } else { Calibration::MIN_RATIO };
        assert_eq!(
            *estimated_input_tokens,
            Calibration { ratio }.apply(sections.values().sum::<u64>())
        );
    }
    rt.shutdown().await;
}

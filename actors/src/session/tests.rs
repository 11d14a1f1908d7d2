//! Scenario tests of the session/turn/tool actors: in-memory store, scripted model,
//! test tools; every wait is "receive until predicate" under one global timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::testkit::{
    events_until, is_turn_complete, runtime, script, session_config, subscribe, types, within,
};
use foya_protocol::{
    ApprovalMode, ErrorClass, ErrorInfo, Event, EventKind, Input, Seq, SessionUpdate, ToolCall,
    ToolCallId, ToolMessage, TurnStatus,
};
use serde_json::json;

fn tool_message(id: &str, content: &str, is_error: bool) -> EventKind {
    EventKind::ToolMessage(ToolMessage {
        tool_call_id: ToolCallId::new(id),
        content: content.into(),
        is_error,
        images: Vec::new(),
    })
}

fn completed() -> EventKind {
    EventKind::TurnComplete {
        status: TurnStatus::Completed,
        reason: None,
        error: None,
    }
}

fn assert_dense(events: &[Event]) {
    let seqs: Vec<u64> = events.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}

fn text_of(event: &Event) -> Option<&str> {
    match &event.kind {
        EventKind::AssistantMessage(m) => Some(&m.text),
        _ => None,
    }
}

#[tokio::test]
async fn multi_step_turn_runs_a_tool_and_completes() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"echo","arguments":{"x":1}}]},
        {"text":"all done"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&events),
        vec![
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "tool_started",
            "tool_finished",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    assert_dense(&events);
    assert_eq!(events[8].kind, tool_message("c1", "echo: {\"x\":1}", false));
    assert_eq!(text_of(&events[11]), Some("all done"));
    assert_eq!(events[12].kind, completed());
    let run = events[2].run_id;
    assert!(run.is_some() && events[1..].iter().all(|e| e.run_id == run));
    rt.shutdown().await;
}

/// A step's assistant message and the `tool_started` of the calls it starts at once
/// (valid, allowed without asking) share one commit; a call that must ask marks itself
/// started in its own append once allowed. Every append of this turn is sequential, so
/// the store's commit count is exact.
#[tokio::test]
async fn a_steps_allowed_calls_are_marked_started_with_its_assistant_message() {
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let rt = crate::Runtime::start(crate::testkit::config_for(
        store.clone(),
        script(json!({"responses":[
            {"tool_calls":[
                {"id":"c1","name":"echo","arguments":{"x":1}},
                {"id":"c2","name":"echo","arguments":{"x":2}}
            ]},
            {"text":"all done"}
        ]})),
    ))
    .await
    .unwrap();
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    let before = store.stats().commits;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&events[1..]),
        vec![
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "tool_started",
            "tool_started",
            "tool_finished",
            "tool_message",
            "tool_finished",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let started = &events[5..8];
    assert!(
        started.iter().all(|e| e.at_ms == started[0].at_ms),
        "written by one append: {started:?}"
    );
    // user_message; turn_started; step_started + context_diagnostics; the assistant
    // message + both tool_started; each call's tool_finished + result (two appends);
    // step 2's events with turn_complete ending the turn: 7.
    assert_eq!(store.stats().commits - before, 7);
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn subscriber_from_seq_one_mid_turn_sees_every_event_once_plus_deltas() {
    let rt = runtime(script(json!({"responses":[
        {"text":"a long streamed answer","reasoning":"thinking","chunk_chars":4,"delay_ms":10}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut early = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    // Wait until the turn is mid-stream, then subscribe from the start.
    within(async {
        loop {
            if let Some(SessionUpdate::Delta(_)) = early.recv().await {
                break;
            }
        }
    })
    .await
    .unwrap();
    let mut late = subscribe(&session, false).await;
    // Mid-stream the log holds session_created, user_message, turn_started,
    // step_started and context_diagnostics; the subscription replays exactly those.
    assert_eq!(late.replay_end(), Seq(5));
    let mut deltas = String::new();
    let mut events = Vec::new();
    within(async {
        loop {
            match late.recv().await.unwrap() {
                SessionUpdate::Event(e) => {
                    let end = is_turn_complete(&e);
                    events.push(e);
                    if end {
                        break;
                    }
                }
                SessionUpdate::Delta(d) => {
                    if let foya_protocol::Delta::TextDelta { text } = d.delta {
                        deltas.push_str(&text);
                    }
                }
                SessionUpdate::Notice(n) => panic!("unexpected notice {n:?}"),
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        types(&events),
        vec![
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    assert_dense(&events);
    assert!(
        !deltas.is_empty() && "a long streamed answer".ends_with(&deltas),
        "{deltas}"
    );
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_stream_keeps_the_partial_message_and_runs_the_next_input() {
    let rt = runtime(script(json!({"responses":[
        {"text":"this answer is cut off somewhere","chunk_chars":2,"delay_ms":1000},
        {"text":"next"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    within(async {
        loop {
            if let Some(SessionUpdate::Delta(_)) = sub.recv().await {
                break;
            }
        }
    })
    .await
    .unwrap();
    session.cancel().await.unwrap();
    // Submitted after the cancel (no store write may happen mid-stream: with paused time
    // the clock jumps while the writer thread commits): it queues behind the cancelling
    // turn and runs next.
    session.submit(Input::text("second")).await.unwrap();
    let mut done = 0;
    let events = within(events_until(&mut sub, |e| {
        done += usize::from(is_turn_complete(e));
        done == 2
    }))
    .await
    .unwrap();
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    let partial = kinds
        .iter()
        .find_map(|k| match k {
            EventKind::AssistantMessage(m) => Some(m.clone()),
            _ => None,
        })
        .unwrap();
    assert!(partial.interrupted);
    assert!(
        !partial.text.is_empty() && "this answer is cut off somewhere".starts_with(&partial.text)
    );
    let cancel_at = kinds
        .iter()
        .position(|k| matches!(k, EventKind::TurnCancelled { .. }))
        .unwrap();
    assert_eq!(
        *kinds[cancel_at],
        EventKind::TurnCancelled {
            reason: "user".into()
        }
    );
    assert_eq!(
        *kinds[cancel_at + 1],
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None
        }
    );
    assert_eq!(events.iter().filter_map(text_of).next_back(), Some("next"));
    assert_eq!(*kinds[kinds.len() - 1], completed());
    rt.shutdown().await;
}

#[tokio::test]
async fn cancel_during_a_long_tool_gives_a_cancelled_result() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"wait","arguments":{}}]},
        {"text":"after"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    session.submit(Input::text("second")).await.unwrap();
    let mut events = within(events_until(&mut sub, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    }))
    .await
    .unwrap();
    session.cancel().await.unwrap();
    let mut done = 0;
    events.extend(
        within(events_until(&mut sub, |e| {
            done += usize::from(is_turn_complete(e));
            done == 2
        }))
        .await
        .unwrap(),
    );
    let first_run: Vec<&Event> = events
        .iter()
        .filter(|e| e.run_id == events[2].run_id)
        .collect();
    let tail: Vec<&EventKind> = first_run
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(|e| &e.kind)
        .collect();
    assert_eq!(
        tail,
        vec![
            &tool_message("c1", "cancelled", true),
            &EventKind::TurnCancelled {
                reason: "user".into()
            },
            &EventKind::TurnComplete {
                status: TurnStatus::Cancelled,
                reason: None,
                error: None
            },
        ]
    );
    assert_eq!(events.iter().filter_map(text_of).next_back(), Some("after"));
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result_and_the_turn_goes_on() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"boom","arguments":{}},{"id":"c2","name":"nope","arguments":{}}]},
        {"text":"recovered"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    let results: Vec<&EventKind> = events
        .iter()
        .map(|e| &e.kind)
        .filter(|k| matches!(k, EventKind::ToolMessage(_)))
        .collect();
    assert_eq!(
        results,
        vec![
            &tool_message("c1", "tool crashed", true),
            &tool_message(
                "c2",
                "unknown tool \"nope\"; available tools: read_file, list_dir, glob, grep, \
                 write_file, edit_file, shell, echo, wait, boom, exec",
                true
            )
        ]
    );
    assert_eq!(events.last().unwrap().kind, completed());
    assert_dense(&events);
    rt.shutdown().await;
}

#[tokio::test]
async fn a_call_with_an_empty_tool_name_gets_an_error_result_and_the_turn_goes_on() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"","arguments":{"path":"x"}}]},
        {"text":"corrected"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    let calls: Vec<&ToolCall> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) => Some(&m.tool_calls),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        calls,
        vec![&ToolCall {
            id: ToolCallId::new("c1"),
            name: String::new(),
            arguments: json!({"path": "x"}),
            extra: None
        }]
    );
    let results: Vec<&EventKind> = events
        .iter()
        .map(|e| &e.kind)
        .filter(|k| matches!(k, EventKind::ToolMessage(_)))
        .collect();
    assert_eq!(
        results,
        vec![&tool_message(
            "c1",
            "the tool call has an empty tool name; call one of the available tools by its \
             name: read_file, list_dir, glob, grep, write_file, edit_file, shell, echo, wait, \
             boom, exec",
            true
        )]
    );
    assert_eq!(
        events.iter().filter_map(text_of).next_back(),
        Some("corrected")
    );
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test]
async fn a_crashed_turn_fails_and_the_session_continues() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"wait","arguments":{}}]},
        {"text":"second"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    within(events_until(&mut sub, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    }))
    .await
    .unwrap();
    session.crash_turn_for_test().await;
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        events[0].kind,
        tool_message("c1", "the turn crashed before this call finished", true)
    );
    let EventKind::TurnComplete {
        status,
        reason,
        error,
    } = &events[1].kind
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        (*status, reason.as_deref()),
        (TurnStatus::Failed, Some("turn crashed"))
    );
    assert_eq!(error.as_ref().map(|e| e.class), Some(ErrorClass::Internal));
    session.submit(Input::text("again")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        events.iter().filter_map(text_of).next_back(),
        Some("second")
    );
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_transient_error_is_retried_and_quota_is_not() {
    let rt = runtime(script(json!({"responses":[
        {"text":"fine","error":{"class":"rate_limited","message":"slow down","retry_after_ms":100},"fail_times":1},
        {"error":{"class":"quota_exhausted","message":"no credit"}}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&events),
        vec![
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "provider_retry",
            "assistant_message",
            "turn_complete"
        ]
    );
    let EventKind::ProviderRetry {
        attempt,
        max_attempts,
        delay_ms,
        error,
    } = &events[5].kind
    else {
        panic!()
    };
    assert_eq!((*attempt, *max_attempts, *delay_ms), (2, 4, 100));
    assert_eq!(
        (error.class, error.message.as_str()),
        (ErrorClass::RateLimited, "slow down")
    );
    assert_eq!(events[7].kind, completed());

    session.submit(Input::text("again")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&events),
        vec![
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "turn_complete"
        ]
    );
    assert_eq!(
        events[4].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("quota_exhausted".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::QuotaExhausted,
                message: "no credit".into()
            }),
        }
    );
    rt.shutdown().await;
}

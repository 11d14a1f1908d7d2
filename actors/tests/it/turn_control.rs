//! Turn control end to end with real processes: cancel (streaming, a 5-wide parallel
//! batch of `sleep 30`, an approval wait, a retry backoff), delete (idle, busy, twice),
//! one active turn under 50 concurrent submits, run protection (duplicate calls, A-B-A-B
//! cycles, the final no-tools step at `max_steps`) and stop hooks (in-process and a real
//! bash script, the continuation cap, no permission widening), and the history a turn
//! sends whether its idle session kept its log in memory or read it back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agent_tests;
mod hook_tests;
mod model_tests;
mod support;
mod withdrawn_tests;

use foya_actors::RuntimeError;
use foya_protocol::event::Notice;
use foya_protocol::{
    ApprovalMode, ErrorClass, ErrorInfo, Event, EventKind, Input, Message, Seq, SessionUpdate,
    ToolMessage, TurnStatus,
};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn results(events: &[Event]) -> Vec<ToolMessage> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolMessage(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

fn cancelled_end(events: &[Event]) -> Vec<EventKind> {
    events[events.len() - 2..]
        .iter()
        .map(|e| e.kind.clone())
        .collect()
}

fn expected_cancel(reason: &str) -> Vec<EventKind> {
    vec![
        EventKind::TurnCancelled {
            reason: reason.into(),
        },
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None,
        },
    ]
}

#[tokio::test]
async fn cancel_while_streaming_keeps_the_partial_text() {
    let tools = tools();
    let client = Capture::new(json!({"responses":[
        {"text": "a long answer that streams slowly", "chunk_chars": 2, "delay_ms": 100}
    ]}));
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    within(async {
        loop {
            if let Some(SessionUpdate::Delta(_)) = sub.recv().await {
                return;
            }
        }
    })
    .await;
    let asked = Instant::now();
    session.cancel().await.unwrap();
    let events = until(&mut sub, is_complete).await;
    let elapsed = asked.elapsed();
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    let EventKind::AssistantMessage(partial) = &events[events.len() - 3].kind else {
        panic!("no partial message: {:?}", types(&events));
    };
    assert!(partial.interrupted);
    assert!(!partial.text.is_empty());
    assert!("a long answer that streams slowly".starts_with(&partial.text));
    assert_eq!(cancelled_end(&events), expected_cancel("user"));
    rt.shutdown().await;
}

#[tokio::test]
async fn cancel_during_a_parallel_batch_of_sleeps_kills_them_and_the_queue_goes_on() {
    let tools = tools();
    let calls: Vec<_> = (0..5)
        .map(|i| json!({"id": format!("s{i}"), "name": "sleeper", "arguments": {"n": i}}))
        .collect();
    let client = Capture::new(json!({"responses":[
        {"tool_calls": calls},
        {"text": "second input done"}
    ]}));
    let st = store();
    let (rt, session) = start(config(st.clone(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("sleep")).await.unwrap();
    session.submit(Input::text("then this")).await.unwrap();
    let mut started = 0;
    until(&mut sub, |e| {
        started += usize::from(matches!(e.kind, EventKind::ToolStarted { .. }));
        started == 5
    })
    .await;
    let pids = tools.sleeper.wait_pids(5).await;
    let asked = Instant::now();
    session.cancel().await.unwrap();
    let events = until(&mut sub, is_complete).await;
    let elapsed = asked.elapsed();
    assert!(elapsed < Duration::from_millis(1000), "{elapsed:?}");
    assert_eq!(cancelled_end(&events), expected_cancel("user"));
    let cancelled: Vec<ToolMessage> = (0..5)
        .map(|i| ToolMessage {
            tool_call_id: foya_protocol::ToolCallId::new(format!("s{i}")),
            content: "cancelled".into(),
            is_error: true,
            images: Vec::new(),
        })
        .collect();
    assert_eq!(results(&events), cancelled);
    for pid in pids {
        wait_gone(pid).await;
    }
    // The queued input was not dropped: it runs next.
    let next = until(&mut sub, is_complete).await;
    assert_eq!(status(next.last().unwrap()), Some(TurnStatus::Completed));
    let all = st.read_from(session.id(), Seq::FIRST).unwrap();
    assert_well_formed(&all);
    rt.shutdown().await;
}

#[tokio::test]
async fn cancel_while_waiting_for_an_approval() {
    let tools = tools();
    let client = Capture::new(json!({"responses":[
        {"tool_calls": [{"id": "r1", "name": "runner", "arguments": {}}]}
    ]}));
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Ask).await;
    let mut sub = subscribe(&session, true).await;
    session.submit(Input::text("run")).await.unwrap();
    until(&mut sub, |e| {
        matches!(e.kind, EventKind::ApprovalRequested { .. })
    })
    .await;
    session.cancel().await.unwrap();
    let events = until(&mut sub, is_complete).await;
    assert_eq!(
        results(&events),
        vec![ToolMessage {
            tool_call_id: foya_protocol::ToolCallId::new("r1"),
            content: "cancelled".into(),
            is_error: true,
            images: Vec::new(),
        }]
    );
    assert_eq!(cancelled_end(&events), expected_cancel("user"));
    rt.shutdown().await;
}

#[tokio::test]
async fn cancel_during_a_retry_backoff() {
    let tools = tools();
    let client = Capture::new(json!({"responses":[
        {"error": {"class": "rate_limited", "message": "slow down", "retry_after_ms": 60000}}
    ]}));
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    until(&mut sub, |e| {
        matches!(e.kind, EventKind::ProviderRetry { .. })
    })
    .await;
    let asked = Instant::now();
    session.cancel().await.unwrap();
    let events = until(&mut sub, is_complete).await;
    assert!(asked.elapsed() < Duration::from_secs(1));
    assert_eq!(types(&events), ["turn_cancelled", "turn_complete"]);
    assert_eq!(cancelled_end(&events), expected_cancel("user"));
    rt.shutdown().await;
}

#[tokio::test]
async fn delete_during_a_busy_turn_writes_nothing_afterwards() {
    let tools = tools();
    let client = Capture::new(json!({"responses":[
        {"tool_calls": [{"id": "s0", "name": "sleeper", "arguments": {}}]}
    ]}));
    let st = store();
    let (rt, session) = start(config(st.clone(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("sleep")).await.unwrap();
    session.submit(Input::text("queued")).await.unwrap();
    until(&mut sub, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    })
    .await;
    let pid = tools.sleeper.wait_pids(1).await[0];
    within(session.delete()).await.unwrap();
    let (tail, notice) = until_closed(&mut sub).await;
    assert_eq!(
        notice,
        Notice::Closed {
            session_id: session.id(),
            reason: "session deleted".into()
        }
    );
    assert_eq!(
        types(&tail)[types(&tail).len() - 5..],
        [
            "tool_message",
            "turn_cancelled",
            "turn_complete",
            "input_dropped",
            "session_deleted"
        ]
    );
    wait_gone(pid).await;
    let log = st.read_from(session.id(), Seq::FIRST).unwrap();
    assert_eq!(log.last().unwrap().kind, EventKind::SessionDeleted {});
    assert_well_formed(&log);
    // The store refuses anything after session_deleted.
    let late = Event {
        session_id: session.id(),
        seq: Seq(log.last().unwrap().seq.0 + 1),
        run_id: None,
        at_ms: 0,
        kind: EventKind::TitleSet {
            title: "late".into(),
            source: foya_protocol::TitleSource::User,
        },
    };
    assert_eq!(
        st.append(vec![late]).await,
        Err(foya_storage::AppendError::SessionDeleted)
    );
    // Deleted again, or used: a clear error, nothing written.
    assert_eq!(
        session.delete().await,
        Err(RuntimeError::SessionDeleted(session.id()))
    );
    assert_eq!(
        session.submit(Input::text("x")).await,
        Err(RuntimeError::SessionDeleted(session.id()))
    );
    assert_eq!(st.read_from(session.id(), Seq::FIRST).unwrap(), log);
    rt.shutdown().await;
}

#[tokio::test]
async fn delete_an_idle_session() {
    let tools = tools();
    let st = store();
    let client = Capture::new(json!({"responses":[]}));
    let (rt, session) = start(config(st.clone(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    within(session.delete()).await.unwrap();
    let (events, notice) = until_closed(&mut sub).await;
    assert_eq!(types(&events), ["session_created", "session_deleted"]);
    assert!(matches!(notice, Notice::Closed { .. }));
    assert!(rt.list_sessions().await.unwrap()[0].deleted);
    assert_eq!(
        rt.session(session.id()).await.map(|s| s.id()),
        Err(RuntimeError::SessionDeleted(session.id()))
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn fifty_concurrent_submits_run_one_turn_at_a_time_in_order() {
    let tools = tools();
    let responses: Vec<_> = (0..50)
        .map(|i| json!({"text": format!("answer {i}")}))
        .collect();
    let client = Capture::new(json!({ "responses": responses }));
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    let submits = (0..50).map(|i| {
        let session = session.clone();
        async move { session.submit(Input::text(format!("q{i}"))).await.unwrap() }
    });
    let ids = futures::future::join_all(submits).await;
    assert_eq!(ids.len(), 50);
    let mut done = 0;
    let events = until(&mut sub, |e| {
        done += usize::from(is_complete(e));
        done == 50
    })
    .await;
    let mut active = false;
    let mut started = Vec::new();
    for event in &events {
        match &event.kind {
            EventKind::TurnStarted { input_id } => {
                assert!(!active, "two active turns");
                active = true;
                started.push(*input_id);
            }
            EventKind::TurnComplete { status, .. } => {
                assert_eq!(*status, TurnStatus::Completed);
                active = false;
            }
            _ => {}
        }
    }
    let mut sorted_started = started.clone();
    sorted_started.sort();
    let mut sorted_ids = ids.clone();
    sorted_ids.sort();
    assert_eq!(sorted_started, sorted_ids, "every input ran exactly once");
    rt.shutdown().await;
}

#[tokio::test]
async fn a_repeated_call_is_blocked_at_the_threshold_then_the_turn_fails() {
    let tools = tools();
    let same = json!({"tool_calls": [{"id": "p", "name": "probe", "arguments": {"b": 2, "a": 1}}]});
    let mut responses = vec![same.clone(); 4];
    // Key order does not matter.
    responses[1] =
        json!({"tool_calls": [{"id": "p", "name": "probe", "arguments": {"a": 1, "b": 2}}]});
    let client = Capture::new(json!({ "responses": responses }));
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = until(&mut sub, is_complete).await;
    let contents: Vec<(String, bool)> = results(&events)
        .into_iter()
        .map(|r| (r.content, r.is_error))
        .collect();
    let blocked = "not run: this exact call (`probe` with the same arguments) was already made \
                   2 times in this turn, and the 3rd identical call of a turn is not run; \
                   repeating it will not give a different result. Change the arguments, try \
                   another approach, or finish.";
    let insisted = "the model kept repeating the blocked call `probe` with the same arguments";
    assert_eq!(
        contents,
        vec![
            (r#"ok {"a":1,"b":2}"#.to_owned(), false),
            (r#"ok {"a":1,"b":2}"#.to_owned(), false),
            (blocked.to_owned(), true),
            (format!("not run: {insisted}"), true),
        ]
    );
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("loop_detected".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::LoopDetected,
                message: insisted.into()
            }),
        }
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn an_a_b_a_b_cycle_ends_the_turn() {
    let tools = tools();
    let a = json!({"tool_calls": [{"id": "a", "name": "probe", "arguments": {"x": 1}}]});
    let b = json!({"tool_calls": [{"id": "b", "name": "peek", "arguments": {"y": 2}}]});
    let client =
        Capture::new(json!({ "responses": [a.clone(), b.clone(), a, b, {"text": "never"}] }));
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = until(&mut sub, is_complete).await;
    assert_eq!(results(&events).len(), 4);
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("loop_detected".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::LoopDetected,
                message: "the last 4 steps repeat a cycle of 2 steps with the same calls and \
                          results, making no progress: [probe -> peek] twice"
                    .into()
            }),
        }
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn max_steps_ends_with_a_final_no_tools_step() {
    let tools = tools();
    let client = Capture::new(json!({"responses":[
        {"tool_calls": [{"id": "a", "name": "probe", "arguments": {"x": 1}}]},
        {"tool_calls": [{"id": "b", "name": "probe", "arguments": {"x": 2}}]},
        {"text": "summary: probed twice", "tool_calls": [{"id": "c", "name": "probe", "arguments": {}}]}
    ]}));
    let requests = Arc::clone(&client.requests);
    let rt = foya_actors::Runtime::start(config(store(), client, &tools))
        .await
        .unwrap();
    let session = rt
        .create_session(foya_protocol::SessionConfig {
            approval_mode: ApprovalMode::Bypass,
            max_steps: Some(2),
            ..foya_protocol::SessionConfig::new(std::env::temp_dir())
        })
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = until(&mut sub, is_complete).await;
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    assert!(!requests[1].tools.is_empty());
    assert!(requests[2].tools.is_empty());
    assert!(matches!(
        requests[2].messages.last(),
        Some(Message::User(input)) if input == &Input::text(
            "The step limit of this turn was reached: no more tools can be called. Summarise \
             what was done, what remains, and stop."
        )
    ));
    let EventKind::AssistantMessage(last) = &events[events.len() - 2].kind else {
        panic!("{:?}", types(&events))
    };
    assert_eq!(last.text, "summary: probed twice");
    assert_eq!(last.tool_calls, vec![]);
    assert_well_formed(&events);
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("max_steps".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::MaxSteps,
                message: "the turn reached its maximum of 2 steps".into()
            }),
        }
    );
    rt.shutdown().await;
}

/// An idle session keeps its log in memory only within the runtime's idle budget; with
/// none, its next turn reads the log back from the store. Either way that turn sends the
/// whole history: both turns' requests are equal, message for message.
#[tokio::test]
async fn the_next_turn_sends_the_same_history_whether_the_idle_log_was_kept_or_read_back() {
    let mut sent = Vec::new();
    for budget in [0, foya_actors::DEFAULT_IDLE_LOG_EVENTS] {
        let tools = tools();
        let client = Capture::new(json!({"responses":[
            {"tool_calls": [{"id": "a", "name": "probe", "arguments": {"x": 1}}]},
            {"text": "one"},
            {"text": "two"}
        ]}));
        let requests = Arc::clone(&client.requests);
        let config = foya_actors::RuntimeConfig {
            idle_log_events: budget,
            ..config(store(), client, &tools)
        };
        let (rt, session) = start(config, ApprovalMode::Bypass).await;
        let mut sub = subscribe(&session, false).await;
        for text in ["first", "second"] {
            session.submit(Input::text(text)).await.unwrap();
            let events = within(until(&mut sub, is_complete)).await;
            assert_eq!(status(events.last().unwrap()), Some(TurnStatus::Completed));
        }
        let mut requests = requests.lock().unwrap().clone();
        assert_eq!(requests.len(), 3, "budget {budget}");
        sent.push(requests.remove(2).messages);
        rt.shutdown().await;
    }
    let shape: Vec<String> = sent[0]
        .iter()
        .map(|m| match m {
            Message::User(input) => format!("user {}", input.text),
            Message::Assistant(a) if a.tool_calls.is_empty() => format!("assistant {}", a.text),
            Message::Assistant(a) => format!("assistant calls {}", a.tool_calls[0].id),
            Message::Tool(t) => format!("tool {}", t.tool_call_id),
            Message::System { .. } => "system".into(),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "user first",
            "assistant calls a",
            "tool a",
            "assistant one",
            "user second"
        ]
    );
    assert_eq!(sent[0], sent[1]);
}

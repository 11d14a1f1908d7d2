//! Approval scenarios: denied without an approver; "allow for session" grants that
//! survive a restart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::machine::NO_APPROVER;
use crate::testkit::{
    events_until, is_turn_complete, runtime, script, session_config, subscribe, types, within,
};
use foya_protocol::{
    ApprovalDecision, ApprovalMode, EventKind, Input, Seq, SessionUpdate, ToolCallId, ToolMessage,
    TurnStatus,
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

#[tokio::test]
async fn approval_without_an_approver_is_denied_visibly() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"exec","arguments":{"cmd":"ls"}}]},
        {"text":"ok"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Ask))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&events)[5..],
        [
            "assistant_message",
            "approval_requested",
            "approval_decided",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let EventKind::ApprovalDecided {
        decision,
        message,
        grant,
        ..
    } = &events[7].kind
    else {
        panic!()
    };
    assert_eq!(
        (*decision, message.as_deref(), grant),
        (ApprovalDecision::Deny, Some(NO_APPROVER), &None)
    );
    assert_eq!(events[8].kind, tool_message("c1", NO_APPROVER, true));
    rt.shutdown().await;
}

#[tokio::test]
async fn allow_for_session_is_not_asked_again_even_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.redb");
    let responses = json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"exec","arguments":{"n":1}}]},
        {"tool_calls":[{"id":"c2","name":"exec","arguments":{"n":2}}]},
        {"text":"done"},
        {"tool_calls":[{"id":"c3","name":"exec","arguments":{"n":3}}]},
        {"text":"done again"}
    ]});
    let open = || foya_storage::Store::open(&path, foya_storage::StoreOptions::default()).unwrap();
    let rt = crate::Runtime::start(crate::testkit::config_for(
        open(),
        script(responses.clone()),
    ))
    .await
    .unwrap();
    let session = rt
        .create_session(session_config(ApprovalMode::Ask))
        .await
        .unwrap();
    let id = session.id();
    let mut sub = subscribe(&session, true).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(async {
        let mut seen = Vec::new();
        loop {
            let Some(SessionUpdate::Event(e)) = sub.recv().await else {
                continue;
            };
            if let EventKind::ApprovalRequested { request_id, .. } = &e.kind {
                session
                    .decide_approval(*request_id, ApprovalDecision::AllowForSession, None)
                    .await
                    .unwrap();
            }
            let end = is_turn_complete(&e);
            seen.push(e);
            if end {
                return seen;
            }
        }
    })
    .await
    .unwrap();
    let names = types(&events);
    assert_eq!(
        names.iter().filter(|t| **t == "approval_requested").count(),
        1
    );
    assert_eq!(names.iter().filter(|t| **t == "tool_started").count(), 2);
    assert_eq!(events.last().unwrap().kind, completed());
    drop((sub, session));
    rt.shutdown().await;

    let rt = crate::Runtime::start(crate::testkit::config_for(open(), script(responses)))
        .await
        .unwrap();
    let session = rt.session(id).await.unwrap();
    let last = events.last().unwrap().seq;
    let mut sub = session
        .subscribe(Seq(last.0 + 1), crate::SubscribeOptions::default())
        .await
        .unwrap();
    session.submit(Input::text("more")).await.unwrap();
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
    assert_eq!(events[7].kind, tool_message("c3", "echo: {\"n\":3}", false));
    assert_eq!(events[0].seq, last.next());
    rt.shutdown().await;
}

#[tokio::test]
async fn a_denial_reaches_the_model_with_the_users_message() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"exec","arguments":{"cmd":"rm"}}]},
        {"text":"understood"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::AutoEdit))
        .await
        .unwrap();
    let mut sub = subscribe(&session, true).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(async {
        let mut seen = Vec::new();
        loop {
            let Some(SessionUpdate::Event(e)) = sub.recv().await else {
                continue;
            };
            if let EventKind::ApprovalRequested { request_id, .. } = &e.kind {
                session
                    .decide_approval(*request_id, ApprovalDecision::Deny, Some("not now".into()))
                    .await
                    .unwrap();
            }
            let end = is_turn_complete(&e);
            seen.push(e);
            if end {
                return seen;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        types(&events)[5..],
        [
            "assistant_message",
            "approval_requested",
            "approval_decided",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let EventKind::ApprovalDecided {
        decision,
        message,
        grant,
        ..
    } = &events[7].kind
    else {
        panic!()
    };
    assert_eq!(
        (*decision, message.as_deref(), grant),
        (ApprovalDecision::Deny, Some("not now"), &None)
    );
    assert_eq!(events[8].kind, tool_message("c1", "not now", true));
    assert_eq!(events[12].kind, completed());
    rt.shutdown().await;
}

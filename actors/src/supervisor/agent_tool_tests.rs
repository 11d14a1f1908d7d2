//! The `agent` tool forgets a parent turn's counters when that turn ends, so its map
//! does not grow with the number of turns (it held one entry per turn forever before);
//! a turn over its limit of children is told the limit in words ("1 sub-agent"); a
//! cancelled parent turn ends its child's turn through the child's supervisor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::runtime::Runtime;
use crate::testkit::{
    config_for, events_until, is_turn_complete, script, session_config, subscribe, within,
};
use crate::tools::builtin::agent::SubAgentLimits;
use foya_protocol::{
    ApprovalMode, EventKind, Input, SessionId, ToolCallId, ToolMessage, TurnStatus,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_counters_are_forgotten_when_each_parent_turn_ends() {
    // The scripted model answers by the number of assistant messages so far: the
    // parent's turn i gets responses 2i (call the agent) and 2i+1 (answer); a child (a
    // fresh session) gets response 0 — an agent call, refused for children, which still
    // counts against the child's own turn — then response 1, "answer 0".
    let responses: Vec<_> = (0..3)
        .flat_map(|i| {
            [
                json!({"tool_calls": [{"id": format!("ag{i}"), "name": "agent",
                                       "arguments": {"task": format!("sub-task {i}")}}]}),
                json!({"text": format!("answer {i}")}),
            ]
        })
        .collect();
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut config = config_for(store, script(json!({ "responses": responses })));
    config.sub_agents = Some(SubAgentLimits::default());
    let rt = Runtime::start(config).await.unwrap();
    let agent = rt.sub_agent_tool().unwrap();
    let session = rt
        .create_session(session_config(ApprovalMode::ReadOnly))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    for i in 0..3 {
        session
            .submit(Input::text(format!("turn {i}")))
            .await
            .unwrap();
        let events = within(events_until(&mut sub, is_turn_complete))
            .await
            .unwrap();
        let results: Vec<ToolMessage> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::ToolMessage(m) => Some(m.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            vec![ToolMessage {
                tool_call_id: ToolCallId::new(format!("ag{i}")),
                content: "answer 0".into(),
                is_error: false,
                images: Vec::new(),
            }]
        );
        // Both the parent's and the child's turn ended: no counters are left.
        assert_eq!(agent.turns_with_counters(), 0, "after turn {i}");
    }
    drop((sub, session));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_turn_ends_the_child_turn_and_stops_the_child() {
    // The scripted model answers by the number of assistant messages so far: the parent
    // gets response 0 (call the agent); the child gets response 0 (an agent call, refused
    // for children), then response 1 (a call that waits until it is cancelled).
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "ag", "name": "agent", "arguments": {"task": "wait"}}]},
        {"tool_calls": [{"id": "w", "name": "wait", "arguments": {}}]},
    ]});
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut config = config_for(store, script(responses));
    config.sub_agents = Some(SubAgentLimits::default());
    let rt = Runtime::start(config).await.unwrap();
    let parent = rt
        .create_session(session_config(ApprovalMode::ReadOnly))
        .await
        .unwrap();
    let mut parent_sub = subscribe(&parent, false).await;
    parent.submit(Input::text("delegate")).await.unwrap();
    // The call names its child once the child runs; the child is reachable by id.
    let update = within(events_until(&mut parent_sub, |e| {
        matches!(e.kind, EventKind::ToolUpdate { .. })
    }))
    .await
    .unwrap();
    let Some(EventKind::ToolUpdate { message, .. }) = update.last().map(|e| e.kind.clone()) else {
        panic!("no tool_update");
    };
    let child_id: SessionId = message
        .strip_prefix("sub-agent session ")
        .unwrap()
        .parse()
        .unwrap();
    let child_actor = rt.session_actor_now(child_id).unwrap();
    let mut child_sub = subscribe(&rt.session(child_id).await.unwrap(), false).await;
    within(events_until(
        &mut child_sub,
        |e| matches!(&e.kind, EventKind::ToolStarted { name, .. } if name == "wait"),
    ))
    .await
    .unwrap();

    parent.cancel().await.unwrap();

    let parent_end = within(events_until(&mut parent_sub, is_turn_complete))
        .await
        .unwrap();
    assert!(matches!(
        parent_end.last().map(|e| &e.kind),
        Some(EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            ..
        })
    ));
    let child_end = within(events_until(&mut child_sub, is_turn_complete))
        .await
        .unwrap();
    let kinds: Vec<_> = child_end.iter().rev().take(2).map(|e| &e.kind).collect();
    assert_eq!(
        kinds,
        [
            &EventKind::TurnComplete {
                status: TurnStatus::Cancelled,
                reason: None,
                error: None,
            },
            &EventKind::TurnCancelled {
                reason: "user".into()
            },
        ]
    );
    // The child's SessionActor stops with the call that started it (its SubAgentActor
    // stops it once its turn ended): nothing of it is left running.
    within(child_actor.wait(None)).await.unwrap().unwrap();
    assert!(!rt.is_loaded(child_id));
    drop((parent_sub, child_sub, parent));
    rt.shutdown().await;
}

//! Sub-agents: a child over its token budget is stopped (the parent continues), and
//! cancelling the parent cancels the child and its processes.

use super::*;

/// Routes requests of child sessions (whose first message is the sub-task) to their own
/// script.
#[derive(Debug)]
pub(super) struct Router {
    pub(super) parent: Capture,
    pub(super) child: Capture,
}

impl foya_actors::provider::ModelClient for Router {
    fn stream(
        &self,
        request: foya_actors::provider::ModelRequest,
        cancel: tokio_util::sync::CancellationToken,
    ) -> futures::stream::BoxStream<'static, foya_protocol::StreamEvent> {
        let is_child = matches!(
            request.messages.first(),
            Some(Message::User(input)) if input == &Input::text("child task")
        );
        if is_child {
            self.child.stream(request, cancel)
        } else {
            self.parent.stream(request, cancel)
        }
    }
}

#[tokio::test]
async fn a_child_over_its_token_budget_is_stopped_and_the_parent_continues() {
    let tools = tools();
    let parent = Capture::new(json!({"responses":[
        {"tool_calls": [{"id": "ag", "name": "agent", "arguments": {"task": "child task"}}]},
        {"text": "parent done"}
    ]}));
    let parent_requests = Arc::clone(&parent.requests);
    let child = Capture::new(json!({"responses":[
        {"text": "working", "tool_calls": [{"id": "c1", "name": "probe", "arguments": {"i": 1}}],
         "usage": {"input_tokens": 700, "output_tokens": 400}},
        {"text": "never"}
    ]}));
    let st = store();
    let mut cfg = config(st.clone(), Capture::new(json!({"responses": []})), &tools);
    cfg.model = Arc::new(Router { parent, child });
    cfg.sub_agents = Some(foya_actors::tools::builtin::agent::SubAgentLimits {
        token_budget: 1000,
        ..Default::default()
    });
    let (rt, session) = start(cfg, ApprovalMode::ReadOnly).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("delegate")).await.unwrap();
    let events = until(&mut sub, is_complete).await;
    let result = results(&events).remove(0);
    assert_eq!(
        result,
        ToolMessage {
            tool_call_id: foya_protocol::ToolCallId::new("ag"),
            content: "the sub-agent exceeded its token budget of 1000 tokens (used 1100) and \
                      was stopped. Its last answer: working"
                .into(),
            is_error: true,
            images: Vec::new(),
        }
    );
    let EventKind::AssistantMessage(last) = &events[events.len() - 2].kind else {
        panic!("{:?}", types(&events))
    };
    assert_eq!(last.text, "parent done");
    assert_eq!(status(events.last().unwrap()), Some(TurnStatus::Completed));
    // The child: a read-only session recording its parent, its turn cancelled.
    let run_id = events.last().unwrap().run_id.unwrap();
    let child = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id != session.id())
        .unwrap();
    let log = st.read_from(child.id, Seq::FIRST).unwrap();
    let EventKind::SessionCreated { config } = &log[0].kind else {
        panic!()
    };
    assert_eq!(config.approval_mode, ApprovalMode::ReadOnly);
    assert_eq!(
        config.parent,
        Some(foya_protocol::command::ParentRef {
            session_id: session.id(),
            run_id,
            tool_call_id: foya_protocol::ToolCallId::new("ag"),
        })
    );
    let child_end = log
        .iter()
        .rev()
        .find(|e| is_complete(e))
        .map(|e| e.kind.clone());
    assert_eq!(
        child_end,
        Some(EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None
        })
    );
    assert_well_formed(&log);
    assert!(
        parent_requests.lock().unwrap()[0]
            .tools
            .iter()
            .any(|t| t.name == "agent")
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let tools = tools();
    let parent = Capture::new(json!({"responses":[
        {"tool_calls": [{"id": "ag", "name": "agent", "arguments": {"task": "child task"}}]}
    ]}));
    let child = Capture::new(json!({"responses":[
        {"tool_calls": [{"id": "z", "name": "sleeper", "arguments": {}}]}
    ]}));
    let st = store();
    let mut cfg = config(st.clone(), Capture::new(json!({"responses": []})), &tools);
    cfg.model = Arc::new(Router { parent, child });
    cfg.sub_agents = Some(foya_actors::tools::builtin::agent::SubAgentLimits::default());
    let (rt, session) = start(cfg, ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("delegate")).await.unwrap();
    let pid = tools.sleeper.wait_pids(1).await[0];
    session.cancel().await.unwrap();
    let events = until(&mut sub, is_complete).await;
    assert_eq!(cancelled_end(&events), expected_cancel("user"));
    wait_gone(pid).await;
    let child = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id != session.id())
        .unwrap();
    // The child's log from seq 1 until its turn completes (replayed, then live).
    let mut child_sub = subscribe(&rt.session(child.id).await.unwrap(), false).await;
    until(&mut child_sub, is_complete).await;
    let child_log = st.read_from(child.id, Seq::FIRST).unwrap();
    assert_eq!(cancelled_end(&child_log), expected_cancel("user"));
    assert_well_formed(&child_log);
    rt.shutdown().await;
}

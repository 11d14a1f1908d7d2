//! Run protection's repeated-failure rule: a tool that failed three times in a row with
//! the same error is no longer offered, and a model that keeps calling it ends the turn
//! `loop_detected` instead of collecting refusals until the turn completes.

use super::*;

fn breaker(i: u32) -> serde_json::Value {
    json!({"tool_calls": [{"id": format!("b{i}"), "name": "breaker", "arguments": {"i": i}}]})
}

#[tokio::test]
async fn a_withdrawn_tool_is_not_offered_and_calling_it_again_is_a_loop() {
    let tools = tools();
    let mut responses: Vec<_> = (1..=8).map(breaker).collect();
    responses.push(json!({"text": "gave up"}));
    let client = Capture::new(json!({ "responses": responses }));
    let requests = Arc::clone(&client.requests);
    let (rt, session) = start(config(store(), client, &tools), ApprovalMode::Bypass).await;
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = until(&mut sub, is_complete).await;
    assert_well_formed(&events);
    let results: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolMessage(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect();
    let refused = "not run: `breaker` failed 3 times in a row with the same error (boom); it \
                   is no longer offered in this turn. Try another approach.";
    let insisted = "the model kept calling `breaker`, which was withdrawn after failing 3 \
                    times in a row with the same error and is no longer offered";
    assert_eq!(
        results,
        vec![
            "boom".to_owned(),
            "boom".to_owned(),
            "boom".to_owned(),
            refused.to_owned(),
            format!("not run: {insisted}"),
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
    // What the model is told is true: from the request after the third failure on, the
    // tool is not in the request's tool list; the other tools still are.
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    let offers = |i: usize, name: &str| requests[i].tools.iter().any(|t| t.name == name);
    for i in 0..3 {
        assert!(offers(i, "breaker"), "request {i}");
    }
    for i in 3..5 {
        assert!(
            !offers(i, "breaker"),
            "request {i} still offers the withdrawn tool"
        );
        assert!(offers(i, "probe"), "request {i}");
    }
    rt.shutdown().await;
}

//! Lifecycle tests: idempotent submit, queue clearing, titles, `max_steps`, delete, and a
//! lagging subscriber.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::RuntimeError;
use crate::testkit::{
    events_until, is_turn_complete, runtime, script, session_config, subscribe, types, within,
};
use foya_protocol::event::Notice;
use foya_protocol::{
    ApprovalMode, ErrorClass, ErrorInfo, EventKind, Input, InputId, Seq, SessionUpdate,
    TitleSource, TurnStatus,
};
use serde_json::json;

#[tokio::test]
async fn a_resubmitted_input_id_is_applied_once_bad_inputs_are_refused_and_titles_are_recorded() {
    let rt = runtime(script(json!({"responses":[{"text":"one"},{"text":"two"}]}))).await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    let id = InputId::new();
    assert_eq!(session.submit_with_id(id, Input::text("hi")).await, Ok(id));
    assert_eq!(session.submit_with_id(id, Input::text("hi")).await, Ok(id));
    assert_eq!(
        session.submit(Input::text("  ")).await,
        Err(RuntimeError::EmptyInput)
    );
    // The scripted model takes no images: refused at submit, nothing written (the
    // title below still lands at seq 8), the session goes on.
    let with_image = Input {
        images: vec![foya_protocol::AttachmentRef {
            id: "01930000-0000-7000-8000-000000000001".into(),
            media_type: Some("image/png".into()),
        }],
        ..Input::text("what is this?")
    };
    assert_eq!(
        session.submit(with_image).await,
        Err(RuntimeError::ImagesNotSupported {
            model: session_config(ApprovalMode::Bypass).model
        })
    );
    within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    // A blank title writes nothing; a title is stored as one trimmed line.
    assert_eq!(
        session.set_title(" \n\t ".into()).await,
        Err(RuntimeError::EmptyTitle)
    );
    session.set_title("  My\n title ".into()).await.unwrap();
    let events = within(events_until(&mut sub, |e| {
        e.kind.type_name() == "title_set"
    }))
    .await
    .unwrap();
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TitleSet {
            title: "My title".into(),
            source: TitleSource::User
        }
    );
    assert_eq!(events.last().unwrap().seq, Seq(8));
    rt.shutdown().await;
}

#[tokio::test]
async fn max_steps_ends_the_turn_failed() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"echo","arguments":{}}]},
        {"text":"never"}
    ]})))
    .await;
    let mut config = session_config(ApprovalMode::Bypass);
    config.max_steps = Some(1);
    let session = rt.create_session(config).await.unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        types(&events)[3..],
        [
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "tool_started",
            "tool_finished",
            "tool_message",
            // The final no-tools step lets the model summarise.
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let EventKind::AssistantMessage(summary) = &events[events.len() - 2].kind else {
        panic!("no final answer")
    };
    assert_eq!(summary.text, "never");
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("max_steps".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::MaxSteps,
                message: "the turn reached its maximum of 1 step".into()
            }),
        }
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn clear_queue_drops_waiting_inputs_and_delete_cancels_and_closes() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"wait","arguments":{}}]}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    let queued = session.submit(Input::text("second")).await.unwrap();
    // Wait for both the running tool and the queued input (they may commit in any order).
    let (mut started, mut was_queued) = (false, false);
    within(events_until(&mut sub, |e| {
        started |= matches!(e.kind, EventKind::ToolStarted { .. });
        was_queued |= matches!(e.kind, EventKind::InputQueued { .. });
        started && was_queued
    }))
    .await
    .unwrap();
    session.clear_queue().await.unwrap();
    session.submit(Input::text("third")).await.unwrap();
    session.delete().await.unwrap();
    let mut tail = Vec::new();
    let closed = within(async {
        loop {
            match sub.recv().await.unwrap() {
                SessionUpdate::Event(e) => tail.push(e),
                SessionUpdate::Notice(n) => return n,
                SessionUpdate::Delta(_) => {}
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(
        closed,
        Notice::Closed {
            session_id: session.id(),
            reason: "session deleted".into()
        }
    );
    let kinds: Vec<&str> = types(&tail);
    assert_eq!(
        kinds,
        vec![
            "input_dropped",
            "input_queued",
            "tool_message",
            "turn_cancelled",
            "turn_complete",
            "input_dropped",
            "session_deleted"
        ]
    );
    assert_eq!(
        tail[0].kind,
        EventKind::InputDropped {
            input_id: queued,
            reason: "queue cleared".into()
        }
    );
    assert_eq!(sub.recv().await, None);
    assert_eq!(
        rt.session(session.id()).await.err(),
        Some(RuntimeError::SessionDeleted(session.id()))
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_is_cut_off_with_lagged() {
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut config = crate::testkit::config_for(
        store,
        script(
            json!({"responses":[{"text":"a long answer in many small pieces","chunk_chars":1}]}),
        ),
    );
    config.subscriber_buffer = 4;
    let rt = crate::Runtime::start(config).await.unwrap();
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut slow = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    // A client that keeps up: on `Lagged` it resubscribes from `last_seq + 1`.
    let mut from = Seq(1);
    within(async {
        loop {
            let mut sub = session
                .subscribe(from, crate::SubscribeOptions::default())
                .await
                .unwrap();
            loop {
                match sub.recv().await {
                    Some(SessionUpdate::Event(e)) if is_turn_complete(&e) => return,
                    Some(SessionUpdate::Notice(Notice::Lagged { last_seq, .. })) => {
                        from = last_seq.next();
                        break;
                    }
                    Some(_) => {}
                    None => panic!("ended without lagged"),
                }
            }
        }
    })
    .await
    .unwrap();
    // `slow` never read: it got the replay, 4 live updates (user_message, turn_started,
    // step_started, context_diagnostics), then was cut off.
    let mut updates = Vec::new();
    while let Some(update) = slow.recv().await {
        updates.push(update);
    }
    assert_eq!(updates.len(), 6, "{updates:?}");
    assert_eq!(
        updates.last(),
        Some(&SessionUpdate::Notice(Notice::Lagged {
            session_id: session.id(),
            last_seq: Seq(5)
        }))
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_crashed_session_is_restarted_from_the_log_by_the_supervisor() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"wait","arguments":{}}]},
        {"text":"back"}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    let before = within(events_until(&mut sub, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    }))
    .await
    .unwrap();
    session.crash_session_for_test().await;
    // The old subscription ends with Lagged; resubscribing reaches the restarted session.
    let lagged = within(async {
        loop {
            if let Some(SessionUpdate::Notice(n)) = sub.recv().await {
                return n;
            }
        }
    })
    .await
    .unwrap();
    let last_seq = before.last().unwrap().seq;
    assert_eq!(
        lagged,
        Notice::Lagged {
            session_id: session.id(),
            last_seq
        }
    );
    let mut sub = session
        .subscribe(last_seq.next(), crate::SubscribeOptions::default())
        .await
        .unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(types(&events), vec!["tool_message", "turn_complete"]);
    let EventKind::TurnComplete { status, reason, .. } = &events[1].kind else {
        panic!()
    };
    assert_eq!(
        (*status, reason.as_deref()),
        (TurnStatus::Failed, Some("interrupted by restart"))
    );
    session.submit(Input::text("again")).await.unwrap();
    let events = within(events_until(&mut sub, is_turn_complete))
        .await
        .unwrap();
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_outlives_its_timeout_gets_an_error_result() {
    let rt = runtime(script(json!({"responses":[
        {"tool_calls":[{"id":"c1","name":"wait","arguments":{}}]},
        {"text":"moved on"}
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
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    let finished = kinds
        .iter()
        .position(|k| matches!(k, EventKind::ToolFinished { .. }))
        .unwrap();
    let EventKind::ToolFinished {
        is_error,
        duration_ms,
        ..
    } = kinds[finished]
    else {
        panic!()
    };
    assert_eq!((*is_error, *duration_ms), (true, 3_602_000));
    assert_eq!(
        *kinds[finished + 1],
        EventKind::ToolMessage(foya_protocol::ToolMessage {
            tool_call_id: foya_protocol::ToolCallId::new("c1"),
            content: "timed out after 3602000 ms".into(),
            is_error: true,
            images: Vec::new(),
        })
    );
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    rt.shutdown().await;
}

/// A model whose stream breaks off after one fragment, with neither `Done` nor `Error`.
#[derive(Debug)]
struct BrokenStream;

impl crate::provider::ModelClient for BrokenStream {
    fn stream(
        &self,
        _request: crate::provider::ModelRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> futures::stream::BoxStream<'static, foya_protocol::StreamEvent> {
        Box::pin(futures::stream::iter(vec![
            foya_protocol::StreamEvent::TextDelta { text: "par".into() },
        ]))
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_breaks_off_is_retried_then_fails_as_stream_interrupted() {
    let rt = crate::testkit::runtime_with_model(std::sync::Arc::new(BrokenStream)).await;
    let events = crate::testkit::one_turn(&rt, "go").await;
    assert_eq!(
        types(&events)[3..],
        [
            "step_started",
            "context_diagnostics",
            "provider_retry",
            "provider_retry",
            "provider_retry",
            "turn_complete"
        ]
    );
    let attempts: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ProviderRetry { attempt, error, .. } => {
                assert_eq!(error.class, ErrorClass::StreamInterrupted);
                Some(*attempt)
            }
            _ => None,
        })
        .collect();
    assert_eq!(attempts, vec![2, 3, 4]);
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("stream_interrupted".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::StreamInterrupted,
                message: "the stream ended before the response finished".into()
            }),
        }
    );
    rt.shutdown().await;
}

/// Waits (paused time) until `id` is loaded again (by the Supervisor: nothing else asks).
async fn until_loaded(rt: &crate::Runtime, id: foya_protocol::SessionId) {
    within(async {
        while !rt.loaded_session_ids().contains(&id) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
}

/// Crashes the live session actor and waits until it is gone (its subscriber cut off).
async fn crash(session: &crate::SessionHandle) {
    let mut sub = subscribe(session, false).await;
    session.crash_session_for_test().await;
    within(async {
        while let Some(update) = sub.recv().await {
            if matches!(update, SessionUpdate::Notice(_)) {
                return;
            }
        }
    })
    .await
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_session_failing_now_and_then_is_restarted_each_time_and_one_failing_in_a_row_slowly_then_not()
 {
    let rt = runtime(script(json!({"responses":[{"text":"a"}]}))).await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let id = session.id();
    // Failures ten minutes apart (a long-lived node's occasional store outages): each
    // is restarted from the log, past the three a row allows.
    for _ in 0..5 {
        tokio::time::advance(std::time::Duration::from_secs(601)).await;
        crash(&session).await;
        until_loaded(&rt, id).await;
    }
    // Failures in a row: three restarts at once, then ten more, each 30 s later (a
    // store that reads but does not yet write may be back by then), then it is left
    // stopped.
    tokio::time::advance(std::time::Duration::from_secs(601)).await;
    for _ in 0..3 {
        crash(&session).await;
        until_loaded(&rt, id).await;
    }
    for _ in 0..10 {
        crash(&session).await;
        tokio::time::sleep(std::time::Duration::from_secs(25)).await;
        assert!(
            !rt.loaded_session_ids().contains(&id),
            "restarted at once past three failures in a row"
        );
        until_loaded(&rt, id).await;
    }
    crash(&session).await;
    tokio::time::sleep(std::time::Duration::from_secs(300)).await;
    assert!(
        !rt.loaded_session_ids().contains(&id),
        "restarted a fourteenth time in a row"
    );
    rt.shutdown().await;
}

//! Live relay tests: deltas published by the stream task directly to the session agree
//! with what is persisted (cancel mid-stream, every delta before the step's message), and
//! a stream task that panics fails its request instead of leaving the turn waiting.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::testkit::{
    is_turn_complete, one_turn, runtime, runtime_with_model, script, session_config, subscribe,
    within,
};
use foya_protocol::event::Delta;
use foya_protocol::{
    ApprovalMode, ErrorClass, ErrorInfo, EventKind, Input, SessionUpdate, TurnStatus,
};
use serde_json::json;

/// Receives every update until the turn's `turn_complete`.
async fn updates_until_complete(sub: &mut crate::Subscription) -> Vec<SessionUpdate> {
    let mut seen = Vec::new();
    loop {
        let update = sub.recv().await.expect("the subscription ended");
        let done = matches!(&update, SessionUpdate::Event(e) if is_turn_complete(e));
        seen.push(update);
        if done {
            return seen;
        }
    }
}

fn text_deltas(updates: &[SessionUpdate]) -> String {
    updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::Delta(live) => match &live.delta {
                Delta::TextDelta { text } => Some(text.as_str()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_step_persists_exactly_the_text_its_subscribers_were_shown() {
    let rt = runtime(script(json!({"responses":[
        {"text":"this answer is cut off somewhere","chunk_chars":2,"delay_ms":1000}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let mut before = Vec::new();
    within(async {
        while text_deltas(&before).len() < 6 {
            before.push(sub.recv().await.unwrap());
        }
    })
    .await
    .unwrap();
    session.cancel().await.unwrap();
    let after = within(updates_until_complete(&mut sub)).await.unwrap();
    let shown = text_deltas(&before) + &text_deltas(&after);
    let partial = after
        .iter()
        .find_map(|u| match u {
            SessionUpdate::Event(e) => match &e.kind {
                EventKind::AssistantMessage(m) => Some(m.clone()),
                _ => None,
            },
            _ => None,
        })
        .expect("the partial message is persisted");
    assert!(partial.interrupted);
    assert_eq!(partial.text, shown, "persisted text = the deltas shown");
    assert!("this answer is cut off somewhere".starts_with(&shown) && shown.len() >= 6);
    // Nothing of the cancelled stream is published after its message.
    let at = after
        .iter()
        .position(|u| matches!(u, SessionUpdate::Event(e) if matches!(e.kind, EventKind::AssistantMessage(_))))
        .unwrap();
    assert!(
        !after[at..]
            .iter()
            .any(|u| matches!(u, SessionUpdate::Delta(_))),
        "{:?}",
        &after[at..]
    );
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn every_delta_of_a_step_reaches_subscribers_before_the_step_message() {
    let rt = runtime(script(json!({"responses":[
        {"text":"one two three four","chunk_chars":3}
    ]})))
    .await;
    let session = rt
        .create_session(session_config(ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let updates = within(updates_until_complete(&mut sub)).await.unwrap();
    let message_at = updates
        .iter()
        .position(|u| matches!(u, SessionUpdate::Event(e) if matches!(e.kind, EventKind::AssistantMessage(_))))
        .unwrap();
    assert_eq!(text_deltas(&updates[..message_at]), "one two three four");
    assert_eq!(text_deltas(&updates[message_at..]), "");
    rt.shutdown().await;
}

/// A model whose stream task panics on its first poll (a decoder bug).
#[derive(Debug)]
struct PanickingStream;

impl crate::provider::ModelClient for PanickingStream {
    fn stream(
        &self,
        _request: crate::provider::ModelRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> futures::stream::BoxStream<'static, foya_protocol::StreamEvent> {
        Box::pin(futures::stream::poll_fn(
            |_| -> std::task::Poll<Option<foya_protocol::StreamEvent>> { panic!("decoder bug") },
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_task_that_panics_fails_its_request_as_stream_interrupted() {
    let rt = runtime_with_model(std::sync::Arc::new(PanickingStream)).await;
    let events = one_turn(&rt, "go").await;
    let retries = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::ProviderRetry { error, .. } if error.class == ErrorClass::StreamInterrupted))
        .count();
    assert_eq!(retries, 3, "retried like a cut stream");
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("stream_interrupted".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::StreamInterrupted,
                message: "the model stream task panicked: decoder bug".into()
            }),
        }
    );
    rt.shutdown().await;
}

//! The bounds of compaction: a summarisation request that overflows is retried with a
//! smaller input a bounded number of times, `/compact` on a history too short to shrink
//! is a no-op with a note, and a compaction can be cancelled.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{
    ErrorClass, ErrorInfo, EventKind, FinishReason, Input, ProviderError, StreamEvent, TurnStatus,
};
use futures::stream::BoxStream;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// An auxiliary client: the first `overflows` requests fail with `context_overflow`,
/// later ones answer "short summary"; `hang` makes every request wait for cancellation.
#[derive(Debug, Default)]
struct Summariser {
    overflows: usize,
    hang: bool,
    requests: Mutex<Vec<ModelRequest>>,
}

impl ModelClient for Summariser {
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let mut requests = self.requests.lock().unwrap();
        requests.push(request);
        if self.hang {
            return Box::pin(futures::stream::once(async move {
                cancel.cancelled().await;
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                }
            }));
        }
        let events = if requests.len() <= self.overflows {
            vec![StreamEvent::Error {
                error: ProviderError::new(ErrorClass::ContextOverflow, "summary input too long"),
            }]
        } else {
            vec![
                StreamEvent::TextDelta {
                    text: "short summary".into(),
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                },
            ]
        };
        Box::pin(futures::stream::iter(events))
    }
}

/// A runtime whose session has three long turns behind it; returns what `/compact` wrote.
async fn compact_after_history(aux: Arc<Summariser>, words: usize) -> Vec<foya_protocol::Event> {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.aux_model = Some(aux);
    let model = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 128_000,
        answer: |n| format!("answer {n}"),
    });
    let rt = runtime(model, opts).await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    for i in 0..3 {
        let text = format!("{i} {}", filler("lorem", words));
        session.submit(Input::text(text)).await.unwrap();
        events_until(&mut sub, is_turn_complete).await;
    }
    session.submit(Input::command("compact", "")).await.unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    rt.shutdown().await;
    events
}

#[tokio::test]
async fn an_overflowing_summary_request_is_shrunk_and_retried() {
    let aux = Arc::new(Summariser {
        overflows: 2,
        ..Summariser::default()
    });
    let events = compact_after_history(Arc::clone(&aux), 15_000).await;
    assert_eq!(
        types(&events),
        vec![
            "user_message",
            "turn_started",
            "compaction_started",
            "compaction_checkpoint",
            "turn_complete"
        ]
    );
    let requests = aux.requests.lock().unwrap();
    let sizes: Vec<usize> = requests.iter().map(|r| r.messages.len()).collect();
    let chars: Vec<usize> = requests
        .iter()
        .map(|r| serde_json::to_string(&r.messages).unwrap().len())
        .collect();
    // 3 turns (user + answer) + the instruction every time: with half and a quarter of
    // the budget, each long message is cut shorter, none is dropped.
    assert_eq!(sizes, vec![7, 7, 7]);
    assert!(chars[0] > chars[1] && chars[1] > chars[2], "{chars:?}");
}

#[tokio::test]
async fn a_summary_request_that_keeps_overflowing_fails_the_compaction() {
    let aux = Arc::new(Summariser {
        overflows: 10,
        ..Summariser::default()
    });
    let events = compact_after_history(Arc::clone(&aux), 200).await;
    assert_eq!(aux.requests.lock().unwrap().len(), 3);
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("compaction_failed".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::ContextOverflow,
                message: "the compaction request failed: summary input too long".into()
            })
        }
    );
}

#[tokio::test]
async fn compact_on_a_short_history_is_a_no_op_with_a_note() {
    let aux = Arc::new(Summariser::default());
    // Three short turns: the fixed prompt dominates, a summary cannot save 10 %.
    let events = compact_after_history(Arc::clone(&aux), 2).await;
    assert_eq!(
        types(&events),
        vec!["user_message", "turn_started", "turn_complete"]
    );
    let EventKind::TurnComplete {
        status,
        reason,
        error,
    } = &events[2].kind
    else {
        panic!()
    };
    assert_eq!(*status, TurnStatus::Completed);
    assert_eq!(*error, None);
    let reason = reason.as_deref().unwrap();
    assert!(
        reason.starts_with("nothing to compact: the history (")
            && reason.ends_with("is too short for a summary to shrink the context"),
        "{reason}"
    );
    // No summary request was spent on it.
    assert_eq!(aux.requests.lock().unwrap().len(), 0);
}

#[tokio::test]
async fn a_compaction_can_be_cancelled_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.aux_model = Some(Arc::new(Summariser {
        hang: true,
        ..Summariser::default()
    }));
    let model = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 128_000,
        answer: |n| format!("answer {n}"),
    });
    let rt = runtime(model, opts).await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    session
        .submit(Input::text(filler("lorem", 500)))
        .await
        .unwrap();
    events_until(&mut sub, is_turn_complete).await;
    session.submit(Input::command("compact", "")).await.unwrap();
    events_until(&mut sub, |e| e.kind.type_name() == "compaction_started").await;
    session
        .submit(Input::text("queued meanwhile"))
        .await
        .unwrap();
    session.cancel().await.unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(
        types(&events),
        vec!["input_queued", "turn_cancelled", "turn_complete"]
    );
    assert_eq!(
        events[2].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None
        }
    );
    // The queued input runs next, on the history without a checkpoint.
    let events = events_until(&mut sub, is_turn_complete).await;
    let EventKind::AssistantMessage(m) = &events[4].kind else {
        panic!("{:?}", types(&events))
    };
    assert_eq!(m.text, "answer 2");
    rt.shutdown().await;
}

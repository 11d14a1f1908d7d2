//! A threshold compaction is an optimisation, never a reason to fail: when the summary
//! saves too little, the step's request is sent as it is and the provider judges.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{EventKind, FinishReason, Input, StreamEvent, TurnStatus};
use futures::stream::BoxStream;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// An auxiliary client whose summaries are as long as what they summarise.
#[derive(Debug, Default)]
struct Verbose {
    requests: Mutex<Vec<ModelRequest>>,
}

impl ModelClient for Verbose {
    fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        self.requests.lock().unwrap().push(request);
        Box::pin(futures::stream::iter(vec![
            StreamEvent::TextDelta {
                text: filler("summary", 3_000),
            },
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Stop),
            },
        ]))
    }
}

#[tokio::test]
async fn a_threshold_compaction_that_saves_too_little_sends_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let client = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 128_000,
        answer: |n| format!("answer {n}"),
    });
    let aux = Arc::new(Verbose::default());
    let mut opts = options(dir.path());
    opts.compact_threshold_pct = 1;
    opts.aux_model = Some(aux.clone());
    let rt = runtime(client.clone(), opts).await;
    let events = one_turn(&rt, dir.path(), Input::text(filler("lorem", 2_000))).await;
    assert_eq!(
        types(&events)[3..],
        [
            "step_started",
            "context_diagnostics",
            "compaction_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    assert_eq!(aux.requests.lock().unwrap().len(), 1);
    assert_eq!(client.requests.lock().unwrap().len(), 1);
    rt.shutdown().await;
}

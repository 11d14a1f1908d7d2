//! After the provider refuses a request as too large (413), the compaction does not keep
//! image bytes: the kept user message names each image instead, and the re-run step (and
//! every later request) carries no image, so the session does not refuse every turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use foya_actors::attachments::AttachmentStore;
use foya_actors::context::{COMPACTION_SYSTEM_PROMPT, IMAGE_LEFT_OUT};
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{
    AttachmentRef, ErrorClass, EventKind, FinishReason, Input, Message, ProviderError, StreamEvent,
    TurnStatus,
};
use futures::stream::BoxStream;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A 1×1 grey PNG.
const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x04\0\0\0\xb5\x1c\x0c\x02\0\0\0\x0bIDATx\xdacd`\0\0\0\x06\0\x020\x81\xd0/\0\0\0\0IEND\xaeB`\x82";

/// A vision model whose first step request is refused with a 413; summaries and later
/// requests are answered.
#[derive(Debug, Default)]
struct Refusing {
    requests: Mutex<Vec<ModelRequest>>,
}

impl ModelClient for Refusing {
    fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let mut requests = self.requests.lock().unwrap();
        let first = requests.is_empty();
        let summary = request.system == COMPACTION_SYSTEM_PROMPT;
        requests.push(request);
        let events = if first {
            let mut error = ProviderError::new(ErrorClass::ContextOverflow, "HTTP 413");
            error.status = Some(413);
            vec![StreamEvent::Error { error }]
        } else {
            let text = if summary { "the summary" } else { "done" };
            vec![
                StreamEvent::TextDelta { text: text.into() },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                },
            ]
        };
        Box::pin(futures::stream::iter(events))
    }

    fn supports_images(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn after_a_413_image_bytes_are_left_out_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let attachments = Arc::new(AttachmentStore::new(dir.path().join("attachments")));
    let id = attachments.put(PNG_1X1, "image/png").unwrap();
    let model = Arc::new(Refusing::default());
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut cfg = config(store, model.clone(), options(dir.path()));
    cfg.attachments = Some(attachments);
    let rt = foya_actors::Runtime::start(cfg).await.unwrap();
    let input = Input {
        text: filler("lorem", 2_000),
        images: vec![AttachmentRef {
            id: id.clone(),
            media_type: Some("image/png".into()),
        }],
        ..Input::default()
    };
    let events = one_turn(&rt, dir.path(), input).await;
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    let images = |r: &ModelRequest| {
        r.messages
            .iter()
            .map(|m| match m {
                Message::User(u) => u.images.len(),
                _ => 0,
            })
            .sum::<usize>()
    };
    // The refused request had the image; the summary and the re-run step have none.
    assert_eq!(images(&requests[0]), 1);
    assert_eq!(images(&requests[1]), 0);
    assert_eq!(images(&requests[2]), 0);
    // What the checkpoint keeps names the image instead.
    let note = format!("[{IMAGE_LEFT_OUT} {id} (image/png)]");
    let kept = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::CompactionCheckpoint { kept, .. } => Some(kept.clone()),
            _ => None,
        })
        .unwrap();
    let named = |m: &Message| matches!(m, Message::User(u) if u.images.is_empty() && u.text.contains(&note));
    let summary_named = requests[1].messages.iter().any(named);
    assert!(summary_named, "{:?}", requests[1].messages);
    // Nothing the checkpoint keeps carries image bytes.
    let with_images = |m: &Message| matches!(m, Message::User(u) if !u.images.is_empty());
    assert!(!kept.iter().any(with_images), "{kept:?}");
    rt.shutdown().await;
}

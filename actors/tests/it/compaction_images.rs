//! After the provider refuses a request as too large (413), the compaction does not keep
//! image bytes — of a user input or of a tool result: the kept message names each image
//! instead, and the re-run step (and every later request) carries no image, so the
//! session does not refuse every turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use foya_actors::AttachmentStore;
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

/// A tool that answers with an image.
#[derive(Debug)]
struct Screenshot(foya_actors::tools::ToolSpec);

#[async_trait::async_trait]
impl foya_actors::tools::Tool for Screenshot {
    fn spec(&self) -> &foya_actors::tools::ToolSpec {
        &self.0
    }

    async fn call(
        &self,
        _ctx: &foya_actors::tools::ToolContext,
        _args: serde_json::Value,
        _cancel: CancellationToken,
        _progress: &dyn foya_actors::tools::ProgressSink,
    ) -> foya_actors::tools::ToolOutput {
        foya_actors::tools::ToolOutput {
            images: vec![foya_actors::tools::ToolImage {
                media_type: "image/png".into(),
                bytes: PNG_1X1.to_vec(),
            }],
            ..foya_actors::tools::ToolOutput::ok("[image: image/png, 68 bytes]")
        }
    }
}

/// A vision model that calls `screenshot`, is refused with a 413 once the result's image
/// is in the request, then answers summaries and later requests.
#[derive(Debug, Default)]
struct LooksThenRefuses {
    requests: Mutex<Vec<ModelRequest>>,
}

impl ModelClient for LooksThenRefuses {
    fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let mut requests = self.requests.lock().unwrap();
        let summary = request.system == COMPACTION_SYSTEM_PROMPT;
        requests.push(request);
        let events = match requests.len() {
            1 => vec![
                StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some(foya_protocol::ToolCallId::new("c1")),
                    name: Some("screenshot".into()),
                    arguments: "{}".into(),
                    extra: None,
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::ToolCalls),
                },
            ],
            2 => {
                let mut error = ProviderError::new(ErrorClass::ContextOverflow, "HTTP 413");
                error.status = Some(413);
                vec![StreamEvent::Error { error }]
            }
            _ => vec![
                StreamEvent::TextDelta {
                    text: if summary { "the summary" } else { "done" }.into(),
                },
                StreamEvent::Done {
                    finish_reason: Some(FinishReason::Stop),
                },
            ],
        };
        Box::pin(futures::stream::iter(events))
    }

    fn supports_images(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn after_a_413_a_tool_results_image_bytes_are_left_out_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let attachments = Arc::new(AttachmentStore::new(dir.path().join("attachments")));
    let model = Arc::new(LooksThenRefuses::default());
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut cfg = config(store, model.clone(), options(dir.path()));
    let mut tools = foya_actors::tools::ToolRegistry::new();
    tools
        .register(Arc::new(Screenshot(foya_actors::tools::ToolSpec {
            name: "screenshot".into(),
            description: "takes a screenshot".into(),
            parameters: serde_json::json!({"type": "object"}),
            parallel_safe: false,
            side_effect: foya_actors::tools::SideEffect::None,
            cancellable: true,
            default_timeout_ms: 60_000,
        })))
        .unwrap();
    cfg.tools = Arc::new(tools);
    cfg.attachments = Some(Arc::clone(&attachments));
    let rt = foya_actors::Runtime::start(cfg).await.unwrap();
    let events = one_turn(&rt, dir.path(), Input::text(filler("lorem", 2_000))).await;
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            ..
        }
    ));
    // The result references the image, kept in the attachment store.
    let result = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolMessage(m) => Some(m.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(result.images.len(), 1);
    let id = result.images[0].id.clone();
    assert_eq!(attachments.get(&id).unwrap().unwrap().bytes, PNG_1X1);

    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    let images = |r: &ModelRequest| {
        let referenced: usize = r
            .messages
            .iter()
            .map(|m| match m {
                Message::Tool(t) => t.images.len(),
                _ => 0,
            })
            .sum();
        (referenced, r.images.len())
    };
    // The refused request carried the image; the summary and the re-run step do not.
    assert_eq!(images(&requests[1]), (1, 1));
    assert_eq!(images(&requests[2]), (0, 0));
    assert_eq!(images(&requests[3]), (0, 0));
    // The summary request names the image in the result's place.
    let note = format!("[{IMAGE_LEFT_OUT} {id} (image/png)]");
    let named = |m: &Message| matches!(m, Message::Tool(t) if t.content.contains(&note));
    assert!(
        requests[2].messages.iter().any(named),
        "{:?}",
        requests[2].messages
    );
    // Nothing the checkpoint keeps carries image bytes.
    let kept = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::CompactionCheckpoint { kept, .. } => Some(kept.clone()),
            _ => None,
        })
        .unwrap();
    let with_images = |m: &Message| matches!(m, Message::Tool(t) if !t.images.is_empty());
    assert!(!kept.iter().any(with_images), "{kept:?}");
    rt.shutdown().await;
}

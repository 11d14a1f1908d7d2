//! The turn loop against a real HTTP provider (an in-process axum server speaking the
//! OpenAI Chat wire format): a 413 "Request Entity Too Large" (an HTML page from a
//! proxy) is an overflow, so the turn compacts once and re-runs the step instead of
//! failing `invalid_request`; a 429 relayed by a gateway waits what the gateway's form of
//! the hint says (LiteLLM's `llm_provider-retry-after`, OpenRouter's reset in the body,
//! Cloudflare's `RateLimit` header).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::http_support;

use axum::body::Bytes;
use common::*;
use foya_actors::provider::wire::ProviderKind;
use foya_protocol::{EventKind, Input, TurnStatus};
use http_support::{Reply, client, fixture, server, sse};
use std::sync::Arc;

fn completed(events: &[foya_protocol::Event]) -> bool {
    events.last().unwrap().kind
        == EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None,
        }
}

#[tokio::test]
async fn a_413_compacts_once_and_the_step_reruns() {
    let html = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body><center><h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></body></html>\r\n";
    let too_large = Reply {
        status: 413,
        headers: vec![("content-type", "text/html")],
        chunks: vec![Bytes::from_static(html.as_bytes())],
        ..Reply::default()
    };
    let answer = || sse(fixture("openai-chat/basic_text.sse"));
    // The step, the summary request, the re-run step.
    let (url, recorded) = server(vec![too_large, answer(), answer()]).await;
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(client(ProviderKind::OpenaiChat, &format!("{url}/v1")));
    let rt = runtime(model, options(dir.path())).await;
    let events = one_turn(&rt, dir.path(), Input::text(filler("lorem", 2_000))).await;
    assert_eq!(
        types(&events)[3..],
        [
            "step_started",
            "context_diagnostics",
            "compaction_started",
            "compaction_checkpoint",
            "context_diagnostics",
            "assistant_message",
            "usage",
            "turn_complete"
        ]
    );
    let EventKind::CompactionStarted { trigger, .. } = &events[5].kind else {
        panic!("{:?}", events[5])
    };
    assert_eq!(trigger, "overflow");
    assert!(completed(&events), "{:?}", events.last());
    assert_eq!(recorded.lock().unwrap().len(), 3);
    rt.shutdown().await;
}

#[tokio::test]
async fn with_automatic_compaction_off_a_413_fails_the_turn_as_an_overflow() {
    let too_large = Reply {
        status: 413,
        headers: vec![("content-type", "application/json")],
        chunks: vec![Bytes::from_static(
            br#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
        )],
        ..Reply::default()
    };
    let (url, recorded) = server(vec![too_large]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.auto_compact = false;
    let model = Arc::new(client(ProviderKind::OpenaiChat, &format!("{url}/v1")));
    let rt = runtime(model, opts).await;
    let events = one_turn(&rt, dir.path(), Input::text("hi")).await;
    let EventKind::TurnComplete {
        status,
        reason,
        error,
    } = &events.last().unwrap().kind
    else {
        panic!()
    };
    assert_eq!(*status, TurnStatus::Failed);
    assert_eq!(reason.as_deref(), Some("context_overflow"));
    let error = error.as_ref().unwrap();
    assert_eq!(error.class.as_str(), "context_overflow");
    assert!(
        error
            .message
            .ends_with("(automatic compaction is off; send /compact or start a new session)"),
        "{error:?}"
    );
    assert_eq!(recorded.lock().unwrap().len(), 1);
    rt.shutdown().await;
}

#[tokio::test]
async fn a_gateway_429_waits_what_the_gateway_says() {
    let limited = |headers: Vec<(&'static str, &'static str)>, body: String| Reply {
        status: 429,
        headers,
        chunks: vec![Bytes::from(body)],
        ..Reply::default()
    };
    let reset_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 1_300;
    let replies = vec![
        // OpenRouter: the reset (Unix ms) inside the error body.
        limited(
            vec![],
            format!(
                r#"{{"error":{{"code":429,"message":"Rate limit exceeded: free-models-per-min.","metadata":{{"headers":{{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"{reset_ms}"}}}}}}}}"#
            ),
        ),
        // LiteLLM in front of Azure: only the prefixed copy of the upstream's header.
        limited(
            vec![("llm_provider-retry-after", "1")],
            r#"{"error":{"message":"litellm.RateLimitError: AzureException RateLimitError - Requests have exceeded the call rate limit","type":"throttling_error","param":null,"code":"429"}}"#.into(),
        ),
        // Cloudflare: the IETF RateLimit header.
        limited(
            vec![("ratelimit", "\"default\";r=0;t=1")],
            r#"{"success":false,"errors":[{"code":2003,"message":"Rate limited"}]}"#.into(),
        ),
        sse(fixture("openai-chat/basic_text.sse")),
    ];
    let (url, _recorded) = server(replies).await;
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(client(ProviderKind::OpenaiChat, &format!("{url}/v1")));
    let rt = runtime(model, options(dir.path())).await;
    let events = one_turn(&rt, dir.path(), Input::text("hi")).await;
    let delays: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ProviderRetry { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert_eq!(delays.len(), 3, "{:?}", types(&events));
    assert!((1_000..=1_300).contains(&delays[0]), "{delays:?}");
    assert_eq!(delays[1], 1_000);
    assert_eq!(delays[2], 1_000);
    assert!(completed(&events), "{:?}", events.last());
    rt.shutdown().await;
}

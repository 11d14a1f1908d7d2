//! Data-driven tests over `actors/tests/fixtures/providers`: every `.sse` stream goes through
//! the real SSE framing + decoder + `StreamAggregate` (whole, byte by byte, and split at
//! seeded random points) and must give its `.expected.json` aggregate; every error
//! fixture must classify as its `expected`. New fixtures are picked up automatically.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use foya_actors::provider::classify::{classify_http_error_at, parse_rfc3339};
use foya_actors::provider::wire::{ProviderKind, SseLimits, TransportError, decode_sse};
use foya_protocol::{StreamAggregate, StreamEvent};
use futures::StreamExt;
use rand::{Rng, SeedableRng};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers")
}

fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    assert!(
        !out.is_empty(),
        "no *{suffix} fixtures in {}",
        dir.display()
    );
    out
}

async fn decode(kind: ProviderKind, chunks: Vec<Vec<u8>>) -> Vec<StreamEvent> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, TransportError>(Bytes::from(c))),
    );
    decode_sse(bytes, kind.decoder(), SseLimits::default())
        .collect()
        .await
}

/// The aggregate in the fixture's expected shape.
fn summarize(events: &[StreamEvent]) -> Value {
    let finals = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Done { .. } | StreamEvent::Error { .. }))
        .count();
    assert_eq!(finals, 1, "exactly one final event: {events:?}");
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Done { .. } | StreamEvent::Error { .. })
    ));
    let mut agg = StreamAggregate::new();
    for e in events {
        agg.apply(e);
    }
    let msg = agg.to_message();
    json!({
        "text": msg.text,
        "reasoning": msg.reasoning,
        "tool_calls": msg.tool_calls.iter()
            .map(|c| json!({"id": c.id.as_str(), "name": c.name, "arguments": c.arguments}))
            .collect::<Vec<_>>(),
        "finish_reason": msg.finish_reason,
        "usage": agg.usage.map(|u| json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens})),
        "error": agg.error.map(|e| {
            let mut v = json!({"class": e.class.as_str()});
            if let Some(ms) = e.retry_after_ms { v["retry_after_ms"] = json!(ms); }
            v
        }),
    })
}

fn expected(path: &Path) -> Value {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("note");
    v
}

#[tokio::test]
async fn every_stream_fixture_decodes_to_its_aggregate_under_any_chunking() {
    let mut n = 0;
    for kind in ProviderKind::ALL {
        for sse in files(&fixtures().join(kind.as_str()), ".sse") {
            let body = std::fs::read(&sse).unwrap();
            let want = expected(&PathBuf::from(
                sse.to_string_lossy().replace(".sse", ".expected.json"),
            ));
            let name = sse.file_name().unwrap().to_string_lossy().into_owned();

            let whole = summarize(&decode(kind, vec![body.clone()]).await);
            assert_eq!(whole, want, "{kind}/{name} whole");

            let bytewise = summarize(&decode(kind, body.iter().map(|b| vec![*b]).collect()).await);
            assert_eq!(bytewise, want, "{kind}/{name} one byte at a time");

            let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
            for round in 0..20 {
                let mut chunks = Vec::new();
                let mut rest = body.as_slice();
                while !rest.is_empty() {
                    let take = rng.random_range(1..=rest.len().min(97));
                    chunks.push(rest[..take].to_vec());
                    rest = &rest[take..];
                }
                let split = summarize(&decode(kind, chunks).await);
                assert_eq!(split, want, "{kind}/{name} random split round {round}");
            }
            n += 1;
        }
    }
    assert!(n > 0);
}

#[test]
fn every_error_fixture_classifies_as_expected() {
    let now = parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    for path in files(&fixtures().join("errors"), ".json") {
        let f: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let mut headers = HeaderMap::new();
        for (k, v) in f["headers"].as_object().unwrap() {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v.as_str().unwrap()).unwrap(),
            );
        }
        let status = u16::try_from(f["status"].as_u64().unwrap()).unwrap();
        let err = classify_http_error_at(status, &headers, f["body"].as_str().unwrap(), now);
        let mut got = json!({"class": err.class.as_str()});
        if let (Some(ms), Some(_)) = (err.retry_after_ms, f["expected"].get("retry_after_ms")) {
            got["retry_after_ms"] = json!(ms);
        }
        assert_eq!(got, f["expected"], "{}", path.display());
        assert_eq!(err.status, Some(status));
    }
}

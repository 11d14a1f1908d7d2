//! Classifier cases beyond the shared error fixtures: every retry-after source, quota
//! and overflow under unusual statuses, in-stream errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::json;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn retry_after_from_every_source() {
    let now = parse_rfc3339("2026-11-29T21:00:00Z").unwrap();
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Option<u64>);
    let cases: [Case<'_>; 8] = [
        (&[("retry-after-ms", "250")], "", Some(250)),
        (&[("retry-after", "3")], "", Some(3_000)),
        (
            &[("retry-after", "Sun, 29 Nov 2026 21:00:07 GMT")],
            "",
            Some(7_000),
        ),
        (
            &[(
                "anthropic-ratelimit-requests-reset",
                "2026-11-29T21:00:02.5Z",
            )],
            "",
            Some(2_500),
        ),
        (
            &[
                ("x-ratelimit-reset-requests", "20ms"),
                ("x-ratelimit-reset-tokens", "6m0s"),
            ],
            "",
            Some(360_000),
        ),
        (
            &[],
            "Rate limit reached. Please try again in 1.5s.",
            Some(1_500),
        ),
        (&[], "Please retry after 20 seconds", Some(20_000)),
        (&[], "Slow down", None),
    ];
    for (h, msg, want) in cases {
        assert_eq!(retry_after_ms(&headers(h), msg, now), want, "{h:?} {msg}");
    }
    assert_eq!(parse_go_duration("1h2m3.5s"), Some(3_723_500));
    assert_eq!(parse_go_duration("soon"), None);
}

#[test]
fn body_decides_where_status_is_ambiguous() {
    let none = HeaderMap::new();
    let class = |status, body: &str| classify_http_error(status, &none, body).class;
    assert_eq!(
        class(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#
        ),
        ErrorClass::QuotaExhausted
    );
    assert_eq!(
        class(
            500,
            r#"{"error":{"code":500,"message":"the request exceeds the available context size, try increasing it"}}"#
        ),
        ErrorClass::ContextOverflow
    );
    assert_eq!(
        class(500, "exceed context size"),
        ErrorClass::ContextOverflow
    );
    assert_eq!(
        class(
            400,
            r#"{"error":{"message":"max_tokens is too large: 100000. This model supports at most 16384 completion tokens","type":"invalid_request_error"}}"#
        ),
        ErrorClass::OutputLimit
    );
    assert_eq!(
        class(
            400,
            r#"{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy","code":"invalid_prompt"}}"#
        ),
        ErrorClass::ContentPolicy
    );
    assert_eq!(
        class(
            403,
            r#"{"type":"error","error":{"type":"permission_error","message":"no access"}}"#
        ),
        ErrorClass::Auth
    );
    assert_eq!(
        class(503, "<html>Service Unavailable</html>"),
        ErrorClass::Overloaded
    );
    assert_eq!(
        class(404, r#"{"error":{"message":"model not found"}}"#),
        ErrorClass::InvalidRequest
    );
    assert_eq!(
        class(
            429,
            r#"[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]"#
        ),
        ErrorClass::RateLimited
    );
}

#[test]
fn stream_errors_classify_without_status() {
    let err = classify_stream_error(
        &json!({"code": "rate_limit_exceeded", "message": "Please try again in 2s."}),
    );
    assert_eq!(
        err,
        ProviderError {
            class: ErrorClass::RateLimited,
            message: "Please try again in 2s.".into(),
            retry_after_ms: Some(2_000),
            status: None
        }
    );
    let err = classify_stream_error(
        &json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}),
    );
    assert_eq!(err.class, ErrorClass::Server);
    assert_eq!(
        classify_json_body(r#"{"id":"chatcmpl-1","choices":[]}"#).class,
        ErrorClass::InvalidRequest
    );
}

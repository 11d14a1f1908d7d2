//! Classifier cases beyond the shared error fixtures: every retry-after source, quota
//! and overflow under unusual statuses, in-stream errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use http::header::{HeaderName, HeaderValue};
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

#[test]
fn gateway_forms_of_the_retry_hint() {
    let now = parse_rfc3339("2026-11-29T21:00:00Z").unwrap();
    let at = |h: &[(&str, &str)], body: &str| {
        let json = serde_json::from_str::<Value>(body).ok();
        retry_after_hint(&headers(h), json.as_ref(), "", now)
    };
    // LiteLLM: the upstream's headers arrive prefixed with `llm_provider-`.
    assert_eq!(at(&[("llm_provider-retry-after", "7")], ""), Some(7_000));
    assert_eq!(at(&[("llm_provider-retry-after-ms", "450")], ""), Some(450));
    assert_eq!(
        at(&[("llm_provider-x-ratelimit-reset-tokens", "1m30s")], ""),
        Some(90_000)
    );
    // The vendor's own name wins over the prefixed copy.
    assert_eq!(
        at(
            &[("retry-after", "2"), ("llm_provider-retry-after", "9")],
            ""
        ),
        Some(2_000)
    );
    // OpenRouter: Unix milliseconds in X-RateLimit-Reset, in the header or the body.
    let reset_ms = "1795986005000"; // 2026-11-29T21:00:05Z
    assert_eq!(at(&[("x-ratelimit-reset", reset_ms)], ""), Some(5_000));
    let body = format!(
        r#"{{"error":{{"code":429,"message":"Rate limit exceeded: free-models-per-min.","metadata":{{"headers":{{"X-RateLimit-Limit":"20","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"{reset_ms}"}}}}}}}}"#
    );
    assert_eq!(at(&[], &body), Some(5_000));
    // Cloudflare: the IETF RateLimit header (the exhausted item's t) and `retry_after`.
    assert_eq!(
        at(
            &[("ratelimit", r#""default";r=50;t=30, "burst";r=0;t=4"#)],
            ""
        ),
        Some(4_000)
    );
    assert_eq!(at(&[("ratelimit-reset", "12")], ""), Some(12_000));
    assert_eq!(
        at(&[], r#"{"retry_after":30,"error_code":1015}"#),
        Some(30_000)
    );
    // Azure: Unix seconds are not mistaken for a 56-year wait.
    assert_eq!(
        at(&[("x-ratelimit-reset-requests", "1795986003")], ""),
        Some(3_000)
    );
    // Google: RetryInfo in the error details.
    assert_eq!(
        at(
            &[],
            r#"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"Quota exceeded","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"21s"}]}}"#
        ),
        Some(21_000)
    );
    // Through the classifier: a 429 from LiteLLM carries the upstream's wait.
    let err = classify_http_error_at(
        429,
        &headers(&[("llm_provider-retry-after", "3")]),
        r#"{"error":{"message":"litellm.RateLimitError: AzureException RateLimitError - Requests have exceeded the token rate limit","type":"throttling_error","param":null,"code":"429"}}"#,
        now,
    );
    assert_eq!(
        (err.class, err.retry_after_ms),
        (ErrorClass::RateLimited, Some(3_000))
    );
}

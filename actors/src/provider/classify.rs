//! Error classifier: turns a provider failure (HTTP status + headers + body, or an error
//! object inside a 200 stream) into a [`ProviderError`] of one [`ErrorClass`], with the
//! retry-after the provider asked for.
//!
//! Status alone is never enough: quota is a 429 at OpenAI (`insufficient_quota`) and a
//! 400 at Anthropic (credit balance); context overflow is a 400 with a generic code at
//! vLLM/DeepSeek, a 500 on old llama.cpp, a `response.failed` at Responses. So the body's
//! `code`/`type` (top level or under `error`) and message text are read first, and the
//! status decides only what they leave open. Cases: `shared/fixtures/providers/errors/`.

use foya_protocol::{ErrorClass, ProviderError};
use regex::Regex;
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

/// Longest message text kept from a body.
const MAX_MESSAGE_CHARS: usize = 2_000;

/// What an error body says.
#[derive(Debug, Default)]
struct Facts {
    code: String,
    kind: String,
    message: String,
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn facts(v: &Value) -> Facts {
    let v = match v {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    };
    let inner = match v.get("error") {
        Some(e @ Value::Object(_)) => e,
        Some(Value::String(s)) => {
            return Facts {
                message: s.clone(),
                code: text_of(v.get("code")),
                kind: text_of(v.get("type")),
            };
        }
        _ => v,
    };
    let pick = |k: &str| {
        let t = text_of(inner.get(k));
        if t.is_empty() { text_of(v.get(k)) } else { t }
    };
    Facts {
        code: pick("code"),
        kind: [
            text_of(inner.get("type")),
            text_of(inner.get("status")),
            text_of(v.get("type")),
        ]
        .into_iter()
        .find(|t| !t.is_empty() && t != "error")
        .unwrap_or_default(),
        message: pick("message"),
    }
}

fn any(hay: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| hay.contains(n))
}

/// The class from status (when there is one) and body facts.
fn class_of(status: Option<u16>, f: &Facts) -> ErrorClass {
    let ids = format!("{} {}", f.code, f.kind).to_ascii_lowercase();
    let msg = f.message.to_ascii_lowercase();
    let all = format!("{ids} {msg}");
    if any(
        &ids,
        &[
            "context_length_exceeded",
            "exceed_context",
            "context_window_exceeded",
            "string_above_max_length",
        ],
    ) || any(
        &msg,
        &[
            "context length",
            "context window",
            "context size",
            "context limit",
            "maximum context",
            "prompt is too long",
            "exceed context",
            "exceeds the context",
            "prompt too long",
            "input is too long",
            "too many input tokens",
            "reduce the length of the",
        ],
    ) {
        return ErrorClass::ContextOverflow;
    }
    let names_output_cap = any(
        &msg,
        &[
            "max_tokens",
            "max_output_tokens",
            "max_completion_tokens",
            "output tokens",
        ],
    );
    if names_output_cap
        && any(
            &msg,
            &[
                "maximum allowed",
                "too large",
                "exceeds",
                "at most",
                "must be less",
                "> ",
                "greater than",
            ],
        )
    {
        return ErrorClass::OutputLimit;
    }
    if status == Some(402)
        || any(
            &all,
            &[
                "insufficient_quota",
                "billing",
                "credit balance",
                "exceeded your current quota",
                "insufficient balance",
                "payment required",
            ],
        )
    {
        return ErrorClass::QuotaExhausted;
    }
    if matches!(status, Some(401 | 403))
        || any(
            &ids,
            &[
                "authentication",
                "invalid_api_key",
                "permission",
                "unauthorized",
            ],
        )
        || any(&msg, &["api key", "unauthorized", "authentication"])
    {
        return ErrorClass::Auth;
    }
    if status == Some(429) || any(&all, &["rate_limit", "rate limit", "too many requests"]) {
        return ErrorClass::RateLimited;
    }
    if matches!(status, Some(503 | 529)) || any(&all, &["overloaded", "unavailable", "capacity"]) {
        return ErrorClass::Overloaded;
    }
    if any(
        &all,
        &[
            "content_filter",
            "content_policy",
            "content policy",
            "content management policy",
            "safety system",
            "flagged",
        ],
    ) {
        return ErrorClass::ContentPolicy;
    }
    match status {
        Some(s) if s >= 500 => ErrorClass::Server,
        Some(408 | 409 | 425) => ErrorClass::Server,
        Some(s) if s >= 400 => ErrorClass::InvalidRequest,
        _ if any(
            &ids,
            &[
                "invalid_request",
                "not_found",
                "invalid_value",
                "bad_request",
            ],
        ) =>
        {
            ErrorClass::InvalidRequest
        }
        _ => ErrorClass::Server,
    }
}

fn truncate(mut s: String) -> String {
    if s.chars().count() > MAX_MESSAGE_CHARS {
        s = s.chars().take(MAX_MESSAGE_CHARS).collect();
        s.push('…');
    }
    s
}

/// Classifies a non-2xx HTTP response. `body` is the raw text (JSON or not).
#[must_use]
pub fn classify_http_error(status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
    classify_http_error_at(status, headers, body, SystemTime::now())
}

/// [`classify_http_error`] with an explicit clock (for reset timestamps in headers).
#[must_use]
pub fn classify_http_error_at(
    status: u16,
    headers: &HeaderMap,
    body: &str,
    now: SystemTime,
) -> ProviderError {
    let f = serde_json::from_str::<Value>(body)
        .map(|v| facts(&v))
        .unwrap_or_else(|_| Facts {
            message: body.trim().to_owned(),
            ..Facts::default()
        });
    let class = class_of(Some(status), &f);
    let message = if f.message.is_empty() {
        format!("HTTP {status}")
    } else {
        truncate(f.message.clone())
    };
    let retry_after_ms = if class.is_transient() {
        retry_after_ms(headers, &f.message, now)
    } else {
        None
    };
    ProviderError {
        class,
        message,
        retry_after_ms,
        status: Some(status),
    }
}

/// Classifies an error object received inside a 2xx stream: an OpenAI `{"error": …}`
/// chunk, an Anthropic `error` event, a Responses `response.failed` error or `error`
/// event. Accepts the envelope or the inner object.
#[must_use]
pub fn classify_stream_error(error: &Value) -> ProviderError {
    let f = facts(error);
    let class = class_of(None, &f);
    let message = if f.message.is_empty() {
        "error in stream".to_owned()
    } else {
        truncate(f.message.clone())
    };
    let retry_after_ms = class
        .is_transient()
        .then(|| retry_after_from_text(&f.message))
        .flatten();
    ProviderError {
        class,
        message,
        retry_after_ms,
        status: None,
    }
}

/// Classifies a JSON body received with status 200 where an event stream was expected:
/// an error object is classified; anything else is `invalid_request`.
#[must_use]
pub fn classify_json_body(body: &str) -> ProviderError {
    match serde_json::from_str::<Value>(body) {
        Ok(v)
            if v.get("error").is_some_and(|e| !e.is_null())
                || v.get("object").and_then(Value::as_str) == Some("error")
                || v.get("type").and_then(Value::as_str) == Some("error") =>
        {
            classify_stream_error(&v)
        }
        Ok(Value::Array(items)) if items.first().is_some_and(|i| i.get("error").is_some()) => {
            classify_stream_error(&Value::Array(items))
        }
        _ => ProviderError::new(
            ErrorClass::InvalidRequest,
            "expected an event stream, got a JSON body",
        ),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The wait the provider asked for, in milliseconds: `retry-after-ms`, `retry-after`
/// (seconds or HTTP date), `anthropic-ratelimit-*-reset` (RFC 3339),
/// `x-ratelimit-reset-*` (`1s`, `6m0s`, `20ms`), then the message text ("try again in
/// 1.5s", "Please retry after 20 seconds").
#[must_use]
pub fn retry_after_ms(headers: &HeaderMap, message: &str, now: SystemTime) -> Option<u64> {
    if let Some(ms) = header(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(ms.max(0.0) as u64);
    }
    if let Some(v) = header(headers, "retry-after") {
        if let Ok(secs) = v.parse::<f64>() {
            return Some((secs.max(0.0) * 1000.0) as u64);
        }
        if let Ok(at) = httpdate::parse_http_date(v) {
            return Some(until(at, now));
        }
    }
    let mut resets: Vec<u64> = Vec::new();
    for (name, value) in headers {
        let (name, Ok(value)) = (name.as_str(), value.to_str()) else {
            continue;
        };
        if name.starts_with("anthropic-ratelimit-") && name.ends_with("-reset") {
            if let Some(at) = parse_rfc3339(value.trim()) {
                resets.push(until(at, now));
            }
        } else if name.starts_with("x-ratelimit-reset")
            && let Some(ms) = parse_go_duration(value.trim())
        {
            resets.push(ms);
        }
    }
    if let Some(max) = resets.into_iter().max() {
        return Some(max);
    }
    retry_after_from_text(message)
}

fn until(at: SystemTime, now: SystemTime) -> u64 {
    at.duration_since(now)
        .unwrap_or(Duration::ZERO)
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX)
}

static RETRY_TEXT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:try again in|retry after|retry in|retry_delay[^0-9]*)\s*([0-9][0-9.hmsu]*)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)?\b").ok()
});

/// A wait stated in an error message, in milliseconds.
#[must_use]
pub fn retry_after_from_text(message: &str) -> Option<u64> {
    let caps = RETRY_TEXT.as_ref()?.captures(message)?;
    let number = caps.get(1)?.as_str().trim_end_matches('.');
    let unit = caps.get(2).map_or("", |m| m.as_str()).to_ascii_lowercase();
    if let Ok(n) = number.parse::<f64>() {
        let factor = match unit.as_str() {
            "ms" | "millisecond" | "milliseconds" => 1.0,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000.0,
            _ => 1000.0,
        };
        return Some((n * factor) as u64);
    }
    parse_go_duration(&format!("{number}{unit}"))
}

/// Parses a Go-style duration (`1s`, `6m0s`, `20ms`, `1.5s`, `1h2m`) into milliseconds.
#[must_use]
pub fn parse_go_duration(text: &str) -> Option<u64> {
    let mut total = 0.0_f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1.0,
            "s" | "" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += n * factor;
        rest = &rest[unit_len..];
    }
    Some(total.ceil() as u64)
}

/// Parses an RFC 3339 UTC-or-offset timestamp (`2026-11-29T21:03:32Z`,
/// `…T21:03:32.5+01:00`).
#[must_use]
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    let mut frac_ms = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        frac_ms = format!("0.{}", &r[..n]).parse::<f64>().ok()? * 1000.0;
        rest = &r[n..];
    }
    let offset_s = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (o.get(1..3)?.parse::<i64>().ok()? * 3600
                + o.get(4..6)?.parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_s;
    let secs = u64::try_from(secs).ok()?;
    Some(
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(secs)
            + Duration::from_micros((frac_ms * 1000.0) as u64),
    )
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;

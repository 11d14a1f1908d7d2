//! Retry-after parsing for the classifier: the vendors' headers (`retry-after-ms`,
//! `retry-after`, `anthropic-ratelimit-*-reset`, `x-ratelimit-reset-*`), the gateways'
//! forms (LiteLLM's `llm_provider-` prefixed copies, OpenRouter's hints inside the error
//! body, Cloudflare's IETF `RateLimit` header and `retry_after` field), Google's
//! `RetryInfo`, and message text.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The wait the provider asked for, in milliseconds: the headers (see
/// `retry_after_headers`), then the message text ("try again in 1.5s", "Please retry
/// after 20 seconds").
#[must_use]
pub fn retry_after_ms(headers: &HeaderMap, message: &str, now: SystemTime) -> Option<u64> {
    retry_after_headers(headers, now).or_else(|| retry_after_from_text(message))
}

/// [`retry_after_ms`] with the error body's hints between the headers and the text (see
/// `retry_after_from_body`).
#[must_use]
pub(crate) fn retry_after_hint(
    headers: &HeaderMap,
    body: Option<&Value>,
    message: &str,
    now: SystemTime,
) -> Option<u64> {
    retry_after_headers(headers, now)
        .or_else(|| body.and_then(|b| retry_after_from_body(b, now)))
        .or_else(|| retry_after_from_text(message))
}

/// Prefix LiteLLM's proxy puts before every header of the upstream provider's response
/// (`llm_provider-retry-after`, `llm_provider-x-ratelimit-reset-tokens`, …); older
/// proxies send the upstream's `retry-after` only in this form.
const LITELLM_PREFIX: &str = "llm_provider-";

/// The wait asked for in response headers, in milliseconds, first found of:
/// `retry-after-ms` (OpenAI, Azure), `retry-after` (seconds or HTTP date; every vendor,
/// OpenRouter, Cloudflare), each also with LiteLLM's `llm_provider-` prefix; then the
/// longest reset among `anthropic-ratelimit-*-reset` (RFC 3339), `x-ratelimit-reset*`
/// (`1s`, `6m0s`, `20ms`, plain seconds, or a Unix time in seconds or milliseconds as
/// OpenRouter sends it; prefixed or not), `ratelimit-reset` (IETF draft, seconds) and
/// `ratelimit` (IETF draft structured form as Cloudflare sends it, `"default";r=0;t=30`:
/// the `t` of an exhausted item, else the longest `t`).
#[must_use]
pub(crate) fn retry_after_headers(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    let find = |name: &str| {
        header(headers, name).or_else(|| header(headers, &format!("{LITELLM_PREFIX}{name}")))
    };
    if let Some(ms) = find("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(ms.max(0.0) as u64);
    }
    if let Some(v) = find("retry-after") {
        if let Ok(secs) = v.parse::<f64>() {
            return Some((secs.max(0.0) * 1000.0) as u64);
        }
        if let Ok(at) = httpdate::parse_http_date(v) {
            return Some(until(at, now));
        }
    }
    let mut resets: Vec<u64> = Vec::new();
    for (name, value) in headers {
        let Ok(value) = value.to_str() else {
            continue;
        };
        let name = name.as_str();
        let name = name.strip_prefix(LITELLM_PREFIX).unwrap_or(name);
        let value = value.trim();
        if name.starts_with("anthropic-ratelimit-") && name.ends_with("-reset") {
            if let Some(at) = parse_rfc3339(value) {
                resets.push(until(at, now));
            }
        } else if name.starts_with("x-ratelimit-reset") {
            if let Some(ms) = reset_value(value, now) {
                resets.push(ms);
            }
        } else if name == "ratelimit-reset" {
            if let Ok(secs) = value.parse::<f64>() {
                resets.push((secs.max(0.0) * 1000.0) as u64);
            }
        } else if name == "ratelimit"
            && let Some(ms) = structured_reset(value)
        {
            resets.push(ms);
        }
    }
    resets.into_iter().max()
}

/// A reset header's value: a Unix time in milliseconds (≥ 10^12) or seconds (≥ 10^9),
/// plain seconds, or a Go-style duration.
fn reset_value(value: &str, now: SystemTime) -> Option<u64> {
    if let Ok(n) = value.parse::<f64>() {
        let at = if n >= 1e12 {
            SystemTime::UNIX_EPOCH + Duration::from_millis(n as u64)
        } else if n >= 1e9 {
            SystemTime::UNIX_EPOCH + Duration::from_secs(n as u64)
        } else {
            return Some((n.max(0.0) * 1000.0) as u64);
        };
        return Some(until(at, now));
    }
    parse_go_duration(value)
}

/// The wait of an IETF `RateLimit` header (`"default";r=0;t=30, "burst";r=5;t=2`): the
/// longest `t` among exhausted items (`r=0`), else the longest `t`, in milliseconds.
fn structured_reset(value: &str) -> Option<u64> {
    let mut exhausted: Option<u64> = None;
    let mut any: Option<u64> = None;
    for item in value.split(',') {
        let mut remaining = None;
        let mut reset = None;
        for param in item.split(';').skip(1) {
            match param.trim().split_once('=') {
                Some(("r", v)) => remaining = v.trim().parse::<u64>().ok(),
                Some(("t", v)) => reset = v.trim().parse::<u64>().ok(),
                _ => {}
            }
        }
        let Some(t) = reset.map(|t| t.saturating_mul(1000)) else {
            continue;
        };
        any = any.max(Some(t));
        if remaining == Some(0) {
            exhausted = exhausted.max(Some(t));
        }
    }
    exhausted.or(any)
}

/// The wait stated in an error body, in milliseconds: OpenRouter's
/// `error.metadata.headers` (the upstream's or its own `Retry-After` /
/// `X-RateLimit-Reset`, read like response headers), a `retry_after` number in seconds
/// (top level or under `error`, as Cloudflare's error JSON has it), or Google's
/// `RetryInfo` (`error.details[].retryDelay`, `"20s"`).
#[must_use]
pub(crate) fn retry_after_from_body(body: &Value, now: SystemTime) -> Option<u64> {
    let body = match body {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let error = body.get("error").filter(|e| e.is_object()).unwrap_or(body);
    if let Some(Value::Object(embedded)) = error.get("metadata").and_then(|m| m.get("headers")) {
        let mut map = HeaderMap::new();
        for (k, v) in embedded {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()),
                HeaderValue::from_str(&text),
            ) {
                map.insert(name, value);
            }
        }
        if let Some(ms) = retry_after_headers(&map, now) {
            return Some(ms);
        }
    }
    for holder in [error, body] {
        if let Some(secs) = holder.get("retry_after").and_then(Value::as_f64) {
            return Some((secs.max(0.0) * 1000.0) as u64);
        }
    }
    error
        .get("details")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|d| d.get("retryDelay").and_then(Value::as_str))
        .and_then(parse_go_duration)
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
pub(crate) fn retry_after_from_text(message: &str) -> Option<u64> {
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
pub(crate) fn parse_go_duration(text: &str) -> Option<u64> {
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

//! Retry-after parsing for the classifier: headers (`retry-after-ms`, `retry-after`,
//! `anthropic-ratelimit-*-reset`, `x-ratelimit-reset-*`) and message text.

use regex::Regex;
use reqwest::header::HeaderMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

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

//! Error classifier: turns a provider failure (HTTP status + headers + body, or an error
//! object inside a 200 stream) into a [`ProviderError`] of one [`ErrorClass`], with the
//! retry-after the provider asked for.
//!
//! Status alone is never enough: quota is a 429 at OpenAI (`insufficient_quota`) and a
//! 400 at Anthropic (credit balance); context overflow is a 400 with a generic code at
//! vLLM/DeepSeek, a 500 on old llama.cpp, a `response.failed` at Responses. So the body's
//! `code`/`type` (top level or under `error`) and message text are read first, and the
//! status decides only what they leave open. Cases: `actors/tests/fixtures/providers/errors/`.

use foya_protocol::{ErrorClass, ProviderError};
use http::header::HeaderMap;
use serde_json::Value;
use std::time::SystemTime;

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

/// Codes and types that name a context overflow (OpenAI, Azure, Groq, OpenRouter,
/// llama.cpp, LiteLLM's exception names).
const OVERFLOW_IDS: &[&str] = &[
    "context_length_exceeded",
    "exceed_context",
    "context_window_exceeded",
    "contextwindowexceedederror",
    "string_above_max_length",
];

/// Message wordings of a context overflow, lowercase. One or more per provider:
/// OpenAI/Azure/DeepSeek/vLLM/OpenRouter/Together "maximum context length", Anthropic and
/// Fireworks "prompt is too long", Gemini/Vertex "input token count … exceeds the maximum
/// number of tokens", Bedrock "input is too long", Mistral "too large for model with …
/// maximum context length", Cohere "too many tokens", xAI "maximum prompt length", vLLM
/// V1 "maximum model length", Together/TGI "`inputs` tokens + `max_new_tokens`",
/// llama.cpp "exceeds the available context size", Ollama "prompt too long", LM Studio
/// "context length of only".
const OVERFLOW_WORDS: &[&str] = &[
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
    "input token count",
    "exceeds the maximum number of tokens",
    "too many tokens",
    "maximum prompt length",
    "maximum model length",
    "inputs` tokens + `max_new_tokens`",
    "prompt token count",
    "contextwindowexceedederror",
];

/// Words that mark a rate limit or quota message: such a message is never read as an
/// overflow by its wording (Groq's and OpenAI's TPM limits speak of "tokens" and
/// "reduce"; a quota message may name the context).
const PACING_WORDS: &[&str] = &[
    "rate limit",
    "rate_limit",
    "per minute",
    "per day",
    "(tpm)",
    "(rpm)",
    "quota",
    "try again in",
];

/// The class from status (when there is one) and body facts.
fn class_of(status: Option<u16>, f: &Facts) -> ErrorClass {
    let ids = format!("{} {}", f.code, f.kind).to_ascii_lowercase();
    let msg = f.message.to_ascii_lowercase();
    let all = format!("{ids} {msg}");
    // 413: the request is too large for the provider or a proxy in front of it (HTML or
    // JSON, Anthropic's `request_too_large`, Groq's request bigger than its per-minute
    // token limit): waiting does not help, a smaller request does — an overflow.
    if status == Some(413)
        || any(&ids, OVERFLOW_IDS)
        || (any(&msg, OVERFLOW_WORDS) && !any(&msg, PACING_WORDS))
    {
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
    // A rate limit by its code wins over quota words in its text (Groq's 429 links its
    // billing page).
    if status == Some(429) && any(&ids, &["rate_limit"]) {
        return ErrorClass::RateLimited;
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
#[cfg_attr(not(feature = "http"), allow(dead_code))] // used by the HTTP client only
pub(crate) fn classify_http_error(status: u16, headers: &HeaderMap, body: &str) -> ProviderError {
    classify_http_error_at(status, headers, body, SystemTime::now())
}

/// `classify_http_error` with an explicit clock (for reset timestamps in headers).
#[must_use]
pub fn classify_http_error_at(
    status: u16,
    headers: &HeaderMap,
    body: &str,
    now: SystemTime,
) -> ProviderError {
    let json = serde_json::from_str::<Value>(body).ok();
    let f = json.as_ref().map_or_else(
        || Facts {
            message: body.trim().to_owned(),
            ..Facts::default()
        },
        facts,
    );
    let class = class_of(Some(status), &f);
    let message = if f.message.is_empty() {
        format!("HTTP {status}")
    } else {
        truncate(f.message.clone())
    };
    let retry_after_ms = if class.is_transient() {
        retry_after_hint(headers, json.as_ref(), &f.message, now)
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
pub(crate) fn classify_stream_error(error: &Value) -> ProviderError {
    let f = facts(error);
    let class = class_of(None, &f);
    let message = if f.message.is_empty() {
        "error in stream".to_owned()
    } else {
        truncate(f.message.clone())
    };
    let retry_after_ms = class
        .is_transient()
        .then(|| {
            retry_after_from_body(error, SystemTime::now())
                .or_else(|| retry_after_from_text(&f.message))
        })
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
pub(crate) fn classify_json_body(body: &str) -> ProviderError {
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

mod retry_after;
#[cfg(test)]
use retry_after::parse_go_duration;
pub use retry_after::{parse_rfc3339, retry_after_ms};
pub(crate) use retry_after::{retry_after_from_body, retry_after_from_text, retry_after_hint};

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;

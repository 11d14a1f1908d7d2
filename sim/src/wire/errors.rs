//! HTTP error responses for rejected requests, shaped like the vendors' (see
//! `actors/tests/fixtures/providers/errors/`): OpenAI `{"error":{message,type,param,code}}`,
//! Anthropic `{"type":"error","error":{type,message}}`.

use super::{WireFormat, json_str};
use crate::SimRejection;

/// A complete non-streaming HTTP error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    /// HTTP status (429, 529, 503, 400, 404).
    pub status: u16,
    /// Extra headers (`retry-after-ms`, `retry-after`), lower-case names.
    pub headers: Vec<(&'static str, String)>,
    /// JSON body (`content-type: application/json`).
    pub body: String,
}

/// The error response `format`'s vendor sends for `rejection`.
///
/// Rate limits carry both `retry-after-ms` (exact, OpenAI style) and `retry-after` (whole
/// seconds, rounded up, as Anthropic sends). Overload is 529 for Anthropic, 503 for the
/// OpenAI formats.
#[must_use]
pub fn error_response(format: WireFormat, rejection: &SimRejection) -> ErrorResponse {
    let anthropic = format == WireFormat::Anthropic;
    let mut headers = Vec::new();
    let (status, body) = match *rejection {
        SimRejection::RateLimited { retry_after_ms } => {
            headers.push(("retry-after-ms", retry_after_ms.to_string()));
            headers.push(("retry-after", retry_after_ms.div_ceil(1000).to_string()));
            let body = if anthropic {
                anthropic_body(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                )
            } else {
                openai_body(
                    &format!(
                        "Rate limit reached for requests per min. Please try again in {retry_after_ms}ms."
                    ),
                    "requests",
                    "\"rate_limit_exceeded\"",
                    "null",
                )
            };
            (429, body)
        }
        SimRejection::Overloaded if anthropic => {
            (529, anthropic_body("overloaded_error", "Overloaded"))
        }
        SimRejection::Overloaded => (
            503,
            openai_body(
                "The server is overloaded. Please try again later.",
                "server_error",
                "null",
                "null",
            ),
        ),
        SimRejection::ContextOverflow {
            input_tokens,
            context_window_tokens,
        } => {
            let body = if anthropic {
                anthropic_body(
                    "invalid_request_error",
                    &format!(
                        "prompt is too long: {input_tokens} tokens > {context_window_tokens} maximum"
                    ),
                )
            } else {
                openai_body(
                    &format!(
                        "This model's maximum context length is {context_window_tokens} tokens. However, your messages resulted in {input_tokens} tokens. Please reduce the length of the messages."
                    ),
                    "invalid_request_error",
                    "\"context_length_exceeded\"",
                    "\"messages\"",
                )
            };
            (400, body)
        }
    };
    ErrorResponse {
        status,
        headers,
        body,
    }
}

#[cfg(feature = "server")]
/// A 400 for a request body the simulator cannot read.
#[must_use]
pub(crate) fn invalid_request(format: WireFormat, message: &str) -> ErrorResponse {
    let body = if format == WireFormat::Anthropic {
        anthropic_body("invalid_request_error", message)
    } else {
        openai_body(message, "invalid_request_error", "null", "null")
    };
    ErrorResponse {
        status: 400,
        headers: Vec::new(),
        body,
    }
}

#[cfg(feature = "server")]
/// A 404 for a path the simulator does not serve: OpenAI's `invalid_request_error` (its
/// answer to an unknown URL) or Anthropic's `not_found_error`.
#[must_use]
pub(crate) fn not_found(format: WireFormat, message: &str) -> ErrorResponse {
    let body = if format == WireFormat::Anthropic {
        anthropic_body("not_found_error", message)
    } else {
        openai_body(message, "invalid_request_error", "null", "null")
    };
    ErrorResponse {
        status: 404,
        headers: Vec::new(),
        body,
    }
}

fn openai_body(message: &str, kind: &str, code: &str, param: &str) -> String {
    format!(
        r#"{{"error":{{"message":{},"type":"{kind}","param":{param},"code":{code}}}}}"#,
        json_str(message)
    )
}

fn anthropic_body(kind: &str, message: &str) -> String {
    format!(
        r#"{{"type":"error","error":{{"type":"{kind}","message":{}}}}}"#,
        json_str(message)
    )
}

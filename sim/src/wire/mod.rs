//! SSE producers for the three wire formats the simulator serves, and the HTTP error
//! bodies of its injected failures.
//!
//! Given a sequence of [`StreamEvent`]s, an [`SseEncoder`] writes the body a vendor's
//! streaming endpoint would send for it, frame by frame, in the vendor's field order:
//! - OpenAI Chat Completions (`data: {chunk}` … `data: [DONE]`), after
//!   <https://platform.openai.com/docs/api-reference/chat-streaming>;
//! - Anthropic Messages (`event: message_start` … `event: message_stop`), after
//!   <https://docs.anthropic.com/en/docs/build-with-claude/streaming>;
//! - OpenAI Responses (`event: response.created` … `event: response.completed`), after
//!   <https://platform.openai.com/docs/api-reference/responses-streaming>.
//!
//! The shapes match `actors/tests/fixtures/providers/*/` (the tests reproduce fixtures byte for
//! byte). `Usage` is held back and written where the format reports it, at `Done`.

use foya_protocol::StreamEvent;

mod anthropic;
mod chat;
mod errors;
mod responses;

pub use errors::{ErrorResponse, error_response};
#[cfg(feature = "server")]
pub(crate) use errors::{invalid_request, not_found};

pub use crate::format::WireFormat;

/// Response-level fields every frame or the opening frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireMeta {
    /// Response id (`chatcmpl-…`, `msg_…`, `resp_…`).
    pub id: String,
    /// Model name echoed back.
    pub model: String,
    /// Creation time in Unix seconds (Chat Completions `created`).
    pub created: u64,
    /// Input tokens, for formats that report them before `Usage` arrives (Anthropic
    /// `message_start`).
    pub input_tokens: u64,
}

impl WireMeta {
    /// Meta for a simulated response: the id derives from its key, `created` is fixed
    /// (1 764 400 000) so bodies repeat byte for byte.
    #[must_use]
    pub fn for_response(format: WireFormat, response: &super::SimResponse) -> Self {
        let prefix = match format {
            WireFormat::OpenAiChat => "chatcmpl-",
            WireFormat::Anthropic => "msg_",
            WireFormat::OpenAiResponses => "resp_",
        };
        Self {
            id: format!("{prefix}{:016x}{:x}", response.key, response.attempt),
            model: response.model.clone(),
            created: 1_764_400_000,
            input_tokens: response.input_tokens,
        }
    }
}

/// Writes the SSE body of one response in one wire format, event by event.
#[derive(Debug)]
pub struct SseEncoder {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Chat(chat::ChatEncoder),
    Anthropic(anthropic::AnthropicEncoder),
    Responses(responses::ResponsesEncoder),
}

impl SseEncoder {
    /// An encoder for one response.
    #[must_use]
    pub fn new(format: WireFormat, meta: WireMeta) -> Self {
        let inner = match format {
            WireFormat::OpenAiChat => Inner::Chat(chat::ChatEncoder::new(meta)),
            WireFormat::Anthropic => Inner::Anthropic(anthropic::AnthropicEncoder::new(meta)),
            WireFormat::OpenAiResponses => Inner::Responses(responses::ResponsesEncoder::new(meta)),
        };
        Self { inner }
    }

    /// Appends the frames sent before any content (`message_start` + `ping`,
    /// `response.created`; nothing for Chat Completions).
    pub fn start(&mut self, out: &mut String) {
        match &mut self.inner {
            Inner::Chat(_) => {}
            Inner::Anthropic(e) => e.start(out),
            Inner::Responses(e) => e.start(out),
        }
    }

    /// Appends the frames for `event` (possibly none: `Usage` is written at `Done`).
    pub fn event(&mut self, event: &StreamEvent, out: &mut String) {
        match &mut self.inner {
            Inner::Chat(e) => e.event(event, out),
            Inner::Anthropic(e) => e.event(event, out),
            Inner::Responses(e) => e.event(event, out),
        }
    }
}

/// The whole SSE body for `events` (start frames included).
#[must_use]
pub fn encode_body<'a>(
    format: WireFormat,
    meta: WireMeta,
    events: impl IntoIterator<Item = &'a StreamEvent>,
) -> String {
    let mut encoder = SseEncoder::new(format, meta);
    let mut out = String::new();
    encoder.start(&mut out);
    for event in events {
        encoder.event(event, &mut out);
    }
    out
}

/// Appends `s` as a JSON string literal (quotes included).
pub(crate) fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as a JSON string literal.
pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_str(&mut out, s);
    out
}

/// Appends one `event:`/`data:` frame (`event` `None`: a bare `data:` frame).
pub(crate) fn frame(out: &mut String, event: Option<&str>, data: &str) {
    if let Some(event) = event {
        out.push_str("event: ");
        out.push_str(event);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
}

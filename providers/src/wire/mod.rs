//! Wire adapters: pure encoders (neutral [`ModelRequest`] → path, headers, JSON body) and
//! decoders (SSE events → [`StreamEvent`]s) for each supported protocol, plus the SSE
//! framing that drives a decoder over a byte stream. No sockets here: `provider::http`
//! does the I/O.
//!
//! Protocols: OpenAI Chat Completions (<https://platform.openai.com/docs/api-reference/chat-streaming>)
//! and compatible servers, Anthropic Messages
//! (<https://docs.anthropic.com/en/docs/build-with-claude/streaming>), OpenAI Responses
//! (<https://platform.openai.com/docs/api-reference/responses-streaming>).

use crate::ModelRequest;
use foya_protocol::{ErrorClass, ProviderError, StreamEvent};
use serde::{Deserialize, Serialize};

mod anthropic_decode;
mod anthropic_encode;
mod chat_decode;
mod chat_encode;
mod chat_json;
mod common;
mod ids;
mod json;
mod responses_decode;
mod responses_encode;
pub mod sse;

pub use anthropic_decode::AnthropicDecoder;
pub use chat_decode::ChatDecoder;
#[cfg(feature = "http")]
pub(crate) use common::{MAX_EXCERPT_CHARS, excerpt};
pub use responses_decode::ResponsesDecoder;
pub use sse::{SseLimits, TransportError, decode_sse};

/// A wire protocol. Its kebab-case name is the `kind` of a provider profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// OpenAI Chat Completions and compatible servers (vLLM, Ollama, llama.cpp, DeepSeek…).
    OpenaiChat,
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    OpenaiResponses,
}

impl ProviderKind {
    /// Every kind, in a fixed order.
    pub const ALL: [Self; 3] = [Self::OpenaiChat, Self::Anthropic, Self::OpenaiResponses];

    /// The kebab-case name (`openai-chat`, `anthropic`, `openai-responses`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenaiChat => "openai-chat",
            Self::Anthropic => "anthropic",
            Self::OpenaiResponses => "openai-responses",
        }
    }

    /// Parses a kebab-case name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Encodes `request` for this protocol.
    #[must_use]
    pub fn encode(self, request: &ModelRequest) -> EncodedRequest {
        match self {
            Self::OpenaiChat => chat_encode::encode(request),
            Self::Anthropic => anthropic_encode::encode(request),
            Self::OpenaiResponses => responses_encode::encode(request),
        }
    }

    /// A fresh decoder for one response of this protocol.
    #[must_use]
    pub fn decoder(self) -> Box<dyn WireDecoder> {
        match self {
            Self::OpenaiChat => Box::new(ChatDecoder::new()),
            Self::Anthropic => Box::new(AnthropicDecoder::new()),
            Self::OpenaiResponses => Box::new(ResponsesDecoder::new()),
        }
    }

    /// The authentication header for an API key (`Authorization: Bearer …` or Anthropic's
    /// `x-api-key`).
    #[must_use]
    pub fn auth_header(self, key: &str) -> (&'static str, String) {
        match self {
            Self::Anthropic => ("x-api-key", key.to_owned()),
            Self::OpenaiChat | Self::OpenaiResponses => ("authorization", format!("Bearer {key}")),
        }
    }
}

impl std::fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request ready to send: `POST {base_url}{path}` with `headers` and the JSON `body`.
/// Authentication headers are not included (the HTTP client adds them).
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedRequest {
    /// Path appended to the profile's base URL, e.g. `/chat/completions`.
    pub path: &'static str,
    /// Protocol headers (lower-case names), e.g. `anthropic-version`.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: serde_json::Value,
}

/// A protocol's stream decoder: a pure state machine fed one SSE event at a time.
///
/// Contract (see `foya_protocol::stream`): `ToolCallDelta` indexes are dense in call
/// order with id and name on a call's first fragment; `Usage` is cumulative; exactly one
/// final `Done` or `Error`, after which nothing more is emitted.
pub trait WireDecoder: Send + std::fmt::Debug {
    /// Feeds one SSE event: its `event:` name (`message` when absent) and its data.
    fn on_event(&mut self, event: &str, data: &str, out: &mut Vec<StreamEvent>);

    /// The byte stream ended. Emits the final event if none was emitted yet (a clean
    /// end where the protocol allows one, otherwise `stream_interrupted`).
    fn finish(&mut self, out: &mut Vec<StreamEvent>);

    /// Whether the final `Done`/`Error` has been emitted.
    fn is_finished(&self) -> bool;

    /// Fails the stream with `error` unless it already finished.
    fn fail(&mut self, error: ProviderError, out: &mut Vec<StreamEvent>);
}

/// Convenience: a `stream_interrupted` error with `message`.
pub(crate) fn interrupted(message: impl Into<String>) -> ProviderError {
    ProviderError::new(ErrorClass::StreamInterrupted, message)
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod decode_tests;

#[cfg(test)]
#[path = "encode_tests.rs"]
mod encode_tests;

#[cfg(test)]
#[path = "decode_invalid_tests.rs"]
mod decode_invalid_tests;

#[cfg(test)]
#[path = "encode_names_tests.rs"]
mod encode_names_tests;

#[cfg(test)]
#[path = "ids_tests.rs"]
mod ids_tests;

#[cfg(test)]
#[path = "tolerance_chat_tests.rs"]
mod tolerance_chat_tests;

#[cfg(test)]
#[path = "tolerance_tests.rs"]
mod tolerance_tests;

#[cfg(test)]
#[path = "calls_tests.rs"]
mod calls_tests;

#[cfg(test)]
#[path = "encode_images_tests.rs"]
mod encode_images_tests;

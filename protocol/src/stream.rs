//! What a provider stream becomes after wire decoding, and the pure fold that turns a
//! sequence of [`StreamEvent`]s into one [`AssistantMessage`].
//!
//! The wire decoders (in `foya-actors`) normalise every provider quirk before emitting
//! events, so the contract here is simple: tool-call fragments carry a dense `index`
//! (0, 1, 2, … in call order), the call's id and name arrive with its first fragment, and
//! `Usage` events carry cumulative totals (the last one wins).

use crate::ids::ToolCallId;
use crate::message::{AssistantMessage, FinishReason, ReasoningPart, ToolCall, Usage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One normalised event of a streaming model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Answer text for the user.
    TextDelta {
        /// The fragment.
        text: String,
    },
    /// Reasoning text from the model (display only).
    ReasoningDelta {
        /// The fragment.
        text: String,
    },
    /// A complete reasoning block that must be sent back verbatim (Anthropic thinking
    /// with its signature, redacted thinking). Its text was already streamed as
    /// [`StreamEvent::ReasoningDelta`]s.
    ReasoningPart {
        /// The block.
        part: ReasoningPart,
    },
    /// A fragment of a tool call.
    ToolCallDelta {
        /// Dense position of the call in this response (0-based, call order).
        index: u32,
        /// Call id; present on the call's first fragment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<ToolCallId>,
        /// Tool name; present on the call's first fragment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// A fragment of the JSON argument text (may be empty).
        #[serde(default)]
        arguments: String,
        /// Opaque provider fields to send back with the call (e.g. Gemini
        /// `thought_signature`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        extra: Option<serde_json::Value>,
    },
    /// Cumulative token usage so far; replaces any earlier `Usage` of the response.
    Usage {
        /// The totals.
        usage: Usage,
    },
    /// The response finished. `finish_reason` is already normalised by the decoder.
    Done {
        /// Why it ended.
        finish_reason: Option<FinishReason>,
    },
    /// The response failed (an error object inside the stream, a cut stream, …).
    Error {
        /// The classified error.
        error: ProviderError,
    },
}

/// Classes of failure. The provider classes come from the classifier in `foya-actors`
/// (`actors/tests/fixtures/providers/README.md` lists them); the others are runtime failures
/// reported in `turn_complete.error.class`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// The input context is too long for the model. Triggers one compaction retry per turn.
    ContextOverflow,
    /// Too many requests; retry after `retry_after_ms`.
    RateLimited,
    /// Billing quota or credits exhausted. Never retried.
    QuotaExhausted,
    /// The provider is overloaded (Anthropic 529, 503). Retried.
    Overloaded,
    /// The requested maximum output is invalid for the model. Never retried.
    OutputLimit,
    /// Missing or rejected credentials.
    Auth,
    /// Refused by a content policy.
    ContentPolicy,
    /// The request is malformed or unsupported.
    InvalidRequest,
    /// A 5xx or other provider-side failure. Retried.
    Server,
    /// The stream broke off before it finished. Retried.
    StreamInterrupted,
    /// The provider could not be reached (connect, DNS, TLS, idle timeout). Retried.
    Network,
    /// The event store failed (full disk, I/O error).
    Storage,
    /// A bug or crash inside the runtime.
    Internal,
    /// Run protection stopped a turn that made no progress.
    LoopDetected,
    /// The turn reached its maximum number of tool steps.
    MaxSteps,
    /// The provider's stream could not be understood: a `data:` payload that is not
    /// JSON, or a stream that ended without any output (no text, reasoning, tool call
    /// nor finish reason). Retried like a cut stream: in practice it is a corrupted or
    /// truncated transfer (proxy, gateway, overloaded server) that a new request fixes.
    InvalidResponse,
}

impl ErrorClass {
    /// Whether a model request that failed with this class may be retried as is
    /// (bounded backoff). Context overflow is not: it needs compaction first.
    #[must_use]
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Self::RateLimited
                | Self::Overloaded
                | Self::Server
                | Self::StreamInterrupted
                | Self::Network
                | Self::InvalidResponse
        )
    }

    /// The snake_case name used in JSON.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContextOverflow => "context_overflow",
            Self::RateLimited => "rate_limited",
            Self::QuotaExhausted => "quota_exhausted",
            Self::Overloaded => "overloaded",
            Self::OutputLimit => "output_limit",
            Self::Auth => "auth",
            Self::ContentPolicy => "content_policy",
            Self::InvalidRequest => "invalid_request",
            Self::Server => "server",
            Self::StreamInterrupted => "stream_interrupted",
            Self::Network => "network",
            Self::Storage => "storage",
            Self::Internal => "internal",
            Self::LoopDetected => "loop_detected",
            Self::MaxSteps => "max_steps",
            Self::InvalidResponse => "invalid_response",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified provider failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{class}: {message}")]
pub struct ProviderError {
    /// What kind of failure.
    pub class: ErrorClass,
    /// Human-readable message (the provider's own text where it gave one). Never
    /// contains credentials.
    pub message: String,
    /// How long the provider asked us to wait before retrying, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// HTTP status, when the failure came with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

impl ProviderError {
    /// An error of `class` with `message` and nothing else.
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            retry_after_ms: None,
            status: None,
        }
    }
}

/// A tool call being assembled from fragments.
#[derive(Debug, Clone, Default, PartialEq)]
struct PartialCall {
    id: Option<ToolCallId>,
    name: Option<String>,
    arguments: String,
    extra: Option<serde_json::Value>,
}

/// Folds [`StreamEvent`]s into the aggregated result of one model response.
///
/// Pure and order-preserving; feeding the same events always gives the same aggregate,
/// whatever chunking the bytes arrived in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamAggregate {
    /// Concatenated answer text.
    pub text: String,
    /// Concatenated reasoning text.
    pub reasoning: String,
    /// Reasoning blocks to send back verbatim.
    pub reasoning_parts: Vec<ReasoningPart>,
    calls: BTreeMap<u32, PartialCall>,
    /// Last reported usage.
    pub usage: Option<Usage>,
    /// Whether a `Done` event arrived.
    pub done: bool,
    /// Finish reason as reported by `Done` (before the tool-call normalisation of
    /// [`Self::finish_reason`]).
    pub raw_finish_reason: Option<FinishReason>,
    /// The error that ended the stream, if any.
    pub error: Option<ProviderError>,
}

impl StreamAggregate {
    /// An empty aggregate.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one event.
    pub fn apply(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TextDelta { text } => self.text.push_str(text),
            StreamEvent::ReasoningDelta { text } => self.reasoning.push_str(text),
            StreamEvent::ReasoningPart { part } => self.reasoning_parts.push(part.clone()),
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
                extra,
            } => {
                let call = self.calls.entry(*index).or_default();
                if call.id.is_none() {
                    call.id.clone_from(id);
                }
                if call.name.is_none() {
                    call.name.clone_from(name);
                }
                call.arguments.push_str(arguments);
                if extra.is_some() {
                    call.extra.clone_from(extra);
                }
            }
            StreamEvent::Usage { usage } => self.usage = Some(*usage),
            StreamEvent::Done { finish_reason } => {
                self.done = true;
                self.raw_finish_reason = *finish_reason;
            }
            StreamEvent::Error { error } => self.error = Some(error.clone()),
        }
    }

    /// Whether any tool-call fragment arrived.
    #[must_use]
    pub fn has_tool_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The complete tool calls, in index order. A call whose name is missing or empty is
    /// kept with an empty `name` (the tool registry answers it with an `is_error` result
    /// saying the name is empty, so the model can correct itself, as Codex and Claude
    /// Code do); only fragments that carry nothing at all (no id, no name, no arguments,
    /// no extra) are noise and dropped. A call cut off by the output cap (`length`) is
    /// not complete and is dropped too. Missing ids are generated deterministically
    /// (`call_<index>`). Empty arguments become `{}`; arguments that are not JSON are
    /// kept as a JSON string.
    ///
    /// Calls are told apart by their dense index only: two calls with the same id stay two
    /// calls, each with its own arguments (decoders never merge fragments of different
    /// wire indexes by id). Ids are not made distinct here: the turn renames a repeated
    /// id (`<id>_dup2`, see `foya-actors` `turn/duplicates.rs`) before persisting, so
    /// every tool result answers exactly one call when the history is sent back.
    #[must_use]
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        if self.raw_finish_reason == Some(FinishReason::Length) || self.error.is_some() {
            return Vec::new();
        }
        self.calls
            .iter()
            .filter_map(|(index, call)| {
                if call.id.is_none()
                    && call.name.is_none()
                    && call.arguments.is_empty()
                    && call.extra.is_none()
                {
                    return None;
                }
                let name = call.name.clone().unwrap_or_default();
                let id = call
                    .id
                    .clone()
                    .unwrap_or_else(|| ToolCallId(format!("call_{index}")));
                Some(ToolCall {
                    id,
                    name,
                    arguments: parse_arguments(&call.arguments),
                    extra: call.extra.clone(),
                })
            })
            .collect()
    }

    /// The normalised finish reason: a response that produced complete tool calls and
    /// ended with `stop` or no reason is `tool_calls`; `tool_calls` without any complete
    /// call is `stop`.
    #[must_use]
    pub fn finish_reason(&self) -> Option<FinishReason> {
        let has_calls = !self.tool_calls().is_empty();
        match self.raw_finish_reason {
            Some(FinishReason::Stop) | None if has_calls && self.done => {
                Some(FinishReason::ToolCalls)
            }
            Some(FinishReason::ToolCalls) if !has_calls => Some(FinishReason::Stop),
            other => other,
        }
    }

    /// The aggregated assistant message.
    #[must_use]
    pub fn to_message(&self) -> AssistantMessage {
        AssistantMessage {
            text: self.text.clone(),
            reasoning: self.reasoning.clone(),
            reasoning_parts: self.reasoning_parts.clone(),
            tool_calls: self.tool_calls(),
            finish_reason: self.finish_reason(),
            interrupted: false,
        }
    }
}

/// Parses tool-call argument text: empty or whitespace → `{}`; JSON → that value;
/// anything else → the raw text as a JSON string.
#[must_use]
pub fn parse_arguments(text: &str) -> serde_json::Value {
    if text.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(index: u32, id: Option<&str>, name: Option<&str>, args: &str) -> StreamEvent {
        StreamEvent::ToolCallDelta {
            index,
            id: id.map(ToolCallId::new),
            name: name.map(str::to_owned),
            arguments: args.to_owned(),
            extra: None,
        }
    }

    #[test]
    fn stop_after_complete_calls_is_tool_calls_and_fragments_concatenate() {
        let mut agg = StreamAggregate::new();
        for ev in [
            delta(0, Some("a"), Some("shell"), "{\"comm"),
            delta(1, Some("b"), Some("read_file"), ""),
            delta(0, None, None, "and\":\"ls\"}"),
            StreamEvent::Done {
                finish_reason: Some(FinishReason::Stop),
            },
        ] {
            agg.apply(&ev);
        }
        let msg = agg.to_message();
        assert_eq!(msg.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            msg.tool_calls,
            vec![
                ToolCall {
                    id: ToolCallId::new("a"),
                    name: "shell".into(),
                    arguments: serde_json::json!({"command": "ls"}),
                    extra: None
                },
                ToolCall {
                    id: ToolCallId::new("b"),
                    name: "read_file".into(),
                    arguments: serde_json::json!({}),
                    extra: None
                },
            ]
        );
    }

    #[test]
    fn length_cut_call_is_not_complete() {
        let mut agg = StreamAggregate::new();
        agg.apply(&delta(0, Some("a"), Some("shell"), "{\"comm"));
        agg.apply(&StreamEvent::Done {
            finish_reason: Some(FinishReason::Length),
        });
        assert!(agg.tool_calls().is_empty());
        assert_eq!(agg.finish_reason(), Some(FinishReason::Length));
    }

    #[test]
    fn calls_sharing_an_id_stay_two_calls_with_their_own_arguments() {
        let mut agg = StreamAggregate::new();
        for ev in [
            delta(0, Some("dup"), Some("read_file"), "{\"path\":"),
            delta(1, Some("dup"), Some("read_file"), "{\"path\":\"b\"}"),
            delta(0, None, None, "\"a\"}"),
            StreamEvent::Done {
                finish_reason: Some(FinishReason::ToolCalls),
            },
        ] {
            agg.apply(&ev);
        }
        let call = |path: &str| ToolCall {
            id: ToolCallId::new("dup"),
            name: "read_file".into(),
            arguments: serde_json::json!({ "path": path }),
            extra: None,
        };
        assert_eq!(agg.to_message().tool_calls, vec![call("a"), call("b")]);
    }

    #[test]
    fn call_with_empty_or_missing_name_is_kept_for_an_error_result() {
        let mut agg = StreamAggregate::new();
        for ev in [
            delta(0, Some("a"), Some(""), "{\"path\":\"x\"}"),
            delta(1, Some("b"), None, "{}"),
            // a fragment carrying nothing is noise
            delta(2, None, None, ""),
            StreamEvent::Done {
                finish_reason: Some(FinishReason::ToolCalls),
            },
        ] {
            agg.apply(&ev);
        }
        let msg = agg.to_message();
        assert_eq!(msg.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            msg.tool_calls,
            vec![
                ToolCall {
                    id: ToolCallId::new("a"),
                    name: String::new(),
                    arguments: serde_json::json!({"path": "x"}),
                    extra: None
                },
                ToolCall {
                    id: ToolCallId::new("b"),
                    name: String::new(),
                    arguments: serde_json::json!({}),
                    extra: None
                },
            ]
        );
    }
}

//! Anthropic Messages stream decoder (`message_start`, `content_block_*`,
//! `message_delta`, `message_stop`, `ping`, `error`), per
//! <https://docs.anthropic.com/en/docs/build-with-claude/streaming>.
//!
//! Thinking streams as `ReasoningDelta`s and is emitted whole with its signature as a
//! `ReasoningPart` at block stop (the API requires it back on the next request);
//! redacted thinking is kept verbatim. Usage is cumulative: `message_start` gives input
//! and first output counts, `message_delta` replaces them.
//!
//! A `data:` payload that is not JSON fails the stream with `invalid_response` (see
//! `common::parse_payload`); `ping`, empty data, `[DONE]` and unknown event types are
//! ignored.

use super::common::{Payload, Terminal, parse_payload, payload_value};
use super::json::{Obj, Str, U64, json_object};
use super::{WireDecoder, interrupted};
use crate::classify;
use foya_protocol::{FinishReason, ProviderError, ReasoningPart, StreamEvent, ToolCallId, Usage};
use serde_json::Value;
use std::collections::HashMap;

json_object! {
    /// A stream event's payload (its `type` falls back to the SSE event name).
    Event<'a> {
        kind: Str<'a> = "type",
        index: U64 = "index",
        message: Obj<Message> = "message",
        content_block: Obj<ContentBlock<'a>> = "content_block",
        delta: Obj<BlockDelta<'a>> = "delta",
        usage: Obj<AnthropicUsage> = "usage",
    }
}

json_object! {
    /// `message_start`'s `message`.
    Message {
        usage: Obj<AnthropicUsage> = "usage",
    }
}

json_object! {
    /// `content_block_start`'s `content_block`.
    ContentBlock<'a> {
        kind: Str<'a> = "type",
        text: Str<'a> = "text",
        thinking: Str<'a> = "thinking",
        signature: Str<'a> = "signature",
        data: Str<'a> = "data",
        id: Str<'a> = "id",
        name: Str<'a> = "name",
        /// A tool's whole input (kept as JSON: sent as its text if no delta follows).
        input: Option<Value> = "input",
    }
}

json_object! {
    /// `content_block_delta`'s and `message_delta`'s `delta`.
    BlockDelta<'a> {
        kind: Str<'a> = "type",
        text: Str<'a> = "text",
        thinking: Str<'a> = "thinking",
        signature: Str<'a> = "signature",
        partial_json: Str<'a> = "partial_json",
        stop_reason: Str<'a> = "stop_reason",
    }
}

json_object! {
    /// `usage` (token counts).
    AnthropicUsage {
        input_tokens: U64 = "input_tokens",
        output_tokens: U64 = "output_tokens",
        cache_read_input_tokens: U64 = "cache_read_input_tokens",
        cache_creation_input_tokens: U64 = "cache_creation_input_tokens",
    }
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        text: String,
        signature: String,
    },
    Redacted,
    Tool {
        dense: u32,
        got_delta: bool,
        start_input: Option<Value>,
    },
    Other,
}

/// Decoder state for one Messages response.
#[derive(Debug, Default)]
pub struct AnthropicDecoder {
    terminal: Terminal,
    blocks: HashMap<u64, Block>,
    n_calls: u32,
    usage: Usage,
    stop_reason: Option<FinishReason>,
}

impl AnthropicDecoder {
    /// A decoder for a new response.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn apply_usage(&mut self, u: &AnthropicUsage, out: &mut Vec<StreamEvent>) {
        let cache_read = u.cache_read_input_tokens.0;
        let cache_write = u.cache_creation_input_tokens.0;
        if let Some(input) = u.input_tokens.0 {
            self.usage.input_tokens = input + cache_read.unwrap_or(0) + cache_write.unwrap_or(0);
        }
        if cache_read.is_some() {
            self.usage.cached_input_tokens = cache_read;
        }
        if let Some(output) = u.output_tokens.0 {
            self.usage.output_tokens = output;
        }
        out.push(StreamEvent::Usage { usage: self.usage });
    }

    fn block_start(&mut self, index: u64, block: ContentBlock<'_>, out: &mut Vec<StreamEvent>) {
        let state = match block.kind.get() {
            Some("text") => {
                if let Some(text) = block.text.0.filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        text: text.into_owned(),
                    });
                }
                Block::Text
            }
            Some("thinking") => {
                let text = block.thinking.0.unwrap_or_default().into_owned();
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text: text.clone() });
                }
                let signature = block.signature.0.unwrap_or_default().into_owned();
                Block::Thinking { text, signature }
            }
            Some("redacted_thinking") => {
                let data = block.data.0.unwrap_or_default().into_owned();
                out.push(StreamEvent::ReasoningPart {
                    part: ReasoningPart::Redacted { data },
                });
                Block::Redacted
            }
            Some("tool_use") => {
                let dense = self.n_calls;
                self.n_calls += 1;
                out.push(StreamEvent::ToolCallDelta {
                    index: dense,
                    id: block.id.0.map(|id| ToolCallId::new(id.into_owned())),
                    name: block.name.0.map(|n| n.into_owned()),
                    arguments: String::new(),
                    extra: None,
                });
                let start_input = block
                    .input
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                Block::Tool {
                    dense,
                    got_delta: false,
                    start_input,
                }
            }
            _ => Block::Other,
        };
        self.blocks.insert(index, state);
    }

    fn block_delta(&mut self, index: u64, delta: BlockDelta<'_>, out: &mut Vec<StreamEvent>) {
        let Some(block) = self.blocks.get_mut(&index) else {
            return;
        };
        match (block, delta.kind.get()) {
            (Block::Text, Some("text_delta")) => {
                if let Some(text) = delta.text.0.filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        text: text.into_owned(),
                    });
                }
            }
            (Block::Thinking { text, .. }, Some("thinking_delta")) => {
                if let Some(piece) = delta.thinking.get().filter(|t| !t.is_empty()) {
                    text.push_str(piece);
                    out.push(StreamEvent::ReasoningDelta {
                        text: piece.to_owned(),
                    });
                }
            }
            (Block::Thinking { signature, .. }, Some("signature_delta")) => {
                signature.push_str(delta.signature.get().unwrap_or_default());
            }
            (
                Block::Tool {
                    dense, got_delta, ..
                },
                Some("input_json_delta"),
            ) => {
                let piece = delta.partial_json.0.unwrap_or_default();
                if !piece.is_empty() {
                    *got_delta = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: *dense,
                        id: None,
                        name: None,
                        arguments: piece.into_owned(),
                        extra: None,
                    });
                }
            }
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<StreamEvent>) {
        match self.blocks.remove(&index) {
            Some(Block::Thinking { text, signature }) => {
                let signature = (!signature.is_empty()).then_some(signature);
                out.push(StreamEvent::ReasoningPart {
                    part: ReasoningPart::Thinking { text, signature },
                });
            }
            Some(Block::Tool {
                dense,
                got_delta: false,
                start_input: Some(input),
            }) => {
                out.push(StreamEvent::ToolCallDelta {
                    index: dense,
                    id: None,
                    name: None,
                    arguments: input.to_string(),
                    extra: None,
                });
            }
            _ => {}
        }
    }
}

/// Maps an Anthropic `stop_reason`.
#[must_use]
pub(crate) fn map_stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "pause_turn" => FinishReason::PauseTurn,
        "refusal" => FinishReason::ContentFilter,
        "model_context_window_exceeded" => FinishReason::ContextWindow,
        _ => FinishReason::Other,
    }
}

impl WireDecoder for AnthropicDecoder {
    fn on_event(&mut self, event: &str, data: &str, out: &mut Vec<StreamEvent>) {
        if self.terminal.is_finished() {
            return;
        }
        let v = match parse_payload::<Event<'_>>("Anthropic", data) {
            Ok(Payload::Json(v)) => v,
            Ok(Payload::Empty | Payload::Done) => return,
            Err(error) => return self.terminal.error(error, out),
        };
        let index = v.index.0.unwrap_or(0);
        match v.kind.get().unwrap_or(event) {
            "message_start" => {
                if let Some(u) = v.message.0.and_then(|m| m.usage.0) {
                    self.apply_usage(&u, out);
                }
            }
            "content_block_start" => {
                self.block_start(index, v.content_block.0.unwrap_or_default(), out);
            }
            "content_block_delta" => {
                self.block_delta(index, v.delta.0.unwrap_or_default(), out);
            }
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(reason) = v.delta.0.as_ref().and_then(|d| d.stop_reason.get()) {
                    self.stop_reason = Some(map_stop_reason(reason));
                }
                if let Some(u) = &v.usage.0 {
                    self.apply_usage(u, out);
                }
            }
            "message_stop" => self.terminal.done(self.stop_reason, out),
            "error" => self
                .terminal
                .error(classify::classify_stream_error(&payload_value(data)), out),
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.terminal
            .error(interrupted("stream ended before message_stop"), out);
    }

    fn is_finished(&self) -> bool {
        self.terminal.is_finished()
    }

    fn fail(&mut self, error: ProviderError, out: &mut Vec<StreamEvent>) {
        self.terminal.error(error, out);
    }
}

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

use super::common::{Payload, Terminal, parse_payload, str_at, u64_at};
use super::{WireDecoder, interrupted};
use crate::provider::classify;
use foya_protocol::{FinishReason, ProviderError, ReasoningPart, StreamEvent, ToolCallId, Usage};
use serde_json::Value;
use std::collections::HashMap;

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

    fn apply_usage(&mut self, u: &Value, out: &mut Vec<StreamEvent>) {
        if !u.is_object() {
            return;
        }
        let cache_read = u64_at(u, "cache_read_input_tokens");
        let cache_write = u64_at(u, "cache_creation_input_tokens");
        if let Some(input) = u64_at(u, "input_tokens") {
            self.usage.input_tokens = input + cache_read.unwrap_or(0) + cache_write.unwrap_or(0);
        }
        if cache_read.is_some() {
            self.usage.cached_input_tokens = cache_read;
        }
        if let Some(output) = u64_at(u, "output_tokens") {
            self.usage.output_tokens = output;
        }
        out.push(StreamEvent::Usage { usage: self.usage });
    }

    fn block_start(&mut self, index: u64, block: &Value, out: &mut Vec<StreamEvent>) {
        let state = match str_at(block, "type") {
            Some("text") => {
                if let Some(text) = str_at(block, "text").filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        text: text.to_owned(),
                    });
                }
                Block::Text
            }
            Some("thinking") => {
                let text = str_at(block, "thinking").unwrap_or_default().to_owned();
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text: text.clone() });
                }
                let signature = str_at(block, "signature").unwrap_or_default().to_owned();
                Block::Thinking { text, signature }
            }
            Some("redacted_thinking") => {
                let data = str_at(block, "data").unwrap_or_default().to_owned();
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
                    id: str_at(block, "id").map(ToolCallId::new),
                    name: str_at(block, "name").map(str::to_owned),
                    arguments: String::new(),
                    extra: None,
                });
                let start_input = block
                    .get("input")
                    .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                    .cloned();
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

    fn block_delta(&mut self, index: u64, delta: &Value, out: &mut Vec<StreamEvent>) {
        let Some(block) = self.blocks.get_mut(&index) else {
            return;
        };
        match (block, str_at(delta, "type")) {
            (Block::Text, Some("text_delta")) => {
                if let Some(text) = str_at(delta, "text").filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        text: text.to_owned(),
                    });
                }
            }
            (Block::Thinking { text, .. }, Some("thinking_delta")) => {
                if let Some(piece) = str_at(delta, "thinking").filter(|t| !t.is_empty()) {
                    text.push_str(piece);
                    out.push(StreamEvent::ReasoningDelta {
                        text: piece.to_owned(),
                    });
                }
            }
            (Block::Thinking { signature, .. }, Some("signature_delta")) => {
                signature.push_str(str_at(delta, "signature").unwrap_or_default());
            }
            (
                Block::Tool {
                    dense, got_delta, ..
                },
                Some("input_json_delta"),
            ) => {
                let piece = str_at(delta, "partial_json").unwrap_or_default();
                if !piece.is_empty() {
                    *got_delta = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: *dense,
                        id: None,
                        name: None,
                        arguments: piece.to_owned(),
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
        let v = match parse_payload("Anthropic", data) {
            Ok(Payload::Json(v)) => v,
            Ok(Payload::Empty | Payload::Done) => return,
            Err(error) => return self.terminal.error(error, out),
        };
        let kind = str_at(&v, "type").unwrap_or(event);
        let index = u64_at(&v, "index").unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.apply_usage(u, out);
                }
            }
            "content_block_start" => {
                self.block_start(index, v.get("content_block").unwrap_or(&Value::Null), out);
            }
            "content_block_delta" => {
                self.block_delta(index, v.get("delta").unwrap_or(&Value::Null), out)
            }
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(reason) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(map_stop_reason(reason));
                }
                if let Some(u) = v.get("usage") {
                    self.apply_usage(u, out);
                }
            }
            "message_stop" => self.terminal.done(self.stop_reason, out),
            "error" => self
                .terminal
                .error(classify::classify_stream_error(&v), out),
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

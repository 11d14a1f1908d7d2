//! Anthropic Messages stream: `message_start`, `ping`, content blocks (`thinking` with its
//! `signature_delta`, `text`, `tool_use` with `input_json_delta`s), `message_delta` with
//! the stop reason and output tokens, `message_stop`; `event: error` mid-stream.

use super::{WireMeta, frame, json_str};
use foya_protocol::{ErrorClass, FinishReason, ReasoningPart, StreamEvent};

/// Signature written when a thinking block closes without one from a `ReasoningPart`
/// (base64 of `simulated`).
const SIM_SIGNATURE: &str = "c2ltdWxhdGVk";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking { signed: bool },
    Text,
    Tool { call: u32 },
}

#[derive(Debug)]
pub(super) struct AnthropicEncoder {
    meta: WireMeta,
    /// The open content block and its index.
    open: Option<(u32, Block)>,
    next_index: u32,
    output_tokens: Option<u64>,
}

impl AnthropicEncoder {
    pub(super) fn new(meta: WireMeta) -> Self {
        Self {
            meta,
            open: None,
            next_index: 0,
            output_tokens: None,
        }
    }

    pub(super) fn start(&mut self, out: &mut String) {
        let data = format!(
            r#"{{"type":"message_start","message":{{"id":{},"type":"message","role":"assistant","model":{},"content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}}}}"#,
            json_str(&self.meta.id),
            json_str(&self.meta.model),
            self.meta.input_tokens
        );
        frame(out, Some("message_start"), &data);
        frame(out, Some("ping"), r#"{"type":"ping"}"#);
    }

    fn delta(out: &mut String, index: u32, delta: &str) {
        let data = format!(r#"{{"type":"content_block_delta","index":{index},"delta":{delta}}}"#);
        frame(out, Some("content_block_delta"), &data);
    }

    fn close(&mut self, out: &mut String) {
        if let Some((index, block)) = self.open.take() {
            if block == (Block::Thinking { signed: false }) {
                let sig = format!(r#"{{"type":"signature_delta","signature":"{SIM_SIGNATURE}"}}"#);
                Self::delta(out, index, &sig);
            }
            let data = format!(r#"{{"type":"content_block_stop","index":{index}}}"#);
            frame(out, Some("content_block_stop"), &data);
        }
    }

    /// Opens a block of kind `block` (closing the current one) unless it is already
    /// open; returns its index.
    fn ensure(&mut self, out: &mut String, block: Block, content_block: &str) -> u32 {
        match self.open {
            Some((index, open)) if same_kind(open, block) => index,
            _ => {
                self.close(out);
                let index = self.next_index;
                self.next_index += 1;
                let data = format!(
                    r#"{{"type":"content_block_start","index":{index},"content_block":{content_block}}}"#
                );
                frame(out, Some("content_block_start"), &data);
                self.open = Some((index, block));
                index
            }
        }
    }

    pub(super) fn event(&mut self, event: &StreamEvent, out: &mut String) {
        match event {
            StreamEvent::ReasoningDelta { text } => {
                let start = r#"{"type":"thinking","thinking":"","signature":""}"#;
                let index = self.ensure(out, Block::Thinking { signed: false }, start);
                let delta = format!(
                    r#"{{"type":"thinking_delta","thinking":{}}}"#,
                    json_str(text)
                );
                Self::delta(out, index, &delta);
            }
            StreamEvent::ReasoningPart {
                part: ReasoningPart::Thinking { signature, .. },
            } => {
                if let Some((index, Block::Thinking { signed: false })) = self.open {
                    let sig = signature.as_deref().unwrap_or(SIM_SIGNATURE);
                    let delta = format!(
                        r#"{{"type":"signature_delta","signature":{}}}"#,
                        json_str(sig)
                    );
                    Self::delta(out, index, &delta);
                    self.open = Some((index, Block::Thinking { signed: true }));
                }
            }
            StreamEvent::ReasoningPart {
                part: ReasoningPart::Redacted { data },
            } => {
                self.close(out);
                let start = format!(
                    r#"{{"type":"redacted_thinking","data":{}}}"#,
                    json_str(data)
                );
                self.ensure(out, Block::Text, &start);
                self.open = self
                    .open
                    .map(|(i, _)| (i, Block::Thinking { signed: true }));
                self.close(out);
            }
            StreamEvent::TextDelta { text } => {
                let index = self.ensure(out, Block::Text, r#"{"type":"text","text":""}"#);
                let delta = format!(r#"{{"type":"text_delta","text":{}}}"#, json_str(text));
                Self::delta(out, index, &delta);
            }
            StreamEvent::ToolCallDelta {
                index: call,
                id,
                name,
                arguments,
                ..
            } => {
                let continuing = self
                    .open
                    .is_some_and(|(_, b)| b == Block::Tool { call: *call });
                if !continuing || id.is_some() {
                    self.close(out);
                    let id = id
                        .as_ref()
                        .map_or_else(|| format!("toolu_sim_{call}"), |i| i.0.clone());
                    let start = format!(
                        r#"{{"type":"tool_use","id":{},"name":{},"input":{{}}}}"#,
                        json_str(&id),
                        json_str(name.as_deref().unwrap_or_default())
                    );
                    let index = self.ensure(out, Block::Tool { call: *call }, &start);
                    if !arguments.is_empty() {
                        Self::json_delta(out, index, arguments);
                    }
                } else if let Some((index, _)) = self.open {
                    Self::json_delta(out, index, arguments);
                }
            }
            StreamEvent::Usage { usage } => self.output_tokens = Some(usage.output_tokens),
            StreamEvent::Done { finish_reason } => {
                self.close(out);
                let data = format!(
                    r#"{{"type":"message_delta","delta":{{"stop_reason":{},"stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
                    stop_reason(*finish_reason),
                    self.output_tokens.unwrap_or(0)
                );
                frame(out, Some("message_delta"), &data);
                frame(out, Some("message_stop"), r#"{"type":"message_stop"}"#);
            }
            StreamEvent::Error { error } => {
                let kind = match error.class {
                    ErrorClass::Overloaded => "overloaded_error",
                    ErrorClass::RateLimited => "rate_limit_error",
                    ErrorClass::ContextOverflow | ErrorClass::InvalidRequest => {
                        "invalid_request_error"
                    }
                    _ => "api_error",
                };
                let data = format!(
                    r#"{{"type":"error","error":{{"type":"{kind}","message":{}}}}}"#,
                    json_str(&error.message)
                );
                frame(out, Some("error"), &data);
            }
        }
    }

    fn json_delta(out: &mut String, index: u32, partial: &str) {
        let delta = format!(
            r#"{{"type":"input_json_delta","partial_json":{}}}"#,
            json_str(partial)
        );
        Self::delta(out, index, &delta);
    }
}

fn same_kind(open: Block, want: Block) -> bool {
    matches!(
        (open, want),
        (Block::Thinking { .. }, Block::Thinking { .. }) | (Block::Text, Block::Text)
    ) || (matches!(open, Block::Tool { .. }) && open == want)
}

fn stop_reason(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Stop | FinishReason::Other) => r#""end_turn""#,
        Some(FinishReason::ToolCalls) => r#""tool_use""#,
        Some(FinishReason::Length) => r#""max_tokens""#,
        Some(FinishReason::ContentFilter) => r#""refusal""#,
        Some(FinishReason::PauseTurn) => r#""pause_turn""#,
        Some(FinishReason::ContextWindow) => r#""model_context_window_exceeded""#,
        None => "null",
    }
}

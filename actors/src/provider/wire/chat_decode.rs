//! OpenAI Chat Completions stream decoder (`chat.completion.chunk` events), robust to the
//! variations of compatible servers: tool calls without `index`, with gaps, all at index
//! 0 with distinct ids, id and name repeated on every fragment, arguments as a JSON
//! object; `reasoning_content` and/or `reasoning`; usage in its own chunk, in the finish
//! chunk or with `choices: null`; error objects inside a 200 stream; no `[DONE]`.
//!
//! What it refuses (`invalid_response`, retried like a cut stream): a `data:` payload
//! that is not JSON (its text would be lost silently; the AI SDK and opencode fail the
//! stream the same way), and a stream that ends without any output — no text, no
//! reasoning, no tool call and no finish reason (e.g. a bare `data: [DONE]`). A
//! response with output but no finish reason still ends `Done` with none; an empty
//! answer with a finish reason is valid.
//!
//! Two calls with the same id at different wire indexes stay two calls (each with its
//! own arguments), never merged by id; the turn then renames the later one
//! (`<id>_dup2`, `turn/duplicates.rs`) so each tool result answers exactly one call.

use super::common::{Payload, Terminal, parse_payload, str_at, u64_at};
use super::{WireDecoder, interrupted};
use crate::provider::classify;
use foya_protocol::{ErrorClass, FinishReason, ProviderError, StreamEvent, ToolCallId, Usage};
use serde_json::Value;

/// One tool call seen in the stream.
#[derive(Debug)]
struct Slot {
    /// The call id the provider gave, if any.
    id: Option<String>,
    /// The wire `index` of its fragments, if the provider sent one.
    wire_index: Option<u64>,
    id_sent: bool,
    name_sent: bool,
}

/// Decoder state for one Chat Completions response.
#[derive(Debug, Default)]
pub struct ChatDecoder {
    terminal: Terminal,
    slots: Vec<Slot>,
    finish_reason: Option<FinishReason>,
    finish_seen: bool,
    /// Last reasoning piece and the field it came from (dedupe of mirrored fields).
    last_reasoning: Option<(bool, String)>,
    last_usage: Option<Usage>,
    /// Whether any text, reasoning or tool-call fragment was emitted.
    output_seen: bool,
}

/// The protocol's name in error messages.
const FORMAT: &str = "OpenAI Chat";

impl ChatDecoder {
    /// A decoder for a new response.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The slot a fragment belongs to: by id (unless both carry different wire indexes:
    /// a repeated id at another index is another call), then by wire index; a fragment
    /// with neither continues the last call unless it names a new tool after a named
    /// call.
    fn slot_for(&mut self, wire_index: Option<u64>, id: Option<&str>, name: Option<&str>) -> usize {
        if let Some(id) = id {
            if let Some(pos) = self.slots.iter().rposition(|s| {
                s.id.as_deref() == Some(id)
                    && (s.wire_index.is_none()
                        || wire_index.is_none()
                        || s.wire_index == wire_index)
            }) {
                return pos;
            }
            if let Some(pos) = self
                .slots
                .iter()
                .rposition(|s| s.id.is_none() && s.wire_index == wire_index && wire_index.is_some())
            {
                self.slots[pos].id = Some(id.to_owned());
                return pos;
            }
        } else if wire_index.is_some() {
            if let Some(pos) = self.slots.iter().rposition(|s| s.wire_index == wire_index) {
                return pos;
            }
        } else if let Some(last) = self.slots.last()
            && (name.is_none() || !last.name_sent)
        {
            return self.slots.len() - 1;
        }
        self.slots.push(Slot {
            id: id.map(str::to_owned),
            wire_index,
            id_sent: false,
            name_sent: false,
        });
        self.slots.len() - 1
    }

    fn tool_call(&mut self, tc: &Value, out: &mut Vec<StreamEvent>) {
        let id = str_at(tc, "id").filter(|s| !s.is_empty());
        let func = tc.get("function").unwrap_or(&Value::Null);
        let name = str_at(func, "name").filter(|s| !s.is_empty());
        let arguments = match func.get("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let pos = self.slot_for(u64_at(tc, "index"), id, name);
        let slot = &mut self.slots[pos];
        let id_out = match (slot.id_sent, slot.id.as_deref()) {
            (false, Some(id)) => {
                slot.id_sent = true;
                Some(ToolCallId::new(id))
            }
            _ => None,
        };
        let name_out = match (slot.name_sent, name) {
            (false, Some(n)) => {
                slot.name_sent = true;
                Some(n.to_owned())
            }
            _ => None,
        };
        let extra = tc.as_object().and_then(|o| {
            let rest: serde_json::Map<String, Value> = o
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "index" | "id" | "type" | "function"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (!rest.is_empty()).then_some(Value::Object(rest))
        });
        if id_out.is_none() && name_out.is_none() && arguments.is_empty() && extra.is_none() {
            return;
        }
        self.output_seen = true;
        out.push(StreamEvent::ToolCallDelta {
            index: u32::try_from(pos).unwrap_or(u32::MAX),
            id: id_out,
            name: name_out,
            arguments,
            extra,
        });
    }

    fn reasoning(&mut self, delta: &Value, out: &mut Vec<StreamEvent>) {
        let a = str_at(delta, "reasoning_content").filter(|s| !s.is_empty());
        let b = str_at(delta, "reasoning").filter(|s| !s.is_empty());
        let pieces = match (a, b) {
            (Some(a), Some(b)) if a == b => vec![(false, a)],
            (a, b) => a
                .map(|a| (false, a))
                .into_iter()
                .chain(b.map(|b| (true, b)))
                .collect(),
        };
        for (field, piece) in pieces {
            if let Some((last_field, last)) = &self.last_reasoning
                && *last_field != field
                && last == piece
            {
                continue;
            }
            self.last_reasoning = Some((field, piece.to_owned()));
            self.output_seen = true;
            out.push(StreamEvent::ReasoningDelta {
                text: piece.to_owned(),
            });
        }
    }

    fn usage(&mut self, u: &Value, out: &mut Vec<StreamEvent>) {
        if !u.is_object() {
            return;
        }
        let usage = Usage {
            input_tokens: u64_at(u, "prompt_tokens").unwrap_or(0),
            output_tokens: u64_at(u, "completion_tokens").unwrap_or(0),
            cached_input_tokens: u
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64),
            reasoning_tokens: u
                .pointer("/completion_tokens_details/reasoning_tokens")
                .and_then(Value::as_u64),
        };
        if self.last_usage != Some(usage) {
            self.last_usage = Some(usage);
            out.push(StreamEvent::Usage { usage });
        }
    }

    fn chunk(&mut self, v: &Value, out: &mut Vec<StreamEvent>) {
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let error: ProviderError = classify::classify_stream_error(err);
            self.terminal.error(error, out);
            return;
        }
        if str_at(v, "object") == Some("error") {
            self.terminal.error(classify::classify_stream_error(v), out);
            return;
        }
        if let Some(choices) = v.get("choices").and_then(Value::as_array) {
            for choice in choices
                .iter()
                .filter(|c| u64_at(c, "index").unwrap_or(0) == 0)
            {
                if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
                    self.reasoning(delta, out);
                    if let Some(text) = str_at(delta, "content").filter(|s| !s.is_empty()) {
                        self.output_seen = true;
                        out.push(StreamEvent::TextDelta {
                            text: text.to_owned(),
                        });
                    }
                    if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                        for tc in calls {
                            self.tool_call(tc, out);
                        }
                    }
                }
                if let Some(reason) = str_at(choice, "finish_reason") {
                    self.finish_seen = true;
                    self.finish_reason = Some(map_finish_reason(reason));
                }
            }
        }
        if let Some(u) = v.get("usage") {
            self.usage(u, out);
        }
    }
}

impl ChatDecoder {
    /// `[DONE]`: the response ends, `invalid_response` when nothing came before it.
    fn end(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finish_seen || self.output_seen {
            self.terminal.done(self.finish_reason, out);
        } else {
            self.terminal.error(no_output(), out);
        }
    }
}

/// The error of a stream that ended without any output.
fn no_output() -> ProviderError {
    ProviderError::new(
        ErrorClass::InvalidResponse,
        "the stream ended without any output (no text, tool call or finish reason)",
    )
}

/// Maps a Chat Completions `finish_reason`.
#[must_use]
pub(crate) fn map_finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" | "end_turn" | "eos" => FinishReason::Stop,
        "length" | "max_tokens" => FinishReason::Length,
        "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

impl WireDecoder for ChatDecoder {
    fn on_event(&mut self, event: &str, data: &str, out: &mut Vec<StreamEvent>) {
        if self.terminal.is_finished() {
            return;
        }
        match parse_payload(FORMAT, data) {
            Ok(Payload::Empty) => {}
            Ok(Payload::Done) => self.end(out),
            Ok(Payload::Json(v)) if event == "error" && v.get("error").is_none() => {
                self.terminal
                    .error(classify::classify_stream_error(&v), out);
            }
            Ok(Payload::Json(v)) => self.chunk(&v, out),
            Err(error) => self.terminal.error(error, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        if self.finish_seen {
            self.terminal.done(self.finish_reason, out);
        } else {
            self.terminal
                .error(interrupted("stream ended before a finish reason"), out);
        }
    }

    fn is_finished(&self) -> bool {
        self.terminal.is_finished()
    }

    /// A transport failure after the finish reason arrived (a server that never sends
    /// `[DONE]` nor closes) loses nothing: the response is complete, so it ends `Done`.
    fn fail(&mut self, error: ProviderError, out: &mut Vec<StreamEvent>) {
        if self.finish_seen && error.class == ErrorClass::StreamInterrupted {
            self.terminal.done(self.finish_reason, out);
        } else {
            self.terminal.error(error, out);
        }
    }
}

//! OpenAI Chat Completions stream decoder (`chat.completion.chunk` events), robust to the
//! variations of compatible servers: tool calls without `index`, with gaps, all at index
//! 0 with distinct ids, id and name repeated on every fragment, arguments as a JSON
//! object, entries that are not objects (skipped); `reasoning_content` and/or
//! `reasoning`; usage in its own chunk, in the finish chunk or with `choices: null`;
//! error objects inside a 200 stream (an `error` that holds nothing — `null`, `false`,
//! `{}` — beside the chunk's fields is no error); no `[DONE]`.
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

use super::chat_json::{ChatUsage, Chunk, Delta, ToolCall};
use super::common::{Payload, Terminal, parse_payload, payload_value};
use super::{WireDecoder, interrupted};
use crate::classify;
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

    fn tool_call(&mut self, tc: ToolCall<'_>, out: &mut Vec<StreamEvent>) {
        let ToolCall {
            index,
            id,
            function,
            extra,
        } = tc;
        let id = id.get().filter(|s| !s.is_empty());
        let (name, arguments) = match &function.0 {
            Some(f) => (
                f.name.get().filter(|s| !s.is_empty()),
                f.arguments.0.as_str(),
            ),
            None => (None, ""),
        };
        let pos = self.slot_for(index.0, id, name);
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
        if id_out.is_none() && name_out.is_none() && arguments.is_empty() && extra.is_none() {
            return;
        }
        let arguments = function.0.map(|f| f.arguments.0).unwrap_or_default();
        self.output_seen = true;
        out.push(StreamEvent::ToolCallDelta {
            index: u32::try_from(pos).unwrap_or(u32::MAX),
            id: id_out,
            name: name_out,
            arguments,
            extra: extra.map(Value::Object),
        });
    }

    fn reasoning(&mut self, delta: &Delta<'_>, out: &mut Vec<StreamEvent>) {
        let a = delta.reasoning_content.get().filter(|s| !s.is_empty());
        let b = delta.reasoning.get().filter(|s| !s.is_empty());
        let pieces = match (a, b) {
            (Some(a), Some(b)) if a == b => [Some((false, a)), None],
            (a, b) => [a.map(|a| (false, a)), b.map(|b| (true, b))],
        };
        for (field, piece) in pieces.into_iter().flatten() {
            match &mut self.last_reasoning {
                Some((last_field, last)) if *last_field != field && last == piece => continue,
                Some((last_field, last)) => {
                    *last_field = field;
                    last.clear();
                    last.push_str(piece);
                }
                None => self.last_reasoning = Some((field, piece.to_owned())),
            }
            self.output_seen = true;
            out.push(StreamEvent::ReasoningDelta {
                text: piece.to_owned(),
            });
        }
    }

    fn usage(&mut self, u: &ChatUsage, out: &mut Vec<StreamEvent>) {
        let usage = Usage {
            input_tokens: u.prompt_tokens.0.unwrap_or(0),
            output_tokens: u.completion_tokens.0.unwrap_or(0),
            cached_input_tokens: u
                .prompt_tokens_details
                .0
                .as_ref()
                .and_then(|d| d.cached_tokens.0),
            reasoning_tokens: u
                .completion_tokens_details
                .0
                .as_ref()
                .and_then(|d| d.reasoning_tokens.0),
        };
        if self.last_usage != Some(usage) {
            self.last_usage = Some(usage);
            out.push(StreamEvent::Usage { usage });
        }
    }

    /// One chunk; `data` is its payload, re-read as a `Value` only to classify an error.
    fn chunk(&mut self, chunk: Chunk<'_>, data: &str, out: &mut Vec<StreamEvent>) {
        if chunk.error.0.is_some_and(|e| e.0) {
            let v = payload_value(data);
            let err = v.get("error").unwrap_or(&Value::Null);
            self.terminal
                .error(classify::classify_stream_error(err), out);
            return;
        }
        if chunk.object.get() == Some("error") {
            self.terminal
                .error(classify::classify_stream_error(&payload_value(data)), out);
            return;
        }
        for choice in chunk.choices.into_iter().filter_map(|c| c.0) {
            if choice.index.0.unwrap_or(0) != 0 {
                continue;
            }
            let delta = match choice.delta.0 {
                Some(delta) => delta.0,
                None => choice.message.0,
            };
            if let Some(delta) = delta {
                self.reasoning(&delta, out);
                if let Some(text) = delta.content.0.filter(|s| !s.is_empty()) {
                    self.output_seen = true;
                    out.push(StreamEvent::TextDelta {
                        text: text.into_owned(),
                    });
                }
                // An entry that is not an object carries nothing: skipped, so it takes no
                // call index.
                for tc in delta.tool_calls.into_iter().filter_map(|tc| tc.0) {
                    self.tool_call(tc, out);
                }
            }
            if let Some(reason) = choice.finish_reason.get() {
                self.finish_seen = true;
                self.finish_reason = Some(map_finish_reason(reason));
            }
        }
        if let Some(u) = &chunk.usage.0 {
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
        match parse_payload::<Chunk<'_>>(FORMAT, data) {
            Ok(Payload::Empty) => {}
            Ok(Payload::Done) => self.end(out),
            Ok(Payload::Json(chunk)) if event == "error" && chunk.error.0.is_none() => {
                self.terminal
                    .error(classify::classify_stream_error(&payload_value(data)), out);
            }
            Ok(Payload::Json(chunk)) => self.chunk(chunk, data, out),
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

//! OpenAI Responses stream decoder (`response.*` events), per
//! <https://platform.openai.com/docs/api-reference/responses-streaming>.
//!
//! Function-call argument deltas carry the output item's `item_id`; they are mapped to
//! the call's `call_id` (announced by `response.output_item.added`). `response.failed`
//! and `error` events are classified like HTTP errors. A `data:` payload that is not
//! JSON fails the stream with `invalid_response` (see `common::parse_payload`); empty
//! data, `[DONE]` and unknown event types are ignored.

use super::common::{Payload, Terminal, parse_payload, str_at, u64_at};
use super::{WireDecoder, interrupted};
use crate::provider::classify;
use foya_protocol::{FinishReason, ProviderError, StreamEvent, ToolCallId, Usage};
use serde_json::Value;
use std::collections::HashMap;

#[derive(Debug)]
struct Call {
    dense: u32,
    got_arguments: bool,
}

/// Decoder state for one Responses stream.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    terminal: Terminal,
    /// Function calls by output item id.
    calls: HashMap<String, Call>,
    /// Item id by output index, for deltas that lack `item_id`.
    by_output_index: HashMap<u64, String>,
    /// Last (item id, summary index) of reasoning text, to separate summary parts.
    last_summary: Option<(String, u64)>,
}

impl ResponsesDecoder {
    /// A decoder for a new response.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn item_added(&mut self, v: &Value, out: &mut Vec<StreamEvent>) {
        let item = v.get("item").unwrap_or(&Value::Null);
        if str_at(item, "type") != Some("function_call") {
            return;
        }
        let item_id = str_at(item, "id")
            .or_else(|| str_at(item, "call_id"))
            .unwrap_or_default()
            .to_owned();
        if self.calls.contains_key(&item_id) {
            return;
        }
        let dense = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
        let arguments = str_at(item, "arguments").unwrap_or_default().to_owned();
        out.push(StreamEvent::ToolCallDelta {
            index: dense,
            id: str_at(item, "call_id")
                .or_else(|| str_at(item, "id"))
                .map(ToolCallId::new),
            name: str_at(item, "name").map(str::to_owned),
            arguments: arguments.clone(),
            extra: None,
        });
        if let Some(i) = u64_at(v, "output_index") {
            self.by_output_index.insert(i, item_id.clone());
        }
        self.calls.insert(
            item_id,
            Call {
                dense,
                got_arguments: !arguments.is_empty(),
            },
        );
    }

    fn call_for(&mut self, v: &Value) -> Option<&mut Call> {
        let id = str_at(v, "item_id").map(str::to_owned).or_else(|| {
            u64_at(v, "output_index").and_then(|i| self.by_output_index.get(&i).cloned())
        })?;
        self.calls.get_mut(&id)
    }

    fn arguments_whole(&mut self, v: &Value, arguments: Option<&str>, out: &mut Vec<StreamEvent>) {
        let Some(arguments) = arguments.filter(|a| !a.is_empty()) else {
            return;
        };
        if let Some(call) = self.call_for(v)
            && !call.got_arguments
        {
            call.got_arguments = true;
            out.push(StreamEvent::ToolCallDelta {
                index: call.dense,
                id: None,
                name: None,
                arguments: arguments.to_owned(),
                extra: None,
            });
        }
    }

    fn reasoning_delta(&mut self, v: &Value, out: &mut Vec<StreamEvent>) {
        let Some(delta) = str_at(v, "delta").filter(|d| !d.is_empty()) else {
            return;
        };
        let key = (
            str_at(v, "item_id").unwrap_or_default().to_owned(),
            u64_at(v, "summary_index").unwrap_or(0),
        );
        if self.last_summary.as_ref().is_some_and(|last| *last != key) {
            out.push(StreamEvent::ReasoningDelta {
                text: "\n\n".to_owned(),
            });
        }
        self.last_summary = Some(key);
        out.push(StreamEvent::ReasoningDelta {
            text: delta.to_owned(),
        });
    }

    fn usage(response: &Value, out: &mut Vec<StreamEvent>) {
        let Some(u) = response.get("usage").filter(|u| u.is_object()) else {
            return;
        };
        out.push(StreamEvent::Usage {
            usage: Usage {
                input_tokens: u64_at(u, "input_tokens").unwrap_or(0),
                output_tokens: u64_at(u, "output_tokens").unwrap_or(0),
                cached_input_tokens: u
                    .pointer("/input_tokens_details/cached_tokens")
                    .and_then(Value::as_u64),
                reasoning_tokens: u
                    .pointer("/output_tokens_details/reasoning_tokens")
                    .and_then(Value::as_u64),
            },
        });
    }
}

/// Maps `incomplete_details.reason` of an incomplete response.
#[must_use]
pub(crate) fn map_incomplete_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("max_output_tokens") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

impl WireDecoder for ResponsesDecoder {
    fn on_event(&mut self, event: &str, data: &str, out: &mut Vec<StreamEvent>) {
        if self.terminal.is_finished() {
            return;
        }
        let v = match parse_payload("OpenAI Responses", data) {
            Ok(Payload::Json(v)) => v,
            Ok(Payload::Empty | Payload::Done) => return,
            Err(error) => return self.terminal.error(error, out),
        };
        let kind = str_at(&v, "type").unwrap_or(event);
        let response = v.get("response").unwrap_or(&Value::Null);
        match kind {
            "response.output_item.added" => self.item_added(&v, out),
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(d) = str_at(&v, "delta").filter(|d| !d.is_empty()) {
                    out.push(StreamEvent::TextDelta { text: d.to_owned() });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.reasoning_delta(&v, out);
            }
            "response.function_call_arguments.delta" => {
                let delta = str_at(&v, "delta").unwrap_or_default().to_owned();
                if let (Some(call), false) = (self.call_for(&v), delta.is_empty()) {
                    call.got_arguments = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: call.dense,
                        id: None,
                        name: None,
                        arguments: delta,
                        extra: None,
                    });
                }
            }
            "response.function_call_arguments.done" => {
                self.arguments_whole(&v, str_at(&v, "arguments"), out);
            }
            "response.output_item.done" => {
                let item = v.get("item").unwrap_or(&Value::Null);
                if str_at(item, "type") == Some("function_call") {
                    self.item_added(&v, out);
                    let probe =
                        serde_json::json!({"item_id": str_at(item, "id").unwrap_or_default()});
                    self.arguments_whole(&probe, str_at(item, "arguments"), out);
                }
            }
            "response.completed" => {
                Self::usage(response, out);
                self.terminal.done(Some(FinishReason::Stop), out);
            }
            "response.incomplete" => {
                Self::usage(response, out);
                let reason = response
                    .pointer("/incomplete_details/reason")
                    .and_then(Value::as_str);
                self.terminal.done(Some(map_incomplete_reason(reason)), out);
            }
            "response.failed" => {
                Self::usage(response, out);
                let error = response
                    .get("error")
                    .filter(|e| !e.is_null())
                    .unwrap_or(response);
                self.terminal
                    .error(classify::classify_stream_error(error), out);
            }
            "error" => self
                .terminal
                .error(classify::classify_stream_error(&v), out),
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.terminal
            .error(interrupted("stream ended before response.completed"), out);
    }

    fn is_finished(&self) -> bool {
        self.terminal.is_finished()
    }

    fn fail(&mut self, error: ProviderError, out: &mut Vec<StreamEvent>) {
        self.terminal.error(error, out);
    }
}

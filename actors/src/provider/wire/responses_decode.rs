//! OpenAI Responses stream decoder (`response.*` events), per
//! <https://platform.openai.com/docs/api-reference/responses-streaming>.
//!
//! Function-call argument deltas carry the output item's `item_id`; they are mapped to
//! the call's `call_id` (announced by `response.output_item.added`). `response.failed`
//! and `error` events are classified like HTTP errors. A `data:` payload that is not
//! JSON fails the stream with `invalid_response` (see `common::parse_payload`); empty
//! data, `[DONE]` and unknown event types are ignored.

use super::common::{Payload, Terminal, parse_payload, payload_value};
use super::json::{Obj, Str, U64, json_object};
use super::{WireDecoder, interrupted};
use crate::provider::classify;
use foya_protocol::{FinishReason, ProviderError, StreamEvent, ToolCallId, Usage};
use serde_json::Value;
use std::collections::HashMap;

json_object! {
    /// A stream event's payload (its `type` falls back to the SSE event name).
    Event<'a> {
        kind: Str<'a> = "type",
        item: Obj<Item<'a>> = "item",
        output_index: U64 = "output_index",
        item_id: Str<'a> = "item_id",
        delta: Str<'a> = "delta",
        summary_index: U64 = "summary_index",
        arguments: Str<'a> = "arguments",
        response: Obj<Response<'a>> = "response",
    }
}

json_object! {
    /// An output item (only function calls are read).
    Item<'a> {
        kind: Str<'a> = "type",
        id: Str<'a> = "id",
        call_id: Str<'a> = "call_id",
        name: Str<'a> = "name",
        arguments: Str<'a> = "arguments",
    }
}

json_object! {
    /// The `response` of a terminal event.
    Response<'a> {
        usage: Obj<ResponsesUsage> = "usage",
        incomplete_details: Obj<IncompleteDetails<'a>> = "incomplete_details",
    }
}

json_object! {
    /// `response.incomplete_details`.
    IncompleteDetails<'a> {
        reason: Str<'a> = "reason",
    }
}

json_object! {
    /// `response.usage` (token counts).
    ResponsesUsage {
        input_tokens: U64 = "input_tokens",
        output_tokens: U64 = "output_tokens",
        input_tokens_details: Obj<InputDetails> = "input_tokens_details",
        output_tokens_details: Obj<OutputDetails> = "output_tokens_details",
    }
}

json_object! {
    /// `usage.input_tokens_details`.
    InputDetails {
        cached_tokens: U64 = "cached_tokens",
    }
}

json_object! {
    /// `usage.output_tokens_details`.
    OutputDetails {
        reasoning_tokens: U64 = "reasoning_tokens",
    }
}

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

    fn item_added(
        &mut self,
        item: &Item<'_>,
        output_index: Option<u64>,
        out: &mut Vec<StreamEvent>,
    ) {
        if item.kind.get() != Some("function_call") {
            return;
        }
        let item_id = item
            .id
            .get()
            .or_else(|| item.call_id.get())
            .unwrap_or_default();
        if self.calls.contains_key(item_id) {
            return;
        }
        let dense = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
        let arguments = item.arguments.get().unwrap_or_default();
        out.push(StreamEvent::ToolCallDelta {
            index: dense,
            id: item
                .call_id
                .get()
                .or_else(|| item.id.get())
                .map(ToolCallId::new),
            name: item.name.get().map(str::to_owned),
            arguments: arguments.to_owned(),
            extra: None,
        });
        if let Some(i) = output_index {
            self.by_output_index.insert(i, item_id.to_owned());
        }
        self.calls.insert(
            item_id.to_owned(),
            Call {
                dense,
                got_arguments: !arguments.is_empty(),
            },
        );
    }

    /// The call of a fragment: by `item_id`, else by `output_index`.
    fn call_for(&mut self, item_id: Option<&str>, output_index: Option<u64>) -> Option<&mut Call> {
        let id = match item_id {
            Some(id) => id,
            None => self.by_output_index.get(&output_index?)?.as_str(),
        };
        self.calls.get_mut(id)
    }

    fn arguments_whole(
        &mut self,
        item_id: Option<&str>,
        output_index: Option<u64>,
        arguments: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        let Some(arguments) = arguments.filter(|a| !a.is_empty()) else {
            return;
        };
        if let Some(call) = self.call_for(item_id, output_index)
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

    fn reasoning_delta(&mut self, v: &Event<'_>, out: &mut Vec<StreamEvent>) {
        let Some(delta) = v.delta.get().filter(|d| !d.is_empty()) else {
            return;
        };
        let item_id = v.item_id.get().unwrap_or_default();
        let index = v.summary_index.0.unwrap_or(0);
        match &mut self.last_summary {
            Some((last_id, last_index)) => {
                if last_id != item_id || *last_index != index {
                    out.push(StreamEvent::ReasoningDelta {
                        text: "\n\n".to_owned(),
                    });
                    last_id.clear();
                    last_id.push_str(item_id);
                    *last_index = index;
                }
            }
            None => self.last_summary = Some((item_id.to_owned(), index)),
        }
        out.push(StreamEvent::ReasoningDelta {
            text: delta.to_owned(),
        });
    }

    fn usage(response: Option<&Response<'_>>, out: &mut Vec<StreamEvent>) {
        let Some(u) = response.and_then(|r| r.usage.0.as_ref()) else {
            return;
        };
        out.push(StreamEvent::Usage {
            usage: Usage {
                input_tokens: u.input_tokens.0.unwrap_or(0),
                output_tokens: u.output_tokens.0.unwrap_or(0),
                cached_input_tokens: u
                    .input_tokens_details
                    .0
                    .as_ref()
                    .and_then(|d| d.cached_tokens.0),
                reasoning_tokens: u
                    .output_tokens_details
                    .0
                    .as_ref()
                    .and_then(|d| d.reasoning_tokens.0),
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
        let v = match parse_payload::<Event<'_>>("OpenAI Responses", data) {
            Ok(Payload::Json(v)) => v,
            Ok(Payload::Empty | Payload::Done) => return,
            Err(error) => return self.terminal.error(error, out),
        };
        match v.kind.get().unwrap_or(event) {
            "response.output_item.added" => {
                if let Some(item) = &v.item.0 {
                    self.item_added(item, v.output_index.0, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(d) = v.delta.0.filter(|d| !d.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        text: d.into_owned(),
                    });
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.reasoning_delta(&v, out);
            }
            "response.function_call_arguments.delta" => {
                let delta = v.delta.0.unwrap_or_default();
                if let (Some(call), false) = (
                    self.call_for(v.item_id.get(), v.output_index.0),
                    delta.is_empty(),
                ) {
                    call.got_arguments = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: call.dense,
                        id: None,
                        name: None,
                        arguments: delta.into_owned(),
                        extra: None,
                    });
                }
            }
            "response.function_call_arguments.done" => {
                self.arguments_whole(v.item_id.get(), v.output_index.0, v.arguments.get(), out);
            }
            "response.output_item.done" => {
                if let Some(item) = &v.item.0
                    && item.kind.get() == Some("function_call")
                {
                    self.item_added(item, v.output_index.0, out);
                    let item_id = item.id.get().unwrap_or_default();
                    self.arguments_whole(Some(item_id), None, item.arguments.get(), out);
                }
            }
            "response.completed" => {
                Self::usage(v.response.0.as_ref(), out);
                self.terminal.done(Some(FinishReason::Stop), out);
            }
            "response.incomplete" => {
                let response = v.response.0.as_ref();
                Self::usage(response, out);
                let reason = response
                    .and_then(|r| r.incomplete_details.0.as_ref())
                    .and_then(|d| d.reason.get());
                self.terminal.done(Some(map_incomplete_reason(reason)), out);
            }
            "response.failed" => {
                Self::usage(v.response.0.as_ref(), out);
                let v = payload_value(data);
                let response = v.get("response").unwrap_or(&Value::Null);
                let error = response
                    .get("error")
                    .filter(|e| !e.is_null())
                    .unwrap_or(response);
                self.terminal
                    .error(classify::classify_stream_error(error), out);
            }
            "error" => self
                .terminal
                .error(classify::classify_stream_error(&payload_value(data)), out),
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

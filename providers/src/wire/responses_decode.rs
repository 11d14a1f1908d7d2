//! OpenAI Responses stream decoder (`response.*` events), per
//! <https://platform.openai.com/docs/api-reference/responses-streaming>.
//!
//! Function calls are output items (`response.output_item.added` / `.done`, both with the
//! item's `output_index`); their argument events (`response.function_call_arguments.delta`
//! / `.done`) carry `output_index` and `item_id` (some compatible servers send `call_id`
//! instead). A fragment belongs to the call whose keys it agrees with: the output index
//! first, then the item id (an item without one is known by its `call_id`), then the
//! `call_id`; empty ids count as missing. So two calls sharing an item id (or with empty
//! ones) stay two calls, each with its own arguments, and the whole arguments of an item
//! that has only a `call_id` still reach its call. The id streamed for a call is its
//! `call_id`, else its item id, else none (the SSE layer then generates one).
//!
//! `response.failed` and `error` events are classified like HTTP errors. A `data:`
//! payload that is not JSON fails the stream with `invalid_response` (see
//! `common::parse_payload`); empty data, `[DONE]` and unknown event types are ignored.

use super::common::{Payload, Terminal, parse_payload, payload_value};
use super::json::{Obj, Str, U64, json_object};
use super::{WireDecoder, interrupted};
use crate::classify;
use foya_protocol::{FinishReason, ProviderError, StreamEvent, ToolCallId, Usage};
use serde_json::Value;

json_object! {
    /// A stream event's payload (its `type` falls back to the SSE event name).
    Event<'a> {
        kind: Str<'a> = "type",
        item: Obj<Item<'a>> = "item",
        output_index: U64 = "output_index",
        item_id: Str<'a> = "item_id",
        call_id: Str<'a> = "call_id",
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

/// What identifies a function call, as far as an event tells: its output index, its
/// output item id and its `call_id` (empty strings are `None`).
#[derive(Debug, Clone, Copy, Default)]
struct Keys<'k> {
    output_index: Option<u64>,
    item_id: Option<&'k str>,
    call_id: Option<&'k str>,
}

impl<'k> Keys<'k> {
    fn new(output_index: Option<u64>, item_id: Option<&'k str>, call_id: Option<&'k str>) -> Self {
        Self {
            output_index,
            item_id: item_id.filter(|s| !s.is_empty()),
            call_id: call_id.filter(|s| !s.is_empty()),
        }
    }

    /// The keys of an output item at `output_index`.
    fn of_item(item: &'k Item<'_>, output_index: Option<u64>) -> Self {
        Self::new(output_index, item.id.get(), item.call_id.get())
    }
}

#[derive(Debug)]
struct Call {
    dense: u32,
    output_index: Option<u64>,
    item_id: Option<String>,
    call_id: Option<String>,
    id_sent: bool,
    name_sent: bool,
    got_arguments: bool,
}

impl Call {
    /// Whether an event with `keys` is about this call. When both know an output index,
    /// it decides (it names one output item of the response). Otherwise every id both
    /// know must agree, and at least one must: an item id is compared with the call's
    /// item id, or with its `call_id` when its item had no id.
    fn matches(&self, keys: &Keys<'_>) -> bool {
        if let (Some(a), Some(b)) = (self.output_index, keys.output_index) {
            return a == b;
        }
        let item_key = self.item_id.as_deref().or(self.call_id.as_deref());
        let item = compare(item_key, keys.item_id);
        let call = compare(self.call_id.as_deref(), keys.call_id);
        item != Some(false) && call != Some(false) && (item == Some(true) || call == Some(true))
    }
}

/// `Some(a == b)` when both are known.
fn compare(a: Option<&str>, b: Option<&str>) -> Option<bool> {
    Some(a? == b?)
}

/// Decoder state for one Responses stream.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    terminal: Terminal,
    /// Function calls in the order they appeared (their dense index).
    calls: Vec<Call>,
    /// Last (item id, summary index) of reasoning text, to separate summary parts.
    last_summary: Option<(String, u64)>,
}

impl ResponsesDecoder {
    /// A decoder for a new response.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest call an event with `keys` is about.
    fn call_for(&mut self, keys: &Keys<'_>) -> Option<&mut Call> {
        self.calls.iter_mut().rev().find(|c| c.matches(keys))
    }

    /// A function-call item (`added` or `done`): the call it names, or a new one. A new
    /// call's first fragment carries its id (`call_id`, else item id), name and the
    /// item's arguments; for a known call, an id or name it did not have yet is sent.
    /// Returns the call's position.
    fn item(
        &mut self,
        item: &Item<'_>,
        output_index: Option<u64>,
        out: &mut Vec<StreamEvent>,
    ) -> usize {
        let keys = Keys::of_item(item, output_index);
        let id = keys.call_id.or(keys.item_id);
        let name = item.name.get();
        if let Some(pos) = self.calls.iter().rposition(|c| c.matches(&keys)) {
            let call = &mut self.calls[pos];
            call.output_index = call.output_index.or(output_index);
            let id = id.filter(|_| !call.id_sent);
            let name = name.filter(|_| !call.name_sent);
            if id.is_some() || name.is_some() {
                call.id_sent |= id.is_some();
                call.name_sent |= name.is_some();
                out.push(StreamEvent::ToolCallDelta {
                    index: call.dense,
                    id: id.map(ToolCallId::new),
                    name: name.map(str::to_owned),
                    arguments: String::new(),
                    extra: None,
                });
            }
            return pos;
        }
        let dense = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
        let arguments = item.arguments.get().unwrap_or_default();
        out.push(StreamEvent::ToolCallDelta {
            index: dense,
            id: id.map(ToolCallId::new),
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
            extra: None,
        });
        self.calls.push(Call {
            dense,
            output_index,
            item_id: keys.item_id.map(str::to_owned),
            call_id: keys.call_id.map(str::to_owned),
            id_sent: id.is_some(),
            name_sent: name.is_some(),
            got_arguments: !arguments.is_empty(),
        });
        self.calls.len() - 1
    }

    /// A call's whole arguments (`.done` events), sent unless deltas already were.
    fn arguments_whole(
        call: Option<&mut Call>,
        arguments: Option<&str>,
        out: &mut Vec<StreamEvent>,
    ) {
        let Some(arguments) = arguments.filter(|a| !a.is_empty()) else {
            return;
        };
        if let Some(call) = call
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
                if let Some(item) = &v.item.0
                    && item.kind.get() == Some("function_call")
                {
                    self.item(item, v.output_index.0, out);
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
                let keys = Keys::new(v.output_index.0, v.item_id.get(), v.call_id.get());
                let delta = v.delta.0.as_deref().unwrap_or_default();
                if let (Some(call), false) = (self.call_for(&keys), delta.is_empty()) {
                    call.got_arguments = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index: call.dense,
                        id: None,
                        name: None,
                        arguments: delta.to_owned(),
                        extra: None,
                    });
                }
            }
            "response.function_call_arguments.done" => {
                let keys = Keys::new(v.output_index.0, v.item_id.get(), v.call_id.get());
                Self::arguments_whole(self.call_for(&keys), v.arguments.get(), out);
            }
            "response.output_item.done" => {
                if let Some(item) = &v.item.0
                    && item.kind.get() == Some("function_call")
                {
                    let pos = self.item(item, v.output_index.0, out);
                    Self::arguments_whole(self.calls.get_mut(pos), item.arguments.get(), out);
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

//! OpenAI Responses stream: `response.created`, output items (reasoning summaries,
//! assistant messages with `output_text`, function calls with argument deltas), each
//! added, streamed and done, then `response.completed` (or `response.incomplete`,
//! `response.failed`). Every payload ends with its `type` and `sequence_number`.

use super::{WireMeta, frame, json_str};
use foya_protocol::{ErrorClass, FinishReason, StreamEvent, Usage};
use std::fmt::Write as _;

#[derive(Debug)]
enum Item {
    Reasoning {
        text: String,
    },
    Message {
        text: String,
    },
    Call {
        call: u32,
        call_id: String,
        name: String,
        arguments: String,
    },
}

#[derive(Debug)]
pub(super) struct ResponsesEncoder {
    meta: WireMeta,
    sequence: u64,
    /// The open output item: its index, id and accumulated content.
    open: Option<(u32, String, Item)>,
    next_index: u32,
    usage: Option<Usage>,
}

impl ResponsesEncoder {
    pub(super) fn new(meta: WireMeta) -> Self {
        Self {
            meta,
            sequence: 0,
            open: None,
            next_index: 0,
            usage: None,
        }
    }

    /// Writes one event; `body` is the payload without its closing brace.
    fn emit(&mut self, out: &mut String, kind: &str, mut body: String) {
        if body.len() > 1 {
            body.push(',');
        }
        let _ = write!(
            body,
            r#""type":"{kind}","sequence_number":{}}}"#,
            self.sequence
        );
        self.sequence += 1;
        frame(out, Some(kind), &body);
    }

    fn response(&self, status: &str, tail: &str) -> String {
        format!(
            r#"{{"response":{{"id":{},"object":"response","status":"{status}","model":{},"output":[]{tail}}}"#,
            json_str(&self.meta.id),
            json_str(&self.meta.model)
        )
    }

    pub(super) fn start(&mut self, out: &mut String) {
        let body = self.response("in_progress", "");
        self.emit(out, "response.created", body);
    }

    fn open_item(&mut self, out: &mut String, prefix: &str, item: Item) -> (u32, String) {
        self.close(out);
        let index = self.next_index;
        self.next_index += 1;
        // Item ids are written unescaped below, so keep them to `[A-Za-z0-9_]`.
        let stem: String = (self.meta.id.trim_start_matches("resp_").chars())
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let id = format!("{prefix}_{stem}_{index}");
        let added = match &item {
            Item::Reasoning { .. } => format!(r#"{{"id":"{id}","type":"reasoning","summary":[]}}"#),
            Item::Message { .. } => format!(
                r#"{{"id":"{id}","type":"message","status":"in_progress","role":"assistant","content":[]}}"#
            ),
            Item::Call { call_id, name, .. } => format!(
                r#"{{"id":"{id}","type":"function_call","status":"in_progress","call_id":{},"name":{},"arguments":""}}"#,
                json_str(call_id),
                json_str(name)
            ),
        };
        self.emit(
            out,
            "response.output_item.added",
            format!(r#"{{"output_index":{index},"item":{added}"#),
        );
        if matches!(item, Item::Message { .. }) {
            let body = format!(
                r#"{{"item_id":"{id}","output_index":{index},"content_index":0,"part":{{"type":"output_text","text":"","annotations":[]}}"#
            );
            self.emit(out, "response.content_part.added", body);
        }
        self.open = Some((index, id.clone(), item));
        (index, id)
    }

    fn close(&mut self, out: &mut String) {
        let Some((index, id, item)) = self.open.take() else {
            return;
        };
        let done = match item {
            Item::Reasoning { text } => format!(
                r#"{{"id":"{id}","type":"reasoning","summary":[{{"type":"summary_text","text":{}}}]}}"#,
                json_str(&text)
            ),
            Item::Message { text } => {
                let text = json_str(&text);
                let head =
                    format!(r#"{{"item_id":"{id}","output_index":{index},"content_index":0,"#);
                self.emit(
                    out,
                    "response.output_text.done",
                    format!(r#"{head}"text":{text}"#),
                );
                let part = format!(
                    r#"{head}"part":{{"type":"output_text","text":{text},"annotations":[]}}"#
                );
                self.emit(out, "response.content_part.done", part);
                format!(
                    r#"{{"id":"{id}","type":"message","status":"completed","role":"assistant","content":[{{"type":"output_text","text":{text},"annotations":[]}}]}}"#
                )
            }
            Item::Call {
                call_id,
                name,
                arguments,
                ..
            } => {
                let arguments = json_str(&arguments);
                let body =
                    format!(r#"{{"item_id":"{id}","output_index":{index},"arguments":{arguments}"#);
                self.emit(out, "response.function_call_arguments.done", body);
                format!(
                    r#"{{"id":"{id}","type":"function_call","status":"completed","call_id":{},"name":{},"arguments":{arguments}}}"#,
                    json_str(&call_id),
                    json_str(&name)
                )
            }
        };
        self.emit(
            out,
            "response.output_item.done",
            format!(r#"{{"output_index":{index},"item":{done}"#),
        );
    }

    pub(super) fn event(&mut self, event: &StreamEvent, out: &mut String) {
        match event {
            StreamEvent::ReasoningDelta { text } => {
                let (index, id) = match &mut self.open {
                    Some((index, id, Item::Reasoning { text: all })) => {
                        all.push_str(text);
                        (*index, id.clone())
                    }
                    _ => self.open_item(out, "rs", Item::Reasoning { text: text.clone() }),
                };
                let body = format!(
                    r#"{{"item_id":"{id}","output_index":{index},"summary_index":0,"delta":{}"#,
                    json_str(text)
                );
                self.emit(out, "response.reasoning_summary_text.delta", body);
            }
            StreamEvent::ReasoningPart { .. } => {}
            StreamEvent::TextDelta { text } => {
                let (index, id) = match &mut self.open {
                    Some((index, id, Item::Message { text: all })) => {
                        all.push_str(text);
                        (*index, id.clone())
                    }
                    _ => self.open_item(out, "msg", Item::Message { text: text.clone() }),
                };
                let body = format!(
                    r#"{{"item_id":"{id}","output_index":{index},"content_index":0,"delta":{}"#,
                    json_str(text)
                );
                self.emit(out, "response.output_text.delta", body);
            }
            StreamEvent::ToolCallDelta {
                index: call,
                id: call_id,
                name,
                arguments,
                ..
            } => {
                let (index, id) = match &mut self.open {
                    Some((
                        index,
                        id,
                        Item::Call {
                            call: open,
                            arguments: all,
                            ..
                        },
                    )) if *open == *call && call_id.is_none() => {
                        all.push_str(arguments);
                        (*index, id.clone())
                    }
                    _ => {
                        let call_id = call_id
                            .as_ref()
                            .map_or_else(|| format!("call_sim_{call}"), |i| i.0.clone());
                        let name = name.clone().unwrap_or_default();
                        let item = Item::Call {
                            call: *call,
                            call_id,
                            name,
                            arguments: arguments.clone(),
                        };
                        let opened = self.open_item(out, "fc", item);
                        if arguments.is_empty() {
                            return;
                        }
                        opened
                    }
                };
                let body = format!(
                    r#"{{"item_id":"{id}","output_index":{index},"delta":{}"#,
                    json_str(arguments)
                );
                self.emit(out, "response.function_call_arguments.delta", body);
            }
            StreamEvent::Usage { usage } => self.usage = Some(*usage),
            StreamEvent::Done { finish_reason } => {
                self.close(out);
                let u = self.usage.unwrap_or_default();
                let usage = format!(
                    r#","usage":{{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens":{},"output_tokens_details":{{"reasoning_tokens":{}}},"total_tokens":{}}}"#,
                    u.input_tokens,
                    u.cached_input_tokens.unwrap_or(0),
                    u.output_tokens,
                    u.reasoning_tokens.unwrap_or(0),
                    u.input_tokens + u.output_tokens
                );
                if *finish_reason == Some(FinishReason::Length) {
                    let tail =
                        format!(r#","incomplete_details":{{"reason":"max_output_tokens"}}{usage}"#);
                    let body = self.response("incomplete", &tail);
                    self.emit(out, "response.incomplete", body);
                } else {
                    let body = self.response("completed", &usage);
                    self.emit(out, "response.completed", body);
                }
            }
            StreamEvent::Error { error } => {
                self.close(out);
                let code = match error.class {
                    ErrorClass::RateLimited => "rate_limit_exceeded",
                    ErrorClass::ContextOverflow => "context_length_exceeded",
                    ErrorClass::Overloaded => "server_is_overloaded",
                    _ => "server_error",
                };
                let tail = format!(
                    r#","error":{{"code":"{code}","message":{}}}"#,
                    json_str(&error.message)
                );
                let body = self.response("failed", &tail);
                self.emit(out, "response.failed", body);
            }
        }
    }
}

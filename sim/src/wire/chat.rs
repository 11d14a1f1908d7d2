//! OpenAI Chat Completions chunks: `data: {"id",…,"choices":[{"index":0,
//! "finish_reason":…,"delta":…}]}` frames, a usage chunk with empty `choices`, then
//! `data: [DONE]`.

use super::{WireMeta, frame, json_str, push_json_str};
use foya_protocol::{ErrorClass, FinishReason, StreamEvent, Usage};
use std::fmt::Write as _;

#[derive(Debug)]
pub(super) struct ChatEncoder {
    /// `{"id":…,"object":…,"created":…,"model":…,"choices":` shared by every chunk.
    head: String,
    /// Whether the role chunk was sent.
    opened: bool,
    /// Usage held back until `Done`.
    usage: Option<Usage>,
}

impl ChatEncoder {
    pub(super) fn new(meta: WireMeta) -> Self {
        let head = format!(
            r#"{{"id":{},"object":"chat.completion.chunk","created":{},"model":{},"choices":"#,
            json_str(&meta.id),
            meta.created,
            json_str(&meta.model)
        );
        Self {
            head,
            opened: false,
            usage: None,
        }
    }

    fn chunk(&self, out: &mut String, finish: Option<&str>, delta: &str) {
        let finish = finish.map_or_else(|| "null".to_owned(), json_str);
        let data = format!(
            r#"{}[{{"index":0,"finish_reason":{finish},"delta":{delta}}}]}}"#,
            self.head
        );
        frame(out, None, &data);
    }

    /// The first chunk carries the role; its `content` is `""` when text comes first,
    /// `null` otherwise (as OpenAI sends before tool calls).
    fn open(&mut self, out: &mut String, text_first: bool) {
        if !self.opened {
            self.opened = true;
            let content = if text_first { r#""""# } else { "null" };
            self.chunk(
                out,
                None,
                &format!(r#"{{"role":"assistant","content":{content}}}"#),
            );
        }
    }

    pub(super) fn event(&mut self, event: &StreamEvent, out: &mut String) {
        match event {
            StreamEvent::TextDelta { text } => {
                self.open(out, true);
                self.chunk(out, None, &format!(r#"{{"content":{}}}"#, json_str(text)));
            }
            StreamEvent::ReasoningDelta { text } => {
                self.open(out, false);
                self.chunk(
                    out,
                    None,
                    &format!(r#"{{"reasoning_content":{}}}"#, json_str(text)),
                );
            }
            StreamEvent::ReasoningPart { .. } => {}
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
                ..
            } => {
                self.open(out, false);
                let mut call = format!(r#"{{"index":{index}"#);
                if let Some(id) = id {
                    let _ = write!(
                        call,
                        r#","id":{},"type":"function","function":{{"name":"#,
                        json_str(id.as_str())
                    );
                    push_json_str(&mut call, name.as_deref().unwrap_or_default());
                    call.push(',');
                } else {
                    call.push_str(r#","function":{"#);
                }
                call.push_str(r#""arguments":"#);
                push_json_str(&mut call, arguments);
                call.push_str("}}");
                self.chunk(out, None, &format!(r#"{{"tool_calls":[{call}]}}"#));
            }
            StreamEvent::Usage { usage } => self.usage = Some(*usage),
            StreamEvent::Done { finish_reason } => {
                self.open(out, true);
                self.chunk(out, Some(finish_str(*finish_reason)), "{}");
                if let Some(u) = self.usage {
                    let mut usage = format!(
                        r#"{{"prompt_tokens":{},"completion_tokens":{},"total_tokens":{}"#,
                        u.input_tokens,
                        u.output_tokens,
                        u.input_tokens + u.output_tokens
                    );
                    if let Some(cached) = u.cached_input_tokens {
                        let _ = write!(
                            usage,
                            r#","prompt_tokens_details":{{"cached_tokens":{cached}}}"#
                        );
                    }
                    if let Some(reasoning) = u.reasoning_tokens {
                        let _ = write!(
                            usage,
                            r#","completion_tokens_details":{{"reasoning_tokens":{reasoning}}}"#
                        );
                    }
                    frame(
                        out,
                        None,
                        &format!(r#"{}[],"usage":{usage}}}}}"#, self.head),
                    );
                }
                frame(out, None, "[DONE]");
            }
            StreamEvent::Error { error } => {
                let (kind, code) = match error.class {
                    ErrorClass::RateLimited => ("requests", r#""rate_limit_exceeded""#),
                    ErrorClass::ContextOverflow => {
                        ("invalid_request_error", r#""context_length_exceeded""#)
                    }
                    ErrorClass::Overloaded => ("server_error", r#""server_is_overloaded""#),
                    _ => ("server_error", "null"),
                };
                let data = format!(
                    r#"{{"error":{{"message":{},"type":"{kind}","code":{code}}}}}"#,
                    json_str(&error.message)
                );
                frame(out, None, &data);
            }
        }
    }
}

fn finish_str(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::ToolCalls) => "tool_calls",
        Some(FinishReason::Length) => "length",
        Some(FinishReason::ContentFilter) => "content_filter",
        _ => "stop",
    }
}

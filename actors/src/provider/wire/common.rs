//! Helpers shared by the protocol adapters: rendering a user input as text, resolving
//! image references, the terminal-event guard every decoder uses.

use crate::provider::{ImageData, ModelRequest};
use foya_protocol::{AssistantMessage, FinishReason, Input, ProviderError, StreamEvent};

/// Marker put before reasoning of an interrupted assistant message, sent once as text.
pub(crate) const INTERRUPTED_REASONING: &str = "[interrupted reasoning]";

/// Prefix of a failed tool result's content for protocols without an `is_error` flag.
pub(crate) const TOOL_ERROR_PREFIX: &str = "Error: ";

/// The text of a user input: its text, the command when there is no text, and the
/// selected page elements, one per paragraph.
pub(crate) fn user_text(input: &Input) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(cmd) = &input.command
        && input.text.trim().is_empty()
    {
        let line = format!("/{} {}", cmd.name, cmd.arguments);
        parts.push(line.trim_end().to_owned());
    }
    if !input.text.is_empty() {
        parts.push(input.text.clone());
    }
    for el in &input.selected_elements {
        parts.push(format!(
            "[selected element `{}` on {}]\n{}",
            el.selector, el.url, el.text
        ));
    }
    parts.join("\n\n")
}

/// The images of a user input, resolved from the request (missing ones are reported as
/// text so the model knows something was there).
pub(crate) fn user_images<'a>(
    input: &Input,
    request: &'a ModelRequest,
) -> Vec<Result<&'a ImageData, String>> {
    input
        .images
        .iter()
        .map(|r| {
            request
                .images
                .get(&r.id)
                .ok_or_else(|| format!("[image {} unavailable]", r.id))
        })
        .collect()
}

/// `data:` URL of an image.
pub(crate) fn data_url(image: &ImageData) -> String {
    format!("data:{};base64,{}", image.media_type, image.base64)
}

/// The interrupted reasoning of `msg` to send once as text, if any.
pub(crate) fn interrupted_reasoning(msg: &AssistantMessage) -> Option<String> {
    (msg.interrupted && !msg.reasoning.trim().is_empty())
        .then(|| format!("{INTERRUPTED_REASONING} {}", msg.reasoning))
}

/// Tool arguments as the JSON text OpenAI protocols expect (a string kept verbatim).
pub(crate) fn arguments_text(arguments: &serde_json::Value) -> String {
    match arguments {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Guards the single final event of a decoder.
#[derive(Debug, Default)]
pub(crate) struct Terminal {
    finished: bool,
}

impl Terminal {
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    pub(crate) fn done(&mut self, finish_reason: Option<FinishReason>, out: &mut Vec<StreamEvent>) {
        if !self.finished {
            self.finished = true;
            out.push(StreamEvent::Done { finish_reason });
        }
    }

    pub(crate) fn error(&mut self, error: ProviderError, out: &mut Vec<StreamEvent>) {
        if !self.finished {
            self.finished = true;
            out.push(StreamEvent::Error { error });
        }
    }
}

/// Reads a non-negative integer field.
pub(crate) fn u64_at(v: &serde_json::Value, key: &str) -> Option<u64> {
    v.get(key).and_then(serde_json::Value::as_u64)
}

/// Reads a string field.
pub(crate) fn str_at<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_json::Value::as_str)
}

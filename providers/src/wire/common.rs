//! Helpers shared by the protocol adapters: rendering a user input as text, resolving
//! image references, the terminal-event guard every decoder uses, the parsing of an
//! event's `data:` payload (a malformed one fails the stream), and the tool name sent
//! back to a provider.

use super::json::{Obj, Object};
use crate::{ImageData, ModelRequest};
use foya_protocol::{
    AssistantMessage, AttachmentRef, ErrorClass, FinishReason, Input, ProviderError, StreamEvent,
};

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

/// The images `refs` (of a user input or a tool result), resolved from the request
/// (missing ones are reported as text so the model knows something was there).
pub(crate) fn images<'a>(
    refs: &[AttachmentRef],
    request: &'a ModelRequest,
) -> Vec<Result<&'a ImageData, String>> {
    refs.iter()
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

/// What an SSE event's `data:` payload holds.
#[derive(Debug)]
pub(crate) enum Payload<T> {
    /// Nothing (an event with only `event:` or an empty `data:`): ignored.
    Empty,
    /// The `[DONE]` sentinel (OpenAI Chat's end; tolerated and ignored elsewhere).
    Done,
    /// A JSON value read as `T` (a value that is not an object reads as `T::default()`).
    Json(T),
}

/// Longest excerpt of a malformed payload quoted in an error message, in characters.
pub(crate) const MAX_EXCERPT_CHARS: usize = 80;

/// Parses an event's `data:` payload for the decoder of `format` (`OpenAI Chat`, …) into
/// the typed view `T` (see `json`), borrowing from `data`.
///
/// # Errors
/// A payload that is neither empty, `[DONE]` nor JSON is an `invalid_response` error
/// naming `format`, the parser's complaint and a one-line excerpt of at most
/// [`MAX_EXCERPT_CHARS`] characters (never the whole payload: it may be large, and
/// only data is quoted, never headers). The complaint is the one `serde_json::Value`
/// gives, whatever `T` is. Comments (`: ping`) never reach here (the SSE parser drops
/// them).
pub(crate) fn parse_payload<'a, T: Object<'a>>(
    format: &str,
    data: &'a str,
) -> Result<Payload<T>, ProviderError> {
    let trimmed = data.trim();
    if trimmed.is_empty() {
        return Ok(Payload::Empty);
    }
    if trimmed == "[DONE]" {
        return Ok(Payload::Done);
    }
    match serde_json::from_str::<Obj<T>>(trimmed) {
        Ok(Obj(object)) => Ok(Payload::Json(object.unwrap_or_default())),
        Err(typed) => {
            // The typed view accepts exactly what `Value` accepts; quote `Value`'s
            // complaint so the message stays the same (the typed one only if `Value`
            // were to accept it).
            let e = serde_json::from_str::<serde_json::Value>(trimmed)
                .err()
                .unwrap_or(typed);
            Err(ProviderError::new(
                ErrorClass::InvalidResponse,
                format!(
                    "malformed {format} stream event: its data is not JSON ({e}): `{}`",
                    excerpt(trimmed, MAX_EXCERPT_CHARS)
                ),
            ))
        }
    }
}

/// The whole payload as a `serde_json::Value`, for the rare paths that keep or classify
/// arbitrary JSON (error events). `Null` if it is not JSON (never the case after
/// [`parse_payload`] accepted it).
pub(crate) fn payload_value(data: &str) -> serde_json::Value {
    serde_json::from_str(data.trim()).unwrap_or_default()
}

/// `text` on one line (whitespace and control characters each become a space, runs
/// collapsed), cut to at most `max` characters with `…` at the end when cut.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let mut line = String::new();
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            if !line.ends_with(' ') {
                line.push(' ');
            }
        } else {
            line.push(c);
        }
    }
    let line = line.trim();
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Placeholder sent instead of a tool name that providers would reject.
pub(crate) const INVALID_TOOL_NAME: &str = "invalid_tool_name";

/// The name under which a call of the history is sent back to a provider: its own when
/// it matches `^[a-zA-Z0-9_-]{1,64}$` (the tool-name pattern OpenAI and Anthropic
/// document and enforce on replayed calls too), else [`INVALID_TOOL_NAME`]. The model
/// asked for a name no tool has (empty, too long, other characters); the call was
/// answered with an `is_error` result, and replaying the name verbatim would make a
/// strict provider refuse every later request of the session with a 400. The stored log
/// keeps the original name.
pub(crate) fn wire_tool_name(name: &str) -> &str {
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid { name } else { INVALID_TOOL_NAME }
}

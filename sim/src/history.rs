//! What the simulator reads from a request: how far the turn has got and a key that
//! identifies the request, from a neutral request's messages or from a wire request body.

use super::format::WireFormat;
use super::rng::Fnv;
use foya_protocol::Message;
use serde_json::Value;

/// The parts of a request history that decide the simulated response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistorySummary {
    /// Messages in the history, system prompt excluded, counted as the neutral form
    /// counts them (one per user input, assistant step and tool result).
    pub messages: u64,
    /// Step number in the current turn: assistant messages after the last user message,
    /// plus one (1-based).
    pub step: u32,
    /// Text of the last user message (empty when there is none).
    pub last_user_text: String,
    /// Approximate size of the request in characters, for the reported input tokens.
    pub input_chars: u64,
    /// Model named by the request, if any.
    pub model: Option<String>,
    /// Whether the request offers tools. A request without (a title request, say) is
    /// answered with text only, whatever the step.
    pub tools_offered: bool,
}

impl HistorySummary {
    /// Summarises a neutral request: its system prompt, messages, model (empty: none)
    /// and whether it offers tools.
    #[must_use]
    pub fn from_messages<'a>(
        system: &str,
        messages: impl IntoIterator<Item = &'a Message>,
        model: &str,
        tools_offered: bool,
    ) -> Self {
        let mut counter = Counter::default();
        let mut chars = system.len() as u64;
        for message in messages {
            match message {
                Message::System { text } => chars += text.len() as u64,
                Message::User(input) => {
                    chars += input.text.len() as u64;
                    counter.user(&input.text);
                }
                Message::Assistant(a) => {
                    chars += (a.text.len() + a.reasoning.len()) as u64;
                    for call in &a.tool_calls {
                        chars += (call.name.len() + call.arguments.to_string().len()) as u64;
                    }
                    counter.assistant();
                }
                Message::Tool(t) => {
                    chars += t.content.len() as u64;
                    counter.tool(1);
                }
            }
        }
        let model = (!model.is_empty()).then(|| model.to_owned());
        counter.finish(chars, model, tools_offered)
    }

    /// Summarises a wire request body of `format` (`body_len` bytes long). Shapes it
    /// does not know count as nothing; it never fails.
    #[must_use]
    pub fn from_wire(format: WireFormat, body: &Value, body_len: usize) -> Self {
        let mut counter = Counter::default();
        match format {
            WireFormat::OpenAiChat => chat(body, &mut counter),
            WireFormat::Anthropic => anthropic(body, &mut counter),
            WireFormat::OpenAiResponses => responses(body, &mut counter),
        }
        let model = body.get("model").and_then(Value::as_str).map(str::to_owned);
        let tools_offered = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty());
        counter.finish(body_len as u64, model, tools_offered)
    }

    /// The request key: equal histories (length and last user text) under one seed
    /// give equal keys.
    #[must_use]
    pub fn key(&self, seed: u64) -> u64 {
        Fnv::new()
            .u64(seed)
            .u64(self.messages)
            .u64(u64::from(self.step))
            .bytes(self.last_user_text.as_bytes())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Counter {
    messages: u64,
    assistants_since_user: u32,
    last_user_text: String,
}

impl Counter {
    fn user(&mut self, text: &str) {
        self.messages += 1;
        self.assistants_since_user = 0;
        text.clone_into(&mut self.last_user_text);
    }
    fn assistant(&mut self) {
        self.messages += 1;
        self.assistants_since_user += 1;
    }
    fn tool(&mut self, n: u64) {
        self.messages += n;
    }
    fn finish(
        self,
        input_chars: u64,
        model: Option<String>,
        tools_offered: bool,
    ) -> HistorySummary {
        HistorySummary {
            messages: self.messages,
            step: self.assistants_since_user + 1,
            last_user_text: self.last_user_text,
            input_chars,
            model,
            tools_offered,
        }
    }
}

/// Text of a content field: a string, or the `text` of its parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn items<'a>(body: &'a Value, field: &str) -> &'a [Value] {
    body.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn role(item: &Value) -> Option<&str> {
    item.get("role").and_then(Value::as_str)
}

/// Chat Completions: `messages[]` with roles system/developer/user/assistant/tool.
fn chat(body: &Value, counter: &mut Counter) {
    for message in items(body, "messages") {
        match role(message) {
            Some("user") => counter.user(&content_text(message.get("content"))),
            Some("assistant") => counter.assistant(),
            Some("tool" | "function") => counter.tool(1),
            _ => {}
        }
    }
}

/// Messages: tool results travel inside `user` messages as `tool_result` blocks; such a
/// message is a user input only when it carries something else too.
fn anthropic(body: &Value, counter: &mut Counter) {
    for message in items(body, "messages") {
        match role(message) {
            Some("user") => {
                let content = message.get("content");
                let blocks = content
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                let results = blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                    .count();
                counter.tool(results as u64);
                if results == 0 || results < blocks.len() {
                    counter.user(&content_text(content));
                }
            }
            Some("assistant") => counter.assistant(),
            _ => {}
        }
    }
}

/// Responses: `input` is a string or a list of items; consecutive assistant-side items
/// (assistant messages, reasoning, function calls) form one assistant step.
fn responses(body: &Value, counter: &mut Counter) {
    if let Some(text) = body.get("input").and_then(Value::as_str) {
        counter.user(text);
        return;
    }
    let mut in_assistant_run = false;
    for item in items(body, "input") {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        let assistant_side = match (kind, role(item)) {
            ("message", Some("user")) => {
                counter.user(&content_text(item.get("content")));
                false
            }
            ("message", Some("assistant")) | ("function_call" | "reasoning", _) => true,
            ("function_call_output", _) => {
                counter.tool(1);
                false
            }
            _ => in_assistant_run,
        };
        if assistant_side && !in_assistant_run {
            counter.assistant();
        }
        in_assistant_run = assistant_side;
    }
}

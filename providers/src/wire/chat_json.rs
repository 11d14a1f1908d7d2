//! Typed views of OpenAI Chat Completions stream payloads (`chat.completion.chunk`), per
//! <https://platform.openai.com/docs/api-reference/chat-streaming>, read leniently (see
//! `json`): only the fields the Chat decoder uses, borrowing strings from the payload.

use super::json::{Args, Arr, Filled, Obj, Object, Present, Skip, Str, U64, json_object};
use serde::de::MapAccess;
use serde_json::{Map, Value};

json_object! {
    /// A chunk, or an error object sent in its place.
    Chunk<'a> {
        /// `error` (present even when `null`; true when it holds something: not `null`,
        /// `false` or an empty string, array or object).
        error: Present<Filled> = "error",
        object: Str<'a> = "object",
        choices: Arr<Obj<Choice<'a>>> = "choices",
        usage: Obj<ChatUsage> = "usage",
    }
}

json_object! {
    /// One choice; `delta` wins over `message` when present, even `null`.
    Choice<'a> {
        index: U64 = "index",
        delta: Present<Obj<Delta<'a>>> = "delta",
        message: Obj<Delta<'a>> = "message",
        finish_reason: Str<'a> = "finish_reason",
    }
}

json_object! {
    /// A choice's delta (or message). A `tool_calls` entry that is not an object reads
    /// as `Obj(None)` (the decoder skips it).
    Delta<'a> {
        content: Str<'a> = "content",
        reasoning_content: Str<'a> = "reasoning_content",
        reasoning: Str<'a> = "reasoning",
        tool_calls: Arr<Obj<ToolCall<'a>>> = "tool_calls",
    }
}

json_object! {
    /// A tool call's `function`.
    Function<'a> {
        name: Str<'a> = "name",
        arguments: Args = "arguments",
    }
}

json_object! {
    /// `usage` (token counts).
    ChatUsage {
        prompt_tokens: U64 = "prompt_tokens",
        completion_tokens: U64 = "completion_tokens",
        prompt_tokens_details: Obj<PromptDetails> = "prompt_tokens_details",
        completion_tokens_details: Obj<CompletionDetails> = "completion_tokens_details",
    }
}

json_object! {
    /// `usage.prompt_tokens_details`.
    PromptDetails {
        cached_tokens: U64 = "cached_tokens",
    }
}

json_object! {
    /// `usage.completion_tokens_details`.
    CompletionDetails {
        reasoning_tokens: U64 = "reasoning_tokens",
    }
}

/// A tool-call fragment (an object: an entry of another type is skipped, see
/// [`Delta`]). Keys other than `index`, `id`, `type` and `function` are kept in `extra`
/// (sent back with the call).
#[derive(Debug, Default)]
pub(crate) struct ToolCall<'a> {
    pub(crate) index: U64,
    pub(crate) id: Str<'a>,
    pub(crate) function: Obj<Function<'a>>,
    pub(crate) extra: Option<Map<String, Value>>,
}

impl<'de: 'a, 'a> Object<'de> for ToolCall<'a> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "index" => self.index = map.next_value()?,
            "id" => self.id = map.next_value()?,
            "function" => self.function = map.next_value()?,
            "type" => {
                map.next_value::<Skip>()?;
            }
            other => {
                let value: Value = map.next_value()?;
                self.extra
                    .get_or_insert_with(Map::new)
                    .insert(other.to_owned(), value);
            }
        }
        Ok(())
    }
}

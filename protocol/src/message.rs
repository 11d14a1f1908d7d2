//! The neutral message structure the context compiler produces and the provider wire
//! adapters materialise into each protocol's request body.

use crate::ids::ToolCallId;
use crate::input::{AttachmentRef, Input};
use serde::{Deserialize, Serialize};

/// One message of a model conversation, independent of any provider's wire format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// System prompt text.
    System {
        /// The prompt.
        text: String,
    },
    /// A user input (text plus optional images, page elements and command).
    User(Input),
    /// What the model produced in one step.
    Assistant(AssistantMessage),
    /// The result of one tool call.
    Tool(ToolMessage),
}

/// The aggregated assistant output of one model response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Answer text for the user, concatenated from the text deltas.
    #[serde(default)]
    pub text: String,
    /// Reasoning text, for display. Not sent back to the model (specification step 4),
    /// except through [`Self::reasoning_parts`] where a protocol requires it, and except
    /// when [`Self::interrupted`] is set.
    #[serde(default)]
    pub reasoning: String,
    /// Opaque reasoning blocks a provider requires back verbatim on the next request
    /// (Anthropic thinking signatures and redacted thinking, DeepSeek `reasoning_content`
    /// on tool-call turns). Empty for most providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning_parts: Vec<ReasoningPart>,
    /// Complete tool calls, in the order the model gave them.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Normalised finish reason; `None` when the stream ended without one (cancel, error).
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// Set when the turn was cancelled while this message was being generated: the
    /// content is partial and its reasoning is sent once to the model, marked as
    /// interrupted context.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// A reasoning block that must round-trip to the provider unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReasoningPart {
    /// Anthropic `thinking` block with its signature.
    Thinking {
        /// The thinking text.
        text: String,
        /// The `signature` the API checks when the block is sent back.
        #[serde(default)]
        signature: Option<String>,
    },
    /// Anthropic `redacted_thinking`: encrypted data kept verbatim.
    Redacted {
        /// The opaque `data` field.
        data: String,
    },
}

/// One complete tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-given call id; the tool result carries the same id.
    pub id: ToolCallId,
    /// Tool name.
    pub name: String,
    /// Parsed JSON arguments (`{}` when the model sent none). When the model sent text
    /// that is not JSON, it is kept as a JSON string so nothing is lost; the tool runtime
    /// answers it with an `is_error` result.
    pub arguments: serde_json::Value,
    /// Opaque provider fields that must be sent back unchanged with this call
    /// (e.g. Gemini `thought_signature`). `None` for most providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

/// The result of one tool call, fed back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolMessage {
    /// The id of the call this answers.
    pub tool_call_id: ToolCallId,
    /// Result text for the model.
    pub content: String,
    /// True when the call failed; the model sees the error and may try another way.
    #[serde(default)]
    pub is_error: bool,
    /// Images the tool returned (an MCP tool's `image` content), kept in the attachment
    /// store like a user's uploads and referenced here by attachment id. The content
    /// names each one as text too, so a model without vision still learns it was there;
    /// a model with vision is sent the image itself. Absent in logs written before
    /// tool results carried images (read as none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<AttachmentRef>,
}

impl ToolMessage {
    /// A result with text `content` and no images.
    pub fn text(tool_call_id: ToolCallId, content: impl Into<String>, is_error: bool) -> Self {
        Self {
            tool_call_id,
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }
}

/// Why a model response ended, normalised across providers
/// (see `actors/tests/fixtures/providers/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer (`stop`, Anthropic `end_turn`, `stop_sequence`).
    Stop,
    /// The model asked for tools and produced complete calls.
    ToolCalls,
    /// The output-token cap was hit (`length`, `max_tokens`). Never context overflow.
    Length,
    /// A content filter or refusal stopped the answer.
    ContentFilter,
    /// Anthropic `pause_turn`: a long server-side turn paused; continue it.
    PauseTurn,
    /// Anthropic `model_context_window_exceeded`.
    ContextWindow,
    /// A reason this runtime does not know.
    #[serde(other)]
    Other,
}

/// Token usage reported by a provider for one model request. Fields are token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input (prompt) tokens, including cached ones.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output (completion) tokens, including reasoning tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Reasoning tokens among the output tokens, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

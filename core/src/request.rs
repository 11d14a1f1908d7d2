//! The neutral model request every provider materialises per protocol (plain data).

pub use crate::messages::Messages;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How many images one request may carry, and how many bytes of them (base64, as sent):
/// a provider profile's `max_images` and `max_image_bytes`. The compiler keeps the most
/// recent images that fit and leaves the older ones out (a line names each one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageBudget {
    /// Most images per request (user inputs and tool results together).
    pub max_images: usize,
    /// Most bytes of base64 image data per request.
    pub max_bytes: u64,
}

impl ImageBudget {
    /// Default image count: under Anthropic's 100 (and its 20, above which each image
    /// must be smaller) and OpenAI's 500.
    pub const DEFAULT_MAX_IMAGES: usize = 20;
    /// Default base64 bytes: under Anthropic's 32 MB and OpenAI's 50 MB request bodies,
    /// with room for the text.
    pub const DEFAULT_MAX_BYTES: u64 = 20_000_000;
}

impl Default for ImageBudget {
    fn default() -> Self {
        Self {
            max_images: Self::DEFAULT_MAX_IMAGES,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        }
    }
}

/// A tool as exposed to the model: name, description and JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSchema {
    /// Tool name (`read_file`, …).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema (draft 2020-12 subset the providers accept) of the arguments object.
    pub parameters: serde_json::Value,
}

/// Image bytes resolved from an attachment reference, for protocols that take images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageData {
    /// MIME type, e.g. `image/png`.
    pub media_type: String,
    /// Base64 (standard alphabet, padded) of the image bytes.
    pub base64: String,
}

/// One model request in neutral form; the wire adapters materialise it per protocol.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Model name.
    pub model: String,
    /// System prompt compiled for this step.
    pub system: String,
    /// History, well-formed (each tool call has exactly one result, in order); a shared
    /// prefix plus this request's own messages (see [`Messages`]).
    pub messages: Messages,
    /// Tools exposed for this step (empty: no tools, e.g. a final summarising step).
    /// Shared: a turn builds its tool schemas once and every request points at them.
    pub tools: std::sync::Arc<[ToolSchema]>,
    /// Maximum output tokens, when set.
    pub max_output_tokens: Option<u32>,
    /// Images referenced by user messages, by attachment id.
    pub images: BTreeMap<String, ImageData>,
}

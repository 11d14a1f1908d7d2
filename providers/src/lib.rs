//! `foya-providers`: the model providers. The neutral request, the `ModelClient` seam every backend implements
//! (HTTP wire adapters, the scripted replayer, the simulator), wire adapters and the
//! error classifier.
//!
//! Owns: turning a [`ModelRequest`] into a stream of [`StreamEvent`]s. Must not: touch the
//! store or know about sessions; retries are decided by the turn (see `retry`).

#[cfg(feature = "client")]
use foya_protocol::StreamEvent;
#[cfg(feature = "client")]
use futures::stream::BoxStream;
#[cfg(feature = "client")]
use tokio_util::sync::CancellationToken;

pub mod classify;
#[cfg(feature = "http")]
pub mod http;
pub mod profile;
pub mod redact;
/// The retry policy (pure; in `foya-core`).
pub use foya_core::retry;
#[cfg(feature = "client")]
pub mod scripted;
#[cfg(feature = "client")]
mod step_scope;
#[cfg(feature = "client")]
pub use step_scope::{StepOf, current_step, in_step};
#[cfg(feature = "sim")]
pub mod sim;
pub mod wire;

pub use foya_core::request::{ImageBudget, ImageData, Messages, ModelRequest, ToolSchema};

/// A backend that streams a model response for a request.
///
/// # The stream contract
/// - Text comes as [`StreamEvent::TextDelta`] fragments, in order.
/// - Each tool call comes as one or more [`StreamEvent::ToolCallDelta`]s with a dense
///   `index` (0 for the response's first call, 1 for the next, …); the call's first
///   fragment carries its `id` and `name`, and the `arguments` fragments of one index,
///   concatenated, are the call's JSON arguments. Fragments of different calls may
///   interleave.
/// - [`StreamEvent::Usage`] (optional) is cumulative: a later one replaces an earlier.
/// - The stream ends with exactly one [`StreamEvent::Done`] (with the finish reason:
///   `tool_calls` when it made calls) or [`StreamEvent::Error`]. A stream that ends
///   without either has been cut off and is treated as `stream_interrupted` (retried).
///
/// ```
/// use futures::stream::{self, BoxStream};
/// use foya_providers::{ModelClient, ModelRequest};
/// use tokio_util::sync::CancellationToken;
/// use foya_protocol::{FinishReason, StreamEvent, ToolCallId};
///
/// /// Asks for the `clock` tool once, then answers with the tool's result.
/// #[derive(Debug)]
/// struct ClockModel;
///
/// impl ModelClient for ClockModel {
///     fn stream(&self, request: ModelRequest, _cancel: CancellationToken) -> BoxStream<'static, StreamEvent> {
///         let events = match request.messages.last() {
///             Some(foya_protocol::Message::Tool(result)) => vec![
///                 StreamEvent::TextDelta { text: format!("It is {}.", result.content) },
///                 StreamEvent::Done { finish_reason: Some(FinishReason::Stop) },
///             ],
///             _ => vec![
///                 StreamEvent::ToolCallDelta {
///                     index: 0,
///                     id: Some(ToolCallId::new("call_1")),
///                     name: Some("clock".into()),
///                     arguments: "{\"zone\":".into(),
///                     extra: None,
///                 },
///                 StreamEvent::ToolCallDelta {
///                     index: 0, id: None, name: None, arguments: "\"UTC\"}".into(), extra: None,
///                 },
///                 StreamEvent::Done { finish_reason: Some(FinishReason::ToolCalls) },
///             ],
///         };
///         Box::pin(stream::iter(events))
///     }
/// }
/// ```
///
/// # Cancel safety
/// Dropping the stream aborts the request (HTTP connection closed). `cancel` lets an
/// implementation stop early too; it must never block.
#[cfg(feature = "client")]
pub trait ModelClient: Send + Sync + std::fmt::Debug {
    /// Starts one streaming request.
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent>;

    /// The model's context window in tokens (for the context budget).
    fn context_window(&self) -> u64 {
        128_000
    }

    /// Whether the model accepts image inputs (default `false`: a conversation with
    /// images then fails its turn with a clear message instead of dropping them).
    fn supports_images(&self) -> bool {
        false
    }

    /// How many images, and bytes of them, one request may carry (a provider profile's
    /// `max_images` and `max_image_bytes`); default [`ImageBudget::default`].
    fn image_budget(&self) -> ImageBudget {
        ImageBudget::default()
    }

    /// The retry policy of this client's requests (a provider profile's
    /// `[profiles.NAME.retry]`); `None` (the default): the runtime's
    /// `RuntimeConfig::retry` (foya-actors). A wrapper around
    /// another client forwards it.
    fn retry_policy(&self) -> Option<retry::RetryPolicy> {
        None
    }
}

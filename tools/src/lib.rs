//! Tools: the `Tool` contract, the registry of built-ins, argument validation, the
//! Approval Gateway policy and the Sandbox Runner.
//!
//! Owns: what a tool is and how one call runs. Must not: write events or talk to actors;
//! the ToolActor drives a call and persists what happens.

/// Approval Gateway policy (pure): `evaluate` → `Verdict`.
pub mod approval;
/// The built-in tools.
pub mod builtin;
/// The environment of the processes the runtime starts (`shell`, hooks, MCP servers).
pub mod env_policy;
/// Exact grants of exec tools ("allow for this session" covers an argv prefix).
pub mod grants;
// Path resolution and working-directory confinement of the file tools.
mod paths;
/// Protected paths: the runtime's control files.
pub mod protected;
/// `ToolRegistry`: exposed schemas and argument validation (`prepare`).
pub mod registry;
/// Sandbox Runner (Landlock helper, process groups).
pub mod sandbox;
/// Batching of one step's tool calls (pure).
pub use foya_core::schedule;
/// Typed tools (argument struct + async fn) and the embedder's shared state.
pub mod typed;

pub use foya_core::schedule::CANCELLED;
pub use registry::{InvalidToolSchema, PreparedCall, ToolRegistry};
pub use typed::{DEFAULT_TYPED_TIMEOUT_MS, ToolState, TypedTool};

use async_trait::async_trait;
use foya_protocol::{ApprovalMode, RunId, SessionId, ToolCallId};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// What kind of side effect a tool may have; drives the Approval Gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffect {
    /// Reads only.
    None,
    /// Writes files.
    Write,
    /// Runs processes.
    Exec,
    /// Talks to the network.
    Network,
    /// Served by an MCP server: its effects are unknown to Foya (the server is another
    /// party), so every call asks unless the mode is `bypass`; the grant key is the
    /// tool's name (`mcp__<server>__<tool>`).
    External,
}

/// What a tool declares about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name the model calls it by.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
    /// May run concurrently with other parallel-safe calls (explicit, never inferred).
    pub parallel_safe: bool,
    /// Side-effect class.
    pub side_effect: SideEffect,
    /// Whether a running call stops when its cancellation token fires.
    pub cancellable: bool,
    /// Default timeout of one call, in milliseconds.
    pub default_timeout_ms: u64,
}

/// What a tool call knows about where it runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Session working directory (absolute).
    pub cwd: PathBuf,
    /// Project id.
    pub project_id: Option<String>,
    /// Session approval mode.
    pub approval_mode: ApprovalMode,
    /// Session.
    pub session_id: SessionId,
    /// Turn.
    pub run_id: RunId,
    /// 1-based step of the turn.
    pub step: u32,
    /// This call.
    pub tool_call_id: ToolCallId,
    /// The sandbox the Approval Gateway chose for this call (the ToolActor sets it on
    /// every call): exec tools run under it; file tools stay inside `cwd` unless it is
    /// `SandboxPolicy::None` or the mode is `bypass`.
    pub sandbox: SandboxPolicy,
    /// The working directory's protected paths: file tools refuse to write them (also
    /// through a symlink) unless the sandbox allows it, and a sandboxed command cannot.
    pub protected: protected::Protected,
    /// The runtime's [`ToolState`] (read with [`ToolContext::state`]).
    pub shared: ToolState,
    /// This call's cancellation token, the one [`Tool::call`] receives: it fires when
    /// the turn is cancelled (or the session deleted, or the runtime shut down) and when
    /// the call passes its timeout. A [`TypedTool`] handler reads it here to stop work
    /// that outlives its future (a blocking thread, a spawned task) before it has an
    /// effect.
    pub cancel: CancellationToken,
}

pub use foya_core::approval::SandboxPolicy;

/// Where a running tool reports progress (`tool_update` events) and live output.
pub trait ProgressSink: Send + Sync {
    /// A progress line (persisted as `tool_update`).
    fn update(&self, message: String);
    /// A chunk of live output (broadcast, not persisted).
    fn output(&self, chunk: String);
}

/// The result of one call, fed back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Text for the model.
    pub content: String,
    /// Whether it failed.
    pub is_error: bool,
    /// Images for the model (an MCP tool's `image` content), in the order the tool gave
    /// them; `content` names each one too. The ToolActor keeps them in the runtime's
    /// attachment store and the result references them by id.
    pub images: Vec<ToolImage>,
}

/// One image a tool returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolImage {
    /// MIME type as the tool declared it, e.g. `image/png`.
    pub media_type: String,
    /// The image bytes.
    pub bytes: Vec<u8>,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self::text(content, false)
    }

    /// A failed result the model can act on.
    pub fn error(content: impl Into<String>) -> Self {
        Self::text(content, true)
    }

    /// A text result without images.
    pub fn text(content: impl Into<String>, is_error: bool) -> Self {
        Self {
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }
}

/// A tool. Implementations are stateless or internally synchronised; one value serves
/// every session. [`TypedTool`] builds one from an argument struct and an async fn;
/// implement the trait for full control (progress, live output, a hand-written schema):
///
/// ```
/// use foya_tools::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec};
/// use async_trait::async_trait;
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(Debug)]
/// struct Echo(ToolSpec);
///
/// #[async_trait]
/// impl Tool for Echo {
///     fn spec(&self) -> &ToolSpec {
///         &self.0
///     }
///     async fn call(&self, _ctx: &ToolContext, args: serde_json::Value, _cancel: CancellationToken, progress: &dyn ProgressSink) -> ToolOutput {
///         progress.update("echoing".into());
///         ToolOutput::ok(args["text"].as_str().unwrap_or_default())
///     }
/// }
///
/// let echo = Echo(ToolSpec {
///     name: "echo".into(),
///     description: "Repeats its text".into(),
///     parameters: serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
///     parallel_safe: true,
///     side_effect: SideEffect::None,
///     cancellable: true,
///     default_timeout_ms: 1_000,
/// });
/// let mut tools = foya_tools::ToolRegistry::new();
/// tools.register(std::sync::Arc::new(echo))?;
/// # Ok::<(), foya_tools::InvalidToolSchema>(())
/// ```
#[async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    /// Its declaration.
    fn spec(&self) -> &ToolSpec;

    /// Runs one call with validated arguments.
    ///
    /// Expected failures (missing file, non-zero exit) are `ToolOutput::error`, not panics.
    ///
    /// # Cancel safety
    /// When `cancel` fires, a cancellable tool stops promptly (killing its process group)
    /// and returns; dropping the future must also leave nothing running.
    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput;
}

//! Owns [`AgentBuilder`] and [`Agent`]: an embedder's agent in one place — its
//! instructions, model, tools, approval mode and limits — started as a [`Runtime`]
//! whose sessions all follow it. Everything here is sugar over [`RuntimeConfig`] and
//! [`SessionConfig`]; both stay available for what the builder does not cover.

use crate::kernel::RuntimeError;
use crate::options::ContextOptions;
use crate::provider::ModelClient;
use crate::runtime::{Runtime, RuntimeConfig, SessionHandle};
use crate::tools::{InvalidToolSchema, Tool, ToolRegistry, ToolState};
use crate::turn::protection::Limits;
use foya_protocol::{ApprovalMode, Instructions, SessionConfig};
use std::path::PathBuf;
use std::sync::Arc;

/// Builds an [`Agent`]. Defaults: Foya's built-in coding-agent prompt, no tools, approval
/// mode [`ApprovalMode::Ask`], no step limit, the default run-protection limits, and no
/// files read (neither the project's `AGENTS.md` nor the user's `~/.config/foya`; see
/// [`Self::context`]).
///
/// Tools are explicit, as in other agent SDKs: the agent's model can call only the tools
/// given with [`Self::tool`], [`Self::tools`] or [`Self::read_only_builtin_tools`]
/// (Foya's `read_file`, `list_dir`, `glob`, `grep` over the session's working
/// directory). An agent that answers customers should not read the files of the
/// directory its service runs in unless its author said so. (The lower-level
/// [`RuntimeConfig::new`] does start with those read-only tools.)
///
/// ```
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use foya_actors::provider::scripted::ScriptedClient;
/// use foya_actors::{Agent, RuntimeError};
/// use foya_protocol::{ApprovalMode, Input};
/// use std::sync::Arc;
///
/// let model = Arc::new(ScriptedClient::from_script(serde_json::from_value(
///     serde_json::json!({"responses": [{"text": "Paris."}]}),
/// )?));
/// let agent = Agent::builder(model)
///     .instructions("You answer geography questions in one word.")
///     .approval_mode(ApprovalMode::ReadOnly)
///     .max_steps(4)
///     .start(foya_storage::Store::open_in_memory(Default::default())?)
///     .await?;
/// let session = agent.session("/tmp").await?;
/// let outcome = session.run(Input::text("Capital of France?")).await?;
/// assert_eq!(outcome.text, "Paris.");
/// agent.shutdown().await;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Debug)]
pub struct AgentBuilder {
    model: Arc<dyn ModelClient>,
    model_name: String,
    instructions: Option<Instructions>,
    tools: ToolRegistry,
    approval_mode: ApprovalMode,
    max_steps: Option<u32>,
    limits: Limits,
    context: ContextOptions,
    state: ToolState,
}

/// A started agent: a [`Runtime`] plus the session settings of its builder.
#[derive(Debug)]
pub struct Agent {
    runtime: Runtime,
    template: SessionConfig,
}

impl Agent {
    /// A builder of an agent served by `model`.
    #[must_use]
    pub fn builder(model: Arc<dyn ModelClient>) -> AgentBuilder {
        AgentBuilder {
            model,
            model_name: String::new(),
            instructions: None,
            tools: ToolRegistry::new(),
            approval_mode: ApprovalMode::default(),
            max_steps: None,
            limits: Limits::default(),
            context: ContextOptions::default(),
            state: ToolState::new(),
        }
    }

    /// An agent of a runtime started from [`AgentBuilder::runtime_config`] (adjusted),
    /// whose sessions take `template` (its `cwd` is replaced by each session's).
    #[must_use]
    pub fn from_runtime(runtime: Runtime, template: SessionConfig) -> Self {
        Self { runtime, template }
    }

    /// Creates a session working in `cwd` with the agent's settings.
    ///
    /// # Errors
    /// As [`Runtime::create_session`].
    pub async fn session(&self, cwd: impl Into<PathBuf>) -> Result<SessionHandle, RuntimeError> {
        let config = SessionConfig {
            cwd: cwd.into(),
            ..self.template.clone()
        };
        self.runtime.create_session(config).await
    }

    /// The runtime, for everything else (loading sessions by id, listing, draining).
    #[must_use]
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Stops the runtime ([`Runtime::shutdown`]).
    pub async fn shutdown(self) {
        self.runtime.shutdown().await;
    }
}

impl AgentBuilder {
    /// Instructions that replace Foya's built-in coding-agent prompt.
    #[must_use]
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(Instructions::replace(text));
        self
    }

    /// Instructions that follow Foya's built-in coding-agent prompt.
    #[must_use]
    pub fn append_instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(Instructions::append(text));
        self
    }

    /// Instructions that are the whole system prompt: unlike [`Self::instructions`],
    /// neither Foya's coding-agent prompt nor its `# Environment` (working directory,
    /// OS, shell, date) and `# Approval mode` sections are sent
    /// ([`foya_protocol::InstructionsMode::Only`]). Sections from the project's files
    /// follow only when [`Self::context`] turns file reading on.
    #[must_use]
    pub fn instructions_only(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(Instructions::only(text));
        self
    }

    /// The model name sent to the provider (recorded in each session's config).
    #[must_use]
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = name.into();
        self
    }

    /// Adds a tool (one of the same name is replaced).
    ///
    /// # Errors
    /// [`InvalidToolSchema`] when its parameter schema is invalid
    /// ([`ToolRegistry::register`]).
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Result<Self, InvalidToolSchema> {
        self.tools.register(tool)?;
        Ok(self)
    }

    /// Uses `tools` as the tool set (replacing the ones added so far), e.g.
    /// [`ToolRegistry::builtin`] for Foya's file and shell tools.
    #[must_use]
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Adds Foya's built-in tools without side effects ([`ToolRegistry::read_only_builtin`]:
    /// `read_file`, `list_dir`, `glob`, `grep`, confined to each session's working
    /// directory) to the tools added so far; as with [`Self::tool`], one of the same name
    /// is replaced.
    #[must_use]
    pub fn read_only_builtin_tools(mut self) -> Self {
        for tool in crate::tools::builtin::read_only() {
            // Their schemas are fixed (foya-tools registers each in a test): never refused.
            if let Err(e) = self.tools.register(tool) {
                tracing::error!(error = %e, "a built-in tool was refused");
            }
        }
        self
    }

    /// The approval mode of its sessions.
    #[must_use]
    pub fn approval_mode(mut self, mode: ApprovalMode) -> Self {
        self.approval_mode = mode;
        self
    }

    /// The most tool steps one turn may take.
    #[must_use]
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = Some(steps);
        self
    }

    /// Run-protection limits (duplicate calls, repeated failures, step cycles).
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// A value the agent's tools reach with [`crate::tools::ToolContext::state`] (one per
    /// type; a second of the same type replaces the first).
    #[must_use]
    pub fn state<T: std::any::Any + Send + Sync>(mut self, value: T) -> Self {
        self.state = self.state.with(value);
        self
    }

    /// Context settings; [`ContextOptions::with_files`] reads the project's files and
    /// the user's `~/.config/foya` as the CLI does.
    #[must_use]
    pub fn context(mut self, context: ContextOptions) -> Self {
        self.context = context;
        self
    }

    /// The runtime configuration this builder stands for, to adjust before
    /// [`Runtime::start`] (its sessions then take their settings from
    /// [`Self::session_config`]).
    #[must_use]
    pub fn runtime_config(&self, store: impl Into<foya_storage::LogStore>) -> RuntimeConfig {
        RuntimeConfig {
            tools: Arc::new(self.tools.clone()),
            protection: self.limits,
            context: self.context.clone(),
            instructions: self.instructions.clone(),
            default_model: self.model_name.clone(),
            tool_state: self.state.clone(),
            ..RuntimeConfig::new(store, Arc::clone(&self.model))
        }
    }

    /// The session configuration of this agent's sessions, working in `cwd`.
    #[must_use]
    pub fn session_config(&self, cwd: impl Into<PathBuf>) -> SessionConfig {
        SessionConfig {
            approval_mode: self.approval_mode,
            model: self.model_name.clone(),
            max_steps: self.max_steps,
            instructions: self.instructions.clone(),
            ..SessionConfig::new(cwd)
        }
    }

    /// Starts the agent's runtime on `store`.
    ///
    /// # Errors
    /// As [`Runtime::start`].
    pub async fn start(
        self,
        store: impl Into<foya_storage::LogStore>,
    ) -> Result<Agent, RuntimeError> {
        let runtime = Runtime::start(self.runtime_config(store)).await?;
        let template = self.session_config(PathBuf::new());
        Ok(Agent { runtime, template })
    }
}

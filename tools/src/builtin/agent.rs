//! The built-in `agent` tool (sub-agents): runs a child session on a sub-task and returns
//! the child's final answer as the tool result.
//!
//! Registered by `Runtime::start` when `RuntimeConfig::sub_agents` is set, with a
//! `SubAgentSpawner`: the narrow seam through which it starts a child session and
//! follows it (the tool names no actor and no façade type). A child:
//! - records `SessionConfig::parent` (the parent's session, run and tool call ids);
//! - inherits the parent's cwd, provider, model and approval mode — never more (a
//!   `read-only` parent has read-only children; the sandbox follows from the mode; an
//!   `ask` child has no approver, so calls needing approval are denied);
//! - runs with `max_steps` = [`SubAgentLimits::max_steps`] and may not start sub-agents;
//! - is bounded by [`SubAgentLimits`]: children at once per parent turn, children per
//!   parent turn, and a token budget (input + output tokens of its `usage` events;
//!   exceeding it cancels the child and returns an `is_error` result).
//!
//! The child's lifetime is the call's: the `ChildSession` the spawner returns stops the
//! child when it is dropped — when the call returns, is cancelled, or its ToolActor is
//! killed with the parent turn — through supervision (the child's SessionActor sits under
//! a per-call supervisor that cancels its running turn, waits for `turn_complete`, then
//! stops it; see `supervisor/sub_agent.rs`). No task outlives the call.
//!
//! The per-turn counters live as long as the parent turn: the turn holds a `TurnScope`
//! from its first tool step and drops it when it ends (or is killed), which removes the
//! turn's entry.

use crate::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec};
use async_trait::async_trait;
use foya_protocol::command::ParentRef;
use foya_protocol::{EventKind, RunId, SessionConfig, SessionId, SessionUpdate, TurnStatus};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Name of the tool.
pub(crate) const AGENT_TOOL: &str = "agent";

/// Limits of sub-agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubAgentLimits {
    /// Children running at once per parent turn (default 3).
    pub max_concurrent: usize,
    /// Children per parent turn (default 8).
    pub max_per_turn: u32,
    /// Input + output tokens (from `usage` events) a child may use before it is
    /// cancelled (default 200 000).
    pub token_budget: u64,
    /// Maximum steps of a child turn (default 50).
    pub max_steps: u32,
    /// How long a child may run (default 30 minutes).
    pub timeout: Duration,
}

impl Default for SubAgentLimits {
    fn default() -> Self {
        Self {
            max_concurrent: 3,
            max_per_turn: 8,
            token_budget: 200_000,
            max_steps: 50,
            timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// Why the runtime could not start or drive a child session, in words (the `agent`
/// call's error result tells the model).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SubAgentError(pub String);

/// What the `agent` tool needs from the runtime: the parent's configuration and a way to
/// start a child session. Implemented by the supervisor layer
/// (`supervisor::sub_agent::Spawner`).
#[async_trait]
pub trait SubAgentSpawner: Send + Sync + std::fmt::Debug {
    /// The configuration session `parent` was created with.
    ///
    /// # Errors
    /// The store's failure, or a session without `session_created`, in words.
    async fn parent_config(&self, parent: SessionId) -> Result<SessionConfig, SubAgentError>;

    /// Creates a child session with `config` (`session_created` committed) and starts it
    /// under the supervision of its parent (`config.parent`'s session).
    ///
    /// # Errors
    /// Why the child could not start, in words (the runtime is stopping, the parent is
    /// not running, the store refused the write).
    async fn start(&self, config: SessionConfig) -> Result<Box<dyn ChildSession>, SubAgentError>;
}

/// A running child session, owned by the `agent` call that started it. Dropping it stops
/// the child: a turn still running is cancelled and its end committed first.
#[async_trait]
pub trait ChildSession: Send + Sync {
    /// The child's session id (it can be loaded, observed and subscribed to by id).
    fn id(&self) -> SessionId;

    /// Submits `task` as the child's input; its updates from its first event on are
    /// then read with [`Self::next`].
    ///
    /// # Errors
    /// The session's refusal, in words.
    async fn submit(&mut self, task: &str) -> Result<(), SubAgentError>;

    /// The child's next update; `None` once the child is gone.
    async fn next(&mut self) -> Option<SessionUpdate>;

    /// Cancels the child's running turn (its end follows through [`Self::next`]).
    async fn cancel(&self);
}

/// Per parent turn: children started and the concurrency gate.
#[derive(Debug)]
struct TurnSlots {
    started: u32,
    gate: Arc<Semaphore>,
}

/// The `agent` tool.
#[derive(Debug)]
pub struct AgentTool {
    spec: ToolSpec,
    limits: SubAgentLimits,
    spawner: Arc<dyn SubAgentSpawner>,
    turns: Mutex<HashMap<RunId, TurnSlots>>,
}

/// Held by a turn while it runs; dropping it forgets the turn's sub-agent counters.
#[derive(Debug)]
pub struct TurnScope {
    agent: Arc<AgentTool>,
    run_id: RunId,
}

impl Drop for TurnScope {
    fn drop(&mut self) {
        self.agent.turn_ended(self.run_id);
    }
}

impl AgentTool {
    /// The tool, with `limits`, starting children through `spawner`.
    pub fn new(limits: SubAgentLimits, spawner: Arc<dyn SubAgentSpawner>) -> Self {
        Self {
            spec: ToolSpec {
                name: AGENT_TOOL.into(),
                description: "Run a sub-agent on a self-contained sub-task; it works with \
                              the same tools and permissions (or fewer) and returns its final \
                              answer."
                    .into(),
                parameters: serde_json::json!({
                    "type": "object",
                    "properties": {
                        "task": {"type": "string", "description": "The complete sub-task."}
                    },
                    "required": ["task"]
                }),
                parallel_safe: true,
                side_effect: SideEffect::None,
                cancellable: true,
                default_timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
            },
            limits,
            spawner,
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// The scope of turn `run_id`'s counters: dropping it (when the turn ends) forgets
    /// them.
    pub fn turn_scope(self: &Arc<Self>, run_id: RunId) -> TurnScope {
        TurnScope {
            agent: Arc::clone(self),
            run_id,
        }
    }

    /// Forgets the counters of turn `run_id` (it ended).
    fn turn_ended(&self, run_id: RunId) {
        self.turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&run_id);
    }

    /// How many turns have counters (for the runtime's tests).
    #[doc(hidden)]
    pub fn turns_with_counters(&self) -> usize {
        self.turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Takes a child slot of the parent turn `run_id`, or says why not.
    pub(crate) fn slot(&self, run_id: RunId) -> Result<Arc<Semaphore>, String> {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        let slots = turns.entry(run_id).or_insert_with(|| TurnSlots {
            started: 0,
            gate: Arc::new(Semaphore::new(self.limits.max_concurrent.max(1))),
        });
        if slots.started >= self.limits.max_per_turn {
            let max = self.limits.max_per_turn;
            let noun = if max == 1 { "sub-agent" } else { "sub-agents" };
            return Err(format!(
                "not run: this turn already started its maximum of {max} {noun}"
            ));
        }
        slots.started += 1;
        Ok(Arc::clone(&slots.gate))
    }

    async fn child_config(&self, ctx: &ToolContext) -> Result<SessionConfig, String> {
        let parent = self
            .spawner
            .parent_config(ctx.session_id)
            .await
            .map_err(|e| e.0)?;
        if parent.parent.is_some() {
            return Err("not run: a sub-agent cannot start sub-agents".into());
        }
        Ok(SessionConfig {
            cwd: ctx.cwd.clone(),
            project_id: ctx.project_id.clone(),
            // Never more than the parent: the running call's mode is the parent's.
            approval_mode: ctx.approval_mode,
            provider: parent.provider,
            model: parent.model,
            title: None,
            max_steps: Some(self.limits.max_steps),
            auto_compact: parent.auto_compact,
            // A sub-agent uses the parent's MCP servers.
            mcp_servers: parent.mcp_servers,
            // A sub-agent is the same agent: the parent's instructions.
            instructions: parent.instructions,
            parent: Some(ParentRef {
                session_id: ctx.session_id,
                run_id: ctx.run_id,
                tool_call_id: ctx.tool_call_id.clone(),
            }),
        })
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let task = args
            .get("task")
            .and_then(|t| t.as_str())
            .unwrap_or_default();
        if task.trim().is_empty() {
            return ToolOutput::error("`task` must be a non-empty string");
        }
        let gate = match self.slot(ctx.run_id) {
            Ok(gate) => gate,
            Err(e) => return ToolOutput::error(e),
        };
        let config = match self.child_config(ctx).await {
            Ok(config) => config,
            Err(e) => return ToolOutput::error(e),
        };
        let _permit = tokio::select! {
            () = cancel.cancelled() => return ToolOutput::error("cancelled"),
            permit = gate.acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return ToolOutput::error("sub-agent gate closed"),
            },
        };
        let mut child = match self.spawner.start(config).await {
            Ok(child) => child,
            Err(e) => return ToolOutput::error(format!("cannot create the sub-agent: {e}")),
        };
        progress.update(format!("sub-agent session {}", child.id()));
        // Dropping `child` (here, or with this future when the ToolActor is killed)
        // stops the child through its supervisor, which first ends a running turn.
        self.drive(child.as_mut(), task, &cancel)
            .await
            .into_output(self.limits.token_budget)
    }
}

/// How a child's run ended.
#[derive(Debug)]
enum Outcome {
    Answer(String),
    Failed(String),
    OverBudget { used: u64, partial: String },
    Cancelled,
}

impl Outcome {
    fn into_output(self, budget: u64) -> ToolOutput {
        match self {
            Self::Answer(text) => ToolOutput::ok(text),
            Self::Failed(why) => ToolOutput::error(format!("the sub-agent failed: {why}")),
            Self::OverBudget { used, partial } => ToolOutput::error(format!(
                "the sub-agent exceeded its token budget of {budget} tokens (used {used}) and \
                 was stopped. Its last answer: {partial}"
            )),
            Self::Cancelled => ToolOutput::error("cancelled"),
        }
    }
}

impl AgentTool {
    /// Submits the task to the child and follows it to its `turn_complete`.
    async fn drive(
        &self,
        child: &mut dyn ChildSession,
        task: &str,
        cancel: &CancellationToken,
    ) -> Outcome {
        if let Err(e) = child.submit(task).await {
            return Outcome::Failed(e.0);
        }
        let mut used = 0u64;
        let mut last = String::new();
        let mut over = false;
        loop {
            let update = tokio::select! {
                () = cancel.cancelled(), if !over => return Outcome::Cancelled,
                update = child.next() => update,
            };
            let Some(update) = update else {
                return Outcome::Failed("the sub-agent session closed".into());
            };
            let SessionUpdate::Event(event) = update else {
                continue;
            };
            match event.kind {
                EventKind::Usage(usage) => {
                    used = used.saturating_add(usage.input_tokens + usage.output_tokens);
                    if used > self.limits.token_budget && !over {
                        over = true;
                        child.cancel().await;
                    }
                }
                EventKind::AssistantMessage(message) if !message.text.is_empty() => {
                    last = message.text;
                }
                EventKind::TurnComplete {
                    status,
                    reason,
                    error,
                } => {
                    return if over {
                        Outcome::OverBudget {
                            used,
                            partial: last,
                        }
                    } else {
                        match status {
                            TurnStatus::Completed => Outcome::Answer(last),
                            TurnStatus::Cancelled => Outcome::Failed("cancelled".into()),
                            TurnStatus::Failed => Outcome::Failed(
                                error
                                    .map(|e| e.message)
                                    .or(reason)
                                    .unwrap_or_else(|| "failed".into()),
                            ),
                        }
                    };
                }
                _ => {}
            }
        }
    }
}

/// A spawner without a runtime: every child is refused (for tests of the tool alone).
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct NoRuntime;

#[cfg(test)]
#[async_trait]
impl SubAgentSpawner for NoRuntime {
    async fn parent_config(&self, _parent: SessionId) -> Result<SessionConfig, SubAgentError> {
        Err(SubAgentError("no runtime".into()))
    }

    async fn start(&self, _config: SessionConfig) -> Result<Box<dyn ChildSession>, SubAgentError> {
        Err(SubAgentError("no runtime".into()))
    }
}

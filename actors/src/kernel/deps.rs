//! What every actor shares ([`RuntimeDeps`]) and the runtime settings the actors read.

use crate::options::ContextOptions;
use crate::provider::ModelClient;
use crate::provider::retry::RetryPolicy;
use crate::tools::ToolRegistry;
use foya_core::turn::protection::Limits;
use foya_protocol::{SessionConfig, SessionId};
use std::collections::HashMap;
use std::sync::Arc;

pub use foya_core::session::{QueuedOnRestart, StopCause, WithoutApprover};

/// Turn-control settings shared by every turn (from `RuntimeConfig`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ControlConfig {
    /// Run-protection thresholds.
    pub protection: Limits,
    /// Cap of stop-hook continuations per turn.
    pub max_hook_continuations: u32,
}

/// What every actor shares.
#[derive(Debug, Clone)]
pub(crate) struct RuntimeDeps {
    pub store: foya_storage::LogStore,
    pub model: Arc<dyn ModelClient>,
    pub models: HashMap<String, Arc<dyn ModelClient>>,
    pub tools: Arc<ToolRegistry>,
    pub retry: RetryPolicy,
    pub subscriber_buffer: usize,
    pub context: ContextOptions,
    pub control: ControlConfig,
    pub attachments: Option<Arc<crate::attachments::AttachmentStore>>,
    pub queued_on_restart: QueuedOnRestart,
    /// The `agent` tool when sub-agents are on (a turn tells it when it ends).
    pub sub_agents: Option<Arc<crate::tools::builtin::agent::AgentTool>>,
    /// Every hook of the runtime.
    pub hooks: Arc<crate::hooks::Hooks>,
    /// Events idle sessions may keep in memory (see `log::IdleLogs`).
    pub idle_logs: crate::log::IdleLogs,
    /// [`crate::RuntimeConfig::default_provider`] and [`crate::RuntimeConfig::default_model`].
    pub default_provider: String,
    pub default_model: String,
    /// [`crate::RuntimeConfig::mcp`].
    #[cfg(feature = "mcp")]
    pub mcp: Option<Arc<crate::mcp::McpManager>>,
    /// [`crate::RuntimeConfig::instructions`].
    pub instructions: Option<foya_protocol::Instructions>,
    /// [`crate::RuntimeConfig::tool_state`].
    pub tool_state: crate::tools::ToolState,
    /// [`crate::RuntimeConfig::without_approver`].
    pub without_approver: WithoutApprover,
    /// [`crate::RuntimeConfig::hibernate_after`].
    pub hibernate_after: Option<std::time::Duration>,
    /// [`crate::RuntimeConfig::hibernate_at_once_above`].
    pub hibernate_at_once_above: Option<usize>,
    /// [`crate::RuntimeConfig::stats`]: the counts the actors keep.
    pub stats: super::StatsSource,
    /// [`crate::RuntimeConfig::ownership`]; `None`: every session is ours, appends
    /// carry `Fence::None`.
    pub ownership: Option<Arc<dyn foya_storage::Ownership>>,
    /// Where a session reports that the store refused its write as fenced: the runtime
    /// then drops every loaded session of that shard (`Runtime::start`'s task).
    pub fenced: Option<tokio::sync::mpsc::UnboundedSender<u32>>,
    /// Set in the actors' copy of the deps only (not the façade's): `Runtime::shutdown`
    /// waits until every actor and task holding that copy dropped it. Never sent on.
    pub _actors_alive: Option<tokio::sync::mpsc::Sender<std::convert::Infallible>>,
}

impl RuntimeDeps {
    /// The fence to write `session`'s events under (`parent`: a sub-agent's parent);
    /// `Fence::None` without an ownership.
    ///
    /// # Errors
    /// [`super::RuntimeError::NotOwner`] when this node does not hold its shard.
    pub(crate) fn fence_for(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
    ) -> Result<foya_storage::Fence, super::RuntimeError> {
        let Some(ownership) = &self.ownership else {
            return Ok(foya_storage::Fence::None);
        };
        let shard = ownership.shard_of(session, parent);
        ownership.fence(shard).map_err(|e| not_owner(session, e))
    }

    /// Whether `session` may be loaded or take new inputs here.
    ///
    /// # Errors
    /// [`super::RuntimeError::NotOwner`].
    pub(crate) fn admit(
        &self,
        session: SessionId,
        parent: Option<SessionId>,
    ) -> Result<(), super::RuntimeError> {
        let Some(ownership) = &self.ownership else {
            return Ok(());
        };
        let shard = ownership.shard_of(session, parent);
        ownership.admit(shard).map_err(|e| not_owner(session, e))
    }

    /// A fresh id for a new session (`parent`: a sub-agent's, whose shard it joins).
    ///
    /// # Errors
    /// [`super::RuntimeError::NoShard`] when this node holds no shard to put it in;
    /// [`super::RuntimeError::NotOwner`] for a child whose parent's shard is not held.
    pub(crate) fn mint_session_id(
        &self,
        parent: Option<SessionId>,
    ) -> Result<SessionId, super::RuntimeError> {
        let Some(ownership) = &self.ownership else {
            return Ok(SessionId::new());
        };
        match parent {
            None => ownership
                .mint_session_id(None)
                .ok_or(super::RuntimeError::NoShard),
            Some(parent) => {
                // A child belongs to its parent's running turn: created while the shard
                // is held, even while it is handed off (the turn finishes meanwhile).
                let shard = ownership.shard_of(parent, None);
                ownership.fence(shard).map_err(|e| not_owner(parent, e))?;
                ownership
                    .mint_session_id(Some(shard))
                    .ok_or(super::RuntimeError::NoShard)
            }
        }
    }

    /// The store refused a write of `session` under `fence`: the shard is another
    /// node's now. Tells the ownership and asks the runtime to drop the shard's
    /// sessions (none of them writes again).
    pub(crate) fn report_fenced(&self, fence: foya_storage::Fence) {
        let Some(ownership) = &self.ownership else {
            return;
        };
        ownership.fenced(fence);
        if let (foya_storage::Fence::Epoch { shard, .. }, Some(fenced)) = (fence, &self.fenced) {
            let _ = fenced.send(shard);
        }
    }

    /// The client for a session's provider name.
    pub(crate) fn client_for(&self, provider: &str) -> Arc<dyn ModelClient> {
        Arc::clone(self.models.get(provider).unwrap_or(&self.model))
    }

    /// The client for auxiliary requests (title, compaction summary) of a session.
    pub(crate) fn aux_client_for(&self, provider: &str) -> Arc<dyn ModelClient> {
        self.context
            .aux_model
            .clone()
            .unwrap_or_else(|| self.client_for(provider))
    }

    /// `config` with the runtime's defaults where it has none: a session created without
    /// a provider records [`Self::default_provider`], without a model (its provider empty
    /// or the default one) [`Self::default_model`], without instructions
    /// [`Self::instructions`].
    pub(crate) fn complete_config(&self, mut config: SessionConfig) -> SessionConfig {
        if config.provider.is_empty() {
            config.provider.clone_from(&self.default_provider);
        }
        if config.model.is_empty() && config.provider == self.default_provider {
            config.model.clone_from(&self.default_model);
        }
        if config.instructions.is_none() {
            config.instructions.clone_from(&self.instructions);
        }
        config
    }
}

/// [`super::RuntimeError::NotOwner`] of `session`.
fn not_owner(session: SessionId, e: foya_storage::NotOwner) -> super::RuntimeError {
    super::RuntimeError::NotOwner {
        session,
        shard: e.shard,
        owner: e.owner,
    }
}

//! One configured MCP server: its connection (started lazily, restarted with backoff
//! after a failure), its tool list (re-read after `notifications/tools/list_changed`),
//! its calls, and its shutdown.
//!
//! Owns: the child process of a stdio server (started through the sandbox helper, so it
//! leads its own process group, which is killed when the connection is dropped and by
//! the helper when Foya dies, even by SIGKILL), the streamable HTTP client of a remote
//! one, the server's stderr (to the tracing log, line by line), and turning every failure
//! (start, crash, timeout, garbage) into an error message for the one call or listing.
//! Must not: panic or block a caller past the configured timeouts.

use super::config::McpServerConfig;
use super::handler::Handler;
use crate::tools::sandbox::{ProcessGroupGuard, SandboxRunner};
use rmcp::service::RunningService;
use rmcp::{Peer, RoleClient};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

#[path = "server_call.rs"]
mod call;
#[path = "server_start.rs"]
mod start;

pub(crate) use call::CallOutcome;

/// Longest wait between restarts of a failing server.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What `mcp list` shows of a server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// Never started (stdio servers start on first use).
    NotStarted,
    /// Connected.
    Running,
    /// The last start or the connection failed; restarted on next use after the backoff.
    Failed {
        /// Why.
        error: String,
    },
    /// Stopped by the runtime's shutdown.
    Stopped,
}

/// The live connection.
struct Connection {
    service: RunningService<RoleClient, Handler>,
    /// Counts connections, so a failure reported by an old call does not drop a new one.
    generation: u64,
    /// stdio: the helper leading the server's process group.
    child: Option<tokio::process::Child>,
    /// stdio: kills the group when the connection is dropped.
    group: Option<ProcessGroupGuard>,
}

#[derive(Default)]
struct Slot {
    connection: Option<Connection>,
    generation: u64,
    tools: Option<Arc<Vec<rmcp::model::Tool>>>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
    stopped: bool,
}

/// One server, shared by every session of a runtime.
pub(crate) struct Server {
    pub(crate) name: String,
    /// The start of its tools' names ([`super::names::prefixes`]).
    pub(crate) prefix: String,
    /// The name each tool it ever listed was given: kept for the runtime's life, so a
    /// name never moves to another tool (see [`Server::tool_name`]).
    tool_names: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
    pub(crate) config: McpServerConfig,
    runner: SandboxRunner,
    slot: tokio::sync::Mutex<Slot>,
    handler: Handler,
    tools_changed: Arc<AtomicBool>,
    state: std::sync::Mutex<ServerState>,
    /// `notifications/cancelled` being sent for dropped calls: shutdown waits for them
    /// before it closes the connection.
    cancels: Cancels,
    /// The last successful listing, kept through failures: while the server is down
    /// its tools stay known, so a call of one fails with why (or restarts it).
    last_listed: std::sync::Mutex<Option<Arc<Vec<rmcp::model::Tool>>>>,
}

type Cancels = Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>;

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Server {
    pub(crate) fn new(
        name: String,
        prefix: String,
        config: McpServerConfig,
        runner: SandboxRunner,
    ) -> Self {
        let tools_changed = Arc::new(AtomicBool::new(false));
        let (progress, _) = broadcast::channel(256);
        let handler = Handler {
            server: Arc::from(name.as_str()),
            progress,
            tools_changed: Arc::clone(&tools_changed),
        };
        Self {
            name,
            prefix,
            tool_names: std::sync::Mutex::default(),
            config,
            runner,
            slot: tokio::sync::Mutex::default(),
            handler,
            tools_changed,
            state: std::sync::Mutex::new(ServerState::NotStarted),
            cancels: Cancels::default(),
            last_listed: std::sync::Mutex::default(),
        }
    }

    /// The model's name of its tool `tool`: the one given before, else
    /// `<prefix><tool>` ([`super::names::qualified`]) made unique against `reserved`
    /// (the runtime's own tools) and every name this server's tools were ever given.
    pub(crate) fn tool_name(&self, tool: &str, reserved: &[String]) -> String {
        let mut names = self
            .tool_names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(name) = names.get(tool) {
            return name.clone();
        }
        let mut taken: std::collections::BTreeSet<String> =
            names.values().chain(reserved).cloned().collect();
        let name = super::names::unique(
            super::names::qualified(&self.prefix, &self.name, tool),
            &self.name,
            tool,
            &mut taken,
        );
        names.insert(tool.to_owned(), name.clone());
        name
    }

    /// Its state now.
    pub(crate) fn state(&self) -> ServerState {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_state(&self, state: ServerState) {
        *self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }

    /// Its tools, listed (every page) on first use and again after `list_changed`;
    /// starts the server if needed.
    ///
    /// # Errors
    /// Why the server could not be started or listed.
    pub(crate) async fn tools(&self) -> Result<Arc<Vec<rmcp::model::Tool>>, String> {
        let mut slot = self.slot.lock().await;
        let peer = self.connect(&mut slot).await?;
        let changed = self.tools_changed.swap(false, Ordering::SeqCst);
        if let Some(tools) = &slot.tools
            && !changed
        {
            return Ok(Arc::clone(tools));
        }
        let listed =
            tokio::time::timeout(self.config.startup_timeout(), peer.list_all_tools()).await;
        match listed {
            Ok(Ok(tools)) => {
                let tools = Arc::new(tools);
                slot.tools = Some(Arc::clone(&tools));
                *self
                    .last_listed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&tools));
                Ok(tools)
            }
            Ok(Err(e)) => {
                let message = format!("MCP server `{}` failed to list its tools: {e}", self.name);
                self.failed(&mut slot, message.clone());
                Err(message)
            }
            Err(_) => {
                let message = format!(
                    "MCP server `{}` did not list its tools within {} ms",
                    self.name,
                    self.config.startup_timeout().as_millis()
                );
                self.failed(&mut slot, message.clone());
                Err(message)
            }
        }
    }

    /// The last successful listing, if any (see [`Server::tools`]).
    pub(crate) fn last_listed(&self) -> Option<Arc<Vec<rmcp::model::Tool>>> {
        self.last_listed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The peer of a live connection, starting one if there is none and the backoff
    /// after the last failure has passed.
    async fn connect(&self, slot: &mut Slot) -> Result<Peer<RoleClient>, String> {
        if slot.stopped {
            return Err(format!(
                "MCP server `{}` is stopped (the runtime is shutting down)",
                self.name
            ));
        }
        if let Some(connection) = &slot.connection {
            if !connection.service.is_closed() {
                return Ok(connection.service.peer().clone());
            }
            let message = format!("MCP server `{}` closed the connection", self.name);
            self.failed(slot, message);
        }
        if let Some(at) = slot.retry_at
            && Instant::now() < at
        {
            let wait = at.saturating_duration_since(Instant::now());
            return Err(format!(
                "MCP server `{}` is unavailable (restarted in {} ms): {}",
                self.name,
                wait.as_millis(),
                slot.last_error.as_deref().unwrap_or("it failed")
            ));
        }
        match tokio::time::timeout(self.config.startup_timeout(), self.start()).await {
            Ok(Ok(mut connection)) => {
                slot.generation += 1;
                connection.generation = slot.generation;
                slot.tools = None;
                slot.failures = 0;
                slot.retry_at = None;
                slot.last_error = None;
                let peer = connection.service.peer().clone();
                slot.connection = Some(connection);
                self.set_state(ServerState::Running);
                tracing::info!(mcp.server = %self.name, "MCP server started");
                Ok(peer)
            }
            Ok(Err(message)) => {
                self.failed(slot, message.clone());
                Err(message)
            }
            Err(_) => {
                let message = format!(
                    "MCP server `{}` did not start within {} ms (startup_timeout_ms)",
                    self.name,
                    self.config.startup_timeout().as_millis()
                );
                self.failed(slot, message.clone());
                Err(message)
            }
        }
    }

    /// Drops the connection (killing a stdio server's group) and schedules the restart:
    /// at once after the first failure, then after 1 s, 2 s, … up to [`MAX_BACKOFF`].
    fn failed(&self, slot: &mut Slot, message: String) {
        tracing::warn!(mcp.server = %self.name, error = %message, "MCP server failed");
        slot.connection = None;
        slot.tools = None;
        slot.failures = slot.failures.saturating_add(1);
        let backoff = match slot.failures {
            0 | 1 => Duration::ZERO,
            n => Duration::from_secs(1u64 << (n - 2).min(5)).min(MAX_BACKOFF),
        };
        slot.retry_at = Some(Instant::now() + backoff);
        slot.last_error = Some(message.clone());
        self.set_state(ServerState::Failed { error: message });
    }

    async fn connection_lost(&self, generation: u64, message: String) {
        let mut slot = self.slot.lock().await;
        if slot.generation == generation && slot.connection.is_some() {
            self.failed(&mut slot, message);
        }
    }

    /// Closes the connection (a stdio server sees its stdin end and gets 2 s to exit,
    /// then its process group is killed). Later calls fail.
    pub(crate) async fn shutdown(&self) {
        let mut slot = self.slot.lock().await;
        slot.stopped = true;
        if let Some(connection) = slot.connection.take() {
            let Connection {
                service,
                child,
                group,
                ..
            } = connection;
            let pending: Vec<_> = std::mem::take(
                &mut *self
                    .cancels
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            let sent = futures::future::join_all(pending);
            let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
            let _ = tokio::time::timeout(Duration::from_secs(2), service.cancel()).await;
            if let Some(mut child) = child {
                let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
            }
            drop(group);
        }
        self.set_state(ServerState::Stopped);
    }
}

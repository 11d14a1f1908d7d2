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
use super::handler::{Handler, clip};
use crate::tools::sandbox::{ProcessGroupGuard, SandboxRunner};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{Peer, RoleClient, ServiceExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

/// How a call ended.
pub(crate) enum CallOutcome {
    /// The server's result (`CallToolResult` as JSON).
    Result(serde_json::Value),
    /// Failed before or without a result (the message says why).
    Failed(String),
    /// The call's cancellation token fired (`notifications/cancelled` was sent).
    Cancelled,
}

impl Server {
    pub(crate) fn new(name: String, config: McpServerConfig, runner: SandboxRunner) -> Self {
        let tools_changed = Arc::new(AtomicBool::new(false));
        let (progress, _) = broadcast::channel(256);
        let handler = Handler {
            server: Arc::from(name.as_str()),
            progress,
            tools_changed: Arc::clone(&tools_changed),
        };
        Self {
            name,
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

    /// Calls tool `tool` (the server's name for it) with `arguments`; progress lines go
    /// to `on_progress`. A timeout or a fired `cancel` sends `notifications/cancelled`
    /// (and so does dropping the future while the request is in flight).
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        cancel: &CancellationToken,
        on_progress: &(dyn Fn(String) + Send + Sync),
    ) -> CallOutcome {
        let (peer, generation) = {
            let mut slot = self.slot.lock().await;
            match self.connect(&mut slot).await {
                Ok(peer) => (peer, slot.generation),
                Err(message) => return CallOutcome::Failed(message),
            }
        };
        let mut progress = self.handler.progress.subscribe();
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                let message = format!("MCP server `{}`: cannot send the call: {e}", self.name);
                self.connection_lost(generation, message.clone()).await;
                return CallOutcome::Failed(message);
            }
        };
        let token = handle.progress_token.clone();
        let mut abandoned = AbandonGuard {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
            reason: "the turn was cancelled",
            sent: Arc::clone(&self.cancels),
        };
        let response = handle.await_response();
        tokio::pin!(response);
        let timeout_ms = self.config.tool_timeout_ms();
        let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                // The server answered (or the connection ended).
                result = &mut response => {
                    abandoned.peer = None;
                    return match result {
                        Ok(ServerResult::CallToolResult(result)) => {
                            serde_json::to_value(&result)
                                .map_or_else(|e| CallOutcome::Failed(e.to_string()), CallOutcome::Result)
                        }
                        Ok(_) => CallOutcome::Failed(format!(
                            "MCP server `{}` answered the call with something that is not a tool result",
                            self.name
                        )),
                        Err(rmcp::ServiceError::McpError(error)) => CallOutcome::Failed(format!(
                            "MCP server `{}` refused the call: {} (code {})",
                            self.name, error.message, error.code.0
                        )),
                        Err(e) => {
                            let message = format!(
                                "MCP server `{}` stopped answering during the call ({e}); it is \
                                 restarted on its next use",
                                self.name
                            );
                            self.connection_lost(generation, message.clone()).await;
                            CallOutcome::Failed(message)
                        }
                    };
                }
                // A progress notification of this call: a `tool_update`.
                Ok((of, text)) = progress.recv() => {
                    if of == token {
                        on_progress(clip(&text, 500));
                    }
                }
                // The turn was cancelled: the guard tells the server.
                () = cancel.cancelled() => {
                    abandoned.reason = "the turn was cancelled";
                    return CallOutcome::Cancelled;
                }
                // Hung past `tool_timeout_ms`: the guard tells the server.
                () = &mut deadline => {
                    abandoned.reason = "timeout";
                    abandoned.send().await;
                    return CallOutcome::Failed(format!(
                        "MCP server `{}` did not answer within {timeout_ms} ms (tool_timeout_ms); \
                         the call was cancelled",
                        self.name
                    ));
                }
            }
        }
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

    /// Starts the server and runs `initialize` (version negotiation included).
    async fn start(&self) -> Result<Connection, String> {
        match (&self.config.command, &self.config.url) {
            (Some(command), _) => self.start_stdio(command).await,
            (None, Some(url)) => self.start_http(url).await,
            (None, None) => Err(format!(
                "MCP server `{}` has neither command nor url",
                self.name
            )),
        }
    }

    async fn start_stdio(&self, command: &str) -> Result<Connection, String> {
        let cwd = match &self.config.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?,
        };
        let args: Vec<std::ffi::OsString> = self.config.args.iter().map(Into::into).collect();
        let mut prepared = self
            .runner
            .spawn(self.config.sandbox.policy(), &cwd, command, &args)
            .map_err(|e| format!("MCP server `{}`: {e}", self.name))?;
        for name in &self.config.env_vars {
            if let Some(value) = std::env::var_os(name) {
                prepared.command.env(name, value);
            }
        }
        prepared
            .command
            .envs(&self.config.env)
            .stdin(std::process::Stdio::piped());
        let mut child = prepared.command.spawn().map_err(|e| {
            format!(
                "MCP server `{}` could not be started ({command}): {e}",
                self.name
            )
        })?;
        let group = ProcessGroupGuard::new(child.id());
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(format!("MCP server `{}`: no stdio pipes", self.name));
        };
        let tail = StderrTail::default();
        let stderr_done = child.stderr.take().map(|stderr| {
            tokio::spawn(log_stderr(
                Arc::from(self.name.as_str()),
                stderr,
                Arc::clone(&tail),
            ))
        });
        let service = match self.handler.clone().serve((stdout, stdin)).await {
            Ok(service) => service,
            Err(e) => {
                // What the server (or the helper, when the program cannot run) said last.
                if let Some(done) = stderr_done {
                    let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
                }
                let said = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(" | ");
                let said = if said.is_empty() {
                    String::new()
                } else {
                    format!("; its stderr: {said}")
                };
                return Err(format!(
                    "MCP server `{}` ({command}) failed to initialize: {e}{said}",
                    self.name
                ));
            }
        };
        Ok(Connection {
            service,
            generation: 0,
            child: Some(child),
            group: Some(group),
        })
    }

    async fn start_http(&self, url: &str) -> Result<Connection, String> {
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        if let Some(var) = &self.config.bearer_token_env_var {
            let token = std::env::var(var).map_err(|_| {
                format!(
                    "MCP server `{}`: the environment variable {var} (bearer_token_env_var) is not set",
                    self.name
                )
            })?;
            config = config.auth_header(token);
        }
        let mut headers = std::collections::HashMap::new();
        let pairs = self
            .config
            .http_headers
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.clone())));
        let from_env = self.config.env_http_headers.iter().map(|(k, var)| {
            std::env::var(var).map(|v| (k.clone(), v)).map_err(|_| {
                format!(
                    "MCP server `{}`: the environment variable {var} (header {k}) is not set",
                    self.name
                )
            })
        });
        for pair in pairs.chain(from_env) {
            let (name, value) = pair?;
            let name = reqwest::header::HeaderName::try_from(name.as_str())
                .map_err(|e| format!("MCP server `{}`: header {name}: {e}", self.name))?;
            let value = reqwest::header::HeaderValue::try_from(value.as_str())
                .map_err(|e| format!("MCP server `{}`: header {name}: {e}", self.name))?;
            headers.insert(name, value);
        }
        config = config.custom_headers(headers);
        let transport = StreamableHttpClientTransport::from_config(config);
        let service = self.handler.clone().serve(transport).await.map_err(|e| {
            format!(
                "MCP server `{}` ({url}) failed to initialize: {e}",
                self.name
            )
        })?;
        Ok(Connection {
            service,
            generation: 0,
            child: None,
            group: None,
        })
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

/// Sends `notifications/cancelled` for a request abandoned before its answer: on a
/// timeout at once, and when the call's future is dropped (a cancelled turn kills its
/// ToolActors) from a task the server's shutdown waits for.
struct AbandonGuard {
    peer: Option<Peer<RoleClient>>,
    id: rmcp::model::RequestId,
    reason: &'static str,
    sent: Cancels,
}

impl AbandonGuard {
    fn notification(&self) -> rmcp::model::CancelledNotification {
        rmcp::model::CancelledNotification::new(rmcp::model::CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some(self.reason.to_owned()),
        ))
    }

    /// Sends it now (bounded by 1 s).
    async fn send(&mut self) {
        if let Some(peer) = self.peer.take() {
            let notification = self.notification();
            let sent = peer.send_notification(notification.into());
            let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
        }
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let notification = self.notification();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let task = runtime.spawn(async move {
                let sent = peer.send_notification(notification.into());
                let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
            });
            let mut pending = self
                .sent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pending.retain(|t| !t.is_finished());
            pending.push(task);
        }
    }
}

/// The last lines a stdio server wrote to stderr (at most [`STDERR_TAIL_LINES`]).
type StderrTail = Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// How many stderr lines a failed start quotes.
const STDERR_TAIL_LINES: usize = 5;

/// Copies a stdio server's stderr to the tracing log, one event per line (lines capped
/// at 2 000 characters), keeping the last lines in `tail`.
async fn log_stderr(server: Arc<str>, stderr: tokio::process::ChildStderr, tail: StderrTail) {
    let mut lines = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = clip(text.trim_end(), 2_000);
                tracing::info!(mcp.server = %server, stderr = %text, "mcp server stderr");
                let mut tail = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(text);
            }
        }
    }
}

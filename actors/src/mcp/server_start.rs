//! Starting a [`Server`]: a stdio child through the sandbox helper (its stderr to the
//! tracing log) or a streamable HTTP client, then `initialize`.

use super::{Connection, Server};
use crate::mcp::handler::clip;
use crate::tools::sandbox::ProcessGroupGuard;
use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

impl Server {
    /// Starts the server and runs `initialize` (version negotiation included).
    pub(super) async fn start(&self) -> Result<Connection, String> {
        if let Some(why) = &self.config.unsupported {
            return Err(format!("MCP server `{}` {why}", self.name));
        }
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
        // The user configured this server and its sandbox. Under `workspace-write` the
        // helper keeps the working directory's protected paths read-only (mounts, see
        // `sandbox/shield.rs`) and the rest writable; a model's call naming a protected
        // path is also asked at the gateway every time (`tools/approval.rs`).
        let policy = sandbox_policy(self.config.sandbox);
        if policy != crate::tools::SandboxPolicy::ReadOnly {
            // Before the server can write there (off the async workers; the runner's
            // `spawn` would list it on this one): see `remember_protected_paths`.
            crate::tools::sandbox::remember_protected_paths(&cwd)
                .await
                .map_err(|e| format!("MCP server `{}`: {e}", self.name))?;
        }
        let mut prepared = self
            .runner
            .spawn(policy, &cwd, &[], command, &args)
            .map_err(|e| format!("MCP server `{}`: {e}", self.name))?;
        // An allow-list (`EnvPolicy::mcp_server`: PATH, HOME, the locale…), then what
        // the server's config names: its `env_vars` as they are, its `env`.
        crate::tools::env_policy::EnvPolicy::mcp_server().apply(&mut prepared.command);
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
        let service = match self
            .handler
            .clone()
            .serve((
                crate::mcp::line_guard::LineGuard::new(stdout)
                    .flagging_tools_changed(Arc::clone(&self.tools_changed)),
                stdin,
            ))
            .await
        {
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
                // Untrusted text bound for the log and error messages shown on a
                // terminal: its control characters are made visible, never obeyed.
                let text = foya_protocol::visible::visible(text.trim_end()).into_owned();
                let text = clip(&text, 2_000);
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

/// The sandbox policy a server's `sandbox = "…"` stands for.
pub(crate) fn sandbox_policy(sandbox: crate::mcp::ServerSandbox) -> crate::tools::SandboxPolicy {
    use crate::mcp::ServerSandbox;
    use crate::tools::SandboxPolicy;
    match sandbox {
        ServerSandbox::None => SandboxPolicy::None,
        ServerSandbox::ReadOnly => SandboxPolicy::ReadOnly,
        ServerSandbox::WorkspaceWrite => SandboxPolicy::WorkspaceWrite { network: false },
        ServerSandbox::WorkspaceWriteNetwork => SandboxPolicy::WorkspaceWrite { network: true },
    }
}

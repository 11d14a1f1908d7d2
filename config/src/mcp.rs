//! MCP server configuration: `[mcp_servers.NAME]` tables of `config.toml` (Codex CLI's
//! keys plus Foya's own) and Claude Code's project `.mcp.json` (`mcpServers`).
//!
//! Owns: the shape of one server's configuration, its checks (exactly one of `command`
//! and `url`; a valid server name), and reading the files. Must not: start servers, or
//! read a token itself (only the *name* of the variable holding it is configured).

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Default `startup_timeout_ms`: 10 s (Codex CLI's default).
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 10_000;
/// Default `tool_timeout_ms`: 60 s (Codex CLI's default).
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 60_000;

/// How a stdio server is confined (`sandbox = "…"`), through the same helper and
/// Landlock rules as the `shell` tool's commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerSandbox {
    /// Unconfined (its own process group all the same).
    #[default]
    None,
    /// Reads everywhere, writes nowhere, no network.
    ReadOnly,
    /// Reads everywhere, writes only its `cwd` and a private temp dir, no network.
    WorkspaceWrite,
    /// As `workspace-write`, with network access.
    WorkspaceWriteNetwork,
}

/// One `[mcp_servers.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program to start.
    #[serde(default)]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: variables set for it (passed even when their names look secret, since the
    /// user wrote them here). Of Foya's own environment a server gets only an
    /// allow-list (foya-tools' `EnvPolicy::mcp_server`:
    /// PATH, HOME, USER, the locale, TERM, TMPDIR, TZ…) and its `env_vars`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: names of Foya's environment variables passed through as they are (even
    /// credential-shaped ones: naming one is the user's choice).
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// stdio: working directory (default: Foya's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// stdio, Foya: the Landlock sandbox the server runs in (default `none`).
    #[serde(default)]
    pub sandbox: ServerSandbox,
    /// Streamable HTTP: the endpoint URL.
    #[serde(default)]
    pub url: Option<String>,
    /// Streamable HTTP: the environment variable holding the bearer token.
    #[serde(default)]
    pub bearer_token_env_var: Option<String>,
    /// Streamable HTTP: headers sent with every request.
    #[serde(default)]
    pub http_headers: BTreeMap<String, String>,
    /// Streamable HTTP: headers whose values are read from environment variables
    /// (header name → variable name).
    #[serde(default)]
    pub env_http_headers: BTreeMap<String, String>,
    /// Why this server cannot be started, when its transport is one Foya does not speak
    /// (a `.mcp.json` server of `"type": "sse"`): it stays listed and is reported failed
    /// with this reason, and the other servers still start. Never read from a file.
    #[serde(skip)]
    pub unsupported: Option<String>,
    /// How long starting and `initialize` may take (default 10 s).
    #[serde(default)]
    pub startup_timeout_ms: Option<u64>,
    /// How long one `tools/call` may take (default 60 s).
    #[serde(default)]
    pub tool_timeout_ms: Option<u64>,
    /// Whether the server is on in sessions that do not name their servers (default
    /// true).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Only these tools are offered (default: all).
    #[serde(default)]
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// Foya: tools the user declares free of side effects (they run without approval);
    /// only the user's own config can say so.
    #[serde(default)]
    pub read_only_tools: Vec<String>,
    /// Foya: tools that may run concurrently with other parallel-safe calls.
    #[serde(default)]
    pub parallel_safe_tools: Vec<String>,
}

impl McpServerConfig {
    /// `startup_timeout_ms` or its default.
    #[must_use]
    pub fn startup_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.startup_timeout_ms
                .unwrap_or(DEFAULT_STARTUP_TIMEOUT_MS),
        )
    }

    /// `tool_timeout_ms` or its default.
    #[must_use]
    pub fn tool_timeout_ms(&self) -> u64 {
        self.tool_timeout_ms.unwrap_or(DEFAULT_TOOL_TIMEOUT_MS)
    }

    /// Whether tool `name` (the server's own name for it) is offered.
    #[must_use]
    pub fn offers(&self, name: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|on| on.iter().any(|t| t == name))
            && !self.disabled_tools.iter().any(|t| t == name)
    }

    /// The transport, checked: exactly one of `command` and `url`.
    ///
    /// # Errors
    /// A message naming the server when both or neither are set.
    pub fn check(&self, name: &str) -> Result<(), crate::Invalid> {
        self.transport(name).map_err(crate::Invalid::from)
    }

    /// [`Self::check`]'s work, its refusal as text.
    fn transport(&self, name: &str) -> Result<(), String> {
        if !valid_server_name(name) {
            return Err(format!(
                "MCP server name `{name}` may only contain letters, digits, `_` and `-`"
            ));
        }
        if self.unsupported.is_some() {
            return Ok(());
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => Err(format!(
                "[mcp_servers.{name}] sets both `command` (stdio) and `url` (streamable HTTP)"
            )),
            (None, None) => Err(format!(
                "[mcp_servers.{name}] needs `command` (stdio) or `url` (streamable HTTP)"
            )),
            (Some(command), None) if command.trim().is_empty() => {
                Err(format!("[mcp_servers.{name}] `command` is empty"))
            }
            _ => Ok(()),
        }
    }
}

/// Whether `name` is a valid server name: `^[a-zA-Z0-9_-]+$`.
#[must_use]
pub(crate) fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The servers of one file or of several merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpConfig {
    /// Servers by name.
    pub servers: BTreeMap<String, McpServerConfig>,
}

#[derive(Deserialize)]
struct TomlFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpServerConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct McpJson {
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpJsonServer>,
}

/// A `.mcp.json` entry (Claude Code's shape).
#[derive(Deserialize)]
struct McpJsonServer {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

impl McpConfig {
    /// The `[mcp_servers]` tables of a `config.toml` text (other tables are ignored).
    ///
    /// # Errors
    /// A message naming `path` and what is wrong.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, crate::Invalid> {
        let file: TomlFile = toml::from_str(text)
            .map_err(|e| format!("{}: [mcp_servers]: {}", path.display(), e.message()))?;
        Self::checked(file.mcp_servers, path)
    }

    /// The `mcpServers` of a `.mcp.json` text: `command`/`args`/`env` (stdio) or `url`
    /// with `headers` (`"type": "http"`). A server of the old SSE transport (`"type":
    /// "sse"`) is kept as [`McpServerConfig::unsupported`]: reported failed, not started.
    ///
    /// # Errors
    /// A message naming `path` and what is wrong.
    pub fn from_mcp_json(text: &str, path: &Path) -> Result<Self, crate::Invalid> {
        let file: McpJson =
            serde_json::from_str(text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut servers = BTreeMap::new();
        for (name, s) in file.mcp_servers {
            let unsupported = (s.kind.as_deref() == Some("sse")).then(|| {
                format!(
                    "uses the SSE transport ({}), which Foya does not speak (use streamable \
                     HTTP: \"type\": \"http\")",
                    path.display()
                )
            });
            let config = McpServerConfig {
                command: s.command,
                args: s.args,
                env: s.env,
                url: s.url,
                http_headers: s.headers,
                unsupported,
                ..McpServerConfig::default()
            };
            servers.insert(name, config);
        }
        Self::checked(servers, path)
    }

    fn checked(
        servers: BTreeMap<String, McpServerConfig>,
        path: &Path,
    ) -> Result<Self, crate::Invalid> {
        for (name, server) in &servers {
            server
                .check(name)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(Self { servers })
    }

    /// Adds a project's servers that this (the user's) configuration does not define:
    /// the user's definition of a name wins; a project's own `read_only_tools` and
    /// `parallel_safe_tools` are dropped (only the user's config may loosen); and a
    /// project's server takes nothing from the user's environment (`env_vars`,
    /// `bearer_token_env_var` and `env_http_headers` are dropped), so a project file
    /// cannot send the user's keys to a server or host of its choosing. A server that
    /// needs a token is defined in the user's own config.
    pub fn add_project(&mut self, project: Self) {
        for (name, mut server) in project.servers {
            server.read_only_tools.clear();
            server.parallel_safe_tools.clear();
            server.env_vars.clear();
            server.bearer_token_env_var = None;
            server.env_http_headers.clear();
            self.servers.entry(name).or_insert(server);
        }
    }

    /// Reads the user's servers (`[mcp_servers]` of `user_file`) and, when
    /// `trust_project` is set, the project's (`[mcp_servers]` of `project_file` and
    /// `.mcp.json` at `project_root`); the user's definition of a name wins. Missing files
    /// are skipped.
    ///
    /// # Errors
    /// [`FileError`](crate::FileError): an unreadable or invalid file, named.
    pub fn load(
        user_file: Option<&Path>,
        project_file: &Path,
        project_root: &Path,
        trust_project: bool,
    ) -> Result<Self, crate::FileError> {
        let read = crate::files::read_optional;
        let mut config = Self::default();
        if let Some(path) = user_file
            && let Some(text) = read(path)?
        {
            config = Self::from_toml(&text, path)?;
        }
        if trust_project {
            if let Some(text) = read(project_file)? {
                config.add_project(Self::from_toml(&text, project_file)?);
            }
            let json = project_root.join(".mcp.json");
            if let Some(text) = read(&json)? {
                config.add_project(Self::from_mcp_json(&text, &json)?);
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
#[path = "mcp_tests.rs"]
mod tests;

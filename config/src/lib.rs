//! `foya-config`: the configuration files of Foya and where they live.
//!
//! - [`files`]: the user's config directory (`$XDG_CONFIG_HOME/foya`, else
//!   `~/.config/foya`) and how a config file is read;
//! - [`trust`]: the project trust list (`trusted-projects.toml`);
//! - [`provider`]: provider profiles (`[profiles.NAME]` of `config.toml`), resolved to
//!   `foya-providers`' [`ProviderProfile`](foya_providers::profile::ProviderProfile);
//! - [`hooks`]: command hooks (`[hooks]`) in Claude Code's shape;
//! - [`mcp`]: MCP servers (`[mcp_servers.NAME]`, a project's `.mcp.json`).
//!
//! Invariant: the runtime (`foya-actors`) calls no loader of this crate; it takes the
//! parsed values (`RuntimeConfig`, `McpManager::new`, the CLI's setup) from its embedder,
//! so a library default reads no user file (ARCHITECTURE.md, `.ci/boundaries`).

pub mod files;
pub mod hooks;
pub mod mcp;
pub mod provider;
pub mod trust;

/// A configuration text that is not valid (hooks, MCP servers): one line naming the file
/// or table and what is wrong, fit to show to a user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// What is wrong, and where.
    pub message: String,
}

impl From<String> for Invalid {
    fn from(message: String) -> Self {
        Self { message }
    }
}

impl From<&str> for Invalid {
    fn from(message: &str) -> Self {
        Self {
            message: message.to_owned(),
        }
    }
}

/// A configuration file that cannot be read or is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// It cannot be read.
    #[error(transparent)]
    Read(#[from] files::ReadError),
    /// Its text is not valid.
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

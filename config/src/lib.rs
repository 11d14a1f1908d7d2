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

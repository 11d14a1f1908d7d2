//! MCP tool servers: tools served by Model Context Protocol servers (stdio child
//! processes and streamable HTTP endpoints, through the `rmcp` client) offered to the
//! model as first-class tools.
//!
//! Owns: the configuration (`config`), the runtime's shared servers (`manager`: one
//! connection per configured server, started lazily, restarted with backoff, stopped on
//! shutdown), their tools (`tool`, named by `names`) and how a result reads (`result`).
//! Must not: bypass the Approval Gateway (MCP tools are `SideEffect::External` unless
//! the user's config marks them read-only) or let a failing server fail a turn (every
//! failure is that call's `is_error` result).

/// The servers as configured (in `foya-config`).
pub use foya_config::mcp as config;
mod handler;
mod line_guard;
mod manager;
mod names;
mod result;
mod server;
mod tool;

pub use config::{McpConfig, McpServerConfig, ServerSandbox};
pub(crate) use manager::ListingKey;
pub use manager::{McpManager, ServerReport};
pub use server::ServerState;

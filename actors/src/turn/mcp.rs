//! The turn's view of MCP tools: before each step, the tools of the session's MCP
//! servers (started on first use, listed again after `tools/list_changed`) join the
//! runtime's tools, so a step always offers and validates the current list; a call of a
//! tool of a server that is down fails naming the server and why.
//!
//! Owns: rebuilding the step's registry and tool set when the listings changed.
//! Must not: outlive a cancel (the listing is abandoned when the turn's token fires;
//! the pending `Cancel` then ends the turn).

use super::actor::Turn;
use std::sync::Arc;

impl Turn {
    /// Refreshes the step's tools from the session's MCP servers; a server that cannot
    /// be started or listed is left out of this step (logged).
    pub(super) async fn refresh_mcp_tools(&mut self) {
        let Some(mcp) = self.args.deps.mcp.clone() else {
            return;
        };
        if mcp.is_empty() {
            return;
        }
        let reserved = self.args.deps.tools.names();
        let selected = self.args.config.mcp_servers.clone();
        let listed = tokio::select! {
            listed = mcp.tools(selected.as_deref(), &reserved) => listed,
            // The session cancels the token before it sends `Cancel`: keep this step's
            // tools and let the cancel end the turn.
            () = self.args.cancel.cancelled() => return,
        };
        for error in &listed.errors {
            tracing::warn!(session.id = %self.args.session_id, %error, "MCP server left out of this step");
        }
        // A server that is down keeps no key of its own: rebuilt while one is, so the
        // reason its calls fail is the current one.
        if self.io.mcp_key.as_ref() == Some(&listed.key) && listed.unavailable.is_empty() {
            return;
        }
        let mut registry = (*self.args.deps.tools).clone();
        for (prefix, why) in listed.unavailable {
            registry.unavailable(prefix, why);
        }
        for tool in listed.tools {
            if let Err(error) = registry.register(tool) {
                tracing::warn!(session.id = %self.args.session_id, %error, "MCP tool left out of this step");
            }
        }
        self.io.registry = Arc::new(registry);
        self.io.tools = self.io.registry.tool_set(self.args.config.approval_mode);
        self.io.mcp_key = Some(listed.key);
    }
}

//! An MCP server's tool as a Foya [`Tool`]: named `mcp__<server>__<tool>`, its input
//! schema validated like a built-in's, side-effecting (approval asked) unless the user's
//! config lists it in `read_only_tools`, sequential unless listed in
//! `parallel_safe_tools`.
//!
//! Owns: the spec of an MCP tool (server annotations may only make it stricter: a tool
//! the user marked read-only stays side-effecting when the server says `readOnlyHint:
//! false` or `destructiveHint: true`) and one call (progress → `tool_update`, cancel →
//! `notifications/cancelled`, result → [`super::result::render`]).

use super::server::{CallOutcome, Server};
use crate::tools::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec};
use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One tool of one MCP server.
#[derive(Debug)]
pub(crate) struct McpTool {
    spec: ToolSpec,
    server: Arc<Server>,
    /// The server's own name for the tool.
    tool: String,
}

impl McpTool {
    /// The tool `listed` of `server`, exposed as `name`.
    pub(crate) fn new(server: Arc<Server>, listed: &rmcp::model::Tool, name: String) -> Self {
        let tool = listed.name.to_string();
        let config = &server.config;
        let hints = listed.annotations.as_ref();
        let server_says_writes = hints
            .is_some_and(|a| a.read_only_hint == Some(false) || a.destructive_hint == Some(true));
        let read_only = config.read_only_tools.contains(&tool) && !server_says_writes;
        let mut parameters = serde_json::Value::Object((*listed.input_schema).clone());
        if let Some(schema) = parameters.as_object_mut() {
            schema
                .entry("type")
                .or_insert_with(|| serde_json::Value::from("object"));
            schema
                .entry("properties")
                .or_insert_with(|| serde_json::json!({}));
        }
        let description = listed
            .description
            .as_deref()
            .or(listed.title.as_deref())
            .unwrap_or_default();
        let spec = ToolSpec {
            name,
            description: format!(
                "{description} (tool `{tool}` of MCP server `{}`)",
                server.name
            ),
            parameters,
            parallel_safe: config.parallel_safe_tools.contains(&tool),
            side_effect: if read_only {
                SideEffect::None
            } else {
                SideEffect::External
            },
            cancellable: true,
            default_timeout_ms: config.tool_timeout_ms(),
        };
        Self { spec, server, tool }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        _ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let serde_json::Value::Object(arguments) = args else {
            return ToolOutput::error("arguments must be a JSON object");
        };
        let on_progress = |line: String| progress.update(line);
        match self
            .server
            .call(&self.tool, arguments, &cancel, &on_progress)
            .await
        {
            CallOutcome::Result(result) => super::result::render(&result),
            CallOutcome::Failed(message) => ToolOutput::error(message),
            CallOutcome::Cancelled => ToolOutput::error(crate::tools::CANCELLED),
        }
    }
}

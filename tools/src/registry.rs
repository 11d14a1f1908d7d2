//! The tool registry: which tools a session exposes, their schemas for the model, and
//! validation of a call's arguments before it runs.
//!
//! Owns: registration order, one compiled JSON-Schema validator per tool, and the
//! messages the model gets for a call it cannot make (unknown tool, a tool of a provider
//! that is down, invalid JSON, schema violation). Must not: run tools or decide approvals.

use super::sandbox::SandboxRunner;
use super::{SideEffect, Tool, ToolOutput, builtin};
use foya_context::ToolSet;
use foya_core::request::ToolSchema;
use foya_protocol::ApprovalMode;
use std::fmt::Write as _;
use std::sync::Arc;

/// Registered tools in registration order.
#[derive(Debug, Clone, Default)]
pub struct ToolRegistry {
    entries: Vec<Entry>,
    /// [`ToolRegistry::tool_set`] per visibility (every tool, read-only tools), built on
    /// first use and cleared by [`ToolRegistry::register`].
    sets: [std::sync::OnceLock<ToolSet>; 2],
    /// Name prefixes of tool providers that are down now, with why (see
    /// [`ToolRegistry::unavailable`]).
    unavailable: Vec<(String, String)>,
    /// The runner of `shell` ([`ToolRegistry::builtin_with_sandbox`]), asked by
    /// [`ToolRegistry::shield_available`].
    sandbox: Option<SandboxRunner>,
}

#[derive(Debug, Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    /// Compiled once at registration.
    validator: Arc<jsonschema::Validator>,
}

/// [`ToolRegistry::register`] refused a tool: its parameter schema is not a JSON Schema
/// of an object (the arguments of a function call are always an object).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool {name:?} has an invalid parameter schema: {reason}")]
pub struct InvalidToolSchema {
    /// The tool's name.
    pub name: String,
    /// What is wrong.
    pub reason: String,
}

/// A call that passed [`ToolRegistry::prepare`]: the tool and its arguments object.
#[derive(Debug, Clone)]
pub struct PreparedCall {
    /// The tool to call.
    pub tool: Arc<dyn Tool>,
    /// Arguments, a JSON object valid against the tool's schema.
    pub args: serde_json::Value,
}

impl ToolRegistry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-ins (`read_file`, `list_dir`, `glob`, `grep`, `write_file`, `edit_file`,
    /// `shell`), with `shell` sandboxed through [`SandboxRunner::from_env`] (without
    /// `FOYA_SANDBOX_HELPER`, `shell` answers every call with an error saying how to set
    /// a helper).
    #[must_use]
    pub fn builtin() -> Self {
        Self::builtin_with_sandbox(SandboxRunner::from_env())
    }

    /// The built-ins without side effects ([`builtin::read_only`]: `read_file`,
    /// `list_dir`, `glob`, `grep`): what `RuntimeConfig::new` (foya-actors) registers.
    #[must_use]
    pub fn read_only_builtin() -> Self {
        Self::taking(builtin::read_only())
    }

    /// The built-ins with `shell` sandboxed through `runner` (tests pass the
    /// `foya-sandbox` helper binary).
    #[must_use]
    pub fn builtin_with_sandbox(runner: SandboxRunner) -> Self {
        let mut registry = Self::taking(builtin::all(runner.clone()));
        registry.sandbox = Some(runner);
        registry
    }

    /// Whether the sandbox keeps the protected paths read-only while the working
    /// directory stays writable ([`SandboxRunner::shield_available`], probed once per
    /// process); `true` for a registry without the built-in `shell`.
    #[must_use]
    pub fn shield_available(&self) -> bool {
        self.sandbox
            .as_ref()
            .is_none_or(SandboxRunner::shield_available)
    }

    /// A registry of built-in tools.
    fn taking(tools: Vec<Arc<dyn Tool>>) -> Self {
        let mut registry = Self::new();
        for tool in tools {
            // Their schemas are fixed (a unit test registers each): this never refuses.
            if let Err(e) = registry.register(tool) {
                tracing::error!(error = %e, "a built-in tool was refused");
            }
        }
        registry
    }

    /// Adds `tool`, or replaces the registered tool of the same name in place. Its
    /// parameter schema is compiled now.
    ///
    /// # Errors
    /// [`InvalidToolSchema`] (nothing is registered) when the schema does not compile
    /// or does not say `"type": "object"`.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), InvalidToolSchema> {
        let spec = tool.spec();
        let invalid = |reason: String| InvalidToolSchema {
            name: spec.name.clone(),
            reason,
        };
        if spec.parameters.get("type") != Some(&serde_json::Value::from("object")) {
            return Err(invalid(format!(
                "it must have \"type\": \"object\", got {}",
                clip(&spec.parameters.to_string(), 200)
            )));
        }
        let validator = jsonschema::validator_for(&spec.parameters)
            .map(Arc::new)
            .map_err(|e| invalid(e.to_string()))?;
        let entry = Entry { tool, validator };
        self.sets = Default::default();
        match self
            .entries
            .iter_mut()
            .find(|e| e.tool.spec().name == entry.tool.spec().name)
        {
            Some(existing) => *existing = entry,
            None => self.entries.push(entry),
        }
        Ok(())
    }

    /// Marks the names starting with `prefix` as the tools of a provider that is down
    /// now (an MCP server that could not be started or listed): a call of such a name
    /// that no registered tool has fails with "`<name>` " followed by `why`, not as an
    /// unknown tool. Nothing is offered to the model for it.
    pub fn unavailable(&mut self, prefix: impl Into<String>, why: impl Into<String>) {
        self.unavailable.push((prefix.into(), why.into()));
    }

    /// The tool called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.entries
            .iter()
            .find(|e| e.tool.spec().name == name)
            .map(|e| Arc::clone(&e.tool))
    }

    /// Names in registration order.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| e.tool.spec().name.clone())
            .collect()
    }

    /// The tools exposed to the model in `mode`, in registration order. In `read-only`
    /// mode tools with side effects are hidden.
    #[must_use]
    pub fn schemas(&self, mode: ApprovalMode) -> Vec<ToolSchema> {
        self.entries
            .iter()
            .map(|e| e.tool.spec())
            .filter(|spec| mode != ApprovalMode::ReadOnly || spec.side_effect == SideEffect::None)
            .map(|spec| ToolSchema {
                name: spec.name.clone(),
                description: spec.description.clone(),
                parameters: spec.parameters.clone(),
            })
            .collect()
    }

    /// [`ToolRegistry::schemas`] for `mode` as a [`ToolSet`] (schemas shared, token
    /// estimate done), built once per registry and visibility: every turn in that mode
    /// shares it instead of copying the schemas and estimating them again.
    #[must_use]
    pub fn tool_set(&self, mode: ApprovalMode) -> ToolSet {
        let slot = &self.sets[usize::from(mode == ApprovalMode::ReadOnly)];
        slot.get_or_init(|| ToolSet::new(self.schemas(mode)))
            .clone()
    }

    /// Checks a model's call before it runs.
    ///
    /// # Errors
    /// A `ToolOutput::error` for the model when the tool name is empty or unknown (lists
    /// the available ones), the arguments are not valid JSON (`StreamAggregate` keeps such text as a
    /// JSON string), not an object, or violate the tool's schema (each violation with
    /// its field and what was expected).
    pub fn prepare(
        &self,
        name: &str,
        arguments: &serde_json::Value,
    ) -> Result<PreparedCall, ToolOutput> {
        if name.trim().is_empty() {
            return Err(ToolOutput::error(format!(
                "the tool call has an empty tool name; call one of the available tools by \
                 its name: {}",
                self.names().join(", ")
            )));
        }
        let Some(entry) = self.entries.iter().find(|e| e.tool.spec().name == name) else {
            if let Some((_, why)) = self
                .unavailable
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix.as_str()))
            {
                return Err(ToolOutput::error(format!("`{name}` {why}")));
            }
            return Err(ToolOutput::error(format!(
                "unknown tool {name:?}; available tools: {}",
                self.names().join(", ")
            )));
        };
        let args = match arguments {
            serde_json::Value::Object(_) => arguments.clone(),
            serde_json::Value::String(text) => {
                return Err(ToolOutput::error(invalid_json_message(name, text)));
            }
            other => {
                return Err(ToolOutput::error(format!(
                    "arguments for `{name}` must be a JSON object, got {}: {}",
                    json_type(other),
                    clip(&other.to_string(), 200)
                )));
            }
        };
        let mut errors = entry.validator.iter_errors(&args).peekable();
        if errors.peek().is_none() {
            drop(errors);
            return Ok(PreparedCall {
                tool: Arc::clone(&entry.tool),
                args,
            });
        }
        let mut message = format!("invalid arguments for `{name}`:");
        for error in errors {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() {
                "(root)".to_owned()
            } else {
                at
            };
            let _ = write!(message, "\n- at {at}: {error}");
        }
        let _ = write!(
            message,
            "\nexpected parameters: {}",
            entry.tool.spec().parameters
        );
        Err(ToolOutput::error(message))
    }
}

fn invalid_json_message(name: &str, text: &str) -> String {
    let reason = match serde_json::from_str::<serde_json::Value>(text) {
        Err(e) => e.to_string(),
        Ok(_) => "not an object".to_owned(),
    };
    format!(
        "arguments are not valid JSON: {reason}; call `{name}` again with a JSON object as \
         arguments. Received: {}",
        clip(text, 200)
    )
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// At most `max` chars of `text`, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::builtin::{Shell, read_file, write_file};

    fn names(set: &ToolSet) -> Vec<&str> {
        set.schemas().iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn the_cached_tool_sets_follow_the_mode_and_every_registration() {
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(read_file())).unwrap();
        let auto = registry.tool_set(ApprovalMode::Auto);
        assert_eq!(names(&auto), ["read_file"]);
        assert_eq!(auto, ToolSet::new(registry.schemas(ApprovalMode::Auto)));
        // Shared, not rebuilt: the same schemas allocation.
        assert!(Arc::ptr_eq(
            auto.schemas(),
            registry.tool_set(ApprovalMode::Ask).schemas()
        ));

        registry.register(Arc::new(write_file())).unwrap();
        registry
            .register(Arc::new(Shell::new(SandboxRunner::new("/nonexistent"))))
            .unwrap();
        assert_eq!(
            names(&registry.tool_set(ApprovalMode::Auto)),
            ["read_file", "write_file", "shell"]
        );
        assert_eq!(
            names(&registry.tool_set(ApprovalMode::ReadOnly)),
            ["read_file"],
            "read-only hides tools with side effects"
        );
        assert_eq!(
            registry.tool_set(ApprovalMode::Bypass),
            ToolSet::new(registry.schemas(ApprovalMode::Bypass))
        );
    }

    #[test]
    fn every_built_in_tool_is_taken() {
        let builtin = ToolRegistry::builtin_with_sandbox(SandboxRunner::new("/nonexistent"));
        assert_eq!(
            builtin.names().len(),
            builtin::all(SandboxRunner::new("/x")).len()
        );
        let agent = builtin::agent::AgentTool::new(
            builtin::agent::SubAgentLimits::default(),
            Arc::new(builtin::agent::NoRuntime),
        );
        let mut with_agent = ToolRegistry::new();
        with_agent.register(Arc::new(agent)).unwrap();
        assert_eq!(with_agent.names(), ["agent"]);
    }
}

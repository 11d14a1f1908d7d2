//! The simulated model's tool-call arguments: [`SimConfig::tool_args`] with its `{step}`
//! and `{call}` placeholders filled in for one call (pure; shared by the in-process
//! client and the HTTP server through the planner).

use super::SimConfig;
use serde_json::Value;
use std::borrow::Cow;

/// Placeholder for the 1-based step number in the turn.
pub const STEP_PLACEHOLDER: &str = "{step}";
/// Placeholder for the 0-based index of the call within its step.
pub const CALL_PLACEHOLDER: &str = "{call}";

/// The arguments template, prepared once per [`SimConfig`]: arguments without
/// placeholders are serialised once and shared by every call.
#[derive(Debug, Clone)]
pub(crate) enum ToolArgs {
    /// No string holds a placeholder: every call gets this JSON text.
    Fixed(String),
    /// Some string holds a placeholder: rendered per call.
    Templated(Value),
}

impl ToolArgs {
    /// Prepares `template`.
    pub(crate) fn new(template: &Value) -> Self {
        if has_placeholder(template) {
            Self::Templated(template.clone())
        } else {
            Self::Fixed(template.to_string())
        }
    }

    /// The JSON text of call `call` (0-based) of step `step` (1-based).
    pub(crate) fn render(&self, step: u32, call: u32) -> Cow<'_, str> {
        match self {
            Self::Fixed(text) => Cow::Borrowed(text),
            Self::Templated(template) => Cow::Owned(substitute(template, step, call).to_string()),
        }
    }
}

impl SimConfig {
    /// The arguments the simulated model sends with call `call` (0-based) of step `step`
    /// (1-based): [`tool_args`](Self::tool_args) with `{step}` and `{call}` replaced in
    /// every string value, at any depth (object keys are left alone).
    #[must_use]
    pub fn tool_call_args(&self, step: u32, call: u32) -> Value {
        substitute(&self.tool_args, step, call)
    }

    /// The steps of a turn that ask for tool calls, in order (1-based): every step
    /// before the last, none when [`tool_calls_per_step`](Self::tool_calls_per_step)
    /// is 0.
    #[must_use]
    pub fn tool_steps(&self) -> std::ops::Range<u32> {
        let last = if self.tool_calls_per_step == 0 {
            1
        } else {
            self.steps_per_turn.max(1)
        };
        1..last
    }
}

fn has_placeholder(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains(STEP_PLACEHOLDER) || s.contains(CALL_PLACEHOLDER),
        Value::Array(items) => items.iter().any(has_placeholder),
        Value::Object(map) => map.values().any(has_placeholder),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn substitute(value: &Value, step: u32, call: u32) -> Value {
    match value {
        Value::String(s) => Value::String(
            s.replace(STEP_PLACEHOLDER, &step.to_string())
                .replace(CALL_PLACEHOLDER, &call.to_string()),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| substitute(v, step, call)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, step, call)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;

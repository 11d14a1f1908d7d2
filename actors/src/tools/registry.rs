//! The tool registry: tools by name, and the schemas exposed to the model.
//!
//! Placeholder until the tools engineer's registry lands (same API: `register`, `get`,
//! `schemas`, `builtin`). `builtin()` is empty here.

use super::Tool;
use crate::provider::ToolSchema;
use foya_protocol::ApprovalMode;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Tools by name. Cheap to share behind an `Arc`.
#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// The built-in tools (empty in this placeholder).
    #[must_use]
    pub fn builtin() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a tool under its spec name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name.clone(), tool);
    }

    /// The tool called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Schemas of the tools exposed in `mode`, sorted by name.
    #[must_use]
    pub fn schemas(&self, _mode: ApprovalMode) -> Vec<ToolSchema> {
        self.tools
            .values()
            .map(|t| {
                let spec = t.spec();
                ToolSchema {
                    name: spec.name.clone(),
                    description: spec.description.clone(),
                    parameters: spec.parameters.clone(),
                }
            })
            .collect()
    }
}

//! The `agent` tool (sub-agents): runs a child session on a sub-task and returns its
//! final answer as the tool result.

use std::time::Duration;

/// Limits of sub-agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubAgentLimits {
    /// Children running at once per parent turn.
    pub max_concurrent: usize,
    /// Children per parent turn.
    pub max_per_turn: u32,
    /// Input + output tokens (from `usage` events) a child may use before it is cancelled.
    pub token_budget: u64,
    /// Maximum steps of a child turn.
    pub max_steps: u32,
    /// How long a child may run.
    pub timeout: Duration,
}

impl Default for SubAgentLimits {
    fn default() -> Self {
        Self {
            max_concurrent: 3,
            max_per_turn: 8,
            token_budget: 200_000,
            max_steps: 50,
            timeout: Duration::from_secs(30 * 60),
        }
    }
}

//! The turn's rules: the pure state machine ([`machine::TurnMachine`]: the step loop,
//! tool batching and call order, run protection, retries, overflow recovery,
//! compaction, stop hooks, cancellation — read it top to bottom there), run protection
//! (`protection.rs`) and repeated call ids (`duplicates.rs`), helpers the machine drives.
//! The runtime's TurnActor is its driver.

pub mod duplicates;
pub mod machine;
pub mod protection;

/// What a turn does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnMode {
    /// The step loop (model requests and tools).
    Model,
    /// `/compact`: compact the context now, then end the turn.
    Compact,
}

/// Whether summarising the history can make a request meaningfully smaller: the history
/// (the part a checkpoint replaces) must hold at least `min_saving_pct` % of the
/// request's estimated `total_tokens`. When the fixed part (system prompt, tools)
/// dominates, no summary saves enough, and a compaction would only spend a request.
#[must_use]
pub fn can_shrink(total_tokens: u64, history_tokens: u64, min_saving_pct: u64) -> bool {
    history_tokens.saturating_mul(100) >= total_tokens.saturating_mul(min_saving_pct)
}

//! The tool calls of one step as pure scheduling state: which calls may start now
//! (`tools::schedule::plan_batches`, at most `MAX_PARALLEL` in flight), where each call
//! is in its lifecycle (`call.rs`), which results are in, and the prefix committed in
//! call order.

use super::call::CallState;
use crate::schedule::{MAX_PARALLEL, plan_batches};
use foya_protocol::{ToolCall, ToolMessage};

/// Result text of a call stopped by a cancel.
pub use crate::schedule::CANCELLED;
/// Last line of the result of a call stopped by a cancel after it had printed output
/// (the output so far comes first).
pub(crate) const CANCELLED_PARTIAL: &str =
    "[cancelled; the output above is what the call printed before it was stopped]";
/// Result text of a call whose ToolActor panicked.
pub(crate) const CRASHED: &str = "tool crashed";

/// The tool calls of one step and where each one is.
#[derive(Debug)]
pub(crate) struct ToolRun {
    pub(super) calls: Vec<ToolCall>,
    /// Call indices to run one batch after another (see `plan_batches`), in order.
    batches: Vec<Vec<usize>>,
    /// The batch being run.
    batch: usize,
    /// Calls `batches[batch][..spawned]` were started (or answered without running).
    spawned: usize,
    results: Vec<Option<ToolMessage>>,
    /// Where each call is (in flight: started, no result yet).
    states: Vec<CallState>,
    /// What the call's hooks said for the model, added to its result.
    pub(super) notes: Vec<Vec<String>>,
    /// Results `[..committed]` are written.
    committed: usize,
    /// The written results, in call order (for run protection's end of step).
    pub(super) written: Vec<ToolMessage>,
}

impl ToolRun {
    /// A run of `calls`; `parallel_safe[i]` tells whether call `i` may share a batch
    /// (a missing entry counts as parallel-safe: an unknown tool fails at once).
    pub(crate) fn new(calls: Vec<ToolCall>, parallel_safe: &[bool]) -> Self {
        let n = calls.len();
        let parallel: Vec<bool> = (0..n)
            .map(|i| parallel_safe.get(i).copied().unwrap_or(true))
            .collect();
        Self {
            calls,
            batches: plan_batches(&parallel),
            batch: 0,
            spawned: 0,
            results: vec![None; n],
            states: vec![CallState::Waiting; n],
            notes: vec![Vec::new(); n],
            committed: 0,
            written: Vec::with_capacity(n),
        }
    }

    fn running_count(&self) -> usize {
        self.states.iter().filter(|s| s.in_flight()).count()
    }

    /// The calls that may start now (marked [`CallState::Checking`]): the next ones of the current
    /// batch while fewer than `MAX_PARALLEL` run; the next batch starts once every call
    /// of the current one finished.
    pub(crate) fn start_ready(&mut self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut running = self.running_count();
        while let Some(batch) = self.batches.get(self.batch) {
            if self.spawned == batch.len() {
                if running > 0 {
                    break;
                }
                self.batch += 1;
                self.spawned = 0;
                continue;
            }
            let index = batch[self.spawned];
            if self.results[index].is_some() {
                // Answered without running (run protection).
                self.spawned += 1;
                continue;
            }
            if running >= MAX_PARALLEL {
                break;
            }
            self.states[index] = CallState::Checking;
            running += 1;
            out.push(index);
            self.spawned += 1;
        }
        out
    }

    /// Answers call `index` without running it (run protection).
    pub(crate) fn preset(&mut self, index: usize, result: ToolMessage) {
        if let Some(slot) = self.results.get_mut(index) {
            *slot = Some(result);
        }
    }

    /// Whether call `index` is in flight (started, no result yet).
    pub(crate) fn is_running(&self, index: usize) -> bool {
        self.states.get(index).is_some_and(CallState::in_flight)
    }

    /// Where call `index` is.
    pub(crate) fn state(&self, index: usize) -> Option<&CallState> {
        self.states.get(index)
    }

    /// Takes call `index`'s state out (leaving it `Done`) when `pick` matches it.
    pub(crate) fn take_state(
        &mut self,
        index: usize,
        pick: impl FnOnce(&CallState) -> bool,
    ) -> Option<CallState> {
        let state = self.states.get_mut(index).filter(|s| pick(s))?;
        Some(std::mem::replace(state, CallState::Done))
    }

    /// Moves call `index` to `state`.
    pub(crate) fn set_state(&mut self, index: usize, state: CallState) {
        if let Some(slot) = self.states.get_mut(index) {
            *slot = state;
        }
    }

    /// Records a result (written once every call before it has one).
    pub(crate) fn record(&mut self, index: usize, result: ToolMessage) {
        if let Some(state) = self.states.get_mut(index) {
            *state = CallState::Done;
        }
        if index < self.results.len() && index >= self.committed && self.results[index].is_none() {
            self.results[index] = Some(result);
        }
    }

    /// The results that lead the uncommitted part, in call order (written now).
    pub(crate) fn take_committable(&mut self) -> Vec<ToolMessage> {
        let mut out = Vec::new();
        while let Some(Some(result)) = self.results.get_mut(self.committed).map(Option::take) {
            self.written.push(result.clone());
            out.push(result);
            self.committed += 1;
        }
        out
    }

    /// The result of call `index` whose ToolActor crashed.
    pub(crate) fn crashed(&self, index: usize) -> Option<ToolMessage> {
        self.calls
            .get(index)
            .map(|call| error_result(call, CRASHED.into()))
    }

    /// Uncommitted results in call order, "cancelled" for calls without one; a call
    /// that had printed output (`outputs[i]`) keeps it, followed by
    /// [`CANCELLED_PARTIAL`].
    pub(crate) fn cancel_remaining(&mut self, outputs: &[Option<String>]) -> Vec<ToolMessage> {
        let start = self.committed;
        self.committed = self.calls.len();
        (start..self.calls.len())
            .map(|i| {
                self.results[i].take().unwrap_or_else(|| {
                    let output = outputs.get(i).and_then(Option::as_deref);
                    error_result(&self.calls[i], cancelled_content(output))
                })
            })
            .collect()
    }

    /// Every result is written.
    pub(crate) fn all_committed(&self) -> bool {
        self.committed == self.calls.len()
    }
}

/// An `is_error` result of `call`.
pub(crate) fn error_result(call: &ToolCall, content: String) -> ToolMessage {
    ToolMessage {
        tool_call_id: call.id.clone(),
        content,
        is_error: true,
        images: Vec::new(),
    }
}

/// The result text of a cancelled call: its output so far, if any, then the mark.
fn cancelled_content(output: Option<&str>) -> String {
    match output {
        None | Some("") => CANCELLED.into(),
        Some(output) => {
            let newline = if output.ends_with('\n') { "" } else { "\n" };
            format!("{output}{newline}{CANCELLED_PARTIAL}")
        }
    }
}

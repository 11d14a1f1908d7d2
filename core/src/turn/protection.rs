//! Run protection of one turn as a pure state machine (no actors, no async): duplicate-call
//! detection, repeated-failure blocking and step-level loop (cycle) detection.
//!
//! The TurnActor feeds it the calls of each step before they run (`Guard::check_calls`)
//! and the step's calls with their results once all are committed (`Guard::end_step`).
//!
//! Rules (thresholds in [`Limits`]):
//! - **duplicate calls**: a call is keyed by its tool name and canonical JSON arguments
//!   (object key order ignored). Every occurrence counts, calls within one step included
//!   (but a read-only call repeated within one step counts once: reads before and after a
//!   write are progress): the `duplicate_threshold`-th occurrence of a key in the turn,
//!   and any later copy in the same step, is not run: the model gets an `is_error` result
//!   explaining the repetition. If the model sends a blocked key again in a later step,
//!   the turn ends `failed/loop_detected`.
//! - **repeated failures**: when one tool failed `failure_threshold` times in a row with
//!   the same error text, it is withdrawn: later requests of the turn no longer offer it
//!   ([`Guard::withdrawn`]), a call of it is not run (an `is_error` result explains why),
//!   and a call of it in a later step, after that refusal, ends the turn
//!   `failed/loop_detected` (a loop of refusals is a loop).
//! - **step cycles**: each finished step has a signature (its sorted calls with results).
//!   When the last `2 × p` signatures are a period-`p` cycle repeated twice (`p` in
//!   `2..=max_cycle`, e.g. A-B-A-B), the turn ends `failed/loop_detected` with the cycle
//!   in the reason. Period 1 (A-A-…) is left to the duplicate-call rule.

use foya_protocol::{ToolCall, ToolMessage};
use std::collections::HashMap;

/// Thresholds of run protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Occurrence of the same call (per turn) that is blocked instead of run; ≥ 2.
    pub duplicate_threshold: u32,
    /// Consecutive identical failures of one tool after which it is no longer run; ≥ 1.
    pub failure_threshold: u32,
    /// Longest step cycle looked for (in steps).
    pub max_cycle: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            duplicate_threshold: 3,
            failure_threshold: 3,
            max_cycle: 4,
        }
    }
}

/// What to do with one call of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallVerdict {
    /// Run it.
    Run,
    /// Do not run it; answer with this `is_error` text.
    Block(String),
}

/// The turn must end `failed` with `loop_detected` and this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDetected(pub String);

/// Protection state of one turn.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    limits: Limits,
    /// Occurrences per call key.
    seen: HashMap<String, u32>,
    /// Call keys that were blocked once.
    blocked: HashMap<String, u32>,
    /// Per tool: (last error text, consecutive count).
    failures: HashMap<String, (String, u32)>,
    /// Withdrawn tools whose call was already refused once (in an earlier step).
    refused: std::collections::HashSet<String>,
    /// Signatures of finished steps, in order.
    steps: Vec<String>,
    /// Short labels of finished steps (for the reason).
    labels: Vec<String>,
}

/// The canonical JSON of `value`: objects with sorted keys, no whitespace.
#[must_use]
pub(crate) fn canonical_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    let key = Value::String(k.clone()).to_string();
                    format!("{key}:{}", canonical_json(&map[k]))
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// The key of a call: tool name and canonical arguments.
#[must_use]
pub(crate) fn call_key(call: &ToolCall) -> String {
    format!("{}{}", call.name, canonical_json(&call.arguments))
}

impl Guard {
    /// A guard with these limits.
    #[must_use]
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Verdicts for the calls of a step, in call order (`read_only[i]`: call `i` has no
    /// side effects — a parallel-safe tool; missing entries count as side effects);
    /// `Err` when the model insists on a call that was already blocked.
    ///
    /// # Errors
    /// [`LoopDetected`] when a blocked call is repeated.
    pub(crate) fn check_calls(
        &mut self,
        calls: &[ToolCall],
        read_only: &[bool],
    ) -> Result<Vec<CallVerdict>, LoopDetected> {
        let mut out = Vec::with_capacity(calls.len());
        // Verdicts given in this step to read-only calls, by key: the same read repeated
        // within one response (before and after a write, say) counts once and shares the
        // verdict of its first occurrence. A call with side effects counts every time.
        let mut reads: HashMap<String, CallVerdict> = HashMap::new();
        if let Some(call) = calls.iter().find(|c| self.refused.contains(&c.name)) {
            return Err(LoopDetected(format!(
                "the model kept calling `{}`, which was withdrawn after failing {} times in a \
                 row with the same error and is no longer offered",
                call.name,
                self.limits.failure_threshold.max(1)
            )));
        }
        // Every occurrence counts, within one step as across steps: the threshold-th
        // identical call of the turn is not run, whichever step it is in. The model has
        // not seen a refusal given in this step yet, so further copies in the same step
        // are refused too (not a loop); sending the refused call in a later step is.
        if let Some(call) = calls
            .iter()
            .find(|c| self.blocked.contains_key(&call_key(c)))
        {
            return Err(LoopDetected(format!(
                "the model kept repeating the blocked call `{}` with the same arguments",
                call.name
            )));
        }
        let threshold = self.limits.duplicate_threshold.max(2);
        let mut refused_now = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            let key = call_key(call);
            let read = read_only.get(index).copied().unwrap_or(false);
            if read && let Some(verdict) = reads.get(&key) {
                out.push(verdict.clone());
                continue;
            }
            let count = self.seen.entry(key.clone()).or_insert(0);
            *count += 1;
            let verdict = if *count >= threshold {
                self.blocked.insert(key.clone(), 1);
                CallVerdict::Block(format!(
                    "not run: this exact call (`{}` with the same arguments) was already made \
                     {} times in this turn, and the {} identical call of a turn is not run; \
                     repeating it will not give a different result. Change the arguments, try \
                     another approach, or finish.",
                    call.name,
                    *count - 1,
                    ordinal(threshold)
                ))
            } else if let Some((error, n)) = self.failures.get(&call.name)
                && *n >= self.limits.failure_threshold.max(1)
            {
                refused_now.push(call.name.clone());
                CallVerdict::Block(format!(
                    "not run: `{}` failed {n} times in a row with the same error ({}); it is \
                     no longer offered in this turn. Try another approach.",
                    call.name,
                    first_line(error)
                ))
            } else {
                CallVerdict::Run
            };
            if read {
                reads.insert(key, verdict.clone());
            }
            out.push(verdict);
        }
        self.refused.extend(refused_now);
        Ok(out)
    }

    /// Tools withdrawn for the rest of the turn (failed `failure_threshold` times in a row
    /// with the same error): requests must not offer them.
    #[must_use]
    pub fn withdrawn(&self) -> Vec<&str> {
        let threshold = self.limits.failure_threshold.max(1);
        self.failures
            .iter()
            .filter(|(_, (_, n))| *n >= threshold)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Records a finished step (its calls and their results, any order); `Err` when the
    /// step closes a repeating cycle.
    ///
    /// # Errors
    /// [`LoopDetected`] with the cycle in the reason.
    pub(crate) fn end_step(
        &mut self,
        calls: &[ToolCall],
        results: &[ToolMessage],
    ) -> Result<(), LoopDetected> {
        let by_id: HashMap<_, _> = results.iter().map(|r| (&r.tool_call_id, r)).collect();
        let mut parts: Vec<String> = Vec::new();
        for call in calls {
            let result = by_id.get(&call.id);
            let (content, is_error) = result.map_or(("", true), |r| (&*r.content, r.is_error));
            parts.push(format!("{}=>{is_error}:{content}", call_key(call)));
            if is_error && !content.starts_with("not run:") {
                let entry = self
                    .failures
                    .entry(call.name.clone())
                    .or_insert_with(|| (content.to_owned(), 0));
                if entry.0 == content {
                    entry.1 += 1;
                } else {
                    *entry = (content.to_owned(), 1);
                }
            } else if !is_error {
                self.failures.remove(&call.name);
            }
        }
        parts.sort();
        let mut names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        self.steps.push(parts.join("\n"));
        self.labels.push(names.join("+"));
        self.find_cycle()
    }

    fn find_cycle(&self) -> Result<(), LoopDetected> {
        let n = self.steps.len();
        for period in 2..=self.limits.max_cycle {
            if n < 2 * period {
                break;
            }
            let tail = &self.steps[n - 2 * period..];
            let repeats = (0..period).all(|i| tail[i] == tail[i + period]);
            // A cycle of one repeated step is not a cycle of `period`.
            let distinct = (1..period).any(|i| tail[i] != tail[0]);
            if repeats && distinct {
                let cycle: Vec<&str> = self.labels[n - period..]
                    .iter()
                    .map(String::as_str)
                    .collect();
                return Err(LoopDetected(format!(
                    "the last {} steps repeat a cycle of {period} steps with the same calls and \
                     results, making no progress: [{}] twice",
                    2 * period,
                    cycle.join(" -> ")
                )));
            }
        }
        Ok(())
    }
}

/// `3rd`, `4th`, `21st`… of `n`.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    line.get(..line.len().min(200)).unwrap_or(line)
}

#[cfg(test)]
mod tests;

//! The TurnActor's tool pool: running one step's calls batch by batch
//! (`tools::schedule::plan_batches`, at most `MAX_PARALLEL` ToolActors at once) and
//! committing results in call order.

use super::TurnMsg;
use super::actor::Turn;
use crate::tools::ToolRegistry;
use crate::tools::protected::Protected;
use crate::tools::schedule::{MAX_PARALLEL, plan_batches};
use crate::tools_actor::actor::{PartialOutput, Started, pre_start};
use crate::tools_actor::{ToolActor, ToolArgs, ToolMsg};
use foya_protocol::{EventKind, ToolCall, ToolMessage};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef};
use std::collections::HashMap;

pub(crate) use crate::tools::CANCELLED;
/// Last line of the result of a call stopped by a cancel after it had printed output
/// (the output so far comes first).
pub(crate) const CANCELLED_PARTIAL: &str =
    "[cancelled; the output above is what the call printed before it was stopped]";
/// Result text of a call whose ToolActor panicked.
pub(crate) const CRASHED: &str = "tool crashed";

/// The tool calls of one step and where each one is.
#[derive(Debug)]
pub(crate) struct ToolRun {
    calls: Vec<ToolCall>,
    /// Call indices to run one batch after another (see `plan_batches`), in order.
    batches: Vec<Vec<usize>>,
    /// The batch being run.
    batch: usize,
    /// Calls `batches[batch][..spawned]` were spawned.
    spawned: usize,
    results: Vec<Option<ToolMessage>>,
    /// Live output of every call started so far, by call index (kept on cancel).
    partials: Vec<Option<PartialOutput>>,
    /// Results `[..committed]` are persisted.
    committed: usize,
    running: HashMap<ActorId, (usize, Option<ActorRef<ToolMsg>>)>,
}

impl ToolRun {
    /// A run of `calls`; unknown tools count as parallel-safe (they fail at once).
    pub(crate) fn new(calls: Vec<ToolCall>, tools: &ToolRegistry) -> Self {
        let parallel: Vec<bool> = calls
            .iter()
            .map(|c| tools.get(&c.name).is_none_or(|t| t.spec().parallel_safe))
            .collect();
        let n = calls.len();
        Self {
            calls,
            batches: plan_batches(&parallel),
            batch: 0,
            spawned: 0,
            results: vec![None; n],
            partials: vec![None; n],
            committed: 0,
            running: HashMap::new(),
        }
    }

    /// The calls that may start now: the next ones of the current batch while fewer than
    /// [`MAX_PARALLEL`](crate::tools::schedule::MAX_PARALLEL) run; the next batch starts once every call of the current one
    /// finished.
    fn ready(&mut self) -> Vec<usize> {
        let mut out = Vec::new();
        while let Some(batch) = self.batches.get(self.batch) {
            if self.spawned == batch.len() {
                if !self.running.is_empty() || !out.is_empty() {
                    break;
                }
                self.batch += 1;
                self.spawned = 0;
                continue;
            }
            if self.results[batch[self.spawned]].is_some() {
                // Answered without running (run protection).
                self.spawned += 1;
                continue;
            }
            if self.running.len() + out.len() >= MAX_PARALLEL {
                break;
            }
            out.push(batch[self.spawned]);
            self.spawned += 1;
        }
        out
    }

    /// Answers call `index` without running it (run protection); committed in call
    /// order with the others.
    pub(crate) fn preset(&mut self, index: usize, result: ToolMessage) {
        if let Some(slot) = self.results.get_mut(index) {
            *slot = Some(result);
        }
    }

    /// The index of the call run by actor `id`.
    pub(crate) fn index_of(&self, id: ActorId) -> Option<usize> {
        self.running.get(&id).map(|(i, _)| *i)
    }

    /// The result of a call whose actor crashed.
    pub(crate) fn crashed(&self, index: usize) -> ToolMessage {
        ToolMessage {
            tool_call_id: self.calls[index].id.clone(),
            content: CRASHED.into(),
            is_error: true,
            images: Vec::new(),
        }
    }

    /// Kills every running ToolActor (their tool futures are dropped).
    pub(crate) fn kill_all(&mut self) {
        for (_, (_, actor)) in self.running.drain() {
            if let Some(actor) = actor {
                actor.kill();
            }
        }
    }

    /// Uncommitted results in call order, "cancelled" for calls without one; a call
    /// that had printed output keeps it (capped like a tool's output), followed by
    /// [`CANCELLED_PARTIAL`].
    pub(crate) fn cancel_remaining(&mut self) -> Vec<ToolMessage> {
        let start = self.committed;
        self.committed = self.calls.len();
        (start..self.calls.len())
            .map(|i| {
                self.results[i].take().unwrap_or_else(|| ToolMessage {
                    tool_call_id: self.calls[i].id.clone(),
                    content: cancelled_content(self.partials[i].as_ref()),
                    is_error: true,
                    images: Vec::new(),
                })
            })
            .collect()
    }

    /// Records a result; returns the newly committable prefix, in call order.
    fn record(&mut self, index: usize, result: ToolMessage) -> Vec<ToolMessage> {
        self.running.retain(|_, (i, _)| *i != index);
        if index < self.results.len() && index >= self.committed && self.results[index].is_none() {
            self.results[index] = Some(result);
        }
        let mut out = Vec::new();
        while let Some(Some(result)) = self.results.get_mut(self.committed).map(Option::take) {
            out.push(result);
            self.committed += 1;
        }
        out
    }

    #[cfg(test)]
    fn parallel_running_for_test(&mut self, id: ActorId, index: usize) {
        self.running.insert(id, (index, None));
    }

    fn all_committed(&self) -> bool {
        self.committed == self.calls.len()
    }
}

/// The result text of a cancelled call: its output so far, if any, then the mark.
fn cancelled_content(partial: Option<&PartialOutput>) -> String {
    let output = partial.map_or_else(String::new, |p| {
        p.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .render()
    });
    if output.is_empty() {
        return CANCELLED.into();
    }
    let newline = if output.ends_with('\n') { "" } else { "\n" };
    format!("{output}{newline}{CANCELLED_PARTIAL}")
}

impl Turn {
    /// Spawns the ToolActors that may start now. The calls allowed without asking are
    /// validated here and their `tool_started` committed in one append (with the step's
    /// events still pending: the assistant message), before any of them runs; the
    /// others validate, ask and mark themselves started in their ToolActor.
    pub(super) async fn spawn_tools(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let super::actor::Phase::Tools(run) = &mut self.phase else {
            return Ok(());
        };
        let ready: Vec<(usize, ToolCall)> = run
            .ready()
            .into_iter()
            .map(|index| (index, run.calls[index].clone()))
            .collect();
        let cancelled = self.args.cancel.is_cancelled();
        let cwd = &self.args.config.cwd;
        let protected = Protected::new(cwd, &self.args.deps.hooks.commands(cwd));
        let hooks = std::sync::Arc::clone(&self.args.deps.hooks);
        let mut started: Vec<Option<Started>> = ready
            .iter()
            .map(|(_, call)| {
                (!cancelled)
                    .then(|| pre_start(&self.registry, &self.args.config, &protected, &hooks, call))
                    .flatten()
            })
            .collect();
        let transcript_path = self.tool_transcript(ready.iter().map(|(_, call)| call));
        let kinds = ready
            .iter()
            .zip(&started)
            .filter(|(_, s)| s.is_some())
            .map(|((_, call), _)| EventKind::ToolStarted {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
            })
            .collect();
        self.persist(kinds).await?;
        if self.args.cancel.is_cancelled() {
            // The session may have dropped those `tool_started` (it records no tool
            // activity once a cancel is requested): the actors take the usual way,
            // where the session refuses them.
            started.iter_mut().for_each(|s| *s = None);
        }
        let super::actor::Phase::Tools(run) = &mut self.phase else {
            return Ok(());
        };
        for ((index, call), started) in ready.into_iter().zip(started) {
            let partial = PartialOutput::default();
            run.partials[index] = Some(std::sync::Arc::clone(&partial));
            let args = ToolArgs {
                session: self.args.session.clone(),
                turn: myself.clone(),
                session_id: self.args.session_id,
                run_id: self.args.run_id,
                step: self.step,
                index,
                tools: std::sync::Arc::clone(&self.registry),
                call,
                config: self.args.config.clone(),
                protected: protected.clone(),
                shared: self.args.deps.tool_state.clone(),
                cancel: self.args.cancel.child_token(),
                partial,
                started,
                hooks: std::sync::Arc::clone(&hooks),
                transcript_path: transcript_path.clone(),
                hook_notes: Vec::new(),
                attachments: self.args.deps.attachments.clone(),
            };
            let (actor, _) = Actor::spawn_linked(None, ToolActor, args, myself.get_cell()).await?;
            run.running.insert(actor.get_id(), (index, Some(actor)));
        }
        Ok(())
    }

    /// A call finished: commit its `tool_finished` (when it ran) and what became
    /// committable in call order, in one append; then more tools or the next step.
    pub(super) async fn tool_done(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        index: usize,
        result: ToolMessage,
        duration_ms: Option<u64>,
    ) -> Result<(), ActorProcessingErr> {
        let super::actor::Phase::Tools(run) = &mut self.phase else {
            return Ok(());
        };
        let finished = duration_ms
            .filter(|_| !self.args.cancel.is_cancelled())
            .map(|duration_ms| EventKind::ToolFinished {
                tool_call_id: result.tool_call_id.clone(),
                is_error: result.is_error,
                duration_ms,
            });
        let ready = run.record(index, result);
        let done = run.all_committed();
        let kinds = finished
            .into_iter()
            .chain(ready.into_iter().map(EventKind::ToolMessage))
            .collect();
        self.persist(kinds).await?;
        if done {
            return self.start_step(myself).await;
        }
        self.spawn_tools(myself).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: foya_protocol::ToolCallId::new(id),
            name: name.into(),
            arguments: serde_json::json!({}),
            extra: None,
        }
    }

    fn ok(id: &str) -> ToolMessage {
        ToolMessage {
            tool_call_id: foya_protocol::ToolCallId::new(id),
            content: id.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// Marks `indices` as running, as `spawn_tools` does.
    fn start(run: &mut ToolRun, indices: &[usize]) {
        for &i in indices {
            let id = ractor::ActorId::Local(1000 + i as u64);
            // The ActorRef is never used by `ready`/`record`; scheduling only needs ids.
            run.parallel_running_for_test(id, i);
        }
    }

    #[test]
    fn parallel_safe_calls_batch_up_to_five_and_others_run_alone_in_order() {
        let tools = crate::testkit::tools();
        // echo: parallel-safe; wait: not.
        let mut names = vec!["echo"; 7];
        names.extend(["wait", "echo"]);
        let calls: Vec<ToolCall> = names
            .iter()
            .enumerate()
            .map(|(i, n)| call(&format!("c{i}"), n))
            .collect();
        let mut run = ToolRun::new(calls, &tools);
        let first = run.ready();
        assert_eq!(first, vec![0, 1, 2, 3, 4]);
        start(&mut run, &first);
        assert_eq!(run.ready(), Vec::<usize>::new());
        // Results arrive out of order; commits stay in call order.
        assert_eq!(run.record(1, ok("c1")), vec![]);
        assert_eq!(run.record(0, ok("c0")), vec![ok("c0"), ok("c1")]);
        let next = run.ready();
        assert_eq!(next, vec![5, 6]);
        start(&mut run, &next);
        for i in [2, 3, 4, 5] {
            run.record(i, ok(&format!("c{i}")));
        }
        assert_eq!(run.ready(), Vec::<usize>::new(), "wait must run alone");
        run.record(6, ok("c6"));
        let alone = run.ready();
        assert_eq!(alone, vec![7]);
        start(&mut run, &alone);
        assert_eq!(run.ready(), Vec::<usize>::new());
        assert_eq!(run.record(7, ok("c7")), vec![ok("c7")]);
        assert_eq!(run.ready(), vec![8]);
        assert!(!run.all_committed());
    }

    #[test]
    fn a_cancel_keeps_the_output_a_call_printed_so_far() {
        let tools = crate::testkit::tools();
        let calls = vec![call("c0", "wait"), call("c1", "wait"), call("c2", "wait")];
        let mut run = ToolRun::new(calls, &tools);
        let printed = PartialOutput::default();
        printed.lock().unwrap().push(b"line one\nline tw");
        run.partials[0] = Some(printed);
        run.partials[1] = Some(PartialOutput::default());
        let content = |m: &ToolMessage| (m.content.clone(), m.is_error);
        assert_eq!(
            run.cancel_remaining()
                .iter()
                .map(content)
                .collect::<Vec<_>>(),
            vec![
                (format!("line one\nline tw\n{CANCELLED_PARTIAL}"), true),
                (CANCELLED.to_owned(), true),
                (CANCELLED.to_owned(), true),
            ]
        );
    }
}

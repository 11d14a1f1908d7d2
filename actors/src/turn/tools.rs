//! The TurnActor's tool pool: scheduling ToolActors and committing results in call order.

use super::actor::Turn;
use super::{MAX_TOOL_ACTORS, TurnMsg};
use crate::tools::ToolRegistry;
use crate::tools_actor::{ToolActor, ToolArgs, ToolMsg};
use foya_protocol::{EventKind, ToolCall, ToolMessage};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef};
use std::collections::HashMap;

/// Result text of a call stopped by a cancel.
pub(crate) const CANCELLED: &str = "cancelled";
/// Result text of a call whose ToolActor panicked.
pub(crate) const CRASHED: &str = "tool crashed";

/// The tool calls of one step and where each one is.
#[derive(Debug)]
pub(crate) struct ToolRun {
    calls: Vec<ToolCall>,
    parallel: Vec<bool>,
    results: Vec<Option<ToolMessage>>,
    /// Results `[..committed]` are persisted.
    committed: usize,
    /// Calls `[..next]` were spawned.
    next: usize,
    running: HashMap<ActorId, (usize, ActorRef<ToolMsg>)>,
}

impl ToolRun {
    /// A run of `calls`; unknown tools count as parallel-safe (they fail at once).
    pub(crate) fn new(calls: Vec<ToolCall>, tools: &ToolRegistry) -> Self {
        let parallel = calls
            .iter()
            .map(|c| tools.get(&c.name).is_none_or(|t| t.spec().parallel_safe))
            .collect();
        let n = calls.len();
        Self {
            calls,
            parallel,
            results: vec![None; n],
            committed: 0,
            next: 0,
            running: HashMap::new(),
        }
    }

    /// The calls that may start now: a parallel-safe call joins running parallel-safe
    /// ones (up to the pool limit); one that is not runs alone.
    fn ready(&mut self) -> Vec<usize> {
        let mut out = Vec::new();
        while self.next < self.calls.len() {
            let alive = self.running.len() + out.len();
            let exclusive_running = self
                .running
                .values()
                .map(|(i, _)| *i)
                .chain(out.iter().copied())
                .any(|i| !self.parallel[i]);
            let fits = if self.parallel[self.next] {
                !exclusive_running && alive < MAX_TOOL_ACTORS
            } else {
                alive == 0
            };
            if !fits {
                break;
            }
            out.push(self.next);
            self.next += 1;
        }
        out
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
        }
    }

    /// Kills every running ToolActor (their tool futures are dropped).
    pub(crate) fn kill_all(&mut self) {
        for (_, (_, actor)) in self.running.drain() {
            actor.kill();
        }
    }

    /// Uncommitted results in call order, "cancelled" for calls without one.
    pub(crate) fn cancel_remaining(&mut self) -> Vec<ToolMessage> {
        let start = self.committed;
        self.committed = self.calls.len();
        (start..self.calls.len())
            .map(|i| {
                self.results[i].take().unwrap_or_else(|| ToolMessage {
                    tool_call_id: self.calls[i].id.clone(),
                    content: CANCELLED.into(),
                    is_error: true,
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

    fn all_committed(&self) -> bool {
        self.committed == self.calls.len()
    }
}

impl Turn {
    /// Spawns the ToolActors that may start now.
    pub(super) async fn spawn_tools(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let super::actor::Phase::Tools(run) = &mut self.phase else {
            return Ok(());
        };
        for index in run.ready() {
            let call = run.calls[index].clone();
            let args = ToolArgs {
                session: self.args.session.clone(),
                turn: myself.clone(),
                session_id: self.args.session_id,
                run_id: self.args.run_id,
                step: self.step,
                index,
                tool: self.args.deps.tools.get(&call.name),
                call,
                config: self.args.config.clone(),
                cancel: self.args.cancel.child_token(),
            };
            let (actor, _) = Actor::spawn_linked(None, ToolActor, args, myself.get_cell()).await?;
            run.running.insert(actor.get_id(), (index, actor));
        }
        Ok(())
    }

    /// A call finished: commit what is committable in order, then more tools or the
    /// next step.
    pub(super) async fn tool_done(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        index: usize,
        result: ToolMessage,
    ) -> Result<(), ActorProcessingErr> {
        let super::actor::Phase::Tools(run) = &mut self.phase else {
            return Ok(());
        };
        let ready = run.record(index, result);
        let done = run.all_committed();
        self.persist(ready.into_iter().map(EventKind::ToolMessage).collect())
            .await?;
        if done {
            return self.start_step(myself).await;
        }
        self.spawn_tools(myself).await
    }
}

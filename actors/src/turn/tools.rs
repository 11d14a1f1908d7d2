//! The TurnActor's tool I/O: starting the ToolActors of the calls the machine starts
//! (the machine schedules them: `machine/run.rs`). The calls allowed without asking are
//! validated here and their `tool_started` committed in one append with what is
//! pending (the step's assistant message, the previous call's results), before any of
//! them runs; the others validate, ask and mark themselves started in their ToolActor.

use super::TurnMsg;
use super::actor::Turn;
use super::tool::actor::{PartialOutput, Started, pre_start};
use super::tool::{ToolActor, ToolArgs};
use crate::tools::protected::Protected;
use foya_protocol::{EventKind, ToolCall};
use ractor::{Actor, ActorProcessingErr, ActorRef};

impl Turn {
    /// Starts `calls` (call index, call) of step `step`.
    pub(super) async fn start_tools(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        step: u32,
        calls: Vec<(usize, ToolCall)>,
    ) -> Result<(), ActorProcessingErr> {
        if self.io.sub_agents.is_none() {
            let run_id = self.args.run_id;
            self.io.sub_agents = self
                .args
                .deps
                .sub_agents
                .as_ref()
                .map(|agent| agent.turn_scope(run_id));
        }
        if self.io.partials_step != step {
            self.io.partials_step = step;
            self.io.partials.clear();
        }
        let cwd = &self.args.config.cwd;
        let protected = Protected::new(cwd, &self.args.deps.hooks.commands(cwd));
        let hooks = std::sync::Arc::clone(&self.args.deps.hooks);
        let started: Vec<Option<Started>> = calls
            .iter()
            .map(|(_, call)| {
                pre_start(
                    &self.io.registry,
                    &self.args.config,
                    &protected,
                    &hooks,
                    call,
                )
            })
            .collect();
        let transcript_path = self.tool_transcript(calls.iter().map(|(_, call)| call));
        let kinds =
            calls
                .iter()
                .zip(&started)
                .filter(|(_, s)| s.is_some())
                .map(|((_, call), _)| EventKind::ToolStarted {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                });
        self.append(kinds);
        self.flush().await?;
        if self.args.cancel.is_cancelled() {
            // Nothing starts once the token fired (the session dropped those
            // `tool_started`): the `Cancel` that follows writes "cancelled" results.
            return Ok(());
        }
        for ((index, call), started) in calls.into_iter().zip(started) {
            let partial = PartialOutput::default();
            if self.io.partials.len() <= index {
                self.io.partials.resize(index + 1, None);
            }
            self.io.partials[index] = Some(std::sync::Arc::clone(&partial));
            let args = ToolArgs {
                session: self.args.session.clone(),
                turn: myself.clone(),
                session_id: self.args.session_id,
                run_id: self.args.run_id,
                step,
                index,
                tools: std::sync::Arc::clone(&self.io.registry),
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
            self.io.running.insert(actor.get_id(), (index, actor));
        }
        Ok(())
    }
}

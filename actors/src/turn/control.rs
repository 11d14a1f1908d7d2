//! Turn control hook points of the TurnActor: run protection (duplicate calls, repeated
//! failures, step cycles — the pure [`Guard`]), the final no-tools step at `max_steps`,
//! and stop hooks. The step loop in `actor.rs` calls these at three points: when a
//! response asks for tools, when it does not, and before the next step starts.
//!
//! End states chosen here:
//! - `max_steps`: after the limit, one more request is sent with `tools: []` and an
//!   appended user instruction; its answer is persisted (any tool calls stripped) and the
//!   turn ends `failed`, reason `max_steps`, error class `max_steps` — the task was cut,
//!   not finished by the model's own decision (headless `run` exits non-zero).
//! - `loop_detected`: `failed`, reason `loop_detected`, error class `loop_detected` with
//!   the repeated call or the step cycle in the error message. When the model insists on
//!   a blocked call, its calls get `is_error` "not run" results first (the log stays
//!   well-formed).
//! - a tool hook's `continue: false` ends the turn `completed` before the next step,
//!   with the hook's `stopReason` (or `stopped by hook`).
//! - stop hooks (`hooks.rs`): `Block` writes `hook_continued{reason, count}` and starts another step
//!   (the history fold turns it into a user message); `count` counts the turn's
//!   continuations, tool steps in between included, and `stop_hook_active` is true on
//!   every stop after the first continuation (the turn is continuing because of a hook);
//!   a block beyond `max_hook_continuations` per turn ends it `completed`, reason
//!   `stop_hook_limit`; `End` ends it `completed` with the hook's `stopReason` (or
//!   `stopped by hook`).

use super::TurnMsg;
use super::actor::{Phase, Turn};
use super::protection::{CallVerdict, Guard, Limits, LoopDetected};
use super::tools::ToolRun;
use crate::provider::ModelRequest;
use foya_protocol::{
    AssistantMessage, ErrorClass, ErrorInfo, EventKind, Input, Message, ToolCall, ToolMessage,
    TurnStatus,
};
use ractor::{ActorProcessingErr, ActorRef};

/// The instruction appended to the final request when the step limit is reached.
pub(crate) const MAX_STEPS_INSTRUCTION: &str = "The step limit of this turn was reached: no \
     more tools can be called. Summarise what was done, what remains, and stop.";

/// Turn-control state of one turn.
#[derive(Debug, Default)]
pub(crate) struct Control {
    guard: Guard,
    /// The calls of the current step (checked against their results before the next).
    calls: Vec<ToolCall>,
    /// The current step is the final no-tools one.
    pub(super) final_step: bool,
    /// Stop-hook continuations of this turn (tool steps in between do not reset it).
    pub(super) hook_blocks: u32,
    /// Set by a tool hook's `continue: false`: the turn ends before the next step, with
    /// this reason.
    hook_stop: Option<String>,
    /// Keeps the `agent` tool's counters of this turn (from the first tool step until
    /// the turn ends; see [`Turn::end_sub_agent_scope`]).
    sub_agents: Option<crate::tools::builtin::agent::TurnScope>,
}

impl Control {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            guard: Guard::new(limits),
            ..Self::default()
        }
    }
}

fn not_run(call: &ToolCall, text: &str) -> ToolMessage {
    ToolMessage {
        tool_call_id: call.id.clone(),
        content: text.to_owned(),
        is_error: true,
        images: Vec::new(),
    }
}

impl Turn {
    /// Before a step starts: `max_steps` turns the step into the final no-tools one
    /// (`Ok(false)`: go on), and a finished tool step is checked for cycles. `Ok(true)`
    /// means the turn was ended.
    pub(super) async fn before_step(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<bool, ActorProcessingErr> {
        if let Some(reason) = self.control.hook_stop.take() {
            self.end_by_hook(myself, Some(reason)).await?;
            return Ok(true);
        }
        if !self.control.calls.is_empty() {
            let calls = std::mem::take(&mut self.control.calls);
            let ids: Vec<_> = calls.iter().map(|c| &c.id).collect();
            // This run's results, read back from the end of the log to its turn_started.
            let run = Some(self.args.run_id);
            let mut results: Vec<ToolMessage> = self
                .args
                .log
                .read()
                .iter()
                .rev()
                .take_while(|e| {
                    !(e.run_id == run && matches!(e.kind, EventKind::TurnStarted { .. }))
                })
                .filter(|e| e.run_id == run)
                .filter_map(|e| match &e.kind {
                    EventKind::ToolMessage(m) if ids.contains(&&m.tool_call_id) => Some(m.clone()),
                    _ => None,
                })
                .collect();
            results.reverse();
            if let Err(LoopDetected(message)) = self.control.guard.end_step(&calls, &results) {
                self.loop_detected(myself, Vec::new(), message).await?;
                return Ok(true);
            }
        }
        if let Some(max) = self.args.config.max_steps
            && self.step >= max
        {
            if self.control.final_step {
                let steps = if max == 1 { "step" } else { "steps" };
                let message = format!("the turn reached its maximum of {max} {steps}");
                self.fail(myself, ErrorClass::MaxSteps, message).await?;
                return Ok(true);
            }
            self.control.final_step = true;
        }
        Ok(false)
    }

    /// The final step's request offers no tools and says why; a tool withdrawn by run
    /// protection (repeated identical failures) is not offered.
    pub(super) fn adjust_request(&self, request: &mut ModelRequest) {
        let withdrawn = self.control.guard.withdrawn();
        if !withdrawn.is_empty() {
            request.tools = request
                .tools
                .iter()
                .filter(|t| !withdrawn.contains(&t.name.as_str()))
                .cloned()
                .collect();
        }
        if self.control.final_step {
            request.tools = std::sync::Arc::default();
            request
                .messages
                .push(Message::User(Input::text(MAX_STEPS_INSTRUCTION)));
        }
    }

    /// The final step's answer keeps no tool calls (none could run).
    pub(super) fn adjust_message(&self, message: &mut AssistantMessage) {
        if self.control.final_step {
            message.tool_calls.clear();
            if message.finish_reason == Some(foya_protocol::FinishReason::ToolCalls) {
                message.finish_reason = Some(foya_protocol::FinishReason::Stop);
            }
        }
    }

    async fn loop_detected(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        kinds: Vec<EventKind>,
        message: String,
    ) -> Result<(), ActorProcessingErr> {
        let error = ErrorInfo {
            class: ErrorClass::LoopDetected,
            message,
        };
        let reason = Some(ErrorClass::LoopDetected.as_str().into());
        self.finish(myself, kinds, TurnStatus::Failed, reason, Some(error))
            .await
    }

    /// The response asked for tools: blocked calls get their `is_error` result without
    /// running, the others run; a repeated blocked call ends the turn `loop_detected`.
    /// A call repeating an earlier call's id in this response is renamed and not run
    /// (`duplicates.rs`).
    pub(super) async fn run_calls(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        mut kinds: Vec<EventKind>,
        mut calls: Vec<ToolCall>,
    ) -> Result<(), ActorProcessingErr> {
        let repeated = super::duplicates::rename_in_response(&mut kinds, &mut calls);
        self.open_sub_agent_scope();
        let verdicts = match self.control.guard.check_calls(&calls) {
            Ok(verdicts) => verdicts,
            Err(LoopDetected(message)) => {
                let text = format!("not run: {message}");
                kinds.extend(
                    calls
                        .iter()
                        .map(|c| EventKind::ToolMessage(not_run(c, &text))),
                );
                return self.loop_detected(myself, kinds, message).await;
            }
        };
        // Committed with the first calls' `tool_started` by `spawn_tools` (which always
        // writes what is pending before any call runs): one append fewer per step.
        self.pending.extend(kinds);
        self.control.calls.clone_from(&calls);
        let mut run = ToolRun::new(calls.clone(), &self.registry);
        let mut first_blocked = None;
        for (index, verdict) in verdicts.into_iter().enumerate() {
            let verdict = super::duplicates::verdict_for(&repeated, index, verdict);
            if let CallVerdict::Block(text) = verdict {
                let result = not_run(&calls[index], &text);
                first_blocked.get_or_insert((index, result.clone()));
                run.preset(index, result);
            }
        }
        self.phase = Phase::Tools(run);
        self.spawn_tools(myself).await?;
        if let Some((index, result)) = first_blocked {
            // Commits the preset results that lead the call order (and moves on when
            // every call was blocked).
            self.tool_done(myself, index, result, None).await?;
        }
        Ok(())
    }

    /// Opens the sub-agent counters' scope of this turn (once; when sub-agents are on).
    fn open_sub_agent_scope(&mut self) {
        if self.control.sub_agents.is_none() {
            let run_id = self.args.run_id;
            self.control.sub_agents = self
                .args
                .deps
                .sub_agents
                .as_ref()
                .map(|agent| agent.turn_scope(run_id));
        }
    }

    /// The turn ends: forget its sub-agent counters now (dropping the turn would too,
    /// but later).
    pub(super) fn end_sub_agent_scope(&mut self) {
        self.control.sub_agents = None;
    }

    /// The model stopped without tool calls: persist its answer, then run the stop
    /// hooks (in a task that reports by message, so a cancel is heard) or end the turn.
    pub(super) async fn on_stop(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        kinds: Vec<EventKind>,
        last_text: String,
    ) -> Result<(), ActorProcessingErr> {
        if self.control.final_step {
            let max = self.args.config.max_steps.unwrap_or_default();
            let steps = if max == 1 { "step" } else { "steps" };
            let error = ErrorInfo {
                class: ErrorClass::MaxSteps,
                message: format!("the turn reached its maximum of {max} {steps}"),
            };
            let reason = Some(ErrorClass::MaxSteps.as_str().into());
            return self
                .finish(myself, kinds, TurnStatus::Failed, reason, Some(error))
                .await;
        }
        let event = self.stop_event();
        if !self.args.deps.hooks.any(event, None) {
            return self
                .finish(myself, kinds, TurnStatus::Completed, None, None)
                .await;
        }
        self.persist(kinds).await?;
        self.spawn_stop_hooks(myself, event, last_text);
        Ok(())
    }

    /// A tool hook answered `continue: false` (the first reason is kept).
    pub(super) fn hook_stopped(&mut self, reason: Option<String>) {
        self.control
            .hook_stop
            .get_or_insert_with(|| reason.unwrap_or_else(|| "stopped by hook".into()));
    }
}

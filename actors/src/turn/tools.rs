//! The TurnActor's tool I/O: what the machine's call lifecycle (`machine/call.rs`) asks
//! for. `CheckCalls` validates each call with the registry and puts it through the
//! Approval Gateway (answered at once; the prepared calls are kept for the step);
//! `RunToolHook` runs a call's `PreToolUse`/`PostToolUse` hooks and `AskApproval` asks
//! the session, each in a task that reports by message (so a cancel is heard at once:
//! dropping the task kills the hooks, drops the question); `RunTool` hands the call to
//! a ToolActor of the turn's pool (`tool/`), which only runs the prepared call under its
//! sandbox.

use super::TurnMsg;
use super::actor::Turn;
use super::machine::{CallCheck, TurnInput};
use super::port::ApprovalQuestion;
use super::tool::actor::PartialOutput;
use super::tool::{ToolActor, ToolEnv, ToolJob, ToolMsg};
use crate::hooks::{HookEvent, HookInput, hook_tool_input};
use crate::task::AbortOnDropHandle;
use crate::tools::approval::evaluate;
use crate::tools::protected::Protected;
use crate::tools::{PreparedCall, SandboxPolicy};
use foya_core::approval::ApprovalAnswer;
use foya_core::turn::machine::ToolHook;
use foya_protocol::ToolCall;
use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, MessagingErr};
use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// A call of the step, as the driver keeps it between its lifecycle's effects.
#[derive(Debug)]
pub(crate) struct StepCall {
    pub(super) call: ToolCall,
    /// The validated call (taken when it runs).
    pub(super) prepared: Option<PreparedCall>,
}

impl Turn {
    /// Checks `calls` (call index, call) of step `step`: the machine's `CallsChecked`.
    pub(super) fn check_calls(&mut self, step: u32, calls: Vec<(usize, ToolCall)>) -> TurnInput {
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
            self.io.calls.clear();
        }
        let cwd = self.args.config.cwd.clone();
        let protected = Protected::new(&cwd, &self.args.deps.hooks.commands(&cwd));
        self.io.transcript_path = self.tool_transcript(calls.iter().map(|(_, call)| call));
        let hooks = Arc::clone(&self.args.deps.hooks);
        let mode = self.args.config.approval_mode;
        let mut checks = Vec::with_capacity(calls.len());
        for (index, call) in calls {
            let check = match self.io.registry.prepare(&call.name, &call.arguments) {
                Err(output) => {
                    self.keep_call(index, call, None);
                    CallCheck::Invalid(output.content)
                }
                Ok(prepared) => {
                    let verdict = evaluate(
                        mode,
                        prepared.tool.spec(),
                        &prepared.args,
                        &cwd,
                        &protected,
                        &BTreeSet::new(),
                        self.io.registry.shield_available(),
                    );
                    let pre_hooks = hooks
                        .any(HookEvent::PreToolUse, Some(&call.name))
                        .then(|| format!("{} {}", call.name, prepared.args));
                    let post_hooks = hooks.any(HookEvent::PostToolUse, Some(&call.name));
                    self.keep_call(index, call, Some(prepared));
                    CallCheck::Valid {
                        verdict,
                        pre_hooks,
                        post_hooks,
                    }
                }
            };
            checks.push((index, check));
        }
        self.io.protected = Some(protected);
        TurnInput::CallsChecked(checks)
    }

    fn keep_call(&mut self, index: usize, call: ToolCall, prepared: Option<PreparedCall>) {
        if self.io.calls.len() <= index {
            self.io.calls.resize_with(index + 1, || None);
        }
        self.io.calls[index] = Some(StepCall { call, prepared });
    }

    fn step_call(&self, index: usize) -> Option<&StepCall> {
        self.io.calls.get(index).and_then(Option::as_ref)
    }

    /// Runs `hook` for call `index` in a task that answers `ToolHookDone` (a panicking
    /// hook answers as a crashed call).
    pub(super) fn run_tool_hook(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        index: usize,
        hook: ToolHook,
    ) {
        let Some(step_call) = self.step_call(index) else {
            return;
        };
        let call = &step_call.call;
        let cwd = &self.args.config.cwd;
        let (event, tool_input, tool_response) = match hook {
            ToolHook::Pre => {
                let args = step_call
                    .prepared
                    .as_ref()
                    .map_or(&call.arguments, |p| &p.args);
                (
                    HookEvent::PreToolUse,
                    hook_tool_input(&call.name, args, cwd),
                    None,
                )
            }
            ToolHook::Post { content, is_error } => (
                HookEvent::PostToolUse,
                hook_tool_input(&call.name, &call.arguments, cwd),
                Some(serde_json::json!({ "content": content, "is_error": is_error })),
            ),
        };
        let mut input = HookInput::new(
            event,
            self.args.session_id,
            cwd.clone(),
            self.args.config.approval_mode,
        );
        input.turn_id = Some(self.args.run_id);
        input.transcript_path.clone_from(&self.io.transcript_path);
        input.tool_name = Some(call.name.clone());
        input.tool_use_id = Some(call.id.clone());
        input.tool_input = Some(tool_input);
        input.tool_response = tool_response;
        let hooks = Arc::clone(&self.args.deps.hooks);
        let me = myself.clone();
        let task = tokio::spawn(async move {
            let run = AssertUnwindSafe(hooks.run(&input))
                .catch_unwind()
                .await
                .ok();
            let _ = me.cast(TurnMsg::ToolHookDone { index, run });
        });
        self.io
            .call_tasks
            .insert(index, AbortOnDropHandle::new(task));
    }

    /// Asks the session whether call `index` may run, in a task that answers
    /// `ApprovalDone`.
    pub(super) fn ask_approval(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        index: usize,
        action: String,
        reason: String,
        grant_key: String,
    ) {
        let Some(step_call) = self.step_call(index) else {
            return;
        };
        let question = ApprovalQuestion {
            run_id: self.args.run_id,
            tool_call_id: step_call.call.id.clone(),
            tool_name: step_call.call.name.clone(),
            action,
            reason,
            grant_key,
        };
        let session = self.args.session.clone();
        let me = myself.clone();
        let task = tokio::spawn(async move {
            let answer = session
                .ask_approval(question)
                .await
                .unwrap_or_else(|| ApprovalAnswer {
                    allowed: false,
                    message: Some("the approval request was dropped".into()),
                });
            let _ = me.cast(TurnMsg::ApprovalDone { index, answer });
        });
        self.io
            .call_tasks
            .insert(index, AbortOnDropHandle::new(task));
    }

    /// Runs call `index` (its `tool_started` is committed) on an idle ToolActor of the
    /// turn's pool, or on a new one.
    pub(super) async fn run_tool(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        index: usize,
        sandbox: SandboxPolicy,
    ) -> Result<(), ActorProcessingErr> {
        let Some(slot) = self.io.calls.get_mut(index).and_then(Option::as_mut) else {
            return Ok(());
        };
        // The call stays for its `PostToolUse` hooks.
        let Some(prepared) = slot.prepared.take() else {
            return Ok(());
        };
        let call = slot.call.clone();
        let partial = PartialOutput::default();
        if self.io.partials.len() <= index {
            self.io.partials.resize(index + 1, None);
        }
        self.io.partials[index] = Some(Arc::clone(&partial));
        let mut job = Box::new(ToolJob {
            step: self.io.partials_step,
            index,
            prepared,
            sandbox,
            call,
            protected: self.io.protected.clone().unwrap_or_else(|| {
                let cwd = &self.args.config.cwd;
                Protected::new(cwd, &self.args.deps.hooks.commands(cwd))
            }),
            cancel: self.args.cancel.child_token(),
            partial,
        });
        while let Some(actor) = self.io.idle_tools.pop() {
            match actor.cast(ToolMsg::Run(job)) {
                Ok(()) => {
                    self.io.running.insert(actor.get_id(), (index, actor));
                    return Ok(());
                }
                // Gone meanwhile (never expected: a crashed or killed actor is never put
                // back): the next one, or a new one.
                Err(MessagingErr::SendErr(ToolMsg::Run(back))) => job = back,
                Err(e) => return Err(e.to_string().into()),
            }
        }
        let env = ToolEnv {
            session: self.args.session.clone(),
            turn: myself.clone(),
            session_id: self.args.session_id,
            run_id: self.args.run_id,
            config: self.args.config.clone(),
            shared: self.args.deps.tool_state.clone(),
            attachments: self.args.deps.attachments.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, ToolActor, env, myself.get_cell()).await?;
        actor.cast(ToolMsg::Run(job))?;
        self.io.running.insert(actor.get_id(), (index, actor));
        Ok(())
    }

    /// Call `index` reported its result: its ToolActor goes back to the pool.
    pub(super) fn tool_done(&mut self, index: usize) {
        let id = self
            .io
            .running
            .iter()
            .find_map(|(id, (i, _))| (*i == index).then_some(*id));
        if let Some((_, actor)) = id.and_then(|id| self.io.running.remove(&id)) {
            self.io.idle_tools.push(actor);
        }
    }
}

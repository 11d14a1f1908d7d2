//! The turn's hook points (`crate::hooks`): `SessionStart` (the session's first turn in
//! this runtime) and `UserPromptSubmit` before the first step, `PreCompact` before a
//! summary, `Stop` / `SubagentStop` when the model stops. `PreToolUse` and
//! `PostToolUse` run in the ToolActor; a tool hook's `continue: false` reaches the turn
//! as `HookStopped` and ends it before the next step.
//!
//! `SessionStart`, `UserPromptSubmit` and `PreCompact` run inside the handler, raced
//! against the turn's cancellation token (the session fires it before it sends
//! `Cancel`): a cancel kills the hook at once and the `Cancel` that follows ends the
//! turn. Stop hooks run in a task that reports by message (`HookDone`).
//!
//! Decisions: a `UserPromptSubmit` block (or any `continue: false`) ends the turn
//! `completed` before the model is asked (reason `prompt blocked by hook`, or the hook's
//! `stopReason`); the prompt stays in the log, and the history fold leaves it out of the
//! context. Context from `SessionStart` and `UserPromptSubmit` hooks is folded into the
//! history as a user message. `PreCompact` decides nothing (its runs are logged).

use super::TurnMsg;
use super::actor::{Phase, Turn};
use super::context::Trigger;
use crate::hooks::runner::HookRun;
use crate::hooks::{HookEvent, HookInput};
use crate::task::AbortOnDropHandle;
use foya_protocol::{EventKind, HookDecision, ToolCall, TurnStatus};
use ractor::{ActorProcessingErr, ActorRef};
use std::path::PathBuf;
use std::sync::Arc;

/// `turn_complete` reason of a turn whose prompt a hook blocked.
pub(crate) const PROMPT_BLOCKED: &str = "prompt blocked by hook";

/// Reason given to the model when a stop hook blocks without one.
const CONTINUE: &str = "a stop hook asked to continue";

impl Turn {
    /// The input of `event` in this turn, with the session's transcript exported.
    fn hook_input(&self, event: HookEvent) -> HookInput {
        let mut input = HookInput::new(
            event,
            self.args.session_id,
            self.args.config.cwd.clone(),
            self.args.config.approval_mode,
        );
        input.turn_id = Some(self.args.run_id);
        input.transcript_path = self.transcript();
        input
    }

    fn transcript(&self) -> PathBuf {
        let log = self.args.log.read();
        self.args
            .deps
            .hooks
            .export_transcript(self.args.session_id, &log)
    }

    /// The transcript for the tool hooks of `calls` (exported only when a hook selects
    /// one of them).
    pub(super) fn tool_transcript<'a>(
        &self,
        mut calls: impl Iterator<Item = &'a ToolCall>,
    ) -> PathBuf {
        let hooks = &self.args.deps.hooks;
        let hooked = calls.any(|c| {
            hooks.any(HookEvent::PreToolUse, Some(&c.name))
                || hooks.any(HookEvent::PostToolUse, Some(&c.name))
        });
        if hooked {
            self.transcript()
        } else {
            PathBuf::new()
        }
    }

    /// Runs `input`'s hooks and persists their events; `None` when the turn was
    /// cancelled meanwhile (the hooks are killed, their runs not recorded).
    async fn run_hooks(
        &mut self,
        input: &HookInput,
    ) -> Result<Option<HookRun>, ActorProcessingErr> {
        let hooks = Arc::clone(&self.args.deps.hooks);
        let cancel = self.args.cancel.clone();
        let mut run = tokio::select! {
            // Cancelled: the `Cancel` message that follows ends the turn.
            () = cancel.cancelled() => return Ok(None),
            run = hooks.run(input) => run,
        };
        if input.event() == Some(HookEvent::UserPromptSubmit) {
            forget_context_of_blocked_prompt(&mut run);
        }
        self.persist(run.events.clone()).await?;
        Ok(Some(run))
    }

    /// A model turn begins: its `SessionStart` and `UserPromptSubmit` hooks (top-level
    /// sessions only), then the first step — or the end, when a hook blocks.
    pub(super) async fn begin(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let hooks = Arc::clone(&self.args.deps.hooks);
        let top_level = self.args.config.parent.is_none();
        let source = self.session_source();
        if top_level
            && self.args.first_in_runtime
            && hooks.any(HookEvent::SessionStart, Some(source))
        {
            let mut input = self.hook_input(HookEvent::SessionStart);
            input.source = Some(source);
            let Some(run) = self.run_hooks(&input).await? else {
                return Ok(());
            };
            if run.merged.decision() == HookDecision::Stop {
                return self.end_by_hook(myself, run.merged.reason).await;
            }
        }
        if top_level && hooks.any(HookEvent::UserPromptSubmit, None) {
            let mut input = self.hook_input(HookEvent::UserPromptSubmit);
            input.prompt = Some(self.prompt_text());
            let Some(run) = self.run_hooks(&input).await? else {
                return Ok(());
            };
            match run.merged.decision() {
                HookDecision::Stop => return self.end_by_hook(myself, run.merged.reason).await,
                HookDecision::Block => {
                    return self.end_by_hook(myself, Some(PROMPT_BLOCKED.into())).await;
                }
                _ => {}
            }
        }
        self.start_step(myself).await
    }

    /// `startup` for the session's first turn, `resume` otherwise.
    fn session_source(&self) -> &'static str {
        let turns = self
            .args
            .log
            .read()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
            .count();
        if turns <= 1 { "startup" } else { "resume" }
    }

    /// The text of this turn's input.
    fn prompt_text(&self) -> String {
        let run = Some(self.args.run_id);
        self.args
            .log
            .read()
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::UserMessage { input, .. } if e.run_id == run => Some(input.text.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Ends the turn `completed` because of a hook.
    pub(super) async fn end_by_hook(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        reason: Option<String>,
    ) -> Result<(), ActorProcessingErr> {
        let reason = reason.unwrap_or_else(|| "stopped by hook".into());
        self.finish(
            myself,
            Vec::new(),
            TurnStatus::Completed,
            Some(reason),
            None,
        )
        .await
    }

    /// The `PreCompact` hooks before a summary of `trigger`; `false` when the turn was
    /// cancelled meanwhile.
    pub(super) async fn pre_compact(
        &mut self,
        trigger: Trigger,
    ) -> Result<bool, ActorProcessingErr> {
        let subject = match trigger {
            Trigger::Manual => "manual",
            Trigger::Threshold | Trigger::Overflow => "auto",
        };
        if !self
            .args
            .deps
            .hooks
            .any(HookEvent::PreCompact, Some(subject))
        {
            return Ok(true);
        }
        let mut input = self.hook_input(HookEvent::PreCompact);
        input.trigger = Some(subject);
        input.custom_instructions = Some(String::new());
        Ok(self.run_hooks(&input).await?.is_some())
    }

    /// `SubagentStop` in a sub-agent's session, `Stop` otherwise.
    pub(super) fn stop_event(&self) -> HookEvent {
        if self.args.config.parent.is_some() {
            HookEvent::SubagentStop
        } else {
            HookEvent::Stop
        }
    }

    /// The model stopped: run the hooks of `event` in a task that reports by message.
    pub(super) fn spawn_stop_hooks(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        event: HookEvent,
        last_text: String,
    ) {
        let hooks = Arc::clone(&self.args.deps.hooks);
        let mut input = self.hook_input(event);
        input.stop_hook_active = Some(self.control.hook_blocks > 0);
        input.last_assistant_message = Some(last_text);
        let me = myself.clone();
        let task = tokio::spawn(async move {
            let run = hooks.run(&input).await;
            let _ = me.cast(TurnMsg::HookDone { run });
        });
        self.phase = Phase::Hooks {
            _task: AbortOnDropHandle::new(task),
        };
    }

    /// The stop hooks answered: end the turn, or continue it (up to
    /// `max_hook_continuations`).
    pub(super) async fn hook_done(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        run: HookRun,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(self.phase, Phase::Hooks { .. }) {
            return Ok(());
        }
        self.persist(run.events).await?;
        match run.merged.decision() {
            HookDecision::Stop => self.end_by_hook(myself, run.merged.reason).await,
            HookDecision::Block => {
                let max = self.args.deps.control.max_hook_continuations;
                if self.control.hook_blocks >= max {
                    tracing::warn!(session.id = %self.args.session_id, max, "stop hook continuation limit reached");
                    return self
                        .end_by_hook(myself, Some("stop_hook_limit".into()))
                        .await;
                }
                self.control.hook_blocks += 1;
                let count = self.control.hook_blocks;
                let reason = run.merged.reason.unwrap_or_else(|| CONTINUE.into());
                self.persist(vec![EventKind::HookContinued { reason, count }])
                    .await?;
                self.phase = Phase::Streaming;
                self.start_step(myself).await
            }
            _ => {
                self.finish(myself, Vec::new(), TurnStatus::Completed, None, None)
                    .await
            }
        }
    }
}

/// A prompt that `UserPromptSubmit` hooks block or stop takes the context the other
/// hooks gave for it out of the log too: that context may quote the blocked prompt, and
/// the history would otherwise hand it to the model in a later turn.
fn forget_context_of_blocked_prompt(run: &mut HookRun) {
    if !matches!(
        run.merged.decision(),
        HookDecision::Block | HookDecision::Stop
    ) {
        return;
    }
    run.merged.context.clear();
    for event in &mut run.events {
        if let EventKind::HookRan {
            additional_context, ..
        } = event
        {
            *additional_context = None;
        }
    }
}

//! The turn's hook I/O (`crate::hooks`): builds the input of a hook point the machine
//! asks for — `SessionStart`, `UserPromptSubmit`, `PreCompact`, `Stop` /
//! `SubagentStop` — and runs its hooks in a task that reports by message (`HookDone`),
//! so a cancel is heard at once (dropping the task kills running hooks). `PreToolUse`
//! and `PostToolUse` run the same way, for one call (`tools.rs`, `ToolHookDone`). What a
//! hook's answer means is the machine's business.

use super::TurnMsg;
use super::actor::Turn;
use super::machine::{HookPoint, Trigger};
use crate::hooks::{HookEvent, HookInput};
use crate::task::AbortOnDropHandle;
use foya_protocol::{EventKind, ToolCall};
use ractor::ActorRef;
use std::path::PathBuf;
use std::sync::Arc;

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

    /// The input of hook point `point`.
    fn point_input(&self, point: HookPoint) -> HookInput {
        match point {
            HookPoint::SessionStart => {
                let mut input = self.hook_input(HookEvent::SessionStart);
                input.source = Some(super::actor::session_source(&self.args.log));
                input
            }
            HookPoint::PromptSubmit => {
                let mut input = self.hook_input(HookEvent::UserPromptSubmit);
                input.prompt = Some(self.prompt_text());
                input
            }
            HookPoint::PreCompact(trigger) => {
                let mut input = self.hook_input(HookEvent::PreCompact);
                input.trigger = Some(match trigger {
                    Trigger::Manual => "manual",
                    Trigger::Threshold | Trigger::Overflow => "auto",
                });
                input.custom_instructions = Some(String::new());
                input
            }
            HookPoint::Stop { active, last_text } => {
                let mut input = self.hook_input(HookEvent::stop_of(&self.args.config));
                input.stop_hook_active = Some(active);
                input.last_assistant_message = Some(last_text);
                input
            }
        }
    }

    /// Runs the hooks of `point` in a task that reports by message.
    pub(super) fn spawn_hooks(&mut self, myself: &ActorRef<TurnMsg>, point: HookPoint) {
        let hooks = Arc::clone(&self.args.deps.hooks);
        let input = self.point_input(point);
        let me = myself.clone();
        let task = tokio::spawn(async move {
            let run = hooks.run(&input).await;
            let _ = me.cast(TurnMsg::HookDone { run });
        });
        self.io.hooks = Some(AbortOnDropHandle::new(task));
    }
}

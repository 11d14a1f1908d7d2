//! The ToolActor's hook points: `PreToolUse` between the Approval Gateway's verdict and
//! its execution (the hooks can only tighten the verdict, `hooks::decision::tighten`),
//! `PostToolUse` after the call ran. Each run is persisted (`hook_ran`) through the
//! session before the call goes on; what the hooks say for the model (context, a
//! `PostToolUse` block's reason) is added to the call's result; a `continue: false`
//! tells the turn (`TurnMsg::HookStopped`), which ends after the step.

use super::actor::ToolArgs;
use crate::hooks::{HookEvent, HookInput, hook_tool_input};
use crate::tools::ToolOutput;
use crate::tools::approval::Verdict;
use crate::turn::TurnMsg;
use foya_protocol::HookDecision;
use ractor::ActorProcessingErr;

impl ToolArgs {
    /// The `PreToolUse` hooks of the call (when any selects it): their events are
    /// persisted and their decision can only tighten `verdict`
    /// ([`crate::hooks::decision::tighten`]).
    pub(super) async fn pre_tool_use(
        &mut self,
        args: &serde_json::Value,
        verdict: Verdict,
    ) -> Result<Verdict, ActorProcessingErr> {
        if !self.hooks.any(HookEvent::PreToolUse, Some(&self.call.name)) {
            return Ok(verdict);
        }
        let mut input = self.hook_input(HookEvent::PreToolUse);
        input.tool_input = Some(hook_tool_input(&self.call.name, args, &self.config.cwd));
        let run = self.hooks.run(&input).await;
        self.append(run.events).await?;
        if run.merged.decision() == HookDecision::Stop {
            self.stop_turn(run.merged.reason.clone());
        }
        self.hook_notes.extend(run.merged.context.iter().cloned());
        let action = || format!("{} {}", self.call.name, args);
        Ok(crate::hooks::decision::tighten(
            verdict,
            &run.merged,
            action,
        ))
    }

    /// The `PostToolUse` hooks of a call that ran: a block's reason and any context are
    /// added to the result for the model; `continue: false` ends the turn after the step.
    pub(super) async fn post_tool_use(
        &mut self,
        output: &mut ToolOutput,
    ) -> Result<(), ActorProcessingErr> {
        if self
            .hooks
            .any(HookEvent::PostToolUse, Some(&self.call.name))
        {
            let mut input = self.hook_input(HookEvent::PostToolUse);
            let args = &self.call.arguments;
            input.tool_input = Some(hook_tool_input(&self.call.name, args, &self.config.cwd));
            input.tool_response = Some(serde_json::json!({
                "content": output.content,
                "is_error": output.is_error,
            }));
            let run = self.hooks.run(&input).await;
            self.append(run.events).await?;
            match run.merged.decision() {
                HookDecision::Block => {
                    let reason = run.merged.reason.clone().unwrap_or_default();
                    self.hook_notes
                        .push(format!("PostToolUse hook feedback: {reason}"));
                }
                HookDecision::Stop => self.stop_turn(run.merged.reason.clone()),
                _ => {}
            }
            self.hook_notes.extend(run.merged.context);
        }
        self.add_notes(output);
        Ok(())
    }

    /// Adds what the hooks said for the model to the call's result.
    pub(super) fn add_notes(&mut self, output: &mut ToolOutput) {
        for note in self.hook_notes.drain(..) {
            output.content = format!("{}\n\n[hook] {note}", output.content);
        }
    }

    /// A hook's `continue: false`: the turn ends once this step's results are in.
    fn stop_turn(&self, reason: Option<String>) {
        let _ = self.turn.cast(TurnMsg::HookStopped { reason });
    }

    /// The hook input of `event` for this call.
    fn hook_input(&self, event: HookEvent) -> HookInput {
        let mut input = HookInput::new(
            event,
            self.session_id,
            self.config.cwd.clone(),
            self.config.approval_mode,
        );
        input.turn_id = Some(self.run_id);
        input.transcript_path.clone_from(&self.transcript_path);
        input.tool_name = Some(self.call.name.clone());
        input.tool_use_id = Some(self.call.id.clone());
        input
    }
}

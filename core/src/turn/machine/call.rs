//! One tool call's lifecycle, a state of its own inside phase `Tools` (`run.rs` keeps it
//! per call), read top to bottom:
//! - **Check** ([`TurnEffect::CheckCalls`], answered at once with
//!   [`TurnInput::CallsChecked`](super::TurnInput::CallsChecked)): the driver validates
//!   the arguments against the tool's schema (an invalid call gets the registry's message
//!   as its `is_error` result, nothing runs) and puts the call through the Approval
//!   Gateway ([`Verdict`]).
//! - **`PreToolUse`** (when a hook selects the call): [`TurnEffect::RunToolHook`]; the
//!   answer's `hook_ran` events are written, its decision can only tighten the verdict
//!   ([`tighten`]), its context is kept for the result, a stop ends the turn after the
//!   step.
//! - **Verdict**: `Allow` runs; `Deny` is the `is_error` result with the reason; `Ask`
//!   waits for [`TurnEffect::AskApproval`]'s answer (a person, the session's grants, or
//!   the fallback when nobody can answer: `if_no_approver`).
//! - **Run**: `tool_started` is written (the calls allowed at once: in one append with
//!   what is pending), then [`TurnEffect::RunTool`]; the driver measures the call's
//!   duration (time is an input).
//! - **`PostToolUse`** (when a hook selects the call): a block's reason and the context
//!   are added to the result, a stop ends the turn after the step.
//! - **Result**: the call's result with what the hooks said for the model, and its
//!   `tool_finished` when it ran; results are written in call order (`run.rs`).
//!
//! Cancel, in any of these states: the token fires (phase `Cancelling`), nothing new
//! starts, answers are ignored but for a run without `PostToolUse` hooks (its result
//! is written) and a hook run (its `hook_ran` events are written); `Cancel` writes a
//! "cancelled" result for every call without one, so each call is paired exactly once.

use super::run::error_result;
use super::{Phase, STOPPED_BY_HOOK, TurnEffect, TurnMachine};
use crate::approval::{ApprovalAnswer, NO_APPROVER, SandboxPolicy, Verdict};
use crate::hooks::HookRun;
use crate::hooks::decision::tighten;
use foya_protocol::{EventKind, HookDecision, ToolMessage};

/// What the driver found checking a call: its arguments validated against the tool's
/// schema, then the Approval Gateway's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum CallCheck {
    /// Not valid (unknown tool, arguments that are not JSON or violate the schema): the
    /// registry's message, the call's `is_error` result; nothing runs.
    Invalid(String),
    /// Valid.
    Valid {
        /// The gateway's verdict (without the session's grants: the session answers an
        /// `Ask` its grants cover at once).
        verdict: Verdict,
        /// A `PreToolUse` hook selects the call: the call as a hook's question shows it
        /// (`name args`).
        pre_hooks: Option<String>,
        /// A `PostToolUse` hook selects the call.
        post_hooks: bool,
    },
}

/// A tool hook point of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolHook {
    /// `PreToolUse`: before the verdict is carried out.
    Pre,
    /// `PostToolUse`: after the call ran, with what it returned.
    Post { content: String, is_error: bool },
}

/// Where one call of the step is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallState {
    /// Not started (or answered without running: run protection).
    Waiting,
    /// [`TurnEffect::CheckCalls`] asked (answered at once).
    Checking,
    /// Its `PreToolUse` hooks run; `verdict` is the gateway's.
    PreHooks {
        verdict: Verdict,
        action: String,
        post_hooks: bool,
    },
    /// Waiting for the answer to its approval question.
    Approval {
        sandbox_if_allowed: SandboxPolicy,
        if_no_approver: Option<SandboxPolicy>,
        post_hooks: bool,
    },
    /// The tool runs (`tool_started` is written).
    Running { post_hooks: bool },
    /// Its `PostToolUse` hooks run on `result`.
    PostHooks {
        result: ToolMessage,
        duration_ms: u64,
    },
    /// Its result is recorded.
    Done,
}

impl CallState {
    /// Started, without a result yet (counts toward `MAX_PARALLEL`).
    pub(crate) fn in_flight(&self) -> bool {
        !matches!(self, Self::Waiting | Self::Done)
    }
}

/// Where a transition leaves a call.
enum Advance {
    /// `tool_started`, then run it under the sandbox.
    Run(usize, SandboxPolicy),
    /// Wait for the answer to this effect (hooks, a question).
    Wait(TurnEffect),
    /// Its result; `duration_ms` when it ran.
    Finished {
        index: usize,
        result: ToolMessage,
        duration_ms: Option<u64>,
    },
}

impl TurnMachine {
    /// The calls just started were checked.
    pub(super) fn calls_checked(&mut self, checks: Vec<(usize, CallCheck)>) {
        let Phase::Tools(run) = &mut self.phase else {
            return;
        };
        let mut advances = Vec::new();
        for (index, check) in checks {
            if run.state(index) != Some(&CallState::Checking) {
                continue;
            }
            let Some(call) = run.calls.get(index) else {
                continue;
            };
            advances.push(match check {
                CallCheck::Invalid(text) => Advance::Finished {
                    index,
                    result: error_result(call, text),
                    duration_ms: None,
                },
                CallCheck::Valid {
                    verdict,
                    pre_hooks: Some(action),
                    post_hooks,
                } => {
                    let state = CallState::PreHooks {
                        verdict,
                        action,
                        post_hooks,
                    };
                    run.set_state(index, state);
                    Advance::Wait(TurnEffect::RunToolHook {
                        index,
                        hook: ToolHook::Pre,
                    })
                }
                CallCheck::Valid {
                    verdict,
                    pre_hooks: None,
                    post_hooks,
                } => decide(run, index, verdict, post_hooks),
            });
        }
        self.advance(Vec::new(), advances);
    }

    /// The `PreToolUse` or `PostToolUse` hooks of call `index` answered.
    pub(super) fn tool_hook_answered(&mut self, index: usize, hooks: HookRun) {
        let HookRun { merged, events } = hooks;
        let run = match &mut self.phase {
            Phase::Tools(run) => run,
            Phase::Cancelling(inner) => {
                // The hooks ran: their `hook_ran` events are written; nothing goes on.
                if matches!(inner.as_ref(), Phase::Tools(run) if run.is_running(index)) {
                    self.write(events);
                }
                return;
            }
            _ => return,
        };
        let hooked =
            |s: &CallState| matches!(s, CallState::PreHooks { .. } | CallState::PostHooks { .. });
        let Some(state) = run.take_state(index, hooked) else {
            return;
        };
        let decision = merged.decision();
        let stop = (decision == HookDecision::Stop).then(|| merged.reason.clone());
        let advance = match state {
            CallState::PreHooks {
                verdict,
                action,
                post_hooks,
            } => {
                note(run, index, merged.context.iter().cloned());
                let verdict = tighten(verdict, &merged, || action);
                decide(run, index, verdict, post_hooks)
            }
            CallState::PostHooks {
                result,
                duration_ms,
            } => {
                if decision == HookDecision::Block {
                    let reason = merged.reason.clone().unwrap_or_default();
                    note(run, index, [format!("PostToolUse hook feedback: {reason}")]);
                }
                note(run, index, merged.context);
                Advance::Finished {
                    index,
                    result: with_notes(run, index, result),
                    duration_ms: Some(duration_ms),
                }
            }
            _ => return,
        };
        if let Some(reason) = stop {
            // A `continue: false`: the turn ends once this step's results are in.
            self.turn
                .hook_stop
                .get_or_insert_with(|| reason.unwrap_or_else(|| STOPPED_BY_HOOK.into()));
        }
        self.advance(events, vec![advance]);
    }

    /// The approval question of call `index` was answered.
    pub(super) fn approval_answered(&mut self, index: usize, answer: ApprovalAnswer) {
        let Phase::Tools(run) = &mut self.phase else {
            return;
        };
        let asked = |s: &CallState| matches!(s, CallState::Approval { .. });
        let Some(CallState::Approval {
            sandbox_if_allowed,
            if_no_approver,
            post_hooks,
        }) = run.take_state(index, asked)
        else {
            return;
        };
        // Nobody can answer: what the policy runs unasked runs as before the fallback
        // (Landlock alone keeps the protected paths shut).
        let fallback = if_no_approver.filter(|_| answer.message.as_deref() == Some(NO_APPROVER));
        let advance = match (answer.allowed, fallback) {
            (true, _) => run_under(run, index, sandbox_if_allowed, post_hooks),
            (false, Some(sandbox)) => run_under(run, index, sandbox, post_hooks),
            (false, None) => {
                let message = answer.message.unwrap_or_else(|| "denied".into());
                let result = error_result(&run.calls[index], message);
                Advance::Finished {
                    index,
                    result: with_notes(run, index, result),
                    duration_ms: None,
                }
            }
        };
        self.advance(Vec::new(), vec![advance]);
    }

    /// Call `index` ran (for `duration_ms`) and returned `result`.
    pub(super) fn tool_ran(&mut self, index: usize, result: ToolMessage, duration_ms: u64) {
        let running = |s: &CallState| matches!(s, CallState::Running { .. });
        match &mut self.phase {
            Phase::Tools(run) => {
                let Some(CallState::Running { post_hooks }) = run.take_state(index, running) else {
                    return;
                };
                let advance = if post_hooks {
                    let hook = ToolHook::Post {
                        content: result.content.clone(),
                        is_error: result.is_error,
                    };
                    run.set_state(
                        index,
                        CallState::PostHooks {
                            result,
                            duration_ms,
                        },
                    );
                    Advance::Wait(TurnEffect::RunToolHook { index, hook })
                } else {
                    Advance::Finished {
                        index,
                        result: with_notes(run, index, result),
                        duration_ms: Some(duration_ms),
                    }
                };
                self.advance(Vec::new(), vec![advance]);
            }
            Phase::Cancelling(inner) => {
                // Written without `tool_finished`; its `PostToolUse` hooks do not start
                // (the `Cancel` that follows writes "cancelled" for such a call).
                if let Phase::Tools(run) = inner.as_mut()
                    && run.state(index) == Some(&CallState::Running { post_hooks: false })
                {
                    let result = with_notes(run, index, result);
                    self.cancelling_result(index, result);
                }
            }
            _ => {}
        }
    }

    /// The ToolActor (or the hook task) of call `index` crashed: "tool crashed".
    pub(super) fn tool_crashed(&mut self, index: usize) {
        match &mut self.phase {
            Phase::Tools(run) if run.is_running(index) => {
                let Some(result) = run.crashed(index) else {
                    return;
                };
                let advance = Advance::Finished {
                    index,
                    result,
                    duration_ms: None,
                };
                self.advance(Vec::new(), vec![advance]);
            }
            Phase::Cancelling(inner) => {
                if let Phase::Tools(run) = inner.as_ref()
                    && run.is_running(index)
                    && let Some(result) = run.crashed(index)
                {
                    self.cancelling_result(index, result);
                }
            }
            _ => {}
        }
    }

    /// Records a result that arrived while the turn is cancelling and writes what
    /// became committable (without `tool_finished`).
    fn cancelling_result(&mut self, index: usize, result: ToolMessage) {
        let Phase::Cancelling(inner) = &mut self.phase else {
            return;
        };
        let Phase::Tools(run) = inner.as_mut() else {
            return;
        };
        run.record(index, result);
        let kinds = run
            .take_committable()
            .into_iter()
            .map(EventKind::ToolMessage)
            .collect();
        self.write(kinds);
    }

    /// Carries out `advances`: `events` (hook runs), the `tool_started` of the calls
    /// that run now, the results that became committable (in call order), then the
    /// effects that run or wait, then the calls that may start next.
    fn advance(&mut self, events: Vec<EventKind>, advances: Vec<Advance>) {
        let Phase::Tools(run) = &mut self.phase else {
            return;
        };
        let mut kinds = events;
        let mut effects = Vec::new();
        let mut finished = Vec::new();
        for advance in advances {
            match advance {
                Advance::Run(index, sandbox) => {
                    if let Some(call) = run.calls.get(index) {
                        kinds.push(EventKind::ToolStarted {
                            tool_call_id: call.id.clone(),
                            name: call.name.clone(),
                        });
                        effects.push(TurnEffect::RunTool { index, sandbox });
                    }
                }
                Advance::Wait(effect) => effects.push(effect),
                Advance::Finished {
                    index,
                    result,
                    duration_ms,
                } => {
                    finished.extend(duration_ms.map(|duration_ms| EventKind::ToolFinished {
                        tool_call_id: result.tool_call_id.clone(),
                        is_error: result.is_error,
                        duration_ms,
                    }));
                    run.record(index, result);
                }
            }
        }
        self.write(kinds);
        self.commit_tools(finished);
        for effect in effects {
            self.emit(effect);
        }
        self.start_tools();
    }
}

/// What `verdict` comes to for call `index` (after its `PreToolUse` hooks, if any).
fn decide(
    run: &mut super::run::ToolRun,
    index: usize,
    verdict: Verdict,
    post_hooks: bool,
) -> Advance {
    match verdict {
        Verdict::Allow { sandbox } => run_under(run, index, sandbox, post_hooks),
        Verdict::Deny { reason } => {
            // `index` has a state, so a call.
            let result = error_result(&run.calls[index], reason);
            Advance::Finished {
                index,
                result: with_notes(run, index, result),
                duration_ms: None,
            }
        }
        Verdict::Ask {
            action,
            reason,
            grant_key,
            sandbox_if_allowed,
            if_no_approver,
        } => {
            run.set_state(
                index,
                CallState::Approval {
                    sandbox_if_allowed,
                    if_no_approver,
                    post_hooks,
                },
            );
            Advance::Wait(TurnEffect::AskApproval {
                index,
                action,
                reason,
                grant_key,
            })
        }
    }
}

/// Call `index` runs under `sandbox`.
fn run_under(
    run: &mut super::run::ToolRun,
    index: usize,
    sandbox: SandboxPolicy,
    post_hooks: bool,
) -> Advance {
    run.set_state(index, CallState::Running { post_hooks });
    Advance::Run(index, sandbox)
}

/// Keeps what call `index`'s hooks said for the model.
fn note(run: &mut super::run::ToolRun, index: usize, notes: impl IntoIterator<Item = String>) {
    if let Some(kept) = run.notes.get_mut(index) {
        kept.extend(notes);
    }
}

/// `result` with what call `index`'s hooks said for the model, each as a `[hook]` line.
fn with_notes(run: &mut super::run::ToolRun, index: usize, mut result: ToolMessage) -> ToolMessage {
    let notes = run
        .notes
        .get_mut(index)
        .map(std::mem::take)
        .unwrap_or_default();
    for note in notes {
        result.content = format!("{}\n\n[hook] {note}", result.content);
    }
    result
}

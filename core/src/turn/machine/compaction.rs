//! Compaction rules of the turn machine (phase `Compacting`; the session is busy
//! meanwhile, so inputs queue): `PreCompact` hooks, `compaction_started{trigger,
//! tokens_before}`, a summarisation request without tools, then
//! `compaction_checkpoint{summary, covers_up_to, tokens_before, tokens_after, kept}` and
//! the step's request (a manual `/compact` ends its turn instead).
//!
//! Bounds: a summarisation request that overflows is retried with half the input budget
//! (oldest messages dropped first), at most [`MAX_COMPACTION_ATTEMPTS`] requests; any
//! other failure, an empty summary, or a checkpoint that saves less than
//! [`MIN_SAVING_PCT`] % of the estimated input ends the turn `failed` with reason
//! `compaction_failed` / `compaction_ineffective` (class `context_overflow`) — never a
//! loop. Cancel stops the request like any other; the log then holds a
//! `compaction_started` without checkpoint, which the history fold ignores.

use super::{HookPoint, Phase, TurnEffect, TurnInput, TurnMachine, TurnStatus};
use foya_protocol::{ErrorClass, EventKind, ProviderError};

/// Most summarisation requests of one compaction.
pub(crate) const MAX_COMPACTION_ATTEMPTS: u32 = 3;
/// Least saving, in percent of the estimated input, for a checkpoint to be kept.
pub(crate) const MIN_SAVING_PCT: u64 = 10;
/// `turn_complete` reason of a `/compact` that had nothing to do (completed, no
/// checkpoint); a detail follows after `: ` when there was history.
pub(crate) const NOTHING_TO_COMPACT: &str = "nothing to compact";

/// Why a compaction runs (the `trigger` of `compaction_started`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The estimate crossed the threshold before a step.
    Threshold,
    /// `/compact`.
    Manual,
    /// The provider reported `context_overflow`.
    Overflow,
}

impl Trigger {
    /// The persisted name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Threshold => "threshold",
            Self::Manual => "manual",
            Self::Overflow => "overflow",
        }
    }
}

/// The committed log measured for a compaction.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// The calibrated estimate of the whole input now.
    pub tokens_before: u64,
    /// The history section's estimate.
    pub history_tokens: u64,
    /// All sections' estimate.
    pub raw_total: u64,
    /// No history to summarise.
    pub empty_history: bool,
    /// Input budget of the summarisation request.
    pub budget: u64,
}

/// A compaction in progress.
#[derive(Debug)]
pub struct Compaction {
    trigger: Trigger,
    stage: Stage,
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    /// `PreCompact` hooks run.
    Hooks,
    /// The log is being measured.
    Preparing,
    /// Summarisation request `request` (attempt `attempt`) streams.
    Summarising {
        request: u64,
        attempt: u32,
        budget: u64,
        tokens_before: u64,
        history_tokens: u64,
    },
    /// The checkpoint is being built.
    Checkpointing { tokens_before: u64 },
}

impl Compaction {
    /// What stops this compaction's work on a cancel.
    pub(super) fn stop_effect(&self) -> TurnEffect {
        match self.stage {
            Stage::Hooks => TurnEffect::StopHooks,
            Stage::Preparing | Stage::Summarising { .. } | Stage::Checkpointing { .. } => {
                TurnEffect::StopStream
            }
        }
    }
}

impl TurnMachine {
    /// Starts a compaction of the committed log.
    pub(super) fn begin_compaction(&mut self, trigger: Trigger) {
        self.step.compacted = true;
        let hooks = match trigger {
            Trigger::Manual => self.config.hooks.pre_compact_manual,
            Trigger::Threshold | Trigger::Overflow => self.config.hooks.pre_compact_auto,
        };
        let stage = if hooks {
            self.run_hooks(HookPoint::PreCompact(trigger));
            Stage::Hooks
        } else {
            self.emit(TurnEffect::PrepareCompaction(trigger));
            Stage::Preparing
        };
        self.phase = Phase::Compacting(Compaction { trigger, stage });
    }

    /// Inputs of phase `Compacting`.
    pub(super) fn on_compaction(&mut self, input: TurnInput) {
        let Phase::Compacting(c) = std::mem::replace(&mut self.phase, Phase::Done) else {
            return;
        };
        let trigger = c.trigger;
        let stay = |stage| Phase::Compacting(Compaction { trigger, stage });
        match (c.stage, input) {
            (Stage::Hooks, TurnInput::HooksAnswered(run)) => {
                self.phase = stay(Stage::Preparing);
                self.write(run.events);
                self.emit(TurnEffect::PrepareCompaction(trigger));
            }
            (Stage::Preparing, TurnInput::CompactionPrepared(p)) => {
                self.phase = Phase::Compacting(c);
                self.prepared(trigger, &p);
            }
            (
                Stage::Summarising {
                    request,
                    attempt,
                    budget,
                    tokens_before,
                    history_tokens,
                },
                TurnInput::StreamEnded {
                    request: ended,
                    outcome,
                },
            ) if request == ended => match outcome {
                super::StreamOutcome::Failed(error)
                    if error.class == ErrorClass::ContextOverflow
                        && attempt < MAX_COMPACTION_ATTEMPTS =>
                {
                    self.turn.request += 1;
                    let (request, budget) = (self.turn.request, budget / 2);
                    self.phase = stay(Stage::Summarising {
                        request,
                        attempt: attempt + 1,
                        budget,
                        tokens_before,
                        history_tokens,
                    });
                    self.emit(TurnEffect::StartSummary {
                        request,
                        budget,
                        trigger,
                    });
                }
                super::StreamOutcome::Failed(error) => self.summary_failed(trigger, &error),
                super::StreamOutcome::Done { message, .. } => {
                    let summary = message.text.trim().to_owned();
                    if summary.is_empty() {
                        let message = "the model returned an empty summary".to_owned();
                        return self.compaction_failed(
                            trigger,
                            "compaction_failed",
                            ErrorClass::ContextOverflow,
                            message,
                        );
                    }
                    self.phase = stay(Stage::Checkpointing { tokens_before });
                    self.emit(TurnEffect::BuildCheckpoint {
                        summary,
                        history_tokens,
                        tokens_before,
                        trigger,
                    });
                }
            },
            (
                Stage::Checkpointing { tokens_before },
                TurnInput::CheckpointBuilt {
                    checkpoint,
                    tokens_after,
                },
            ) => self.checkpoint_built(trigger, tokens_before, checkpoint, tokens_after),
            _ => self.phase = Phase::Compacting(c),
        }
    }

    /// The log is measured: summarise, or say why not.
    fn prepared(&mut self, trigger: Trigger, p: &super::compaction::Prepared) {
        if p.empty_history
            || !super::super::can_shrink(p.raw_total, p.history_tokens, MIN_SAVING_PCT)
        {
            let note = if p.empty_history {
                NOTHING_TO_COMPACT.to_owned()
            } else {
                format!(
                    "{NOTHING_TO_COMPACT}: the history ({} of {} estimated tokens) is too \
                     short for a summary to shrink the context",
                    p.history_tokens, p.raw_total
                )
            };
            return self.cannot_compact(trigger, note);
        }
        self.write(vec![EventKind::CompactionStarted {
            trigger: trigger.as_str().into(),
            tokens_before: p.tokens_before,
        }]);
        self.turn.request += 1;
        let request = self.turn.request;
        if let Phase::Compacting(c) = &mut self.phase {
            c.stage = Stage::Summarising {
                request,
                attempt: 1,
                budget: p.budget,
                tokens_before: p.tokens_before,
                history_tokens: p.history_tokens,
            };
        }
        self.emit(TurnEffect::StartSummary {
            request,
            budget: p.budget,
            trigger,
        });
    }

    /// The summarisation request failed (not an overflow with attempts left).
    fn summary_failed(&mut self, trigger: Trigger, error: &ProviderError) {
        let message = format!("the compaction request failed: {}", error.message);
        let class = match error.class {
            ErrorClass::ContextOverflow => ErrorClass::ContextOverflow,
            other if trigger == Trigger::Manual => other,
            _ => ErrorClass::ContextOverflow,
        };
        self.compaction_failed(trigger, "compaction_failed", class, message);
    }

    /// Keeps the checkpoint when it saves enough, then re-runs the step (or ends a
    /// manual compaction's turn).
    fn checkpoint_built(
        &mut self,
        trigger: Trigger,
        tokens_before: u64,
        mut checkpoint: EventKind,
        tokens_after: u64,
    ) {
        if tokens_after * 100 > tokens_before * (100 - MIN_SAVING_PCT) {
            let message = if tokens_after >= tokens_before {
                format!(
                    "compaction would grow the context from {tokens_before} to {tokens_after} \
                     estimated tokens instead of shrinking it (the summary and the messages \
                     it keeps are larger than the history they replace)"
                )
            } else {
                format!(
                    "compaction would reduce the context only from {tokens_before} to \
                     {tokens_after} estimated tokens (less than {MIN_SAVING_PCT} %)"
                )
            };
            return self.compaction_failed(
                trigger,
                "compaction_ineffective",
                ErrorClass::ContextOverflow,
                message,
            );
        }
        if let EventKind::CompactionCheckpoint {
            tokens_before: before,
            tokens_after: after,
            ..
        } = &mut checkpoint
        {
            *before = tokens_before;
            *after = tokens_after;
        }
        self.write(vec![checkpoint]);
        if trigger == Trigger::Manual {
            return self.finish(TurnStatus::Completed, None, None);
        }
        self.step.attempt = 1;
        self.compile_again();
    }

    /// Compaction is impossible or pointless: `/compact` is a no-op that says so, a
    /// threshold compaction gives way to sending the request (the provider judges
    /// whether it fits), an overflow fails.
    fn cannot_compact(&mut self, trigger: Trigger, note: String) {
        match trigger {
            Trigger::Manual => self.finish(TurnStatus::Completed, Some(note), None),
            Trigger::Threshold => self.compile_again(),
            Trigger::Overflow => {
                let message = format!("the context is too large and cannot be compacted ({note})");
                self.compaction_failed(
                    trigger,
                    "compaction_ineffective",
                    ErrorClass::ContextOverflow,
                    message,
                );
            }
        }
    }

    /// The compaction failed: a threshold compaction sends the request uncompacted, a
    /// `/compact` that would save too little is a no-op, anything else ends the turn
    /// `failed` with `reason` and `class`.
    fn compaction_failed(
        &mut self,
        trigger: Trigger,
        reason: &str,
        class: ErrorClass,
        message: String,
    ) {
        match trigger {
            Trigger::Threshold => self.compile_again(),
            Trigger::Manual if reason == "compaction_ineffective" => {
                let note = format!("{NOTHING_TO_COMPACT}: {message}");
                self.finish(TurnStatus::Completed, Some(note), None);
            }
            Trigger::Manual | Trigger::Overflow => self.fail_with(reason, class, message),
        }
    }

    /// The step's request, compiled again (after a checkpoint, or uncompacted).
    fn compile_again(&mut self) {
        self.step.compacted = true;
        self.phase = Phase::Compiling;
        self.emit(TurnEffect::CompileContext {
            refresh_tools: false,
        });
    }
}

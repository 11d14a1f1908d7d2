//! Inputs and turns: submit (queue or start), the FIFO queue, opening a turn (commands
//! that complete at once), the turn's appends, its end (closed when it has no
//! `turn_complete`) and recovery on load.

use super::*;

impl SessionMachine {
    pub(super) fn submit(
        &mut self,
        input_id: InputId,
        input: Input,
        model_takes_images: bool,
        fx: &mut Effects,
    ) {
        let refused = if input.is_empty() {
            Some(Refusal::EmptyInput)
        } else if !input.images.is_empty() && !model_takes_images {
            // Never in the history, where every later request would fail on it.
            Some(Refusal::ImagesNotSupported {
                model: self.fold.config.model.clone(),
            })
        } else {
            match self.phase {
                Phase::Deleting(_) | Phase::Deleted => Some(Refusal::SessionDeleted(self.fold.id)),
                Phase::ShuttingDown(_) => Some(Refusal::ShuttingDown),
                Phase::Idle | Phase::Turn(_) => None,
            }
        };
        if let Some(error) = refused {
            return fx.push(Effect::Reply(Answer::Submitted(Err(error))));
        }
        if self.fold.seen_inputs.contains(&input_id) {
            return fx.push(Effect::Reply(Answer::Submitted(Ok(input_id))));
        }
        if self.phase == Phase::Idle
            && self.fold.open_turn.is_none()
            && self.fold.queue.is_empty()
            && !self.draining
        {
            self.waiting = Some(Waiting::Prepared { answer: true });
            return fx.push(Effect::PrepareInput { input_id, input });
        }
        let kind = EventKind::InputQueued { input_id, input };
        self.append(None, vec![kind], AfterCommit::Queued { input_id }, fx);
    }

    /// Starts the next queued input when idle.
    pub(super) fn start_next(&mut self, fx: &mut Effects) {
        if self.phase != Phase::Idle || self.fold.open_turn.is_some() {
            return;
        }
        if self.draining {
            // Handed off: what is queued stays in the log for the next owner.
            return fx.push(Effect::AnswerDrained);
        }
        match self.fold.queue.front() {
            Some((input_id, input)) => {
                let (input_id, input) = (*input_id, input.clone());
                self.waiting = Some(Waiting::Prepared { answer: false });
                fx.push(Effect::PrepareInput { input_id, input });
            }
            None => {
                self.cancel_next = false;
                fx.push(Effect::WentIdle);
            }
        }
    }

    /// The input is expanded: write `user_message` + `turn_started` (and the whole turn
    /// for a command that completes at once).
    pub(super) fn prepared(
        &mut self,
        input_id: InputId,
        input: Input,
        plan: Plan,
        fx: &mut Effects,
    ) {
        let answer = matches!(
            self.waiting.take(),
            Some(Waiting::Prepared { answer: true })
        );
        let run_id = RunId::new();
        let text = input.text.clone();
        let mut kinds = vec![
            EventKind::UserMessage { input_id, input },
            EventKind::TurnStarted { input_id },
        ];
        let then = match plan {
            Plan::Model => Opened::Turn {
                mode: TurnMode::Model,
                text,
            },
            Plan::Compact => Opened::Turn {
                mode: TurnMode::Compact,
                text,
            },
            Plan::SetTitle(title) => {
                kinds.push(EventKind::TitleSet {
                    title,
                    source: TitleSource::User,
                });
                kinds.push(completed(TurnStatus::Completed, None, None));
                Opened::Completed
            }
            Plan::GenerateTitle => {
                kinds.push(completed(TurnStatus::Completed, None, None));
                Opened::GenerateTitle
            }
            Plan::Unknown(message) => {
                let error = ErrorInfo {
                    class: ErrorClass::InvalidRequest,
                    message,
                };
                let reason = Some("unknown_command".to_owned());
                kinds.push(completed(TurnStatus::Failed, reason, Some(error)));
                Opened::Completed
            }
        };
        let then = AfterCommit::Opened {
            input_id,
            run_id,
            answer,
            then,
        };
        self.append(Some(run_id), kinds, then, fx);
    }

    pub(super) fn opened(
        &mut self,
        input_id: InputId,
        run_id: RunId,
        answer: bool,
        then: Opened,
        fx: &mut Effects,
    ) {
        match then {
            Opened::Turn { mode, text } => {
                if self.settings.generate_titles
                    && self.fold.title.is_none()
                    && !self.title_requested
                    && !text.trim().is_empty()
                {
                    self.title_requested = true;
                    fx.push(Effect::StartTitle {
                        text: TitleText::Input(text),
                        expected: None,
                    });
                }
                self.phase = Phase::Turn(ActiveTurn {
                    run_id,
                    stage: TurnStage::Running,
                });
                let first_in_runtime = !std::mem::replace(&mut self.hooks_started, true);
                fx.push(Effect::StartTurn {
                    run_id,
                    mode,
                    first_in_runtime,
                });
                if std::mem::take(&mut self.cancel_next) {
                    self.cancel_turn("user", fx);
                }
                if answer {
                    fx.push(Effect::Reply(Answer::Submitted(Ok(input_id))));
                }
            }
            Opened::Completed | Opened::GenerateTitle => {
                // A command completes at once: a cancel meant for it has nothing to stop.
                self.cancel_next = false;
                if matches!(then, Opened::GenerateTitle) && self.fold.has_user_text {
                    self.title_requested = true;
                    fx.push(Effect::StartTitle {
                        text: TitleText::FirstUserMessage,
                        expected: self.fold.title.clone(),
                    });
                }
                if answer {
                    fx.push(Effect::Reply(Answer::Submitted(Ok(input_id))));
                }
                // A command turn completed at once: go on with the queue.
                self.start_next(fx);
            }
        }
    }

    /// A caller's cancel: the running turn's; with no turn running (the last one has
    /// written its `turn_complete`) but an input about to start, that input's turn — it
    /// is cancelled as it starts. Otherwise nothing.
    pub(super) fn cancel(&mut self, fx: &mut Effects) {
        let running = matches!(self.phase, Phase::Turn(_)) && self.fold.open_turn.is_some();
        let next = !self.fold.queue.is_empty()
            || matches!(
                self.waiting,
                Some(Waiting::Prepared { .. } | Waiting::Commit(AfterCommit::Opened { .. }))
            );
        if !running && next && matches!(self.phase, Phase::Idle | Phase::Turn(_)) {
            self.cancel_next = true;
        } else {
            self.cancel_turn("user", fx);
        }
    }

    pub(super) fn cancel_turn(&mut self, reason: &'static str, fx: &mut Effects) {
        if let Some(turn) = self.turn_mut() {
            if !matches!(turn.stage, TurnStage::StorageFailed(_)) {
                turn.stage = TurnStage::Cancelling;
            }
            fx.push(Effect::CancelTurn { reason });
        }
    }

    /// `input_dropped` for every queued input.
    pub(super) fn drop_queue(&self, reason: &str) -> Vec<EventKind> {
        self.fold
            .queue
            .iter()
            .map(|(input_id, _)| EventKind::InputDropped {
                input_id: *input_id,
                reason: reason.to_owned(),
            })
            .collect()
    }

    pub(super) fn turn_append(
        &mut self,
        run_id: RunId,
        mut kinds: Vec<EventKind>,
        fx: &mut Effects,
    ) {
        let stage = match &self.phase {
            Phase::Turn(turn) | Phase::ShuttingDown(Some(turn)) | Phase::Deleting(Some(turn)) => {
                Some(&turn.stage)
            }
            _ => None,
        };
        // Once a cancel is asked, tool activity is no longer recorded: the turn writes
        // the calls' "cancelled" results and its end. An append that holds other events
        // too (a step's events with the `tool_started` of the calls it starts at once)
        // keeps those and drops the activity.
        let cancelling = matches!(
            stage,
            Some(TurnStage::Cancelling | TurnStage::StorageFailed(_))
        );
        if cancelling && !kinds.iter().all(is_tool_activity) {
            kinds.retain(|k| !is_tool_activity(k));
        }
        let refused = if cancelling && kinds.iter().any(is_tool_activity) {
            Some(AppendRefused::Cancelling)
        } else if let Some(TurnStage::StorageFailed(failure)) = stage {
            Some(AppendRefused::TurnStorageFailed(failure.clone()))
        } else if self.open_run() != Some(run_id) {
            Some(AppendRefused::NotOpen(run_id))
        } else {
            None
        };
        match refused {
            Some(error) => fx.push(Effect::Reply(Answer::Appended(Err(error)))),
            None => self.append(Some(run_id), kinds, AfterCommit::TurnEvents, fx),
        }
    }

    /// The TurnActor exited: close the turn if it has no `turn_complete`, then go on.
    pub(super) fn turn_ended(&mut self, failure: Option<String>, fx: &mut Effects) {
        let stage = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Turn(turn) => Some(turn.stage),
            Phase::ShuttingDown(turn) => {
                self.phase = Phase::ShuttingDown(None);
                turn.map(|t| t.stage)
            }
            Phase::Deleting(turn) => {
                self.phase = Phase::Deleting(None);
                turn.map(|t| t.stage)
            }
            phase @ (Phase::Idle | Phase::Deleted) => {
                self.phase = phase;
                return;
            }
        };
        self.approvals.clear();
        fx.push(Effect::DropApprovals);
        let (result, reason, error) = match stage {
            Some(TurnStage::StorageFailed(message)) => (
                STORAGE_RESULT,
                ErrorClass::Storage.as_str(),
                ErrorInfo {
                    class: ErrorClass::Storage,
                    message,
                },
            ),
            _ => (
                CRASHED_RESULT,
                "turn crashed",
                ErrorInfo {
                    class: ErrorClass::Internal,
                    message: failure
                        .unwrap_or_else(|| "the turn stopped without completing".into()),
                },
            ),
        };
        self.close_open_turn(result, reason, error, AfterCommit::TurnClosed, fx);
    }

    /// Closes an open turn that has no `turn_complete`: results for unanswered calls,
    /// then `turn_complete{failed}`.
    pub(super) fn close_open_turn(
        &mut self,
        result: &str,
        reason: &str,
        error: ErrorInfo,
        then: AfterCommit,
        fx: &mut Effects,
    ) {
        let Some(run_id) = self.open_run() else {
            return self.after_commit(then, fx);
        };
        let mut kinds: Vec<EventKind> = self
            .fold
            .unanswered_results(result)
            .into_iter()
            .map(EventKind::ToolMessage)
            .collect();
        kinds.push(completed(
            TurnStatus::Failed,
            Some(reason.to_owned()),
            Some(error),
        ));
        self.append(Some(run_id), kinds, then, fx);
    }

    /// After a turn's end: finish a delete or a shutdown, or run the queue.
    pub(super) fn after_turn(&mut self, fx: &mut Effects) {
        match self.phase {
            Phase::Deleting(None) => self.finish_delete(fx),
            Phase::ShuttingDown(None) => self.session_end(fx),
            _ => self.start_next(fx),
        }
    }

    pub(super) fn loaded(&mut self, fx: &mut Effects) {
        let error = ErrorInfo {
            class: ErrorClass::Internal,
            message: "the runtime stopped while this turn ran".into(),
        };
        let reason = "interrupted by restart";
        self.close_open_turn(OUTCOME_UNKNOWN, reason, error, AfterCommit::Recovered, fx);
    }
}

/// Events a ToolActor writes while its call runs (`tool_finished` is the TurnActor's,
/// appended with the call's result).
fn is_tool_activity(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::ToolStarted { .. }
            | EventKind::ToolUpdate { .. }
            | EventKind::ApprovalRequested { .. }
    )
}

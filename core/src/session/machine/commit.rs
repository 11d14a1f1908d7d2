//! The commit protocol: an append asks the driver for one store commit, and what
//! follows it is decided once the machine knows whether it committed.

use super::*;

impl SessionMachine {
    /// Asks for an append of `kinds` (none: `then` runs at once, as if committed).
    pub(super) fn append(
        &mut self,
        run_id: Option<RunId>,
        kinds: Vec<EventKind>,
        then: AfterCommit,
        fx: &mut Effects,
    ) {
        if kinds.is_empty() {
            return self.after_commit(then, fx);
        }
        // Never before the session's previous event, whatever the wall clock did.
        let at_ms = self.now_ms.max(self.fold.last_at_ms);
        let mut seq = self.fold.last_seq;
        let events = kinds
            .into_iter()
            .map(|kind| {
                seq += 1;
                Event {
                    session_id: self.fold.id,
                    seq: Seq(seq),
                    run_id,
                    at_ms,
                    kind,
                }
            })
            .collect();
        self.waiting = Some(Waiting::Commit(then));
        fx.push(Effect::Append(events));
    }

    pub(super) fn committed(&mut self, events: Vec<Event>, fx: &mut Effects) {
        let Some(Waiting::Commit(then)) = self.waiting.take() else {
            return fx.push(Effect::Fail("a commit nobody waited for".into()));
        };
        for event in &events {
            apply(&mut self.fold, event);
            self.track_stage(event);
        }
        if self.fold.deleted {
            self.phase = Phase::Deleted;
        }
        fx.push(Effect::Publish(events));
        self.after_commit(then, fx);
    }

    /// Follows what the running turn does (compaction) from its committed events.
    pub(super) fn track_stage(&mut self, event: &Event) {
        let Some(turn) = self.turn_mut() else {
            return;
        };
        if event.run_id != Some(turn.run_id) {
            return;
        }
        let stage = match (&turn.stage, &event.kind) {
            (TurnStage::Running, EventKind::CompactionStarted { .. }) => TurnStage::Compacting,
            (
                TurnStage::Compacting,
                EventKind::CompactionCheckpoint { .. }
                | EventKind::StepStarted { .. }
                | EventKind::TurnComplete { .. },
            ) => TurnStage::Running,
            _ => return,
        };
        turn.stage = stage;
    }

    pub(super) fn after_commit(&mut self, then: AfterCommit, fx: &mut Effects) {
        match then {
            AfterCommit::Queued { input_id } => {
                fx.push(Effect::Reply(Answer::Submitted(Ok(input_id))));
                self.start_next(fx);
            }
            AfterCommit::Opened {
                input_id,
                run_id,
                answer,
                then,
            } => self.opened(input_id, run_id, answer, then, fx),
            AfterCommit::TurnEvents => fx.push(Effect::Reply(Answer::Appended(Ok(())))),
            AfterCommit::ApprovalAsked { request_id, parked } => match parked {
                Some(pending) => {
                    self.approvals.insert(request_id, *pending);
                }
                None => fx.push(Effect::AnswerApproval {
                    request_id,
                    answer: ApprovalAnswer {
                        allowed: false,
                        message: Some(NO_APPROVER.into()),
                    },
                }),
            },
            AfterCommit::ApprovalDecided { request_id, answer } => {
                fx.push(Effect::AnswerApproval { request_id, answer });
                fx.push(Effect::Reply(Answer::Done(Ok(()))));
            }
            AfterCommit::Answered => fx.push(Effect::Reply(Answer::Done(Ok(())))),
            AfterCommit::TitleApplied => fx.push(Effect::Reply(Answer::TitleApplied(true))),
            AfterCommit::TurnClosed => self.after_turn(fx),
            AfterCommit::Recovered => {
                let kinds = if self.settings.queued_on_restart == QueuedOnRestart::Drop {
                    self.drop_queue(DROPPED_ON_RESTART)
                } else {
                    Vec::new()
                };
                self.append(None, kinds, AfterCommit::QueueDropped, fx);
            }
            AfterCommit::QueueDropped => self.start_next(fx),
            AfterCommit::HooksRecorded => fx.push(Effect::AnswerShutdown),
            AfterCommit::Deleted => {
                fx.push(Effect::ForgetTranscript);
                self.close_deleted(Ok(()), fx);
            }
        }
    }

    pub(super) fn commit_failed(&mut self, message: String, fx: &mut Effects) {
        let Some(Waiting::Commit(then)) = self.waiting.take() else {
            return fx.push(Effect::Fail("a commit failure nobody waited for".into()));
        };
        let error = Refusal::Storage(message.clone());
        match then {
            // Nothing was written: the caller learns it, the session stays as it was.
            AfterCommit::Queued { .. } => fx.push(Effect::Reply(Answer::Submitted(Err(error)))),
            AfterCommit::Opened { answer: true, .. } => {
                fx.push(Effect::Reply(Answer::Submitted(Err(error))));
            }
            AfterCommit::TurnEvents => {
                let refused = AppendRefused::Storage(message.clone());
                if let Some(turn) = self.turn_mut() {
                    turn.stage = TurnStage::StorageFailed(message);
                    fx.push(Effect::StopTurn);
                }
                fx.push(Effect::Reply(Answer::Appended(Err(refused))));
            }
            AfterCommit::ApprovalDecided { request_id, .. } => {
                fx.push(Effect::DropApproval { request_id });
                fx.push(Effect::Reply(Answer::Done(Err(error))));
            }
            AfterCommit::Answered => fx.push(Effect::Reply(Answer::Done(Err(error)))),
            // Recorded on a best-effort basis: the shutdown goes on.
            AfterCommit::HooksRecorded => fx.push(Effect::AnswerShutdown),
            AfterCommit::Deleted => self.close_deleted(Err(error), fx),
            // The session's own bookkeeping: it cannot go on without it; restarted from
            // the log, it recovers.
            AfterCommit::Opened { answer: false, .. }
            | AfterCommit::ApprovalAsked { .. }
            | AfterCommit::TitleApplied
            | AfterCommit::TurnClosed
            | AfterCommit::Recovered
            | AfterCommit::QueueDropped => fx.push(Effect::Fail(error.to_string())),
        }
    }
}

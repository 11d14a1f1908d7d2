//! The session's end: delete (after the turn, if one runs, was cancelled and ended)
//! and the runtime's shutdown (no more inputs; `SessionEnd` hooks; waiters answered).

use super::*;

impl SessionMachine {
    pub(super) fn delete(&mut self, fx: &mut Effects) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Turn(turn) | Phase::ShuttingDown(Some(turn)) | Phase::Deleting(Some(turn)) => {
                Phase::Deleting(Some(turn))
            }
            Phase::Idle | Phase::ShuttingDown(None) | Phase::Deleting(None) => {
                Phase::Deleting(None)
            }
            Phase::Deleted => Phase::Deleted,
        };
        if self.turn_mut().is_some() {
            self.cancel_turn(DELETED_REASON, fx);
        } else {
            self.finish_delete(fx);
        }
    }

    pub(super) fn finish_delete(&mut self, fx: &mut Effects) {
        let mut kinds = self.drop_queue(DELETED_REASON);
        kinds.push(EventKind::SessionDeleted {});
        self.append(None, kinds, AfterCommit::Deleted, fx);
    }

    /// Whatever the commit did, the deleted session closes and stops (a failed delete
    /// is loaded again from its log on the next call).
    pub(super) fn close_deleted(&mut self, result: Result<(), Refusal>, fx: &mut Effects) {
        fx.push(Effect::CloseSubscribers {
            reason: DELETED_REASON,
        });
        fx.push(Effect::AnswerDelete(result));
        fx.push(Effect::Stop {
            reason: DELETED_REASON,
        });
    }

    pub(super) fn shutdown(&mut self, cause: StopCause, fx: &mut Effects) {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Turn(turn) | Phase::ShuttingDown(Some(turn)) => {
                self.phase = Phase::ShuttingDown(Some(turn));
                self.cancel_turn(cause.reason(), fx);
            }
            Phase::Idle | Phase::ShuttingDown(None) => {
                self.phase = Phase::ShuttingDown(None);
                self.session_end(fx);
            }
            // Delete wins: it stops the session once the turn ended.
            phase @ (Phase::Deleting(_) | Phase::Deleted) => {
                self.phase = phase;
                self.cancel_turn(cause.reason(), fx);
            }
        }
    }

    /// A handoff's first half: nothing starts from the queue any more; answered once no
    /// turn runs (at once when none does).
    pub(super) fn drain(&mut self, fx: &mut Effects) {
        self.draining = true;
        if self.turn_mut().is_none() && self.fold.open_turn.is_none() {
            fx.push(Effect::AnswerDrained);
        }
    }

    /// The shutdown's end: the `SessionEnd` hooks (once, and only when a turn of this
    /// top-level session ran in this runtime), then the waiters are answered.
    pub(super) fn session_end(&mut self, fx: &mut Effects) {
        if std::mem::take(&mut self.hooks_started) && self.fold.config.parent.is_none() {
            self.waiting = Some(Waiting::Hooks);
            fx.push(Effect::RunSessionEndHooks);
        } else {
            fx.push(Effect::AnswerShutdown);
        }
    }
}

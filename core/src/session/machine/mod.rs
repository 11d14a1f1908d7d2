//! The session machine: every rule of a session, without I/O.
//!
//! [`SessionMachine::on`] takes what happened ([`SessionInput`]) and returns what must
//! be done ([`Effect`]s); the SessionActor (`actor.rs`) carries the effects out (store
//! appends, subscriber channels, the TurnActor and TitleActor, replies) and feeds their
//! results back. No tokio, ractor, redb or reqwest here.
//!
//! The protocol with the driver: an [`Effect::Append`] is always the last effect of its
//! batch, and the driver answers it with [`SessionInput::Committed`] or
//! [`SessionInput::CommitFailed`] before anything else; [`Effect::PrepareInput`] is
//! answered with [`SessionInput::InputPrepared`] and [`Effect::RunSessionEndHooks`] with
//! [`SessionInput::SessionEndHooksRan`] the same way. So an append of the session is
//! one store commit, awaited in order, and what follows it is decided by the machine
//! once it is known whether the commit succeeded.
//!
//! Rules (the `Phase` says where the session is):
//! - one turn at a time; an input arriving while busy (or while inputs wait) is
//!   persisted as `input_queued` and starts after the `turn_complete` of the turns
//!   before it (FIFO); an input id is applied once;
//! - seqs are dense and assigned here; nothing is written for a run after its
//!   `turn_complete` (late appends are refused); once a cancel is asked, a ToolActor's
//!   activity (`tool_started`, `tool_update`, `approval_requested`) is no longer
//!   recorded;
//! - a TurnActor that exits without `turn_complete` is closed `failed` (class
//!   internal, or storage after a failed append of the turn) and the queue goes on;
//! - on load, an unfinished turn is closed ("outcome unknown" results, then
//!   `turn_complete{failed, "interrupted by restart"}`) and the queued inputs run or
//!   are dropped per [`QueuedOnRestart`];
//! - approvals: a grant answers at once; without an approver the request waits or is
//!   denied per [`WithoutApprover`]; the decision is persisted before the call hears it;
//! - titles: generated once per session actor for the first input when enabled and no
//!   title exists; a generated title lands only if the title did not change meanwhile;
//! - hibernation: only when idle (no turn, nothing queued, no approval waiting) and
//!   unwatched.

use super::state::{SessionState, apply};
use super::{
    AppendRefused, ApprovalAnswer, ApprovalRequest, Plan, QueuedOnRestart, Refusal, StopCause,
    WithoutApprover,
};
use crate::turn::TurnMode;
use foya_protocol::event::Delta;
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, ErrorClass, ErrorInfo, Event, EventKind, Input, InputId,
    RunId, Seq, TitleSource, ToolCallId, TurnStatus,
};
use smallvec::SmallVec;
use std::collections::BTreeMap;

mod approvals;
mod commit;
mod ending;
mod io;
#[cfg(test)]
mod tests;
mod turns;

use approvals::PendingApproval;
pub use io::{Answer, Effect, Effects, SessionInput, TitleText};

/// Result text of a call whose turn was cut by a restart.
pub const OUTCOME_UNKNOWN: &str =
    "outcome unknown: the runtime stopped while this ran; it was not re-run";
/// Result text of a call whose turn failed on a storage error.
pub const STORAGE_RESULT: &str =
    "outcome unknown: the turn failed on a storage error before this result was saved";
/// Result text of a call whose TurnActor crashed.
pub(crate) const CRASHED_RESULT: &str = "the turn crashed before this call finished";
/// `turn_cancelled` reason of a turn cancelled by the runtime's shutdown.
pub(crate) const SHUTDOWN_REASON: &str = "runtime shutdown";
pub use crate::approval::NO_APPROVER;
/// `input_dropped` reason under `QueuedOnRestart::Drop`.
pub const DROPPED_ON_RESTART: &str = "dropped on restart";
/// Why a deleted session stops, and the reason of its `input_dropped` events.
pub(crate) const DELETED_REASON: &str = "session deleted";
/// The stop reason of a hibernating session.
pub const HIBERNATED: &str = "hibernated";

/// The runtime settings the rules depend on.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub queued_on_restart: QueuedOnRestart,
    pub without_approver: WithoutApprover,
    /// Whether a session's first input starts title generation.
    pub generate_titles: bool,
}

/// Where the session is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Phase {
    /// No turn runs: an input starts at once.
    Idle,
    /// A TurnActor runs (from its start until it exited).
    Turn(ActiveTurn),
    /// The runtime shuts down: no input is taken, nothing starts from the queue; the
    /// turn, if one ran, is being cancelled.
    ShuttingDown(Option<ActiveTurn>),
    /// Delete asked: once the turn (if one ran) ended, the queue is dropped and
    /// `session_deleted` written.
    Deleting(Option<ActiveTurn>),
    /// `session_deleted` is committed: nothing more happens.
    Deleted,
}

/// The TurnActor that runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ActiveTurn {
    pub run_id: RunId,
    pub stage: TurnStage,
}

/// What the session knows of its running turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TurnStage {
    /// Steps run.
    Running,
    /// The turn summarises the history (`compaction_started` committed).
    Compacting,
    /// A cancel was asked: tool activity is no longer recorded.
    Cancelling,
    /// An append of the turn failed in the store: every later append is refused, the
    /// turn is stopped and closed `failed` with class storage and this message.
    StorageFailed(String),
}

/// What to do once the store answered an [`Effect::Append`].
#[derive(Debug)]
enum AfterCommit {
    /// `input_queued` of a submitted input.
    Queued { input_id: InputId },
    /// A turn's opening events (with the whole turn, for a command that completes at
    /// once). `answer`: a submit waits for its reply.
    Opened {
        input_id: InputId,
        run_id: RunId,
        answer: bool,
        then: Opened,
    },
    /// Events of the running turn.
    TurnEvents,
    /// `approval_requested` (and the denial when nobody can answer).
    ApprovalAsked {
        request_id: ApprovalRequestId,
        /// Boxed: kept small, the machine's waiting slot is part of every session.
        parked: Option<Box<PendingApproval>>,
    },
    /// `approval_decided` of a person's answer.
    ApprovalDecided {
        request_id: ApprovalRequestId,
        answer: ApprovalAnswer,
    },
    /// An event a caller waits for (`ClearQueue`, `SetTitle`, `SetModel`).
    Answered,
    /// A generated title.
    TitleApplied,
    /// The session closed a turn whose actor exited without `turn_complete`.
    TurnClosed,
    /// Recovery on load closed the interrupted turn.
    Recovered,
    /// Recovery dropped the queue (`QueuedOnRestart::Drop`).
    QueueDropped,
    /// `SessionEnd` hooks recorded.
    HooksRecorded,
    /// The queue dropped and `session_deleted`.
    Deleted,
}

/// What an opened turn does next.
#[derive(Debug)]
enum Opened {
    /// Run a TurnActor (and maybe generate a title from this text).
    Turn { mode: TurnMode, text: String },
    /// The command completed at once.
    Completed,
    /// `/title`: completed; generate a title from the first user message.
    GenerateTitle,
}

/// The answer the machine waits for from the driver (always within one handler).
#[derive(Debug)]
enum Waiting {
    Commit(AfterCommit),
    /// `PrepareInput`; `answer`: a submit waits for its reply.
    Prepared {
        answer: bool,
    },
    Hooks,
}

/// A session's rules and state (see the module docs).
#[derive(Debug)]
pub struct SessionMachine {
    fold: SessionState,
    phase: Phase,
    settings: Settings,
    /// Approval requests waiting for a decision, oldest first (ids are time-ordered).
    approvals: BTreeMap<ApprovalRequestId, PendingApproval>,
    /// Whether this session actor already started title generation for an input.
    title_requested: bool,
    /// Whether a turn of this session started in this runtime (its `SessionStart`
    /// hooks ran; its `SessionEnd` hooks run at shutdown).
    hooks_started: bool,
    /// A cancel came while no turn ran but the next input was about to start (the last
    /// turn had written its `turn_complete`, its actor not yet gone): that next turn is
    /// the one the caller sees running, so it is cancelled as it starts.
    cancel_next: bool,
    /// Handed off (`SessionInput::Drain`): nothing starts from the queue any more (an
    /// input taken meanwhile is queued, for the next owner); the running turn goes on.
    draining: bool,
    waiting: Option<Waiting>,
    /// The wall clock (ms since the epoch) of the input being handled: new events are
    /// stamped with it. Time enters as an input ([`SessionMachine::on`]); the machine
    /// reads no clock.
    now_ms: u64,
}

impl SessionMachine {
    /// A machine for a session folded from its log.
    pub fn new(fold: SessionState, settings: Settings) -> Self {
        let phase = if fold.deleted {
            Phase::Deleted
        } else {
            Phase::Idle
        };
        Self {
            fold,
            phase,
            settings,
            approvals: BTreeMap::new(),
            title_requested: false,
            hooks_started: false,
            cancel_next: false,
            draining: false,
            waiting: None,
            now_ms: 0,
        }
    }

    /// The machine of a session woken from hibernation: when a turn of it already
    /// started in this runtime (`hooks_started`, [`Self::hooks_started`] when it
    /// hibernated), its `SessionStart` hooks do not run again, and its `SessionEnd`
    /// hooks run at shutdown.
    #[must_use]
    pub fn woken(mut self, hooks_started: bool) -> Self {
        self.hooks_started = hooks_started;
        self
    }

    /// Whether a turn of this session started in this runtime (its `SessionStart` hooks
    /// ran).
    pub fn hooks_started(&self) -> bool {
        self.hooks_started
    }

    /// What the log says about the session.
    pub fn fold(&self) -> &SessionState {
        &self.fold
    }

    /// Where the session is.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// How many approval requests wait for a decision.
    pub fn pending_approvals(&self) -> usize {
        self.approvals.len()
    }

    /// Idle: no turn, nothing queued, no approval waiting, not deleting or shutting
    /// down (the hibernation timer runs only then).
    pub fn is_idle(&self) -> bool {
        self.phase == Phase::Idle
            && self.fold.open_turn.is_none()
            && self.fold.queue.is_empty()
            && self.approvals.is_empty()
    }

    /// Handles one input that happened at `now_ms` (the wall clock, ms since the epoch:
    /// the time events it writes are stamped with).
    pub fn on(&mut self, input: SessionInput, now_ms: u64) -> Effects {
        self.now_ms = now_ms;
        let mut fx = Effects::new();
        if self.phase == Phase::Deleted {
            return fx;
        }
        match input {
            SessionInput::Committed(events) => self.committed(events, &mut fx),
            SessionInput::CommitFailed(message) => self.commit_failed(message, &mut fx),
            SessionInput::InputPrepared {
                input_id,
                input,
                plan,
            } => self.prepared(input_id, input, plan, &mut fx),
            SessionInput::SessionEndHooksRan { kinds } => {
                self.waiting = None;
                self.append(None, kinds, AfterCommit::HooksRecorded, &mut fx);
            }
            SessionInput::Loaded => self.loaded(&mut fx),
            SessionInput::SubmitInput {
                input_id,
                input,
                model_takes_images,
            } => self.submit(input_id, input, model_takes_images, &mut fx),
            SessionInput::Subscribe { approver } => fx.push(Effect::AddSubscriber {
                approver,
                replay_end: Seq(self.fold.last_seq),
            }),
            SessionInput::Cancel => {
                self.cancel(&mut fx);
                fx.push(Effect::Reply(Answer::Done(Ok(()))));
            }
            SessionInput::ClearQueue => {
                let kinds = self.drop_queue("queue cleared");
                self.append(None, kinds, AfterCommit::Answered, &mut fx);
            }
            SessionInput::GetPendingApprovals => {
                let pending = self.approvals.values().map(|p| p.request.clone());
                fx.push(Effect::Reply(Answer::PendingApprovals(pending.collect())));
            }
            SessionInput::ApprovalRequested {
                request_id,
                run_id,
                tool_call_id,
                tool_name,
                action,
                reason,
                grant_key,
                approver_attached,
            } => {
                let request = ApprovalRequest {
                    request_id,
                    tool_call_id,
                    tool_name,
                    action,
                    reason,
                };
                self.approval_requested(run_id, request, grant_key, approver_attached, &mut fx);
            }
            SessionInput::DecideApproval {
                request_id,
                decision,
                message,
            } => self.decide(request_id, decision, message, &mut fx),
            SessionInput::SetTitle { title } => {
                let kind = EventKind::TitleSet {
                    title,
                    source: TitleSource::User,
                };
                self.append(None, vec![kind], AfterCommit::Answered, &mut fx);
            }
            SessionInput::SetModel { provider, model } => {
                let config = &self.fold.config;
                let kinds = if config.provider == provider && config.model == model {
                    Vec::new()
                } else {
                    vec![EventKind::ConfigChanged { provider, model }]
                };
                self.append(None, kinds, AfterCommit::Answered, &mut fx);
            }
            SessionInput::Delete => self.delete(&mut fx),
            SessionInput::TurnAppend { run_id, kinds } => self.turn_append(run_id, kinds, &mut fx),
            SessionInput::Deltas { run_id, deltas } => {
                // A stream task outliving its turn publishes nothing after the turn's end.
                if self.open_run() == Some(run_id) {
                    fx.push(Effect::PublishDeltas { run_id, deltas });
                }
            }
            SessionInput::TurnEnded { failure } => self.turn_ended(failure, &mut fx),
            SessionInput::TitleGenerated { title, expected } => {
                if self.fold.title == expected {
                    let kind = EventKind::TitleSet {
                        title,
                        source: TitleSource::Generated,
                    };
                    self.append(None, vec![kind], AfterCommit::TitleApplied, &mut fx);
                } else {
                    fx.push(Effect::Reply(Answer::TitleApplied(false)));
                }
            }
            SessionInput::HibernateCheck { quiet, watched } => {
                if quiet && !watched && self.is_idle() {
                    fx.push(Effect::Stop { reason: HIBERNATED });
                }
            }
            SessionInput::Shutdown { cause } => self.shutdown(cause, &mut fx),
            SessionInput::Drain => self.drain(&mut fx),
        }
        fx
    }

    fn open_run(&self) -> Option<RunId> {
        self.fold.open_turn.as_ref().map(|t| t.run_id)
    }

    fn turn_mut(&mut self) -> Option<&mut ActiveTurn> {
        match &mut self.phase {
            Phase::Turn(turn) | Phase::ShuttingDown(Some(turn)) | Phase::Deleting(Some(turn)) => {
                Some(turn)
            }
            _ => None,
        }
    }
}

/// A `turn_complete` event.
fn completed(status: TurnStatus, reason: Option<String>, error: Option<ErrorInfo>) -> EventKind {
    EventKind::TurnComplete {
        status,
        reason,
        error,
    }
}

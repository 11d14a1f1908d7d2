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
//! Rules (the [`Phase`] says where the session is):
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

use super::ApprovalAnswer;
use super::commands::Plan;
use super::state::{SessionState, apply};
use crate::outcome::ApprovalRequest;
use crate::runtime::{QueuedOnRestart, RuntimeError, WithoutApprover};
use crate::turn::TurnMode;
use foya_protocol::event::Delta;
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, ErrorClass, ErrorInfo, Event, EventKind, Input, InputId,
    RunId, Seq, TitleSource, ToolCallId, TurnStatus,
};
use smallvec::SmallVec;
use std::collections::BTreeMap;

#[cfg(test)]
mod tests;

/// Result text of a call whose turn was cut by a restart.
pub(crate) const OUTCOME_UNKNOWN: &str =
    "outcome unknown: the runtime stopped while this ran; it was not re-run";
/// Result text of a call whose turn failed on a storage error.
pub(crate) const STORAGE_RESULT: &str =
    "outcome unknown: the turn failed on a storage error before this result was saved";
/// Result text of a call whose TurnActor crashed.
pub(crate) const CRASHED_RESULT: &str = "the turn crashed before this call finished";
/// `turn_cancelled` reason of a turn cancelled by the runtime's shutdown.
pub(crate) const SHUTDOWN_REASON: &str = "runtime shutdown";
/// Message when an approval is needed and nobody can answer.
pub(crate) const NO_APPROVER: &str =
    "denied: this call needs approval and no approver is attached to the session";
/// `input_dropped` reason under `QueuedOnRestart::Drop`.
pub(crate) const DROPPED_ON_RESTART: &str = "dropped on restart";
/// Why a deleted session stops, and the reason of its `input_dropped` events.
pub(crate) const DELETED_REASON: &str = "session deleted";
/// The stop reason of a hibernating session.
pub(crate) const HIBERNATED: &str = "hibernated";

/// The runtime settings the rules depend on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub queued_on_restart: QueuedOnRestart,
    pub without_approver: WithoutApprover,
    /// Whether a session's first input starts title generation.
    pub generate_titles: bool,
    /// The wall clock (ms since the epoch) new events are stamped with.
    pub clock: fn() -> u64,
}

/// What happened to the session.
#[derive(Debug)]
pub(crate) enum SessionInput {
    /// The session actor started from its log: recover an unfinished turn, run the queue.
    Loaded,
    /// Submit an input (applied once per input id).
    SubmitInput {
        input_id: InputId,
        input: Input,
        /// Whether the session's model accepts images (asked only when `input` has some).
        model_takes_images: bool,
    },
    /// Answer to [`Effect::PrepareInput`]: the input to record and what it turns into.
    InputPrepared {
        input_id: InputId,
        input: Input,
        plan: Plan,
    },
    /// A subscriber attaches (an approver answers approval requests).
    Subscribe { approver: bool },
    /// Cancel the active turn (no-op when idle).
    Cancel,
    /// Drop every queued input.
    ClearQueue,
    /// The approval requests waiting for a decision.
    GetPendingApprovals,
    /// A ToolActor asks for approval; the driver chose `request_id` and keeps the reply.
    ApprovalRequested {
        request_id: ApprovalRequestId,
        run_id: RunId,
        tool_call_id: ToolCallId,
        tool_name: String,
        action: String,
        reason: String,
        grant_key: String,
        /// Whether a live approver subscription is attached.
        approver_attached: bool,
    },
    /// A person answered an approval request.
    DecideApproval {
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    },
    /// Set the title by hand.
    SetTitle { title: String },
    /// Use this provider and model from the next turn on.
    SetModel { provider: String, model: String },
    /// Delete the session (cancels the turn first).
    Delete,
    /// The turn (or one of its tools) appends these events of `run_id`, in order.
    TurnAppend {
        run_id: RunId,
        kinds: Vec<EventKind>,
    },
    /// The turn's stream publishes live deltas.
    Deltas { run_id: RunId, deltas: Vec<Delta> },
    /// Answer to [`Effect::Append`]: the events are in the store.
    Committed(Vec<Event>),
    /// Answer to [`Effect::Append`]: the store refused the write (nothing was written).
    CommitFailed(String),
    /// The active TurnActor exited (`failure`: how, when it failed).
    TurnEnded { failure: Option<String> },
    /// A generated title, applied only if the title is still `expected`.
    TitleGenerated {
        title: String,
        expected: Option<(String, TitleSource)>,
    },
    /// Answer to [`Effect::RunSessionEndHooks`]: the `hook_ran` events to record.
    SessionEndHooksRan { kinds: Vec<EventKind> },
    /// The hibernation timer fired: `quiet` when nothing happened for the whole period,
    /// `watched` when a subscriber or a child actor is still there.
    HibernateCheck { quiet: bool, watched: bool },
    /// Runtime shutdown: take no more inputs, start nothing, cancel the turn.
    Shutdown,
}

/// What the driver must do, in order.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Append these events (dense seqs) and answer with `Committed` or `CommitFailed`.
    Append(Vec<Event>),
    /// Committed events: extend the in-memory log and send them to subscribers.
    Publish(Vec<Event>),
    /// Send these live deltas of `run_id` to subscribers.
    PublishDeltas { run_id: RunId, deltas: Vec<Delta> },
    /// Load the project, expand the input's command and answer with `InputPrepared`.
    PrepareInput { input_id: InputId, input: Input },
    /// Spawn the TurnActor of `run_id` with a new cancel token.
    StartTurn {
        run_id: RunId,
        mode: TurnMode,
        /// The session's first turn in this runtime (its `SessionStart` hooks run).
        first_in_runtime: bool,
    },
    /// Fire the turn's cancel token, then tell the TurnActor why.
    CancelTurn { reason: &'static str },
    /// Fire the turn's cancel token and stop the TurnActor (its appends fail).
    StopTurn,
    /// Spawn a TitleActor.
    StartTitle {
        text: TitleText,
        /// The session's title now (the generated one lands only if it is unchanged).
        expected: Option<(String, TitleSource)>,
    },
    /// Register a subscriber; it replays up to `replay_end`.
    AddSubscriber { approver: bool, replay_end: Seq },
    /// Answer the request being handled.
    Reply(Answer),
    /// Answer a parked approval request.
    AnswerApproval {
        request_id: ApprovalRequestId,
        answer: ApprovalAnswer,
    },
    /// Drop the reply of an approval request (the call reads it as dropped).
    DropApproval { request_id: ApprovalRequestId },
    /// Drop every parked approval reply (their turn ended).
    DropApprovals,
    /// Answer the delete request.
    AnswerDelete(Result<(), RuntimeError>),
    /// Answer everyone waiting for the shutdown.
    AnswerShutdown,
    /// Run the `SessionEnd` hooks and answer with `SessionEndHooksRan`.
    RunSessionEndHooks,
    /// Remove the transcript exported for the session's hooks.
    ForgetTranscript,
    /// Tell subscribers the session closed (`reason`) and drop them.
    CloseSubscribers { reason: &'static str },
    /// The session went idle: keep its log in memory only within the idle budget.
    WentIdle,
    /// Stop the session actor.
    Stop { reason: &'static str },
    /// The session cannot go on (a write it depends on failed): fail the actor, so the
    /// supervisor restarts it from the log.
    Fail(String),
}

/// The text a title is generated from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TitleText {
    /// This input's text.
    Input(String),
    /// The session's first user message with text (read from the log).
    FirstUserMessage,
}

/// An answer to the request being handled.
#[derive(Debug)]
pub(crate) enum Answer {
    /// `SubmitInput`.
    Submitted(Result<InputId, RuntimeError>),
    /// `Cancel`, `ClearQueue`, `DecideApproval`, `SetTitle`, `SetModel`.
    Done(Result<(), RuntimeError>),
    /// `GetPendingApprovals`, oldest first.
    PendingApprovals(Vec<ApprovalRequest>),
    /// `TurnAppend`.
    Appended(Result<(), String>),
    /// `TitleGenerated`: whether the title was applied.
    TitleApplied(bool),
}

/// The effects of one input. Most inputs have one to four: kept inline, so the hot
/// paths (a turn's appends, its deltas) allocate nothing for them.
pub(crate) type Effects = SmallVec<[Effect; 4]>;

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

/// An approval request waiting for a decision.
#[derive(Debug)]
struct PendingApproval {
    run_id: RunId,
    request: ApprovalRequest,
    grant_key: String,
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
        parked: Option<PendingApproval>,
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
pub(crate) struct SessionMachine {
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
    waiting: Option<Waiting>,
}

impl SessionMachine {
    /// A machine for a session folded from its log.
    pub(crate) fn new(fold: SessionState, settings: Settings) -> Self {
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
            waiting: None,
        }
    }

    /// What the log says about the session.
    pub(crate) fn fold(&self) -> &SessionState {
        &self.fold
    }

    /// Where the session is.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Idle: no turn, nothing queued, no approval waiting, not deleting or shutting
    /// down (the hibernation timer runs only then).
    pub(crate) fn is_idle(&self) -> bool {
        self.phase == Phase::Idle
            && self.fold.open_turn.is_none()
            && self.fold.queue.is_empty()
            && self.approvals.is_empty()
    }

    /// Handles one input.
    pub(crate) fn on(&mut self, input: SessionInput) -> Effects {
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
                self.cancel_turn("user", &mut fx);
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
            SessionInput::Shutdown => self.shutdown(&mut fx),
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

    /// Asks for an append of `kinds` (none: `then` runs at once, as if committed).
    fn append(
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
        let at_ms = (self.settings.clock)().max(self.fold.last_at_ms);
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

    fn committed(&mut self, events: Vec<Event>, fx: &mut Effects) {
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
    fn track_stage(&mut self, event: &Event) {
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

    fn after_commit(&mut self, then: AfterCommit, fx: &mut Effects) {
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
                    self.approvals.insert(request_id, pending);
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

    fn commit_failed(&mut self, message: String, fx: &mut Effects) {
        let Some(Waiting::Commit(then)) = self.waiting.take() else {
            return fx.push(Effect::Fail("a commit failure nobody waited for".into()));
        };
        let error = RuntimeError::Storage(message.clone());
        match then {
            // Nothing was written: the caller learns it, the session stays as it was.
            AfterCommit::Queued { .. } => fx.push(Effect::Reply(Answer::Submitted(Err(error)))),
            AfterCommit::Opened { answer: true, .. } => {
                fx.push(Effect::Reply(Answer::Submitted(Err(error))));
            }
            AfterCommit::TurnEvents => {
                if let Some(turn) = self.turn_mut() {
                    turn.stage = TurnStage::StorageFailed(message);
                    fx.push(Effect::StopTurn);
                }
                fx.push(Effect::Reply(Answer::Appended(Err(error.to_string()))));
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

    fn submit(
        &mut self,
        input_id: InputId,
        input: Input,
        model_takes_images: bool,
        fx: &mut Effects,
    ) {
        let refused = if input.is_empty() {
            Some(RuntimeError::EmptyInput)
        } else if !input.images.is_empty() && !model_takes_images {
            // Never in the history, where every later request would fail on it.
            Some(RuntimeError::ImagesNotSupported {
                model: self.fold.config.model.clone(),
            })
        } else {
            match self.phase {
                Phase::Deleting(_) | Phase::Deleted => {
                    Some(RuntimeError::SessionDeleted(self.fold.id))
                }
                Phase::ShuttingDown(_) => Some(RuntimeError::ShuttingDown),
                Phase::Idle | Phase::Turn(_) => None,
            }
        };
        if let Some(error) = refused {
            return fx.push(Effect::Reply(Answer::Submitted(Err(error))));
        }
        if self.fold.seen_inputs.contains(&input_id) {
            return fx.push(Effect::Reply(Answer::Submitted(Ok(input_id))));
        }
        if self.phase == Phase::Idle && self.fold.open_turn.is_none() && self.fold.queue.is_empty()
        {
            self.waiting = Some(Waiting::Prepared { answer: true });
            return fx.push(Effect::PrepareInput { input_id, input });
        }
        let kind = EventKind::InputQueued { input_id, input };
        self.append(None, vec![kind], AfterCommit::Queued { input_id }, fx);
    }

    /// Starts the next queued input when idle.
    fn start_next(&mut self, fx: &mut Effects) {
        if self.phase != Phase::Idle || self.fold.open_turn.is_some() {
            return;
        }
        match self.fold.queue.front() {
            Some((input_id, input)) => {
                let (input_id, input) = (*input_id, input.clone());
                self.waiting = Some(Waiting::Prepared { answer: false });
                fx.push(Effect::PrepareInput { input_id, input });
            }
            None => fx.push(Effect::WentIdle),
        }
    }

    /// The input is expanded: write `user_message` + `turn_started` (and the whole turn
    /// for a command that completes at once).
    fn prepared(&mut self, input_id: InputId, input: Input, plan: Plan, fx: &mut Effects) {
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

    fn opened(
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
                if answer {
                    fx.push(Effect::Reply(Answer::Submitted(Ok(input_id))));
                }
            }
            Opened::Completed | Opened::GenerateTitle => {
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

    fn cancel_turn(&mut self, reason: &'static str, fx: &mut Effects) {
        if let Some(turn) = self.turn_mut() {
            if !matches!(turn.stage, TurnStage::StorageFailed(_)) {
                turn.stage = TurnStage::Cancelling;
            }
            fx.push(Effect::CancelTurn { reason });
        }
    }

    /// `input_dropped` for every queued input.
    fn drop_queue(&self, reason: &str) -> Vec<EventKind> {
        self.fold
            .queue
            .iter()
            .map(|(input_id, _)| EventKind::InputDropped {
                input_id: *input_id,
                reason: reason.to_owned(),
            })
            .collect()
    }

    fn turn_append(&mut self, run_id: RunId, mut kinds: Vec<EventKind>, fx: &mut Effects) {
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
            Some("the turn is being cancelled".to_owned())
        } else if let Some(TurnStage::StorageFailed(failure)) = stage {
            Some(format!("the turn failed on a storage error: {failure}"))
        } else if self.open_run() != Some(run_id) {
            Some(format!("run {run_id} is not the session's open turn"))
        } else {
            None
        };
        match refused {
            Some(error) => fx.push(Effect::Reply(Answer::Appended(Err(error)))),
            None => self.append(Some(run_id), kinds, AfterCommit::TurnEvents, fx),
        }
    }

    fn approval_requested(
        &mut self,
        run_id: RunId,
        request: ApprovalRequest,
        grant_key: String,
        approver_attached: bool,
        fx: &mut Effects,
    ) {
        let request_id = request.request_id;
        // An empty key offers no grant (protected paths, commands that run other code).
        if !grant_key.is_empty() && self.fold.grants.contains(&grant_key) {
            let answer = ApprovalAnswer {
                allowed: true,
                message: None,
            };
            return fx.push(Effect::AnswerApproval { request_id, answer });
        }
        if self.open_run() != Some(run_id) {
            return fx.push(Effect::DropApproval { request_id });
        }
        let mut kinds = vec![EventKind::ApprovalRequested {
            request_id,
            tool_call_id: request.tool_call_id.clone(),
            tool_name: request.tool_name.clone(),
            action: request.action.clone(),
            reason: request.reason.clone(),
            grant: Some(grant_key.clone()),
        }];
        let waits = approver_attached || self.settings.without_approver == WithoutApprover::Wait;
        if !waits {
            kinds.push(EventKind::ApprovalDecided {
                request_id,
                tool_call_id: request.tool_call_id.clone(),
                decision: ApprovalDecision::Deny,
                message: Some(NO_APPROVER.into()),
                grant: None,
            });
        }
        let parked = waits.then_some(PendingApproval {
            run_id,
            request,
            grant_key,
        });
        let then = AfterCommit::ApprovalAsked { request_id, parked };
        self.append(Some(run_id), kinds, then, fx);
    }

    fn decide(
        &mut self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
        fx: &mut Effects,
    ) {
        let Some(pending) = self.approvals.remove(&request_id) else {
            let error = RuntimeError::UnknownApproval(request_id);
            return fx.push(Effect::Reply(Answer::Done(Err(error))));
        };
        // "Allow for this session" of an action that offers no grant allows it once.
        let grant = (decision == ApprovalDecision::AllowForSession
            && !pending.grant_key.is_empty())
        .then_some(pending.grant_key);
        let allowed = decision != ApprovalDecision::Deny;
        let answer = ApprovalAnswer {
            allowed,
            message: (!allowed).then(|| {
                message
                    .clone()
                    .unwrap_or_else(|| "denied by the user".into())
            }),
        };
        let kind = EventKind::ApprovalDecided {
            request_id,
            tool_call_id: pending.request.tool_call_id,
            decision,
            message,
            grant,
        };
        let then = AfterCommit::ApprovalDecided { request_id, answer };
        self.append(Some(pending.run_id), vec![kind], then, fx);
    }

    /// The TurnActor exited: close the turn if it has no `turn_complete`, then go on.
    fn turn_ended(&mut self, failure: Option<String>, fx: &mut Effects) {
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
    fn close_open_turn(
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
    fn after_turn(&mut self, fx: &mut Effects) {
        match self.phase {
            Phase::Deleting(None) => self.finish_delete(fx),
            Phase::ShuttingDown(None) => self.session_end(fx),
            _ => self.start_next(fx),
        }
    }

    fn loaded(&mut self, fx: &mut Effects) {
        let error = ErrorInfo {
            class: ErrorClass::Internal,
            message: "the runtime stopped while this turn ran".into(),
        };
        let reason = "interrupted by restart";
        self.close_open_turn(OUTCOME_UNKNOWN, reason, error, AfterCommit::Recovered, fx);
    }

    fn delete(&mut self, fx: &mut Effects) {
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

    fn finish_delete(&mut self, fx: &mut Effects) {
        let mut kinds = self.drop_queue(DELETED_REASON);
        kinds.push(EventKind::SessionDeleted {});
        self.append(None, kinds, AfterCommit::Deleted, fx);
    }

    /// Whatever the commit did, the deleted session closes and stops (a failed delete
    /// is loaded again from its log on the next call).
    fn close_deleted(&mut self, result: Result<(), RuntimeError>, fx: &mut Effects) {
        fx.push(Effect::CloseSubscribers {
            reason: DELETED_REASON,
        });
        fx.push(Effect::AnswerDelete(result));
        fx.push(Effect::Stop {
            reason: DELETED_REASON,
        });
    }

    fn shutdown(&mut self, fx: &mut Effects) {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Turn(turn) | Phase::ShuttingDown(Some(turn)) => {
                self.phase = Phase::ShuttingDown(Some(turn));
                self.cancel_turn(SHUTDOWN_REASON, fx);
            }
            Phase::Idle | Phase::ShuttingDown(None) => {
                self.phase = Phase::ShuttingDown(None);
                self.session_end(fx);
            }
            // Delete wins: it stops the session once the turn ended.
            phase @ (Phase::Deleting(_) | Phase::Deleted) => {
                self.phase = phase;
                self.cancel_turn(SHUTDOWN_REASON, fx);
            }
        }
    }

    /// The shutdown's end: the `SessionEnd` hooks (once, and only when a turn of this
    /// top-level session ran in this runtime), then the waiters are answered.
    fn session_end(&mut self, fx: &mut Effects) {
        if std::mem::take(&mut self.hooks_started) && self.fold.config.parent.is_none() {
            self.waiting = Some(Waiting::Hooks);
            fx.push(Effect::RunSessionEndHooks);
        } else {
            fx.push(Effect::AnswerShutdown);
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

//! The SessionActor: a thin driver of the session machine (`machine/`). Each message
//! becomes a [`SessionInput`]; the machine's effects are carried out in `effects.rs`.
//! What stays here: the reply ports (answered when the machine says), the subscriber
//! channels, the running TurnActor's ref and cancel token, the in-memory log.

use super::machine::{SessionInput, SessionMachine, Settings};
use super::state::SessionState;
use super::{ApprovalAnswer, Reply, SessionMsg, Subscribed};
use crate::context::ProjectContext;
use crate::kernel::RuntimeDeps;
use crate::log::{IdleReservation, SharedLog};
use crate::outcome::ApprovalRequest;
use crate::turn::TurnMsg;
use foya_protocol::{ApprovalRequestId, Event, InputId};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The SessionActor.
#[derive(Debug)]
pub(crate) struct SessionActor;

/// What the session is started with: its folded log and the shared dependencies.
#[derive(Debug)]
pub(crate) struct SessionArgs {
    pub state: SessionState,
    /// The session's whole committed log (seq 1 first): what `state` was folded from.
    pub log: Vec<Event>,
    pub deps: Arc<RuntimeDeps>,
    /// Woken from hibernation after a turn of it started in this runtime: its
    /// `SessionStart` hooks do not run again.
    pub hooks_started: bool,
}

#[derive(Debug)]
pub(super) struct Subscriber {
    pub(super) tx: mpsc::Sender<super::UpdateItem>,
    pub(super) approver: bool,
}

/// The running TurnActor and the cancel token it was started with.
#[derive(Debug)]
pub(super) struct RunningTurn {
    pub(super) actor: ActorRef<TurnMsg>,
    pub(super) cancel: CancellationToken,
}

/// The reply port of the request being handled.
#[derive(Debug)]
pub(super) enum Caller {
    Submit(Reply<InputId>),
    Done(Reply<()>),
    Subscribe(Reply<Subscribed>),
    Approvals(Reply<Vec<ApprovalRequest>>),
    Append(Option<RpcReplyPort<Result<(), foya_core::session::AppendRefused>>>),
    Title(Option<RpcReplyPort<bool>>),
}

/// Reply ports answered later than the message that brought them.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    /// Approval requests, by the id the request was given.
    pub(super) approvals: HashMap<ApprovalRequestId, RpcReplyPort<ApprovalAnswer>>,
    /// The delete request (a second one replaces it).
    pub(super) delete: Option<Reply<()>>,
    /// Everyone waiting for the shutdown.
    pub(super) shutdown: Vec<RpcReplyPort<()>>,
    /// Everyone waiting for a handoff's drain (no turn running).
    pub(super) drained: Vec<RpcReplyPort<()>>,
}

/// The SessionActor's state.
#[derive(Debug)]
pub(crate) struct Session {
    pub(super) machine: SessionMachine,
    pub(super) deps: Arc<RuntimeDeps>,
    pub(super) subscribers: Vec<Subscriber>,
    pub(super) turn: Option<RunningTurn>,
    pub(super) waiters: Waiters,
    /// The project loaded for the input being started (`PrepareInput`), handed to its
    /// TurnActor.
    pub(super) project: Option<Arc<ProjectContext>>,
    /// The committed log in memory (see [`SharedLog`]): seeded with what the
    /// supervisor read or wrote when it started the session, read from the store when a
    /// turn starts without it, extended by every append. When the session goes idle it
    /// keeps the log only within the runtime's idle budget
    /// ([`IdleLogs`](crate::log::IdleLogs)), holding `idle_reservation` meanwhile.
    pub(super) log: Option<SharedLog>,
    pub(super) idle_reservation: Option<IdleReservation>,
    /// When the session last handled a message other than the hibernation check
    /// (`hibernate.rs`).
    pub(super) last_activity: tokio::time::Instant,
    /// The timer of the hibernation check on its way, if any: held, so that it is
    /// aborted when the session stops (a detached timer would keep the stopped actor's
    /// cell, its mailboxes' blocks with it, for a whole `hibernate_after`).
    pub(super) hibernation_timer: Option<super::hibernate::Timer>,
    /// Whether the machine asked the actor to stop.
    pub(super) stopping: bool,
    /// What the session adds to the runtime's live counts (taken back when dropped).
    pub(super) share: crate::kernel::SessionShare,
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = Session;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<Session, ActorProcessingErr> {
        let deps = args.deps;
        let settings = Settings {
            queued_on_restart: deps.queued_on_restart,
            without_approver: deps.without_approver,
            generate_titles: deps.context.generate_titles,
        };
        // A session starts idle: its log counts against the idle budget too.
        let idle_reservation = deps.idle_logs.reserve(args.log.len());
        let share = deps.stats.session();
        Ok(Session {
            machine: SessionMachine::new(args.state, settings).woken(args.hooks_started),
            deps,
            subscribers: Vec::new(),
            turn: None,
            waiters: Waiters::default(),
            project: None,
            log: idle_reservation.is_some().then(|| SharedLog::new(args.log)),
            idle_reservation,
            last_activity: tokio::time::Instant::now(),
            hibernation_timer: None,
            stopping: false,
            share,
        })
    }

    /// Recovery on load: close a turn the runtime stopped in, then run the queue.
    async fn post_start(
        &self,
        myself: ActorRef<SessionMsg>,
        state: &mut Session,
    ) -> Result<(), ActorProcessingErr> {
        state.run(&myself, SessionInput::Loaded, None).await?;
        state.arm_hibernation(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut Session,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionMsg::Hibernate => return state.check_hibernation(&myself).await,
            // Not activity: a subscriber went away; maybe the last one.
            SessionMsg::Unwatched => return state.hibernate_if_unwatched(&myself).await,
            SessionMsg::Release { reason, reply } => {
                state.release(&myself, reason);
                let _ = reply.send(());
                return Ok(());
            }
            _ => {}
        }
        state.touched();
        if let Some((input, caller)) = state.input_of(msg) {
            state.run(&myself, input, caller).await?;
        }
        state.hibernate_if_unwatched(&myself).await?;
        state.arm_hibernation(&myself);
        Ok(())
    }

    /// Policy: the children are the TurnActor and TitleActors. Whatever way the active
    /// turn exits, the machine closes it in the log if needed and moves on to its
    /// queue; a TitleActor's exit means nothing; the session itself never stops because
    /// a child did.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SessionMsg>,
        event: SupervisionEvent,
        state: &mut Session,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(format!("turn failed: {err}"))),
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {
                return Ok(());
            }
            #[cfg(feature = "cluster")]
            SupervisionEvent::PidLifecycleEvent(_) => return Ok(()),
        };
        let is_turn = state
            .turn
            .as_ref()
            .is_some_and(|t| t.actor.get_id() == cell.get_id());
        if is_turn {
            state.turn = None;
            let input = SessionInput::TurnEnded { failure };
            state.run(&myself, input, None).await?;
            state.touched();
        }
        // The turn, or a title request, is over: maybe nothing holds the session now.
        state.hibernate_if_unwatched(&myself).await?;
        state.arm_hibernation(&myself);
        Ok(())
    }
}

impl Session {
    /// The machine's input for a message, with the reply port of the caller waiting
    /// for the answer (ports answered later are kept in [`Waiters`]).
    fn input_of(&mut self, msg: SessionMsg) -> Option<(SessionInput, Option<Caller>)> {
        let (input, caller) = match msg {
            SessionMsg::SubmitInput {
                input_id,
                input,
                reply,
            } => {
                let provider = &self.machine.fold().config.provider;
                let model_takes_images =
                    input.images.is_empty() || self.deps.client_for(provider).supports_images();
                let input = SessionInput::SubmitInput {
                    input_id,
                    input,
                    model_takes_images,
                };
                (input, Some(Caller::Submit(reply)))
            }
            SessionMsg::Subscribe { approver, reply } => (
                SessionInput::Subscribe { approver },
                Some(Caller::Subscribe(reply)),
            ),
            SessionMsg::Cancel { reply } => (SessionInput::Cancel, Some(Caller::Done(reply))),
            SessionMsg::ClearQueue { reply } => {
                (SessionInput::ClearQueue, Some(Caller::Done(reply)))
            }
            SessionMsg::GetPendingApprovals { reply } => (
                SessionInput::GetPendingApprovals,
                Some(Caller::Approvals(reply)),
            ),
            SessionMsg::DecideApproval {
                request_id,
                decision,
                message,
                reply,
            } => {
                let input = SessionInput::DecideApproval {
                    request_id,
                    decision,
                    message,
                };
                (input, Some(Caller::Done(reply)))
            }
            SessionMsg::SetTitle { title, reply } => {
                (SessionInput::SetTitle { title }, Some(Caller::Done(reply)))
            }
            SessionMsg::SetModel {
                provider,
                model,
                reply,
            } => (
                SessionInput::SetModel { provider, model },
                Some(Caller::Done(reply)),
            ),
            SessionMsg::Delete { reply } => {
                self.waiters.delete = Some(reply);
                (SessionInput::Delete, None)
            }
            SessionMsg::Append {
                run_id,
                kinds,
                reply,
            } => (
                SessionInput::TurnAppend { run_id, kinds },
                Some(Caller::Append(reply)),
            ),
            SessionMsg::PublishDeltas { run_id, deltas } => {
                (SessionInput::Deltas { run_id, deltas }, None)
            }
            SessionMsg::RequestApproval {
                run_id,
                tool_call_id,
                tool_name,
                action,
                reason,
                grant_key,
                reply,
            } => {
                let request_id = ApprovalRequestId::new();
                self.waiters.approvals.insert(request_id, reply);
                let input = SessionInput::ApprovalRequested {
                    request_id,
                    run_id,
                    tool_call_id,
                    tool_name,
                    action,
                    reason,
                    grant_key,
                    approver_attached: self.has_approver(),
                };
                (input, None)
            }
            SessionMsg::TitleGenerated {
                title,
                expected,
                reply,
            } => (
                SessionInput::TitleGenerated { title, expected },
                Some(Caller::Title(reply)),
            ),
            SessionMsg::Shutdown { cause, reply } => {
                self.waiters.shutdown.push(reply);
                (SessionInput::Shutdown { cause }, None)
            }
            SessionMsg::Drain { reply } => {
                self.waiters.drained.push(reply);
                (SessionInput::Drain, None)
            }
            // Handled before (`SessionActor::handle`): they are not activity.
            SessionMsg::Hibernate | SessionMsg::Unwatched | SessionMsg::Release { .. } => {
                return None;
            }
            #[cfg(test)]
            SessionMsg::Crash => panic!("test-induced SessionActor panic"),
            #[cfg(test)]
            SessionMsg::CrashTurn => {
                if let Some(turn) = &self.turn {
                    let _ = turn.actor.cast(TurnMsg::Panic);
                }
                return None;
            }
        };
        Some((input, caller))
    }

    /// Whether a turn of this session started in this runtime (its `SessionStart` hooks
    /// ran): kept across hibernation by the supervisor.
    pub(crate) fn hooks_started(&self) -> bool {
        self.machine.hooks_started()
    }

    pub(super) fn has_approver(&self) -> bool {
        self.subscribers
            .iter()
            .any(|s| s.approver && !s.tx.is_closed())
    }
}

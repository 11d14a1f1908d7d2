//! The SessionActor's handlers (see the module docs for the invariants).

use super::log::SharedLog;
use super::state::{SessionState, apply};
use super::{ApprovalAnswer, SessionMsg, Subscribed};
use crate::kernel::{RuntimeDeps, RuntimeError};
use crate::turn::TurnMsg;
use foya_protocol::event::LiveDelta;
use foya_protocol::{
    ApprovalRequestId, ErrorClass, ErrorInfo, Event, EventKind, Input, InputId, RunId, Seq,
    SessionUpdate,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Result text of a call whose turn was cut by a restart.
pub(crate) const OUTCOME_UNKNOWN: &str =
    "outcome unknown: the runtime stopped while this ran; it was not re-run";
/// `turn_cancelled` reason of a turn cancelled by the runtime's shutdown.
pub(crate) const SHUTDOWN_REASON: &str = "runtime shutdown";
/// Message when an approval is needed and nobody can answer.
pub(crate) const NO_APPROVER: &str =
    "denied: this call needs approval and no approver is attached to the session";

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
}

#[derive(Debug)]
pub(super) struct Subscriber {
    tx: mpsc::Sender<super::UpdateItem>,
    approver: bool,
}

impl Subscriber {
    /// Whether the subscriber went away (its `Subscription` was dropped).
    pub(super) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[derive(Debug)]
pub(super) struct ActiveTurn {
    pub(super) actor: ActorRef<TurnMsg>,
    pub(super) cancel: CancellationToken,
}

#[derive(Debug)]
pub(super) struct PendingApproval {
    pub(super) run_id: RunId,
    pub(super) request: crate::outcome::ApprovalRequest,
    pub(super) grant_key: String,
    pub(super) reply: RpcReplyPort<ApprovalAnswer>,
}

/// The SessionActor's state.
#[derive(Debug)]
pub(crate) struct Session {
    pub(super) fold: SessionState,
    pub(super) deps: Arc<RuntimeDeps>,
    pub(super) subscribers: Vec<Subscriber>,
    pub(super) turn: Option<ActiveTurn>,
    pub(super) approvals: HashMap<ApprovalRequestId, PendingApproval>,
    pub(super) deleting: Option<super::Reply<()>>,
    /// Whether this session actor already started title generation for a first input.
    pub(super) title_requested: bool,
    /// Set when an append of the active turn failed in the store: the turn is stopped
    /// and closed `failed` with class storage (see [`Session::storage_failed`]).
    pub(super) storage_failure: Option<String>,
    /// Set by `Shutdown`: callers waiting until no turn runs (the session takes no more
    /// inputs and starts nothing from its queue).
    pub(super) shutdown: Option<Vec<RpcReplyPort<()>>>,
    /// The committed log in memory (see [`SharedLog`]): seeded with what the
    /// supervisor read or wrote when it started the session, read from the store when a
    /// turn starts without it, extended by every append. When the session goes idle
    /// after a turn it keeps the log only within the runtime's idle budget
    /// ([`IdleLogs`](super::log::IdleLogs)), holding `idle_reservation` meanwhile.
    pub(super) log: Option<SharedLog>,
    pub(super) idle_reservation: Option<super::log::IdleReservation>,
    /// Whether a turn of this session started in this runtime (its `SessionStart` hooks
    /// ran; `SessionEnd` hooks run at shutdown).
    pub(super) hooks_started: bool,
    /// When the session last handled a message other than the hibernation check
    /// (`hibernate.rs`).
    pub(super) last_activity: tokio::time::Instant,
    /// Whether a hibernation check is on its way.
    pub(super) hibernation_armed: bool,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Session {
    /// Assigns seqs, appends, folds, broadcasts and extends the in-memory log (when
    /// loaded). Nothing changes when the append fails.
    pub(super) async fn persist(
        &mut self,
        run_id: Option<RunId>,
        kinds: Vec<EventKind>,
    ) -> Result<(), RuntimeError> {
        if kinds.is_empty() {
            return Ok(());
        }
        // Never before the session's previous event, whatever the wall clock did.
        let at_ms = now_ms().max(self.fold.last_at_ms);
        let mut seq = self.fold.last_seq;
        let events: Vec<Event> = kinds
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
        self.deps
            .store
            .append_all(&events)
            .await
            .map_err(|e| RuntimeError::Storage(e.to_string()))?;
        for event in &events {
            apply(&mut self.fold, event);
        }
        if !self.subscribers.is_empty() {
            for event in &events {
                self.broadcast(SessionUpdate::Event(event.clone()));
            }
        }
        if let Some(log) = &self.log {
            log.extend(events);
        }
        Ok(())
    }

    /// Going idle: keeps the log if it fits the runtime's idle budget, else releases it
    /// (the next turn reads it from the store once).
    pub(super) fn keep_log_if_budget_allows(&mut self) {
        let events = self.log.as_ref().map_or(0, SharedLog::len);
        self.idle_reservation = self.deps.idle_logs.reserve(events);
        if self.idle_reservation.is_none() {
            self.log = None;
        }
    }

    /// The in-memory log for a turn; read from the store when it was released.
    ///
    /// # Errors
    /// A store read failure.
    pub(super) fn shared_log(&mut self) -> Result<SharedLog, RuntimeError> {
        self.idle_reservation = None; // in use again: no longer counted as idle
        if let Some(log) = &self.log {
            return Ok(log.clone());
        }
        let events = self
            .deps
            .store
            .read_from(self.fold.id, Seq::FIRST)
            .map_err(|e| RuntimeError::Storage(e.to_string()))?;
        let log = SharedLog::new(events);
        self.log = Some(log.clone());
        Ok(log)
    }

    /// Sends to every subscriber; one whose buffer is full is dropped (its Subscription
    /// reports `Notice::Lagged`), never waited for. The last one gets `update` itself.
    pub(super) fn broadcast(&mut self, update: SessionUpdate) {
        let last = self.subscribers.len();
        let mut update = Some(Box::new(update));
        let mut index = 0;
        self.subscribers.retain(|s| {
            index += 1;
            let next = if index == last {
                update.take()
            } else {
                update.clone()
            };
            next.is_some_and(|u| s.tx.try_send(u).is_ok())
        });
    }

    pub(super) fn has_approver(&self) -> bool {
        self.subscribers
            .iter()
            .any(|s| s.approver && !s.tx.is_closed())
    }

    pub(super) fn busy(&self) -> bool {
        self.turn.is_some() || self.fold.open_turn.is_some()
    }

    /// Refuses an input with images when the session's model does not accept them, so
    /// it never enters the history (where every later request would fail on it).
    fn check_images(&self, input: &Input) -> Result<(), RuntimeError> {
        let config = &self.fold.config;
        if input.images.is_empty() || self.deps.client_for(&config.provider).supports_images() {
            return Ok(());
        }
        Err(RuntimeError::ImagesNotSupported {
            model: config.model.clone(),
        })
    }

    async fn submit(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input_id: InputId,
        input: Input,
    ) -> Result<InputId, ActorProcessingErr> {
        if self.fold.seen_inputs.contains(&input_id) {
            return Ok(input_id);
        }
        if self.busy() || !self.fold.queue.is_empty() {
            self.persist(None, vec![EventKind::InputQueued { input_id, input }])
                .await?;
            self.start_next(myself).await?;
        } else {
            self.start_turn(myself, input_id, input).await?;
        }
        Ok(input_id)
    }
}

/// Whether a handler error is a failed store append.
fn is_storage(e: &ActorProcessingErr) -> bool {
    matches!(
        e.downcast_ref::<RuntimeError>(),
        Some(RuntimeError::Storage(_))
    )
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

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = Session;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<Session, ActorProcessingErr> {
        // A session starts idle: its log counts against the idle budget too.
        let idle_reservation = args.deps.idle_logs.reserve(args.log.len());
        Ok(Session {
            fold: args.state,
            deps: args.deps,
            subscribers: Vec::new(),
            turn: None,
            log: idle_reservation.is_some().then(|| SharedLog::new(args.log)),
            idle_reservation,
            approvals: HashMap::new(),
            deleting: None,
            title_requested: false,
            storage_failure: None,
            shutdown: None,
            hooks_started: false,
            last_activity: tokio::time::Instant::now(),
            hibernation_armed: false,
        })
    }

    /// Recovery on load: close a turn the runtime stopped in, then run the queue.
    async fn post_start(
        &self,
        myself: ActorRef<SessionMsg>,
        state: &mut Session,
    ) -> Result<(), ActorProcessingErr> {
        state
            .close_open_turn(
                OUTCOME_UNKNOWN,
                "interrupted by restart",
                ErrorInfo {
                    class: ErrorClass::Internal,
                    message: "the runtime stopped while this turn ran".into(),
                },
            )
            .await?;
        state.drop_queue_on_restart().await?;
        state.start_next(&myself).await?;
        state.arm_hibernation(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut Session,
    ) -> Result<(), ActorProcessingErr> {
        if state.fold.deleted {
            return Ok(());
        }
        if matches!(msg, SessionMsg::Hibernate) {
            state.check_hibernation(&myself);
            return Ok(());
        }
        state.touched();
        handle_msg(state, myself.clone(), msg).await?;
        state.arm_hibernation(&myself);
        Ok(())
    }

    /// Policy: the only children are TurnActors. Whatever way the active turn exits, the
    /// session closes it in the log if needed and moves on to its queue; the session
    /// itself never stops because a child did.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SessionMsg>,
        event: SupervisionEvent,
        state: &mut Session,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(format!("turn failed: {err}"))),
            SupervisionEvent::ActorStarted(_)
            | SupervisionEvent::ProcessGroupChanged(_)
            | SupervisionEvent::PidLifecycleEvent(_) => return Ok(()),
        };
        let is_turn = state
            .turn
            .as_ref()
            .is_some_and(|t| t.actor.get_id() == cell.get_id());
        if is_turn && !state.fold.deleted {
            state.turn_exited(&myself, failure).await?;
            state.touched();
            state.arm_hibernation(&myself);
        }
        Ok(())
    }
}

/// Handles one message of the session (all but the hibernation check).
async fn handle_msg(
    state: &mut Session,
    myself: ActorRef<SessionMsg>,
    msg: SessionMsg,
) -> Result<(), ActorProcessingErr> {
    match msg {
        SessionMsg::SubmitInput {
            input_id,
            input,
            reply,
        } => {
            let result = if input.is_empty() {
                Err(RuntimeError::EmptyInput)
            } else if let Err(e) = state.check_images(&input) {
                Err(e)
            } else if state.deleting.is_some() {
                Err(RuntimeError::SessionDeleted(state.fold.id))
            } else if state.shutdown.is_some() {
                Err(RuntimeError::ShuttingDown)
            } else {
                match state.submit(&myself, input_id, input).await {
                    Ok(id) => Ok(id),
                    // Nothing was written: the caller learns it, the session stays.
                    Err(e) if is_storage(&e) => Err(RuntimeError::Storage(e.to_string())),
                    Err(e) => {
                        let _ = reply.send(Err(RuntimeError::Storage(e.to_string())));
                        return Err(e);
                    }
                }
            };
            let _ = reply.send(result);
        }
        SessionMsg::Subscribe { approver, reply } => {
            let (tx, rx) = mpsc::channel(state.deps.subscriber_buffer.max(1));
            state.subscribers.push(Subscriber { tx, approver });
            let subscribed: Subscribed = (rx, Seq(state.fold.last_seq));
            let _ = reply.send(Ok(subscribed));
        }
        SessionMsg::Cancel { reply } => {
            if let Some(turn) = &state.turn {
                turn.cancel.cancel();
                let _ = turn.actor.cast(TurnMsg::Cancel {
                    reason: "user".into(),
                });
            }
            let _ = reply.send(Ok(()));
        }
        SessionMsg::Shutdown { reply } => {
            let waiting = state.shutdown.get_or_insert_with(Vec::new);
            if let Some(turn) = &state.turn {
                turn.cancel.cancel();
                let _ = turn.actor.cast(TurnMsg::Cancel {
                    reason: SHUTDOWN_REASON.into(),
                });
                waiting.push(reply);
            } else {
                state.session_end_hooks().await;
                let _ = reply.send(());
            }
        }
        SessionMsg::ClearQueue { reply } => {
            let kinds = state
                .fold
                .queue
                .iter()
                .map(|(input_id, _)| EventKind::InputDropped {
                    input_id: *input_id,
                    reason: "queue cleared".into(),
                })
                .collect();
            let _ = reply.send(state.persist(None, kinds).await.map(|_| ()));
        }
        SessionMsg::GetPendingApprovals { reply } => {
            let _ = reply.send(Ok(state.pending_approvals()));
        }
        SessionMsg::DecideApproval {
            request_id,
            decision,
            message,
            reply,
        } => {
            let _ = reply.send(state.decide(request_id, decision, message).await);
        }
        SessionMsg::SetTitle { title, reply } => {
            let kind = EventKind::TitleSet {
                title,
                source: foya_protocol::TitleSource::User,
            };
            let _ = reply.send(state.persist(None, vec![kind]).await.map(|_| ()));
        }
        SessionMsg::SetModel {
            provider,
            model,
            reply,
        } => {
            let config = &state.fold.config;
            let result = if config.provider == provider && config.model == model {
                Ok(())
            } else {
                let kind = EventKind::ConfigChanged { provider, model };
                state.persist(None, vec![kind]).await.map(|_| ())
            };
            let _ = reply.send(result);
        }
        SessionMsg::Delete { reply } => {
            state.deleting = Some(reply);
            if let Some(turn) = &state.turn {
                turn.cancel.cancel();
                let _ = turn.actor.cast(TurnMsg::Cancel {
                    reason: "session deleted".into(),
                });
            } else {
                state.finish_delete(&myself).await?;
            }
        }
        SessionMsg::Append {
            run_id,
            mut kinds,
            reply,
        } => {
            let open = state.fold.open_turn.as_ref().map(|t| t.run_id);
            // Once a cancel is requested, tool activity is no longer recorded: the
            // turn writes the calls' "cancelled" results and its end. An append that
            // holds other events too (the turn's step events with the `tool_started`
            // of the calls it starts at once) keeps those and drops the activity.
            let cancelling = state.turn.as_ref().is_some_and(|t| t.cancel.is_cancelled());
            if cancelling && !kinds.iter().all(is_tool_activity) {
                kinds.retain(|k| !is_tool_activity(k));
            }
            let result = if cancelling && kinds.iter().any(is_tool_activity) {
                Err("the turn is being cancelled".to_owned())
            } else if let Some(failure) = &state.storage_failure {
                Err(format!("the turn failed on a storage error: {failure}"))
            } else if open == Some(run_id) {
                match state.persist(Some(run_id), kinds).await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        state.storage_failed(&e);
                        Err(e.to_string())
                    }
                }
            } else {
                Err(format!("run {run_id} is not the session's open turn"))
            };
            if let Some(reply) = reply {
                let _ = reply.send(result);
            }
        }
        SessionMsg::PublishDeltas { run_id, deltas } => {
            // A stream task outliving its turn (killed, crashed) publishes nothing
            // after the turn's end.
            if state.fold.open_turn.as_ref().map(|t| t.run_id) != Some(run_id) {
                return Ok(());
            }
            for delta in deltas {
                let live = LiveDelta {
                    session_id: state.fold.id,
                    run_id,
                    delta,
                };
                state.broadcast(SessionUpdate::Delta(live));
            }
        }
        msg @ SessionMsg::RequestApproval { .. } => state.request_approval(msg).await?,
        SessionMsg::TitleGenerated {
            title,
            expected,
            reply,
        } => {
            let applied = state.title_generated(title, expected).await?;
            if let Some(reply) = reply {
                let _ = reply.send(applied);
            }
        }
        // Handled before (`SessionActor::handle`): it is not activity.
        SessionMsg::Hibernate => {}
        #[cfg(test)]
        SessionMsg::Crash => panic!("test-induced SessionActor panic"),
        #[cfg(test)]
        SessionMsg::CrashTurn => {
            if let Some(turn) = &state.turn {
                let _ = turn.actor.cast(TurnMsg::Panic);
            }
        }
    }
    Ok(())
}

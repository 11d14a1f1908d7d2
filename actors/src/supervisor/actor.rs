//! The Supervisor's handlers.

use super::SupervisorMsg;
use crate::kernel::{RuntimeDeps, RuntimeError, now_ms};
use crate::session::SessionMsg;
use crate::session::actor::{SessionActor, SessionArgs};
use crate::session::state::SessionState;
use dashmap::DashMap;
use foya_protocol::{Event, EventKind, Seq, SessionConfig, SessionId};
use foya_storage::EventLog as _;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;

/// The registry of live sessions.
pub(crate) type Registry = Arc<DashMap<SessionId, ActorRef<SessionMsg>>>;

/// The Supervisor actor.
#[derive(Debug)]
pub(crate) struct SupervisorActor;

/// What the Supervisor is started with.
#[derive(Debug)]
pub(crate) struct SupervisorArgs {
    pub deps: Arc<RuntimeDeps>,
    pub registry: Registry,
}

/// The Supervisor's state.
#[derive(Debug)]
pub(crate) struct Supervisor {
    deps: Arc<RuntimeDeps>,
    registry: Registry,
    children: HashMap<ActorId, SessionId>,
    /// Restarts after failures, per session: how many in a row (each within
    /// [`RESTART_WINDOW`] of the one before), and when the last one was.
    restarts: HashMap<SessionId, (u32, tokio::time::Instant)>,
    /// Set by `Drain`: no session is created or loaded any more.
    closing: bool,
    /// Sessions that hibernated and were not loaded since (the runtime's
    /// `sessions_hibernated`), each with whether a turn of it had started in this
    /// runtime (woken, it does not run its `SessionStart` hooks again).
    hibernated: HashMap<SessionId, bool>,
}

/// A session that failed more often than this in a row is restarted only after
/// [`SLOW_RESTART_DELAY`], so a session that fails on start cannot spin.
const MAX_RESTARTS: u32 = 3;

/// Past [`MAX_RESTARTS`] in a row, a failed session is restarted after this, at most
/// [`SLOW_RESTARTS`] more times (about five minutes: a store that reads but does not yet
/// write, a database taking no new connections, may be back by then); then it is left
/// stopped, loaded again on the next request for it.
const SLOW_RESTART_DELAY: std::time::Duration = std::time::Duration::from_secs(30);
const SLOW_RESTARTS: u32 = 10;

/// Failures further apart than this are not in a row: a long-lived node restarts a
/// session after each of its occasional store outages, not only after the first three.
const RESTART_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// A restart that could not read the log is tried again after this, doubled each time up
/// to [`RESTART_DELAY_MAX`], at most [`RESTART_ATTEMPTS`] times (about 90 s in
/// all: a database restart or a short outage, not a lost store); then the session is
/// left stopped, loaded again on the next request for it.
const RESTART_DELAY: std::time::Duration = std::time::Duration::from_millis(250);
const RESTART_DELAY_MAX: std::time::Duration = std::time::Duration::from_secs(30);
const RESTART_ATTEMPTS: u32 = 10;

impl Supervisor {
    async fn spawn(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        state: SessionState,
        log: Vec<Event>,
    ) -> Result<ActorRef<SessionMsg>, RuntimeError> {
        let id = state.id;
        let woken = self.hibernated.remove(&id);
        let args = SessionArgs {
            state,
            log,
            deps: Arc::clone(&self.deps),
            hooks_started: woken.unwrap_or(false),
        };
        let (actor, _) = Actor::spawn_linked(None, SessionActor, args, myself.get_cell())
            .await
            .map_err(|e| RuntimeError::Actor(e.to_string()))?;
        self.children.insert(actor.get_id(), id);
        self.registry.insert(id, actor.clone());
        if woken.is_some() {
            self.deps.stats.set_hibernated(self.hibernated.len());
        }
        Ok(actor)
    }

    async fn create(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        config: SessionConfig,
    ) -> Result<(SessionId, ActorRef<SessionMsg>), RuntimeError> {
        if self.closing {
            return Err(RuntimeError::ShuttingDown);
        }
        let (state, log) = new_session(&self.deps, config).await?;
        let id = state.id;
        Ok((id, self.spawn(myself, state, log).await?))
    }

    /// Restarts failed session `id` from the log (its `attempt`-th try); when the log
    /// cannot be read, tries again later: a session with an open turn or queued inputs
    /// is otherwise left waiting for a request that may never come.
    async fn restart(&mut self, myself: &ActorRef<SupervisorMsg>, id: SessionId, attempt: u32) {
        if self.closing {
            return;
        }
        match self.load(myself, id).await {
            Ok(_) => {
                if attempt > 0 {
                    tracing::info!(session.id = %id, attempt, "session restarted from the log");
                }
            }
            Err(RuntimeError::Storage(e)) if attempt + 1 < RESTART_ATTEMPTS => {
                let delay = RESTART_DELAY
                    .saturating_mul(1 << attempt.min(16))
                    .min(RESTART_DELAY_MAX);
                tracing::warn!(session.id = %id, error = %e, retry_in_ms = delay.as_millis(), "session restart failed; trying again");
                myself.send_after(delay, move || SupervisorMsg::Restart {
                    id,
                    attempt: attempt + 1,
                });
            }
            Err(e) => {
                tracing::error!(session.id = %id, error = %e, "session restart failed; left stopped until a request loads it");
            }
        }
    }

    async fn load(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        id: SessionId,
    ) -> Result<ActorRef<SessionMsg>, RuntimeError> {
        if let Some(actor) = self.registry.get(&id)
            && crate::session::is_alive(actor.get_status())
        {
            return Ok(actor.clone());
        }
        if self.closing {
            return Err(RuntimeError::ShuttingDown);
        }
        let events = self
            .deps
            .store
            .read_from(id, Seq::FIRST)
            .await
            .map_err(|e| RuntimeError::Storage(crate::kernel::StorageError::of(e)))?;
        let state = SessionState::from_log(&events).ok_or(RuntimeError::SessionNotFound(id))?;
        if state.deleted {
            return Err(RuntimeError::SessionDeleted(id));
        }
        // A cluster node runs only the sessions of the shards it holds.
        self.deps
            .admit(id, state.config.parent.as_ref().map(|p| p.session_id))?;
        self.spawn(myself, state, events).await
    }
}

/// Commits `session_created` of a new session with `config`; returns the session's state
/// and log, ready for a SessionActor.
///
/// # Errors
/// [`RuntimeError::Storage`] when the store refuses the write.
pub(super) async fn new_session(
    deps: &RuntimeDeps,
    config: SessionConfig,
) -> Result<(SessionState, Vec<Event>), RuntimeError> {
    let parent = config.parent.as_ref().map(|p| p.session_id);
    let id = deps.mint_session_id(parent)?;
    let fence = deps.fence_for(id, parent)?;
    let event = Event {
        session_id: id,
        seq: Seq::FIRST,
        run_id: None,
        at_ms: now_ms(),
        kind: EventKind::SessionCreated {
            config: config.clone(),
        },
    };
    deps.store
        .append(std::slice::from_ref(&event), fence)
        .await
        .map_err(|e| {
            if matches!(e, foya_storage::AppendError::Fenced { .. }) {
                deps.report_fenced(fence);
            }
            RuntimeError::Storage(crate::kernel::StorageError::of(e))
        })?;
    let mut state = SessionState::new(id, config);
    crate::session::state::apply(&mut state, &event);
    Ok((state, vec![event]))
}

impl Actor for SupervisorActor {
    type Msg = SupervisorMsg;
    type State = Supervisor;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<Supervisor, ActorProcessingErr> {
        Ok(Supervisor {
            deps: args.deps,
            registry: args.registry,
            children: HashMap::new(),
            restarts: HashMap::new(),
            closing: false,
            hibernated: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut Supervisor,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::CreateSession { config, reply } => {
                let _ = reply.send(state.create(&myself, *config).await);
            }
            SupervisorMsg::GetSession { id, reply } => {
                let _ = reply.send(state.load(&myself, id).await);
            }
            SupervisorMsg::Restart { id, attempt } => state.restart(&myself, id, attempt).await,
            SupervisorMsg::Drain { reply } => {
                state.closing = true;
                let live = state
                    .registry
                    .iter()
                    .map(|entry| entry.value().clone())
                    .collect();
                let _ = reply.send(Ok(live));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut Supervisor,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, last, reason) => {
                if let Some(id) = state.children.remove(&cell.get_id()) {
                    state
                        .registry
                        .remove_if(&id, |_, a| a.get_id() == cell.get_id());
                    if reason.as_deref() == Some(crate::session::machine::HIBERNATED) {
                        let hooks_started = last
                            .and_then(|mut s| s.take::<crate::session::actor::Session>().ok())
                            .is_some_and(|s| s.hooks_started());
                        state.hibernated.insert(id, hooks_started);
                        state.deps.stats.set_hibernated(state.hibernated.len());
                    }
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(id) = state.children.remove(&cell.get_id()) {
                    tracing::warn!(session.id = %id, error = %err, "session actor failed; restarting from the log");
                    state
                        .registry
                        .remove_if(&id, |_, a| a.get_id() == cell.get_id());
                    let now = tokio::time::Instant::now();
                    let (restarts, last) = state.restarts.entry(id).or_insert((0, now));
                    if now.duration_since(*last) > RESTART_WINDOW {
                        *restarts = 0;
                    }
                    *restarts += 1;
                    *last = now;
                    if state.closing {
                        tracing::warn!(session.id = %id, "not restarted: the runtime is shutting down");
                    } else if *restarts > MAX_RESTARTS + SLOW_RESTARTS {
                        tracing::error!(session.id = %id, "session failed too often; left stopped");
                    } else if *restarts > MAX_RESTARTS {
                        tracing::warn!(
                            session.id = %id,
                            retry_in_s = SLOW_RESTART_DELAY.as_secs(),
                            "session failed again and again; restarting it later"
                        );
                        myself.send_after(SLOW_RESTART_DELAY, move || SupervisorMsg::Restart {
                            id,
                            attempt: 0,
                        });
                    } else {
                        state.restart(&myself, id, 0).await;
                    }
                }
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
            #[cfg(feature = "cluster")]
            SupervisionEvent::PidLifecycleEvent(_) => {}
        }
        Ok(())
    }
}

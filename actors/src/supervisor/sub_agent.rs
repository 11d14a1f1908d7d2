//! Sub-agents in the supervision tree: the [`Spawner`] the `agent` tool starts child
//! sessions through, and the [`SubAgentActor`] that owns one child for one `agent` call.
//!
//! ```text
//! SessionActor (parent)
//!  ├─ TurnActor (parent turn) ── ToolActor (`agent` call) ── holds the ChildSession
//!  └─ SubAgentActor (that call)        stopped when the ChildSession is dropped
//!      └─ SessionActor (child)         in the registry, so it is reachable by id
//!          └─ TurnActor …
//! ```
//!
//! The SubAgentActor sits beside the parent turn, under the parent session, rather than
//! under the ToolActor or the TurnActor: ractor kills an actor's linked children the
//! moment it exits, and the turn kills its ToolActors on cancel, so a child linked there
//! would die before writing its `turn_cancelled`. Its lifetime is still the call's: the
//! call's [`ChildSession`] stops it when dropped (the call returned, was cancelled, or its
//! ToolActor was killed with the parent turn). Stopping is graceful: `post_stop` cancels
//! the child's running turn, waits (at most [`END_GRACE`]) for its `turn_complete`, then
//! stops the child, whose exit then needs no detached task.
//!
//! Supervision policy: when the child stops or fails, the SubAgentActor removes it from
//! the registry and stops (no restart: the call sees its subscription end and reports
//! the failure; the child's log is recovered when something loads it again).

use super::actor::{Registry, new_session};
use crate::kernel::{RuntimeDeps, ask};
use crate::session::SessionMsg;
use crate::session::actor::{SessionActor, SessionArgs};
use crate::subscription::Subscription;
use crate::tools::builtin::agent::{ChildSession, SubAgentError, SubAgentSpawner};
use async_trait::async_trait;
use foya_protocol::{
    Event, EventKind, Input, InputId, Seq, SessionConfig, SessionId, SessionUpdate,
};
use foya_storage::EventLog as _;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a stopping SubAgentActor waits for its child's cancelled turn to end.
const END_GRACE: Duration = Duration::from_secs(5);

/// Starts child sessions for the `agent` tool. Holds the actors' deps weakly (the deps
/// hold the tool registry, which holds this): once the runtime is closed, nothing starts.
#[derive(Debug)]
pub(crate) struct Spawner {
    deps: Weak<RuntimeDeps>,
    registry: Registry,
}

impl Spawner {
    /// A spawner over the actors' deps and the session registry.
    pub(crate) fn new(deps: Weak<RuntimeDeps>, registry: Registry) -> Self {
        Self { deps, registry }
    }

    fn deps(&self) -> Result<Arc<RuntimeDeps>, String> {
        self.deps
            .upgrade()
            .ok_or_else(|| "sub-agents are not available (the runtime is stopping)".into())
    }

    /// The running SessionActor of `id`.
    fn running(&self, id: SessionId) -> Option<ActorRef<SessionMsg>> {
        self.registry
            .get(&id)
            .map(|actor| actor.clone())
            .filter(|actor| crate::session::is_alive(actor.get_status()))
    }
}

#[async_trait]
impl SubAgentSpawner for Spawner {
    async fn parent_config(&self, parent: SessionId) -> Result<SessionConfig, SubAgentError> {
        self.read_parent_config(parent).await.map_err(SubAgentError)
    }

    async fn start(&self, config: SessionConfig) -> Result<Box<dyn ChildSession>, SubAgentError> {
        self.start_child(config).await.map_err(SubAgentError)
    }
}

impl Spawner {
    async fn read_parent_config(&self, parent: SessionId) -> Result<SessionConfig, String> {
        self.deps()?
            .store
            .read_from(parent, Seq::FIRST)
            .await
            .map_err(|e| format!("cannot read the parent session: {e}"))?
            .into_iter()
            .find_map(|e| match e.kind {
                EventKind::SessionCreated { config } => Some(config),
                _ => None,
            })
            .ok_or_else(|| "the parent session has no configuration".into())
    }

    async fn start_child(&self, config: SessionConfig) -> Result<Box<dyn ChildSession>, String> {
        let deps = self.deps()?;
        let parent_id = config
            .parent
            .as_ref()
            .map(|p| p.session_id)
            .ok_or("a sub-agent needs a parent session")?;
        let parent = self
            .running(parent_id)
            .ok_or("the parent session is not running")?;
        let (state, log) = new_session(&deps, deps.complete_config(config))
            .await
            .map_err(|e| e.to_string())?;
        let id = state.id;
        let (started, child) = oneshot::channel();
        let args = SubAgentArgs {
            session: SessionArgs {
                state,
                log,
                deps: Arc::clone(&deps),
                hooks_started: false,
            },
            registry: Arc::clone(&self.registry),
            started,
        };
        let (owner, _) = Actor::spawn_linked(None, SubAgentActor, args, parent.get_cell())
            .await
            .map_err(|e| e.to_string())?;
        let session = child
            .await
            .map_err(|_| "the sub-agent session did not start".to_owned())?;
        Ok(Box::new(Child {
            id,
            session,
            owner,
            deps,
            updates: None,
        }))
    }
}

/// One `agent` call's child session; dropping it stops the child's SubAgentActor.
struct Child {
    id: SessionId,
    session: ActorRef<SessionMsg>,
    owner: ActorRef<SubAgentMsg>,
    deps: Arc<RuntimeDeps>,
    updates: Option<Subscription>,
}

impl Child {
    async fn submit_task(&mut self, task: &str) -> Result<(), String> {
        let subscribed = ask(&self.session, |reply| SessionMsg::Subscribe {
            approver: false,
            reply,
        })
        .await
        .map_err(|e| e.to_string())?;
        let updates = Subscription::replaying(self.id, Seq::FIRST, subscribed, &self.deps.store)
            .await
            .map_err(|e| e.to_string())?;
        self.updates = Some(updates);
        ask(&self.session, |reply| SessionMsg::SubmitInput {
            input_id: InputId::new(),
            input: Input::text(task),
            reply,
        })
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.owner.stop(None);
    }
}

#[async_trait]
impl ChildSession for Child {
    fn id(&self) -> SessionId {
        self.id
    }

    async fn submit(&mut self, task: &str) -> Result<(), SubAgentError> {
        self.submit_task(task).await.map_err(SubAgentError)
    }

    async fn next(&mut self) -> Option<SessionUpdate> {
        self.updates.as_mut()?.recv().await
    }

    async fn cancel(&self) {
        let _ = ask(&self.session, |reply| SessionMsg::Cancel { reply }).await;
    }
}

/// The SubAgentActor: owns one child session for one `agent` call.
#[derive(Debug)]
pub(crate) struct SubAgentActor;

/// Nothing is sent to a SubAgentActor: it is only stopped.
#[derive(Debug)]
pub(crate) enum SubAgentMsg {}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for SubAgentMsg {}

/// What a SubAgentActor is started with.
pub(crate) struct SubAgentArgs {
    session: SessionArgs,
    registry: Registry,
    /// Told the child's SessionActor once it runs.
    started: oneshot::Sender<ActorRef<SessionMsg>>,
}

/// The SubAgentActor's state.
#[derive(Debug)]
pub(crate) struct SubAgent {
    id: SessionId,
    child: ActorRef<SessionMsg>,
    registry: Registry,
    /// The actors' deps (held so that `Runtime::close` waits for this actor too).
    deps: Arc<RuntimeDeps>,
}

impl SubAgent {
    /// Removes the child from the registry (unless another actor serves it by now).
    fn unregister(&self) {
        let child = self.child.get_id();
        self.registry
            .remove_if(&self.id, |_, a| a.get_id() == child);
    }
}

impl Actor for SubAgentActor {
    type Msg = SubAgentMsg;
    type State = SubAgent;
    type Arguments = SubAgentArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SubAgentMsg>,
        args: SubAgentArgs,
    ) -> Result<SubAgent, ActorProcessingErr> {
        let id = args.session.state.id;
        let deps = Arc::clone(&args.session.deps);
        let (child, _) =
            Actor::spawn_linked(None, SessionActor, args.session, myself.get_cell()).await?;
        args.registry.insert(id, child.clone());
        let _ = args.started.send(child.clone());
        Ok(SubAgent {
            id,
            child,
            registry: args.registry,
            deps,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<SubAgentMsg>,
        msg: SubAgentMsg,
        _state: &mut SubAgent,
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SubAgentMsg>,
        event: SupervisionEvent,
        state: &mut SubAgent,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _)
            | SupervisionEvent::ActorFailed(cell, _)
                if cell.get_id() == state.child.get_id() =>
            {
                state.unregister();
                myself.stop(None);
            }
            SupervisionEvent::ActorTerminated(..)
            | SupervisionEvent::ActorFailed(..)
            | SupervisionEvent::ActorStarted(_)
            | SupervisionEvent::ProcessGroupChanged(_) => {}
            #[cfg(feature = "cluster")]
            SupervisionEvent::PidLifecycleEvent(_) => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SubAgentMsg>,
        state: &mut SubAgent,
    ) -> Result<(), ActorProcessingErr> {
        if crate::session::is_alive(state.child.get_status()) {
            end_turn(state).await;
            let _ = state.child.stop_and_wait(None, Some(END_GRACE)).await;
        }
        state.unregister();
        Ok(())
    }
}

/// Cancels the child's running turn, if it has one, and waits at most [`END_GRACE`] for
/// its `turn_complete` to be committed.
async fn end_turn(state: &SubAgent) {
    let subscribed = ask(&state.child, |reply| SessionMsg::Subscribe {
        approver: false,
        reply,
    })
    .await;
    let Ok((mut live, committed, _watch)) = subscribed else {
        return;
    };
    let Ok(log) = state.deps.store.read_from(state.id, Seq::FIRST).await else {
        return;
    };
    if !turn_open(log.iter().filter(|e| e.seq <= committed)) {
        return;
    }
    let _ = ask(&state.child, |reply| SessionMsg::Cancel { reply }).await;
    let ended = async {
        while let Some(update) = live.recv().await {
            if let SessionUpdate::Event(event) = *update
                && matches!(event.kind, EventKind::TurnComplete { .. })
            {
                return;
            }
        }
    };
    if tokio::time::timeout(END_GRACE, ended).await.is_err() {
        tracing::warn!(session.id = %state.id, "a sub-agent's turn did not end within its grace");
    }
}

/// Whether `log` has a turn started and not completed.
fn turn_open<'a>(log: impl Iterator<Item = &'a Event>) -> bool {
    log.fold(false, |open, event| match event.kind {
        EventKind::TurnStarted { .. } => true,
        EventKind::TurnComplete { .. } => false,
        _ => open,
    })
}

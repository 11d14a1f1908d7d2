//! The embedding façade: [`Runtime`] and [`SessionHandle`]. ActorRefs never leave the
//! crate; a handle resolves its session through the registry on every call, so it keeps
//! working after the session is restarted or reloaded from the log.
//!
//! Bird's-eye flow: `Runtime::start` spawns the Supervisor; `create_session` writes
//! `session_created` and starts a SessionActor; `submit` lands in the session's FIFO;
//! the session spawns a TurnActor per input, which spawns a ProviderActor per model
//! request and ToolActors per tool call; every event is committed by the session and
//! then broadcast to [`Subscription`]s.

use crate::provider::ModelClient;
use crate::provider::retry::RetryPolicy;
use crate::session::{Reply, SessionMsg};
pub use crate::subscription::{SubscribeOptions, Subscription};
use crate::supervisor::actor::Registry;
use crate::supervisor::{SupervisorActor, SupervisorArgs, SupervisorMsg};
use crate::tools::ToolRegistry;
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, Input, InputId, Seq, SessionConfig, SessionId,
    SessionSummary,
};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::task::JoinHandle;

/// Errors of the façade.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// No session with this id exists.
    #[error("session {0} not found")]
    SessionNotFound(SessionId),
    /// The session was deleted.
    #[error("session {0} was deleted")]
    SessionDeleted(SessionId),
    /// The input carries nothing.
    #[error("the input is empty")]
    EmptyInput,
    /// No pending approval request has this id.
    #[error("no pending approval request {0}")]
    UnknownApproval(ApprovalRequestId),
    /// The event store failed.
    #[error("storage: {0}")]
    Storage(String),
    /// The actor system failed (an actor stopped or did not answer).
    #[error("runtime: {0}")]
    Actor(String),
}

/// What a runtime is built from.
#[derive(Debug)]
pub struct RuntimeConfig {
    /// The event store.
    pub store: foya_storage::Store,
    /// The model client used when a session's `provider` is not in `models`.
    pub model: Arc<dyn ModelClient>,
    /// Model clients by `SessionConfig::provider`.
    pub models: HashMap<String, Arc<dyn ModelClient>>,
    /// The tools sessions may call.
    pub tools: Arc<ToolRegistry>,
    /// Retry policy of model requests.
    pub retry: RetryPolicy,
    /// Capacity of each subscriber's channel (events + deltas); a subscriber that falls
    /// this far behind is cut off with `Notice::Lagged`. 0 counts as 1.
    pub subscriber_buffer: usize,
}

/// What every actor shares.
#[derive(Debug)]
pub(crate) struct RuntimeDeps {
    pub store: foya_storage::Store,
    pub model: Arc<dyn ModelClient>,
    pub models: HashMap<String, Arc<dyn ModelClient>>,
    pub tools: Arc<ToolRegistry>,
    pub retry: RetryPolicy,
    pub subscriber_buffer: usize,
}

impl RuntimeDeps {
    /// The client for a session's provider name.
    pub(crate) fn client_for(&self, provider: &str) -> Arc<dyn ModelClient> {
        Arc::clone(self.models.get(provider).unwrap_or(&self.model))
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[derive(Debug)]
struct Inner {
    supervisor: ActorRef<SupervisorMsg>,
    join: std::sync::Mutex<Option<JoinHandle<()>>>,
    registry: Registry,
    deps: Arc<RuntimeDeps>,
}

/// A running Foya runtime (one Supervisor and its sessions).
#[derive(Debug)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// A cheap, cloneable handle to one session.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    id: SessionId,
    inner: Arc<Inner>,
}

fn actor_err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Actor(e.to_string())
}

/// Sends a request built by `build` and waits for its reply.
async fn ask<M: ractor::Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    build: impl FnOnce(Reply<T>) -> M,
) -> Result<T, RuntimeError> {
    match actor.call(build, None).await.map_err(actor_err)? {
        CallResult::Success(result) => result,
        CallResult::Timeout | CallResult::SenderError => Err(RuntimeError::Actor(
            "the actor stopped before answering".into(),
        )),
    }
}

impl Inner {
    async fn session_actor(&self, id: SessionId) -> Result<ActorRef<SessionMsg>, RuntimeError> {
        if let Some(actor) = self.registry.get(&id)
            && crate::session::is_alive(actor.get_status())
        {
            return Ok(actor.clone());
        }
        ask(&self.supervisor, |reply| SupervisorMsg::GetSession {
            id,
            reply,
        })
        .await
    }
}

impl Runtime {
    /// Starts the Supervisor.
    ///
    /// # Errors
    /// [`RuntimeError::Actor`] when the actor system cannot start.
    pub async fn start(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let deps = Arc::new(RuntimeDeps {
            store: config.store,
            model: config.model,
            models: config.models,
            tools: config.tools,
            retry: config.retry,
            subscriber_buffer: config.subscriber_buffer.max(1),
        });
        let registry: Registry = Arc::default();
        let args = SupervisorArgs {
            deps: Arc::clone(&deps),
            registry: Arc::clone(&registry),
        };
        let (supervisor, join) = Actor::spawn(None, SupervisorActor, args)
            .await
            .map_err(actor_err)?;
        let inner = Inner {
            supervisor,
            join: std::sync::Mutex::new(Some(join)),
            registry,
            deps,
        };
        Ok(Runtime {
            inner: Arc::new(inner),
        })
    }

    /// Creates a session (`session_created` is committed when this returns).
    ///
    /// # Errors
    /// [`RuntimeError::Storage`] when the store refuses the write.
    pub async fn create_session(
        &self,
        config: SessionConfig,
    ) -> Result<SessionHandle, RuntimeError> {
        let actor: ActorRef<SessionMsg> = ask(&self.inner.supervisor, |reply| {
            SupervisorMsg::CreateSession { config, reply }
        })
        .await?;
        let id = self
            .inner
            .registry
            .iter()
            .find(|e| e.value().get_id() == actor.get_id())
            .map(|e| *e.key());
        let id =
            id.ok_or_else(|| RuntimeError::Actor("created session is not registered".into()))?;
        Ok(SessionHandle {
            id,
            inner: Arc::clone(&self.inner),
        })
    }

    /// A handle to a live session, loading it from the log (with recovery) if needed.
    ///
    /// # Errors
    /// [`RuntimeError::SessionNotFound`], [`RuntimeError::SessionDeleted`], storage errors.
    pub async fn session(&self, id: SessionId) -> Result<SessionHandle, RuntimeError> {
        self.inner.session_actor(id).await?;
        Ok(SessionHandle {
            id,
            inner: Arc::clone(&self.inner),
        })
    }

    /// Every session in the store (deleted ones flagged).
    ///
    /// # Errors
    /// [`RuntimeError::Storage`].
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, RuntimeError> {
        self.inner
            .deps
            .store
            .list_sessions()
            .map_err(|e| RuntimeError::Storage(e.to_string()))
    }

    /// Loads every session that has an unfinished turn or queued inputs (recovery runs on
    /// load); returns how many were loaded.
    ///
    /// # Errors
    /// [`RuntimeError::Storage`].
    pub async fn recover_all(&self) -> Result<usize, RuntimeError> {
        let mut loaded = 0;
        for summary in self.list_sessions()? {
            if summary.deleted || self.inner.registry.contains_key(&summary.id) {
                continue;
            }
            let events = self
                .inner
                .deps
                .store
                .read_from(summary.id, Seq::FIRST)
                .map_err(|e| RuntimeError::Storage(e.to_string()))?;
            let Some(state) = crate::session::state::SessionState::from_log(&events) else {
                continue;
            };
            if state.open_turn.is_some() || !state.queue.is_empty() {
                self.inner.session_actor(summary.id).await?;
                loaded += 1;
            }
        }
        Ok(loaded)
    }

    /// Stops every actor (running turns stop where they are and are recovered on the
    /// next load) and closes the store.
    pub async fn shutdown(self) {
        self.inner.supervisor.stop(Some("shutdown".into()));
        let join = self.inner.join.lock().ok().and_then(|mut j| j.take());
        if let Some(join) = join {
            let _ = join.await;
        }
        self.inner.deps.store.close().await;
    }
}

impl SessionHandle {
    /// Test hook: make the session's active TurnActor panic.
    #[cfg(test)]
    pub(crate) async fn crash_turn_for_test(&self) {
        let actor = self.inner.session_actor(self.id).await.ok();
        if let Some(actor) = actor {
            let _ = actor.cast(SessionMsg::CrashTurn);
        }
    }

    /// Test hook: make the SessionActor panic.
    #[cfg(test)]
    pub(crate) async fn crash_session_for_test(&self) {
        let actor = self.inner.session_actor(self.id).await.ok();
        if let Some(actor) = actor {
            let _ = actor.cast(SessionMsg::Crash);
        }
    }

    /// The session id.
    #[must_use]
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// Runs `f` against the live session actor, reloading it once if it had stopped.
    async fn with_session<T: Send + 'static>(
        &self,
        build: impl Fn(Reply<T>) -> SessionMsg,
    ) -> Result<T, RuntimeError> {
        let actor = self.inner.session_actor(self.id).await?;
        match ask(&actor, &build).await {
            Err(RuntimeError::Actor(_)) => {
                let actor = self.inner.session_actor(self.id).await?;
                ask(&actor, build).await
            }
            other => other,
        }
    }

    /// Submits an input with a fresh id.
    ///
    /// # Errors
    /// [`RuntimeError::EmptyInput`], session and storage errors.
    pub async fn submit(&self, input: Input) -> Result<InputId, RuntimeError> {
        self.submit_with_id(InputId::new(), input).await
    }

    /// Submits an input under a client-chosen id; a repeated id is applied once.
    ///
    /// # Errors
    /// As [`Self::submit`].
    pub async fn submit_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<InputId, RuntimeError> {
        self.with_session(|reply| SessionMsg::SubmitInput {
            input_id,
            input: input.clone(),
            reply,
        })
        .await
    }

    /// Subscribes from `from_seq` (1 = everything): committed events are replayed from
    /// the store, then live ones follow with no gap and no duplicate, with deltas.
    ///
    /// # Errors
    /// Session and storage errors.
    pub async fn subscribe(
        &self,
        from_seq: Seq,
        options: SubscribeOptions,
    ) -> Result<Subscription, RuntimeError> {
        let approver = options.approver;
        let (rx, committed) = self
            .with_session(|reply| SessionMsg::Subscribe { approver, reply })
            .await?;
        let backlog = self
            .inner
            .deps
            .store
            .read_from(self.id, from_seq.max(Seq::FIRST))
            .map_err(|e| RuntimeError::Storage(e.to_string()))?
            .into_iter()
            .filter(|e| e.seq <= committed)
            .collect();
        Ok(Subscription::new(self.id, from_seq, backlog, rx))
    }

    /// Cancels the active turn (no-op when idle).
    ///
    /// # Errors
    /// Session errors.
    pub async fn cancel(&self) -> Result<(), RuntimeError> {
        self.with_session(|reply| SessionMsg::Cancel { reply })
            .await
    }

    /// Drops every queued input (`input_dropped` each).
    ///
    /// # Errors
    /// Session and storage errors.
    pub async fn clear_queue(&self) -> Result<(), RuntimeError> {
        self.with_session(|reply| SessionMsg::ClearQueue { reply })
            .await
    }

    /// Answers a pending approval request.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownApproval`], session and storage errors.
    pub async fn decide_approval(
        &self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    ) -> Result<(), RuntimeError> {
        self.with_session(|reply| SessionMsg::DecideApproval {
            request_id,
            decision,
            message: message.clone(),
            reply,
        })
        .await
    }

    /// Sets the title by hand.
    ///
    /// # Errors
    /// Session and storage errors.
    pub async fn set_title(&self, title: String) -> Result<(), RuntimeError> {
        self.with_session(|reply| SessionMsg::SetTitle {
            title: title.clone(),
            reply,
        })
        .await
    }

    /// Deletes the session: cancels the active turn and waits for it, drops queued
    /// inputs, appends `session_deleted`, closes subscribers (`Notice::Closed`), stops
    /// the actor.
    ///
    /// # Errors
    /// Session and storage errors.
    pub async fn delete(&self) -> Result<(), RuntimeError> {
        let actor = self.inner.session_actor(self.id).await?;
        ask(&actor, |reply| SessionMsg::Delete { reply }).await
    }
}

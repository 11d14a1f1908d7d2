//! [`SessionHandle`] operations: each resolves the live SessionActor through the registry
//! (loading it from the log when needed) and asks it; an actor that stopped in between is
//! resolved once more, so a handle survives session restarts.

use crate::kernel::{ApprovalRequest, Reply, RuntimeError, ask};
use crate::outcome::{TurnOutcome, TurnStream, UpdateSource};
use crate::runtime::SessionHandle;
use crate::session::SessionMsg;
use crate::subscription::{SubscribeOptions, Subscription};
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, Event, Input, InputId, Seq, SessionId, SessionUpdate,
};
use foya_storage::EventLog as _;
use futures::StreamExt;

/// The operations of a session, whether it lives in this runtime ([`SessionHandle`]) or
/// on another node of a cluster ([`RemoteSession`](crate::cluster::RemoteSession)):
/// write a function generic over `SessionApi` and it drives both alike. The methods are
/// [`SessionHandle`]'s, with its signatures (see there for each one's docs); errors are
/// [`RuntimeError`]s on both sides — a remote session's refusals are the variants a
/// local call gets, and only a failure of the cluster layer is
/// [`RuntimeError::Cluster`].
///
/// ```
/// use foya_actors::{RuntimeError, SessionApi};
/// use foya_protocol::{Input, TurnStatus};
///
/// async fn ask<S: SessionApi>(session: &S, question: &str) -> Result<String, RuntimeError> {
///     let outcome = session.run(Input::text(question)).await?;
///     if outcome.status != TurnStatus::Completed {
///         session.cancel().await?;
///     }
///     Ok(outcome.text)
/// }
/// ```
#[async_trait::async_trait]
pub trait SessionApi: Send + Sync {
    /// What [`Self::subscribe`] returns: a stream of the session's updates that ends
    /// with `Notice::Closed`, or with `Notice::Lagged{last_seq}` when the reader fell
    /// the subscriber buffer behind (resubscribe from `last_seq + 1`).
    type Subscription: futures::Stream<Item = SessionUpdate> + Send + Unpin;

    /// The session id.
    fn id(&self) -> SessionId;

    /// [`SessionHandle::submit`]: [`Self::submit_with_id`] under a new id.
    async fn submit(&self, input: Input) -> Result<InputId, RuntimeError> {
        self.submit_with_id(InputId::new(), input).await
    }

    /// [`SessionHandle::submit_with_id`].
    async fn submit_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<InputId, RuntimeError>;

    /// [`SessionHandle::run`]: [`Self::run_streamed`] to the turn's outcome.
    async fn run(&self, input: Input) -> Result<TurnOutcome, RuntimeError> {
        self.run_streamed(input).await?.outcome().await
    }

    /// [`SessionHandle::run_with_id`].
    async fn run_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<TurnOutcome, RuntimeError>;

    /// [`SessionHandle::run_streamed`].
    async fn run_streamed(&self, input: Input) -> Result<TurnStream, RuntimeError>;

    /// [`SessionHandle::subscribe`].
    async fn subscribe(
        &self,
        from_seq: Seq,
        options: SubscribeOptions,
    ) -> Result<Self::Subscription, RuntimeError>;

    /// [`SessionHandle::cancel`].
    async fn cancel(&self) -> Result<(), RuntimeError>;

    /// [`SessionHandle::decide_approval`].
    async fn decide_approval(
        &self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    ) -> Result<(), RuntimeError>;

    /// [`SessionHandle::delete`].
    async fn delete(&self) -> Result<(), RuntimeError>;
}

#[async_trait::async_trait]
impl SessionApi for SessionHandle {
    type Subscription = Subscription;

    fn id(&self) -> SessionId {
        self.id
    }

    async fn submit_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<InputId, RuntimeError> {
        SessionHandle::submit_with_id(self, input_id, input).await
    }

    async fn run_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<TurnOutcome, RuntimeError> {
        SessionHandle::run_with_id(self, input_id, input).await
    }

    async fn run_streamed(&self, input: Input) -> Result<TurnStream, RuntimeError> {
        SessionHandle::run_streamed(self, input).await
    }

    async fn subscribe(
        &self,
        from_seq: Seq,
        options: SubscribeOptions,
    ) -> Result<Subscription, RuntimeError> {
        SessionHandle::subscribe(self, from_seq, options).await
    }

    async fn cancel(&self) -> Result<(), RuntimeError> {
        SessionHandle::cancel(self).await
    }

    async fn decide_approval(
        &self,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    ) -> Result<(), RuntimeError> {
        SessionHandle::decide_approval(self, request_id, decision, message).await
    }

    async fn delete(&self) -> Result<(), RuntimeError> {
        SessionHandle::delete(self).await
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
        self.inner.admit(self.id)?;
        self.with_session(|reply| SessionMsg::SubmitInput {
            input_id,
            input: input.clone(),
            reply,
        })
        .await
    }

    /// Runs `input` to the end of its turn and returns how it ended: the final text,
    /// status, usage, tool calls and the seqs of the turn's events. An input that
    /// arrives while a turn runs waits in the queue first.
    ///
    /// ```
    /// # async fn demo(session: foya_actors::SessionHandle) -> Result<(), foya_actors::RuntimeError> {
    /// use foya_protocol::{Input, TurnStatus};
    /// let outcome = session.run(Input::text("Summarise README.md")).await?;
    /// if outcome.status == TurnStatus::Completed {
    ///     println!("{} ({} output tokens)", outcome.text, outcome.usage.output_tokens);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`RuntimeError::EmptyInput`] and the other errors of [`Self::submit`]; then those
    /// of [`TurnStream::next`] (input dropped, session deleted, shutting down).
    ///
    /// # Cancel safety
    /// Dropping the future loses nothing: once submitted, the turn runs on (dropping
    /// does not cancel it; [`Self::cancel`] does) and all its events are in the log. To
    /// get the outcome after a drop, use [`Self::run_with_id`] with an id you chose:
    /// calling it again with the same id runs the input once and follows the same turn.
    pub async fn run(&self, input: Input) -> Result<TurnOutcome, RuntimeError> {
        self.run_streamed(input).await?.outcome().await
    }

    /// [`Self::run`] under a client-chosen input id, so that a second call with the same
    /// id (after the first future was dropped, or from another task) follows the same
    /// turn instead of running the input again. It replays the session's log from its
    /// start to find that turn.
    ///
    /// # Errors
    /// As [`Self::run`].
    ///
    /// # Cancel safety
    /// Cancel safe: call it again with the same id.
    pub async fn run_with_id(
        &self,
        input_id: InputId,
        input: Input,
    ) -> Result<TurnOutcome, RuntimeError> {
        let subscription = self
            .subscribe(Seq::FIRST, SubscribeOptions::default())
            .await?;
        self.submit_with_id(input_id, input).await?;
        TurnStream::from_source(
            Box::new(ApiSource {
                session: self.clone(),
                subscription,
            }),
            input_id,
        )
        .outcome()
        .await
    }

    /// Submits `input` and returns its turn's events as they happen: text fragments,
    /// tool calls and results, approval requests, then [`TurnEvent::Done`](crate::TurnEvent::Done) with the
    /// outcome.
    ///
    /// ```
    /// # async fn demo(session: foya_actors::SessionHandle) -> Result<(), foya_actors::RuntimeError> {
    /// use foya_actors::TurnEvent;
    /// use foya_protocol::Input;
    /// let mut turn = session.run_streamed(Input::text("List the files")).await?;
    /// while let Some(event) = turn.next().await {
    ///     match event? {
    ///         TurnEvent::Text(fragment) => print!("{fragment}"),
    ///         TurnEvent::ToolCall(call) => println!("\n[{}]", call.name),
    ///         TurnEvent::Done(outcome) => println!("\n{:?}", outcome.status),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Self::submit`].
    ///
    /// # Cancel safety
    /// As [`Self::run`]; the stream's own [`TurnStream::next`] is cancel safe.
    pub async fn run_streamed(&self, input: Input) -> Result<TurnStream, RuntimeError> {
        let subscription = self.subscribe_live().await?;
        let input_id = self.submit(input).await?;
        Ok(TurnStream::from_source(
            Box::new(ApiSource {
                session: self.clone(),
                subscription,
            }),
            input_id,
        ))
    }

    /// A subscription to what the session commits and streams from now on (no replay).
    async fn subscribe_live(&self) -> Result<Subscription, RuntimeError> {
        let (rx, committed, watch) = self
            .with_session(|reply| SessionMsg::Subscribe {
                approver: false,
                reply,
            })
            .await?;
        let next = Seq(committed.0 + 1);
        Ok(Subscription::new(
            self.id,
            next,
            committed,
            Vec::new(),
            rx,
            Some(watch),
        ))
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
        let subscribed = self
            .with_session(|reply| SessionMsg::Subscribe { approver, reply })
            .await?;
        Subscription::replaying(self.id, from_seq, subscribed, &self.inner.deps()?.store).await
    }

    /// The session's persisted events with seq `>= from_seq` (`Seq::FIRST`: its whole
    /// log), in seq order: what it committed up to now, read from the runtime's store
    /// through [`foya_storage::EventLog`] (the redb store or a shared one alike), without
    /// loading the session. Live deltas are not persisted and are not among them; to
    /// follow what comes next, [`Self::subscribe`] from the last seq + 1.
    ///
    /// ```
    /// # async fn demo(runtime: foya_actors::Runtime, id: foya_protocol::SessionId) -> Result<(), foya_actors::RuntimeError> {
    /// use foya_protocol::{EventKind, Seq};
    /// let session = runtime.session(id).await?; // e.g. after reopening the store
    /// for event in session.history(Seq::FIRST).await? {
    ///     if let EventKind::AssistantMessage(message) = &event.kind {
    ///         println!("{}: {}", event.seq.0, message.text);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`RuntimeError::Storage`] when the store cannot be read;
    /// [`RuntimeError::ShuttingDown`] once the runtime was shut down.
    pub async fn history(&self, from_seq: Seq) -> Result<Vec<Event>, RuntimeError> {
        self.history_page(from_seq, usize::MAX).await
    }

    /// At most `limit` of [`Self::history`]'s events, from `from_seq`: to page through a
    /// long log, ask again from the last seq returned + 1 (fewer than `limit`: the end).
    ///
    /// # Errors
    /// As [`Self::history`].
    pub async fn history_page(
        &self,
        from_seq: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, RuntimeError> {
        self.inner
            .deps()?
            .store
            .read_range(self.id, from_seq.max(Seq::FIRST), limit)
            .await
            .map_err(|e| RuntimeError::Storage(crate::kernel::StorageError::of(e)))
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

    /// The approval requests of this session waiting for a decision, oldest first
    /// (see [`crate::WithoutApprover`]).
    ///
    /// # Errors
    /// Session errors.
    pub async fn pending_approvals(&self) -> Result<Vec<ApprovalRequest>, RuntimeError> {
        self.with_session(|reply| SessionMsg::GetPendingApprovals { reply })
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

    /// Sets the title by hand, stored as one trimmed line
    /// ([`normalize_title`](crate::context::normalize_title)).
    ///
    /// # Errors
    /// [`RuntimeError::EmptyTitle`] for a title that is empty or only whitespace
    /// (nothing is written); session and storage errors.
    pub async fn set_title(&self, title: String) -> Result<(), RuntimeError> {
        let title = crate::context::normalize_title(&title).ok_or(RuntimeError::EmptyTitle)?;
        self.with_session(|reply| SessionMsg::SetTitle {
            title: title.clone(),
            reply,
        })
        .await
    }

    /// Uses `provider` and `model` from the next turn on: when they differ from the
    /// session's, `config_changed{provider, model}` is persisted (a resumed session follows
    /// the command line, not the model it was created with); otherwise nothing is written.
    ///
    /// # Errors
    /// Session and storage errors.
    pub async fn set_model(&self, provider: String, model: String) -> Result<(), RuntimeError> {
        self.with_session(|reply| SessionMsg::SetModel {
            provider: provider.clone(),
            model: model.clone(),
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

/// A session's subscription, local ([`SessionHandle`]) or remote
/// (`cluster::RemoteSession`): it resubscribes through [`SessionApi`].
#[derive(Debug)]
pub(crate) struct ApiSource<S: SessionApi> {
    pub(crate) session: S,
    pub(crate) subscription: S::Subscription,
}

#[async_trait::async_trait]
impl<S> UpdateSource for ApiSource<S>
where
    S: SessionApi + std::fmt::Debug,
    S::Subscription: std::fmt::Debug,
{
    async fn recv(&mut self) -> Option<SessionUpdate> {
        self.subscription.next().await
    }

    async fn resubscribe(&mut self, from: Seq) -> Result<(), RuntimeError> {
        self.subscription = self
            .session
            .subscribe(from, SubscribeOptions::default())
            .await?;
        Ok(())
    }
}

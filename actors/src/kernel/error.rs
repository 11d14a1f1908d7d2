//! The runtime's error type and the request/reply helpers every actor uses.

use foya_protocol::{ApprovalRequestId, SessionId};
use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};

/// Errors of the façade. Non-exhaustive: match the variants you handle and keep a
/// catch-all arm.
///
/// Serialisable, so that a cluster node's refusal reaches the caller on another node as
/// the same variant ([`crate::cluster::ClusterError::Runtime`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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
    /// The input carries images but the session's model does not accept them (its
    /// provider profile sets `vision = false`, or the client has no image support).
    /// Nothing was written; the session is unchanged.
    #[error(
        "model {model:?} does not accept images (its provider profile has no vision); send the input without images"
    )]
    ImagesNotSupported {
        /// The session's model name.
        model: String,
    },
    /// The runtime is shutting down ([`Runtime::drain`](crate::Runtime::drain)): it takes no new inputs or
    /// sessions.
    #[error("the runtime is shutting down")]
    ShuttingDown,
    /// A title set by hand is empty or only whitespace.
    #[error("the title is empty (or only whitespace)")]
    EmptyTitle,
    /// The input followed by [`SessionHandle::run`](crate::SessionHandle::run) was dropped before its turn started
    /// (`input_dropped`: queue cleared, session deleted, dropped on restart).
    #[error("input {input_id} was dropped before it ran: {reason}")]
    InputDropped {
        /// The input.
        input_id: foya_protocol::InputId,
        /// Why (`queue cleared`, …).
        reason: String,
    },
    /// [`crate::TurnStream::outcome`] was called after the stream had already ended.
    #[error("the turn's stream already ended (its outcome was taken)")]
    TurnStreamEnded,
    /// A call to a session on another node failed in the cluster layer (node
    /// unreachable, no answer within the call timeout, …). A refusal of the remote
    /// runtime is not this: it is the variant a local call gets (e.g.
    /// [`RuntimeError::SessionDeleted`]). Made on the calling node only; never sent.
    #[cfg(feature = "cluster")]
    #[error("cluster: {0}")]
    #[serde(skip)]
    Cluster(Box<crate::cluster::ClusterError>),
}

/// A reply carrying a runtime result.
pub(crate) type Reply<T> = RpcReplyPort<Result<T, RuntimeError>>;

/// An actor-system failure as a [`RuntimeError::Actor`].
pub(crate) fn actor_err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Actor(e.to_string())
}

/// Sends a request built by `build` and waits for its reply.
pub(crate) async fn ask<M: ractor::Message, T: Send + 'static>(
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

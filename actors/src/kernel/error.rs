//! The runtime's error type and the request/reply helpers every actor uses.

use foya_protocol::{ApprovalRequestId, SessionId};
use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};
use std::sync::Arc;

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
    /// The event store failed (its error is the [`source`](std::error::Error::source)
    /// on the node where it happened).
    #[error(transparent)]
    Storage(StorageError),
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
    /// The session's shard is not held by this node (a cluster node over a shared
    /// store): another node runs it, or will once it claims the shard. Nothing was
    /// written. `owner`: the node that owns it (or should, by placement), when known.
    #[error("session {session} is in shard {shard}, which this node does not own{}", owner_hint(owner.as_deref()))]
    NotOwner {
        /// The session.
        session: SessionId,
        /// Its shard.
        shard: u32,
        /// The node that owns it, when known.
        owner: Option<String>,
    },
    /// This node holds no shard it may create a session in (a cluster node that has
    /// not claimed its shards yet, or is handing them all off).
    #[error("this node owns no shard to create a session in (yet)")]
    NoShard,
    /// A call to a session on another node failed in the cluster layer (node
    /// unreachable, no answer within the call timeout, …). A refusal of the remote
    /// runtime is not this: it is the variant a local call gets (e.g.
    /// [`RuntimeError::SessionDeleted`]). Made on the calling node only; never sent.
    #[cfg(feature = "cluster")]
    #[error("cluster: {0}")]
    #[serde(skip)]
    Cluster(Box<ClusterError>),
}

/// A failure of the event store ([`RuntimeError::Storage`]): what went wrong, in words,
/// and, on the node where it happened, the store's own error as its
/// [`source`](std::error::Error::source). Serialised as the words alone: a node that
/// gets it from another has no source.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(from = "String", into = "String")]
pub struct StorageError {
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl StorageError {
    /// The failure `error` of the store, kept as the source.
    pub(crate) fn of<E: std::error::Error + Send + Sync + 'static>(error: E) -> Self {
        Self {
            message: error.to_string(),
            source: Some(Arc::new(error)),
        }
    }

    /// What went wrong, in words.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<String> for StorageError {
    fn from(message: String) -> Self {
        Self {
            message,
            source: None,
        }
    }
}

impl From<StorageError> for String {
    fn from(error: StorageError) -> Self {
        error.message
    }
}

/// Equal when they say the same (the source is not compared).
impl PartialEq for StorageError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for StorageError {}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "storage: {}", self.message)
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<foya_core::session::Refusal> for RuntimeError {
    fn from(refusal: foya_core::session::Refusal) -> Self {
        use foya_core::session::Refusal;
        match refusal {
            Refusal::SessionDeleted(id) => Self::SessionDeleted(id),
            Refusal::EmptyInput => Self::EmptyInput,
            Refusal::UnknownApproval(id) => Self::UnknownApproval(id),
            Refusal::Storage(message) => Self::Storage(message.into()),
            Refusal::ImagesNotSupported { model } => Self::ImagesNotSupported { model },
            Refusal::ShuttingDown => Self::ShuttingDown,
        }
    }
}

/// Errors of the cluster API. Non-exhaustive: keep a catch-all arm.
#[cfg(feature = "cluster")]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// No live gateway of this node is known (not connected, or it missed heartbeats).
    #[error("node {0} is not reachable")]
    NodeUnreachable(String),
    /// No node of the cluster has this session.
    #[error("session {0} is not on any reachable node")]
    SessionNotFound(foya_protocol::SessionId),
    /// The remote runtime refused, with the error a local call gets
    /// ([`crate::RuntimeError::SessionDeleted`], `ShuttingDown`, …).
    #[error("remote: {0}")]
    Runtime(RuntimeError),
    /// The gateway answered with an error of the cluster layer (an undecodable request
    /// or reply), or a runtime error from a node too old to send it whole.
    #[error("remote: {0}")]
    Remote(String),
    /// The request did not get an answer (connection lost, actor gone).
    #[error("no answer: {0}")]
    NoAnswer(String),
    /// The node did not answer within the client's call timeout
    /// ([`crate::cluster::NodeConfig::call_timeout`], [`crate::cluster::ClusterClient::with_timeout`]).
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    /// An actor could not start.
    #[error("actor: {0}")]
    Actor(String),
    /// No TCP connection to `addr` (refused, unresolvable, or no answer within
    /// [`crate::cluster::NodeConfig::connect_timeout`]).
    #[error("cannot connect to {addr}: {reason}")]
    ConnectFailed {
        /// The address dialled (`host:port`).
        addr: String,
        /// What went wrong (the OS error, or the timeout).
        reason: String,
    },
    /// The peer at `addr` accepted the TCP connection but did not complete the cluster
    /// handshake within [`crate::cluster::NodeConfig::connect_timeout`] of the dial (it is silent, or is
    /// no cluster node).
    #[error(
        "the peer at {addr} accepted the connection but did not complete the cluster \
         handshake within {timeout:?}"
    )]
    HandshakeTimeout {
        /// The address dialled (`host:port`).
        addr: String,
        /// The bound that passed ([`crate::cluster::NodeConfig::connect_timeout`]).
        timeout: std::time::Duration,
    },
    /// The peer at `addr` accepted the connection but closed it before the cluster
    /// handshake's challenge, on every dial for [`crate::cluster::NodeConfig::connect_timeout`]: it is
    /// no cluster node (an HTTP server, or a proxy answering for an address it cannot
    /// reach).
    #[error(
        "the peer at {addr} accepted the connection but closed it before completing the \
         cluster handshake, on every dial for {timeout:?} (is it a foya node?)"
    )]
    HandshakeClosed {
        /// The address dialled (`host:port`).
        addr: String,
        /// How long it was dialled ([`crate::cluster::NodeConfig::connect_timeout`]).
        timeout: std::time::Duration,
    },
    /// The node at `addr` closed the connection during the cookie handshake: the cookies
    /// differ.
    #[error("authentication with {addr} failed (the cookies differ)")]
    AuthFailed {
        /// The address dialled.
        addr: String,
    },
    /// This node was refused: a node started earlier already holds its name.
    #[error(
        "node name {name:?} is already taken in the cluster by the node at {holder}; \
         choose another --name"
    )]
    NameTaken {
        /// The contested name.
        name: String,
        /// The address (`host:port` it listens on) of the node holding it.
        holder: String,
    },
    /// Some nodes did not answer a cluster-wide request (see
    /// [`crate::cluster::ClusterClient::list_cluster`] for the partial answer).
    #[error("no answer from node(s) {}", .0.join(", "))]
    Partial(Vec<String>),
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

/// ", run by node N" when the owner is known.
fn owner_hint(owner: Option<&str>) -> String {
    owner
        .map(|o| format!(" (node {o:?} runs it)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_storage_error_keeps_the_stores_error_as_its_source_and_travels_as_words() {
        let error = RuntimeError::Storage(StorageError::of(std::io::Error::other("disk full")));
        assert_eq!(error.to_string(), "storage: disk full");
        let source = std::error::Error::source(&error).expect("the store's error");
        assert_eq!(source.to_string(), "disk full");
        let json = serde_json::to_string(&error).unwrap();
        assert_eq!(json, r#"{"storage":"disk full"}"#);
        let back: RuntimeError = serde_json::from_str(&json).unwrap();
        assert_eq!(back, error);
        assert!(std::error::Error::source(&back).is_none());
    }
}

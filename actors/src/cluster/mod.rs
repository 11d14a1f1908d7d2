//! The runtime as a ractor_cluster node, and the client API of a cluster.
//!
//! - [`ClusterNode`] serves a [`Runtime`](crate::Runtime) to other nodes: a
//!   `ractor_cluster::NodeServer`, one gateway actor in process group
//!   [`wire::GATEWAY_GROUP`], and a membership task (heartbeats, reconnect with backoff).
//! - [`ClusterClient`] reaches every node's gateway: create a session on any node, submit
//!   (idempotent by input id), cancel, delete, approvals, a cluster-wide session list,
//!   and [`ClusterSubscription`]s that resume from their last seq across reconnects
//!   (bounded like local ones: a reader that falls behind gets `Lagged`). Each request
//!   waits at most the call timeout ([`ClusterError::Timeout`]).
//! - [`RemoteSession`] ([`ClusterClient::session`]): a session on any node behind the
//!   same [`SessionApi`](crate::SessionApi) as a local
//!   [`SessionHandle`](crate::SessionHandle), with [`RuntimeError`](crate::RuntimeError)s.
//! - [`ClientNode`] joins a cluster without serving sessions (a CLI listing the
//!   cluster's sessions through one node).
//! - [`wire`] holds every cross-node message; payloads use the versioned store codec.
//!
//! Several `ClusterNode`s may run in one process (distinct names and ports): ractor's
//! process groups are process-wide, so each node's membership task only counts its own
//! gateway and those of peers it has a node session with (see [`ClusterNode::start`]
//! for the remaining limit).

mod client;
mod connect;
mod dial;
mod gateway;
mod membership;
mod node;
mod session;
mod subscription;
pub mod wire;

pub use client::{ClusterClient, ClusterListing};
pub use connect::ClientNode;
pub use node::ClusterNode;
pub use session::RemoteSession;
pub use subscription::ClusterSubscription;

use ractor::ActorRef;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use wire::GatewayMsg;

/// How a node is started.
#[derive(Clone)]
pub struct NodeConfig {
    /// Address to listen on for other nodes. Port 0 is resolved to a free port before
    /// the node starts, and that port is advertised ([`ClusterNode::listen_addr`]).
    pub listen: SocketAddr,
    /// Shared secret of the cluster (ractor_cluster's cookie handshake).
    pub cookie: String,
    /// Addresses (`host:port`) of nodes to connect to and keep connected.
    pub connect: Vec<String>,
    /// This node's name, unique in the cluster (sessions report it as their `node`).
    pub name: String,
    /// Interval of heartbeats and reconnect attempts (default 250 ms).
    pub heartbeat: Duration,
    /// A peer that does not answer a heartbeat within this is dropped and redialled
    /// (default 1 s).
    pub heartbeat_timeout: Duration,
    /// Timeout of a client's requests to a gateway (default 30 s): past it, the call
    /// fails with [`ClusterError::Timeout`].
    pub call_timeout: Duration,
    /// Bound of one dial of a peer (default 3 s): the TCP connect, and the cluster
    /// handshake and cookie authentication after it, must be done within this of the
    /// dial's start; a refused connection fails at once.
    pub connect_timeout: Duration,
    /// How long a cluster-wide list waits for each node's answer (default 3 s); a node
    /// that does not answer in time is reported in [`ClusterListing::unreachable`].
    pub gather_timeout: Duration,
}

impl NodeConfig {
    /// A configuration with the default intervals.
    pub fn new(
        listen: SocketAddr,
        cookie: impl Into<String>,
        connect: Vec<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            listen,
            cookie: cookie.into(),
            connect,
            name: name.into(),
            heartbeat: Duration::from_millis(250),
            heartbeat_timeout: Duration::from_secs(1),
            call_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            gather_timeout: Duration::from_secs(3),
        }
    }
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("listen", &self.listen)
            .field("cookie", &"<redacted>")
            .field("connect", &self.connect)
            .field("name", &self.name)
            .field("heartbeat", &self.heartbeat)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("gather_timeout", &self.gather_timeout)
            .finish()
    }
}

pub use crate::kernel::ClusterError;

/// A cluster error as the error of the same call on a local session: a remote
/// runtime's refusal is its own variant ([`RuntimeError::SessionDeleted`](crate::RuntimeError::SessionDeleted), …), a session
/// no node has is [`RuntimeError::SessionNotFound`](crate::RuntimeError::SessionNotFound), the rest is
/// [`RuntimeError::Cluster`](crate::RuntimeError::Cluster).
impl From<ClusterError> for crate::RuntimeError {
    fn from(error: ClusterError) -> Self {
        match error {
            ClusterError::Runtime(error) => error,
            ClusterError::SessionNotFound(id) => crate::RuntimeError::SessionNotFound(id),
            other => crate::RuntimeError::Cluster(Box::new(other)),
        }
    }
}

/// The live gateways by node name (published by the membership task), and the nodes
/// that are missing: node name (a node seen live before) or configured address (never
/// reached) → why (last dial error, missed heartbeat).
#[derive(Clone, Default)]
pub(crate) struct Gateways(
    pub(crate) Arc<BTreeMap<String, ActorRef<GatewayMsg>>>,
    pub(crate) Arc<BTreeMap<String, Missing>>,
);

/// Why a node or configured address is missing from the live view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Seen live before; no longer answers heartbeats.
    Gone,
    /// A dial failed (refused, unresolvable, connect timeout).
    Connect(String),
    /// The handshake was closed by the peer after its challenge: cookies differ.
    Auth,
    /// The peer accepted the connection but did not complete the handshake within the
    /// connect timeout (this bound).
    Handshake(Duration),
    /// Dialled, handshake not finished yet.
    Pending,
    /// The peer accepted the connection and closed it before its challenge, on every
    /// dial for the connect timeout (this bound).
    Closed(Duration),
}

impl std::fmt::Debug for Gateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateways")
            .field("live", &self.0.keys().collect::<Vec<_>>())
            .field("missing", &self.1)
            .finish()
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_api;
#[cfg(test)]
mod tests_nodes;

//! [`ClusterNode`]: a runtime served as a ractor_cluster node — the `NodeServer`
//! (listener + node sessions), this node's gateway actor, and the membership task
//! (`membership.rs`: dials with backoff, heartbeats, publishes the live gateways).
//!
//! Several nodes may run in one process (each sees only itself and the nodes it is
//! connected to); see `membership.rs` for how gateways are attributed, and the limits in
//! [`ClusterNode::start`].

use super::gateway::{GatewayActor, GatewayArgs};
use super::membership::Membership;
use super::wire::{GATEWAY_GROUP, GatewayMsg};
use super::{ClusterClient, ClusterError, Gateways, NodeConfig};
use crate::runtime::Runtime;
use ractor::{Actor, ActorRef};
use ractor_cluster::{NodeServer, NodeServerMessage};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running cluster node. Dropping it leaves the actors running; call
/// [`ClusterNode::shutdown`] (or [`ClusterNode::stop`] to keep the runtime).
#[derive(Debug)]
pub struct ClusterNode {
    name: String,
    listen: SocketAddr,
    runtime: Arc<Runtime>,
    server: ActorRef<NodeServerMessage>,
    gateway: ActorRef<GatewayMsg>,
    membership: JoinHandle<()>,
    gateways: watch::Receiver<Gateways>,
    call_timeout: Duration,
}

impl ClusterNode {
    /// Starts the node server on `config.listen`, this node's gateway and the membership
    /// task (which dials `config.connect`).
    ///
    /// Several nodes may run in one process under distinct names and ports: each sees
    /// only itself and the nodes it is connected to. Limits there: ractor_cluster
    /// numbers node sessions per node server from 0, so proxies of two in-process
    /// servers can share an actor id; every route still reaches the right gateway (all
    /// actors are local), but a missed heartbeat may stop a session of the wrong node
    /// server, which its membership task then redials.
    ///
    /// # Errors
    /// [`ClusterError::Actor`] when an actor cannot start (e.g. the listen address is in
    /// use).
    pub async fn start(runtime: Runtime, config: NodeConfig) -> Result<ClusterNode, ClusterError> {
        let runtime = Arc::new(runtime);
        let server = spawn_server(&config).await?;
        let (tx, gateways) = watch::channel(Gateways::default());
        let cluster =
            ClusterClient::new(config.name.clone(), gateways.clone(), config.call_timeout);
        let args = GatewayArgs {
            runtime: Arc::clone(&runtime),
            node: config.name.clone(),
            cluster,
        };
        let (gateway, _) = match Actor::spawn(None, GatewayActor, args).await {
            Ok(spawned) => spawned,
            Err(e) => {
                server.stop(None);
                return Err(ClusterError::Actor(e.to_string()));
            }
        };
        let membership = Membership {
            server: server.clone(),
            name: config.name.clone(),
            own_gateway: Some(gateway.get_id()),
            connect: config.connect.clone(),
            heartbeat: config.heartbeat,
            timeout: config.heartbeat_timeout,
            gateways: tx,
        };
        let membership = tokio::spawn(membership.run());
        Ok(ClusterNode {
            name: config.name,
            listen: config.listen,
            runtime,
            server,
            gateway,
            membership,
            gateways,
            call_timeout: config.call_timeout,
        })
    }

    /// This node's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address the node listens on.
    #[must_use]
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Id of this node's gateway actor.
    #[cfg(test)]
    pub(crate) fn gateway_id(&self) -> ractor::ActorId {
        self.gateway.get_id()
    }

    /// The local runtime.
    #[must_use]
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A client that reaches every node of the cluster through their gateways.
    #[must_use]
    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.name.clone(), self.gateways.clone(), self.call_timeout)
    }

    /// Leaves the cluster: stops the membership task, the gateway (and its forwarders
    /// and request tasks, awaited) and the node server (closing every node session).
    /// Returns the runtime, still running — e.g. to serve it again with a new
    /// `ClusterNode` — unless a [`ClusterNode::runtime`] borrow was turned into
    /// something still holding it (then `None`).
    pub async fn stop(self) -> Option<Runtime> {
        self.membership.abort();
        ractor::pg::leave(GATEWAY_GROUP.to_owned(), vec![self.gateway.get_cell()]);
        let _ = self
            .gateway
            .stop_and_wait(Some("shutdown".into()), None)
            .await;
        stop_server(&self.server).await;
        Arc::try_unwrap(self.runtime).ok()
    }

    /// [`ClusterNode::stop`], then shuts the runtime down.
    pub async fn shutdown(self) {
        if let Some(runtime) = self.stop().await {
            runtime.shutdown().await;
        }
    }
}

/// Stops a node server and waits for its node sessions (so peers see them closed and
/// their remote-actor proxies left the process groups) and its listener (so the port is
/// free) when this returns. The listener waits inside `accept` and never hears a stop:
/// it is killed.
pub(crate) async fn stop_server(server: &ActorRef<NodeServerMessage>) {
    let sessions = match server
        .call(NodeServerMessage::GetSessions, Some(STOP_WAIT))
        .await
    {
        Ok(ractor::rpc::CallResult::Success(map)) => map.into_values().collect(),
        _ => Vec::new(),
    };
    let stops = sessions.iter().map(|s| {
        s.actor
            .stop_and_wait(Some("shutdown".into()), Some(STOP_WAIT))
    });
    futures::future::join_all(stops).await;
    for child in server.get_children() {
        let _ = child.kill_and_wait(Some(STOP_WAIT)).await;
    }
    let _ = server
        .stop_and_wait(Some("shutdown".into()), Some(STOP_WAIT))
        .await;
}

/// How long stopping a node server's actors may take.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Spawns a node server listening on `config.listen` (isolated connection mode: only
/// the configured peers are dialled).
pub(crate) async fn spawn_server(
    config: &NodeConfig,
) -> Result<ActorRef<NodeServerMessage>, ClusterError> {
    let server = NodeServer::new(
        config.listen.port(),
        config.cookie.clone(),
        config.name.clone(),
        config.listen.ip().to_string(),
        None,
        None,
    )
    .with_listen_addr(config.listen.ip());
    let (server, _) = Actor::spawn(None, server, ())
        .await
        .map_err(|e| ClusterError::Actor(e.to_string()))?;
    Ok(server)
}

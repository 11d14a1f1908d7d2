//! [`ClusterNode`]: a runtime served as a ractor_cluster node — the `NodeServer`
//! (listener + node sessions), this node's gateway actor, and the membership task
//! (`membership.rs`: dials with backoff, heartbeats, publishes the live gateways).
//!
//! Several nodes may run in one process (each sees only itself and the nodes it is
//! connected to); see `membership.rs` for how gateways are attributed, and the limits in
//! [`ClusterNode::start`].

use super::dial::Dialer;
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
    refused: watch::Receiver<Option<ClusterError>>,
    call_timeout: Duration,
    gather_timeout: Duration,
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
    /// Names are unique in the cluster: when this node finds a node that started
    /// earlier under its name, it leaves the cluster and [`ClusterNode::refused`]
    /// resolves (the other keeps the name; see `membership.rs`).
    ///
    /// Port 0 in `config.listen` is resolved to a free port first, so the address the
    /// node advertises (and [`Self::listen_addr`]) is one its peers can dial.
    ///
    /// # Errors
    /// [`ClusterError::Actor`] when an actor cannot start (e.g. the listen address is in
    /// use) or no free port was found for port 0.
    pub async fn start(
        runtime: Runtime,
        mut config: NodeConfig,
    ) -> Result<ClusterNode, ClusterError> {
        let runtime = Arc::new(runtime);
        let instance = new_instance();
        let server = spawn_on_a_resolved_port(&mut config, &instance, resolve_port).await?;
        let (tx, gateways) = watch::channel(Gateways::default());
        let (refused_tx, refused) = watch::channel(None);
        let cluster =
            ClusterClient::new(config.name.clone(), gateways.clone(), config.call_timeout)
                .with_gather_timeout(config.gather_timeout);
        let args = GatewayArgs {
            runtime: Arc::clone(&runtime),
            node: config.name.clone(),
            instance: instance.clone(),
            listen: config.listen.to_string(),
            cluster,
            refused: refused_tx.clone(),
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
            instance,
            own_gateway: Some(gateway.get_id()),
            dialer: Dialer::new(server.clone(), &config, true),
            heartbeat: config.heartbeat,
            timeout: config.heartbeat_timeout,
            gateways: tx,
            refused: refused_tx,
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
            refused,
            call_timeout: config.call_timeout,
            gather_timeout: config.gather_timeout,
        })
    }

    /// Resolves when this node was refused by the cluster: a node that started earlier
    /// holds its name ([`ClusterError::NameTaken`], naming that node's address). The
    /// node has then left the cluster (its node sessions closed); call
    /// [`ClusterNode::shutdown`]. Never resolves while the name is this node's.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn refused(&self) -> ClusterError {
        let mut rx = self.refused.clone();
        let refusal = match rx.wait_for(Option::is_some).await {
            Ok(refusal) => refusal.clone(),
            Err(_) => None,
        };
        match refusal {
            Some(e) => e,
            // Gateway and membership task are gone: no refusal can come.
            None => std::future::pending().await,
        }
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

    /// The local runtime, shared (e.g. with an HTTP service). While a clone is held,
    /// [`ClusterNode::stop`] returns `None`: close it with [`Runtime::close`].
    #[must_use]
    pub fn shared_runtime(&self) -> Arc<Runtime> {
        Arc::clone(&self.runtime)
    }

    /// A client that reaches every node of the cluster through their gateways.
    #[must_use]
    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.name.clone(), self.gateways.clone(), self.call_timeout)
            .with_gather_timeout(self.gather_timeout)
            .with_subscriber_buffer(self.runtime.subscriber_buffer())
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
    // The server first: killed while the server runs, the listener would be respawned
    // (and ractor_cluster logs that as an error).
    let children = server.get_children();
    let _ = server
        .stop_and_wait(Some("shutdown".into()), Some(STOP_WAIT))
        .await;
    for child in children {
        let _ = child.kill_and_wait(Some(STOP_WAIT)).await;
    }
}

/// How long stopping a node server's actors may take.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// A new instance id: a UUIDv7, so ids order by start time.
pub(crate) fn new_instance() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Splits a ractor_cluster node-server name, `<name>#<instance>@<host>`, into name and
/// instance (`None` for a name of another form).
pub(crate) fn peer_node(server_name: &str) -> Option<(&str, &str)> {
    server_name.rsplit_once('@')?.0.rsplit_once('#')
}

/// `listen`, with port 0 replaced by a port the OS has free now.
/// How many free ports port 0 tries before giving up.
const PORT_ATTEMPTS: u32 = 5;

/// Spawns the node server on `config.listen`, resolving port 0 to a free port first
/// (and recording it in `config`). The free port is found by binding and closing a probe
/// socket, so another process may take it before the node server binds it: then
/// another free port is tried, up to [`PORT_ATTEMPTS`] in all. A port the caller named
/// is tried once.
async fn spawn_on_a_resolved_port(
    config: &mut NodeConfig,
    instance: &str,
    mut resolve: impl FnMut(SocketAddr) -> Result<SocketAddr, ClusterError>,
) -> Result<ActorRef<NodeServerMessage>, ClusterError> {
    let requested = config.listen;
    let mut attempt = 1;
    loop {
        config.listen = resolve(requested)?;
        match spawn_server(config, instance).await {
            Err(ClusterError::Actor(message))
                if requested.port() == 0
                    && attempt < PORT_ATTEMPTS
                    && message.contains("Address already in use") =>
            {
                tracing::debug!(
                    port = config.listen.port(),
                    "the free port was taken; trying another"
                );
                attempt += 1;
            }
            spawned => return spawned,
        }
    }
}

fn resolve_port(listen: SocketAddr) -> Result<SocketAddr, ClusterError> {
    if listen.port() != 0 {
        return Ok(listen);
    }
    std::net::TcpListener::bind(listen)
        .and_then(|probe| probe.local_addr())
        .map_err(|e| ClusterError::Actor(format!("cannot find a free port on {listen}: {e}")))
}

/// Spawns a node server listening on `config.listen` (isolated connection mode: only
/// the configured peers are dialled), named `<name>#<instance>@<ip>`: unique per run,
/// so ractor_cluster never mistakes two nodes claiming one name for reconnections of
/// one node (it would silently keep one connection of the two).
pub(crate) async fn spawn_server(
    config: &NodeConfig,
    instance: &str,
) -> Result<ActorRef<NodeServerMessage>, ClusterError> {
    let server = NodeServer::new(
        config.listen.port(),
        config.cookie.clone(),
        format!("{}#{instance}", config.name),
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

#[cfg(test)]
mod port_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_free_port_taken_before_the_server_binds_it_is_replaced_by_another() {
        // The first "free" port handed out is one this test holds: the race the probe
        // cannot rule out. The node server must try another instead of failing.
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = held.local_addr().unwrap();
        let mut picks = vec![Ok(taken)];
        let mut config = NodeConfig::new("127.0.0.1:0".parse().unwrap(), "c", vec![], "a");
        let server = spawn_on_a_resolved_port(&mut config, "t", |listen| {
            picks.pop().unwrap_or_else(|| resolve_port(listen))
        })
        .await
        .unwrap();
        assert_ne!(config.listen, taken);
        assert_ne!(config.listen.port(), 0);
        server.stop(None);

        // A port the caller named is tried once: in use is an error.
        let mut named = NodeConfig::new(taken, "c", vec![], "b");
        let err = spawn_on_a_resolved_port(&mut named, "u", resolve_port)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Address already in use"), "{err}");
    }
}

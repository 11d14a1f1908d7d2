//! [`ClusterNode`]: a runtime served as a ractor_cluster node — the `NodeServer`
//! (listener + node sessions), this node's gateway actor, and the membership task.
//!
//! ractor_cluster neither reconnects nor times out dead peers, so the membership task
//! does both on a timer: every `heartbeat` it (1) dials every `connect` address that has
//! no node session, with exponential backoff per address (`heartbeat` doubling up to
//! 32×), and (2) pings every gateway of group `foya.gateway` with a `heartbeat_timeout`;
//! a remote gateway that does not answer gets its node session stopped, so the next tick
//! dials again. The live gateways (node name → actor) are published to clients through a
//! watch channel; a change there is what makes subscriptions resume.

use super::gateway::{GatewayActor, GatewayArgs};
use super::wire::{GATEWAY_GROUP, GatewayMsg, GatewayReply, GatewayRequest};
use super::{ClusterClient, ClusterError, Gateways, NodeConfig};
use crate::runtime::Runtime;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef};
use ractor_cluster::{NodeServer, NodeServerMessage};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running cluster node. Dropping it leaves the actors running; call
/// [`ClusterNode::shutdown`].
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
    /// # Errors
    /// [`ClusterError::Actor`] when an actor cannot start (e.g. a second node server
    /// in the same process: ractor's process groups are process-wide).
    pub async fn start(runtime: Runtime, config: NodeConfig) -> Result<ClusterNode, ClusterError> {
        let runtime = Arc::new(runtime);
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
        let args = GatewayArgs {
            runtime: Arc::clone(&runtime),
            node: config.name.clone(),
        };
        let (gateway, _) = match Actor::spawn(None, GatewayActor, args).await {
            Ok(spawned) => spawned,
            Err(e) => {
                server.stop(None);
                return Err(ClusterError::Actor(e.to_string()));
            }
        };
        let (tx, gateways) = watch::channel(Gateways::default());
        let membership = Membership {
            server: server.clone(),
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

    /// Stops the membership task, the gateway (and its forwarders) and the node server
    /// (closing every node session), then shuts the runtime down if no client task
    /// still holds it.
    pub async fn shutdown(self) {
        self.membership.abort();
        ractor::pg::leave(GATEWAY_GROUP.to_owned(), vec![self.gateway.get_cell()]);
        let _ = self
            .gateway
            .stop_and_wait(Some("shutdown".into()), None)
            .await;
        let _ = self
            .server
            .stop_and_wait(Some("shutdown".into()), None)
            .await;
        if let Ok(runtime) = Arc::try_unwrap(self.runtime) {
            runtime.shutdown().await;
        }
    }
}

/// The membership task's state.
struct Membership {
    server: ActorRef<NodeServerMessage>,
    connect: Vec<String>,
    heartbeat: Duration,
    timeout: Duration,
    gateways: watch::Sender<Gateways>,
}

/// Backoff of one address.
#[derive(Default)]
struct Dial {
    failures: u32,
    next_at: Option<tokio::time::Instant>,
}

impl Membership {
    async fn run(self) {
        let mut dials: HashMap<String, Dial> = HashMap::new();
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let sessions = self.sessions().await;
            self.dial(&sessions, &mut dials).await;
            self.ping(&sessions).await;
        }
    }

    async fn sessions(&self) -> Vec<ractor_cluster::node::NodeServerSessionInformation> {
        match self
            .server
            .call(NodeServerMessage::GetSessions, Some(self.timeout))
            .await
        {
            Ok(CallResult::Success(map)) => map.into_values().collect(),
            _ => Vec::new(),
        }
    }

    /// Dials every configured address that has no node session (with backoff).
    async fn dial(
        &self,
        sessions: &[ractor_cluster::node::NodeServerSessionInformation],
        dials: &mut HashMap<String, Dial>,
    ) {
        let connected: Vec<SocketAddr> = sessions
            .iter()
            .filter_map(|s| s.peer_addr.parse().ok())
            .collect();
        for addr in &self.connect {
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host(addr.as_str())
                .await
                .map(Iterator::collect)
                .unwrap_or_default();
            let dial = dials.entry(addr.clone()).or_default();
            if resolved.iter().any(|a| connected.contains(a)) {
                *dial = Dial::default();
                continue;
            }
            let now = tokio::time::Instant::now();
            if dial.next_at.is_some_and(|at| now < at) {
                continue;
            }
            match ractor_cluster::client_connect(&self.server, addr.as_str()).await {
                Ok(()) => *dial = Dial::default(),
                Err(e) => {
                    tracing::debug!(error = %e, "dial failed");
                    dial.failures = dial.failures.saturating_add(1);
                    let factor = 1u32 << dial.failures.min(5);
                    dial.next_at = Some(now + self.heartbeat * factor);
                }
            }
        }
    }

    /// Pings every gateway; publishes the live ones; drops the node session of a remote
    /// gateway that does not answer.
    async fn ping(&self, sessions: &[ractor_cluster::node::NodeServerSessionInformation]) {
        let members: Vec<ActorRef<GatewayMsg>> = ractor::pg::get_members(&GATEWAY_GROUP.into())
            .into_iter()
            .map(ActorRef::from)
            .collect();
        let pings = members.iter().map(|gw| async move {
            let answer = gw
                .call(
                    |reply| GatewayMsg::Request(GatewayRequest::Ping, reply),
                    Some(self.timeout),
                )
                .await;
            (gw.clone(), answer)
        });
        let mut live = BTreeMap::new();
        for (gw, answer) in futures::future::join_all(pings).await {
            match answer {
                Ok(CallResult::Success(GatewayReply::Pong { node })) => {
                    live.insert(node, gw);
                }
                _ => {
                    let id = gw.get_id();
                    if !id.is_local()
                        && let Some(s) = sessions.iter().find(|s| s.node_id == id.node())
                    {
                        tracing::warn!(peer = %s.peer_addr, "peer missed its heartbeat");
                        s.actor.stop(Some("heartbeat timeout".into()));
                    }
                }
            }
        }
        let live = Gateways(Arc::new(live));
        self.gateways.send_if_modified(|current| {
            let same = current.0.len() == live.0.len()
                && current
                    .0
                    .iter()
                    .zip(live.0.iter())
                    .all(|((n1, a1), (n2, a2))| n1 == n2 && a1.get_id() == a2.get_id());
            if !same {
                *current = live;
            }
            !same
        });
    }
}

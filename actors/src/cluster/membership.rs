//! The membership task of a node (or of a client-only member): dials, heartbeats, and
//! publishes the live gateways.
//!
//! ractor_cluster neither reconnects nor times out dead peers, so this task does both on
//! a timer: every `heartbeat` it (1) dials every `connect` address that has no node
//! session, with exponential backoff per address (`heartbeat` doubling up to 32×), and
//! (2) pings the gateways of group `foya.gateway` that belong to this node with a
//! `heartbeat_timeout`; a remote gateway that does not answer gets its node session
//! stopped, so the next tick dials again. The live gateways (node name → actor) are
//! published through a watch channel; a change there is what makes subscriptions resume.
//!
//! ractor's process groups are process-wide, and in one process every node server's
//! sessions advertise every local actor of the process. So that several nodes can share
//! a process, a gateway counts for this node only when it is this node's own gateway, or
//! it answers with the name of a peer this node server has an authenticated session
//! with (an in-process peer's gateway is then reached directly, a remote one through its
//! proxy). A node therefore never sees an in-process node it is not connected to.

use super::Gateways;
use super::wire::{GATEWAY_GROUP, GatewayMsg, GatewayReply, GatewayRequest};
use ractor::rpc::CallResult;
use ractor::{ActorId, ActorRef};
use ractor_cluster::NodeServerMessage;
use ractor_cluster::node::NodeServerSessionInformation;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The membership task's state.
pub(crate) struct Membership {
    pub(crate) server: ActorRef<NodeServerMessage>,
    /// This node's name (a client-only member has a name but no gateway).
    pub(crate) name: String,
    /// This node's own gateway (`None` for a client-only member).
    pub(crate) own_gateway: Option<ActorId>,
    pub(crate) connect: Vec<String>,
    pub(crate) heartbeat: Duration,
    pub(crate) timeout: Duration,
    pub(crate) gateways: watch::Sender<Gateways>,
}

/// Backoff of one address.
#[derive(Default)]
struct Dial {
    failures: u32,
    next_at: Option<tokio::time::Instant>,
}

impl Membership {
    pub(crate) async fn run(self) {
        let mut dials: HashMap<String, Dial> = HashMap::new();
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Without this node server's sessions, remote gateways cannot be attributed:
            // skip the tick rather than publish a view that lost them.
            let Some(sessions) = self.sessions().await else {
                continue;
            };
            self.dial(&sessions, &mut dials).await;
            self.ping(&sessions).await;
        }
    }

    async fn sessions(&self) -> Option<Vec<NodeServerSessionInformation>> {
        match self
            .server
            .call(NodeServerMessage::GetSessions, Some(self.timeout))
            .await
        {
            Ok(CallResult::Success(map)) => Some(map.into_values().collect()),
            _ => None,
        }
    }

    /// Dials every configured address that has no node session (with backoff).
    async fn dial(
        &self,
        sessions: &[NodeServerSessionInformation],
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

    /// Pings the gateway group's members (except other in-process nodes' local
    /// gateways); publishes the live gateways of this node and of its connected peers;
    /// drops the node session of a remote gateway that does not answer.
    async fn ping(&self, sessions: &[NodeServerSessionInformation]) {
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
        // Per node name: a local gateway (direct) wins over remote proxies, then the
        // smallest id, so the choice is stable from tick to tick.
        let mut live: BTreeMap<String, ActorRef<GatewayMsg>> = BTreeMap::new();
        for (gw, answer) in futures::future::join_all(pings).await {
            let id = gw.get_id();
            match answer {
                Ok(CallResult::Success(GatewayReply::Pong { node })) => {
                    let ours = if Some(id) == self.own_gateway {
                        true
                    } else {
                        node != self.name && sessions.iter().any(|s| peer_is(s, &node))
                    };
                    if !ours {
                        continue;
                    }
                    let better = live
                        .get(&node)
                        .is_none_or(|current| rank(id) < rank(current.get_id()));
                    if better {
                        live.insert(node, gw);
                    }
                }
                _ if id.is_local() => {
                    if Some(id) == self.own_gateway {
                        tracing::warn!("this node's gateway missed its heartbeat");
                    }
                }
                _ => {
                    if let Some(s) = sessions.iter().find(|s| s.node_id == id.node()) {
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

/// Order of preference among gateways answering for one node: local first, then by id.
fn rank(id: ActorId) -> (bool, u64, u64) {
    (
        !id.is_local(),
        if id.is_local() { 0 } else { id.node() },
        id.pid(),
    )
}

/// Whether `session`'s peer is the node named `node` (ractor_cluster names a node server
/// `<name>@<hostname>`).
fn peer_is(session: &NodeServerSessionInformation, node: &str) -> bool {
    session
        .peer_name
        .as_ref()
        .and_then(|p| p.name.rsplit_once('@'))
        .is_some_and(|(name, _)| name == node)
}

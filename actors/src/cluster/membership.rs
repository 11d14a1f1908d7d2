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
//!
//! Names are unique in a cluster. Every gateway answers a ping with its node's name and
//! instance (a UUIDv7 made at start, so instances order by start time). When two
//! instances claim one name, every node that sees both keeps the one that started first
//! and tells the other (`GatewayRequest::NameTaken`), which leaves the cluster
//! ([`ClusterNode::refused`](super::ClusterNode::refused)); a node that finds a peer
//! claiming its own name applies the same rule to itself. All observers agree on the
//! winner, so the cluster keeps one node per name.
//!
//! Nodes seen live once and no longer answering, and configured addresses without a
//! session, are published as missing (with the dial error), so a cluster-wide list
//! reports them instead of dropping them silently.

use super::dial::Dialer;
use super::node::peer_node;
use super::wire::{GATEWAY_GROUP, GatewayMsg, GatewayReply, GatewayRequest};
use super::{ClusterError, Gateways, Missing};
use ractor::rpc::CallResult;
use ractor::{ActorId, ActorRef};
use ractor_cluster::NodeServerMessage;
use ractor_cluster::node::NodeServerSessionInformation;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The membership task's state.
pub(crate) struct Membership {
    pub(crate) server: ActorRef<NodeServerMessage>,
    /// This node's name (a client-only member has a name but no gateway).
    pub(crate) name: String,
    /// This run of the node (see the module docs).
    pub(crate) instance: String,
    /// This node's own gateway (`None` for a client-only member).
    pub(crate) own_gateway: Option<ActorId>,
    pub(crate) dialer: Dialer,
    pub(crate) timeout: Duration,
    pub(crate) heartbeat: Duration,
    pub(crate) gateways: watch::Sender<Gateways>,
    /// Set (by this task or the gateway) when this node lost its name to another.
    pub(crate) refused: watch::Sender<Option<ClusterError>>,
}

/// A gateway that answered a ping.
struct Answer {
    gateway: ActorRef<GatewayMsg>,
    node: String,
    instance: String,
    listen: String,
}

impl Membership {
    pub(crate) async fn run(mut self) {
        let mut tick = tokio::time::interval(self.heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refused = self.refused.subscribe();
        let mut known: BTreeSet<String> = BTreeSet::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = refused.wait_for(Option::is_some) => break,
            }
            // Without this node server's sessions, remote gateways cannot be attributed:
            // skip the tick rather than publish a view that lost them.
            let Some(sessions) = self.sessions().await else {
                continue;
            };
            self.dialer.dial(&sessions).await;
            self.ping(&sessions, &mut known).await;
        }
        self.leave().await;
    }

    /// After a refusal: closes every node session and publishes an empty view.
    async fn leave(&self) {
        tracing::warn!("this node leaves the cluster: its name is taken");
        if let Some(sessions) = self.sessions().await {
            for s in sessions {
                s.actor.stop(Some("name taken".into()));
            }
        }
        self.gateways.send_replace(Gateways::default());
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

    /// Pings the gateway group's members (except other in-process nodes' local
    /// gateways); publishes the live gateways of this node and of its connected peers,
    /// one instance per name; drops the node session of a remote gateway that does not
    /// answer; refuses the later of two instances claiming one name.
    async fn ping(&self, sessions: &[NodeServerSessionInformation], known: &mut BTreeSet<String>) {
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
        let mut answers: Vec<Answer> = Vec::new();
        for (gw, answer) in futures::future::join_all(pings).await {
            let id = gw.get_id();
            match answer {
                Ok(CallResult::Success(GatewayReply::Pong {
                    node,
                    instance,
                    listen,
                })) => {
                    let own = Some(id) == self.own_gateway;
                    let peer = sessions.iter().any(|s| peer_is(s, &node, &instance));
                    let same_run_elsewhere = !own && instance == self.instance;
                    if (own || peer) && !same_run_elsewhere {
                        answers.push(Answer {
                            gateway: gw,
                            node,
                            instance,
                            listen,
                        });
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
        let live = self.elect(answers).await;
        known.extend(live.keys().filter(|n| **n != self.name).cloned());
        let mut missing: BTreeMap<String, Missing> = known
            .iter()
            .filter(|n| !live.contains_key(*n))
            .map(|n| (n.clone(), Missing::Gone))
            .collect();
        for (key, why) in self.dialer.missing() {
            if !live.contains_key(&key) {
                missing.insert(key, why);
            }
        }
        let view = Gateways(Arc::new(live), Arc::new(missing));
        self.gateways.send_if_modified(|current| {
            let same = current.1 == view.1
                && current.0.len() == view.0.len()
                && current
                    .0
                    .iter()
                    .zip(view.0.iter())
                    .all(|((n1, a1), (n2, a2))| n1 == n2 && a1.get_id() == a2.get_id());
            if !same {
                *current = view;
            }
            !same
        });
    }

    /// Per node name, the instance that started first wins; its gateway is chosen
    /// local first, then by smallest id (stable from tick to tick). Later instances are
    /// told to leave; when the later one is this node, it is refused.
    async fn elect(&self, answers: Vec<Answer>) -> BTreeMap<String, ActorRef<GatewayMsg>> {
        let mut winners: BTreeMap<String, (String, String)> = BTreeMap::new();
        for a in &answers {
            let first = winners
                .get(&a.node)
                .is_none_or(|(instance, _)| a.instance < *instance);
            if first {
                winners.insert(a.node.clone(), (a.instance.clone(), a.listen.clone()));
            }
        }
        let mut live: BTreeMap<String, ActorRef<GatewayMsg>> = BTreeMap::new();
        let mut losers = Vec::new();
        for a in answers {
            let Some((instance, holder)) = winners.get(&a.node) else {
                continue;
            };
            if a.instance != *instance {
                if a.instance == self.instance {
                    tracing::info!(name = %a.node, %holder, "this node's name is taken");
                    self.refused.send_replace(Some(ClusterError::NameTaken {
                        name: a.node.clone(),
                        holder: holder.clone(),
                    }));
                } else {
                    tracing::warn!(name = %a.node, %holder, "refusing a second node with a taken name");
                    losers.push((a.gateway, a.node, holder.clone()));
                }
                continue;
            }
            let better = live
                .get(&a.node)
                .is_none_or(|current| rank(a.gateway.get_id()) < rank(current.get_id()));
            if better {
                live.insert(a.node, a.gateway);
            }
        }
        let notices = losers.into_iter().map(|(gw, node, holder)| async move {
            let request = GatewayRequest::NameTaken { node, holder };
            let _ = gw
                .call(
                    |reply| GatewayMsg::Request(request, reply),
                    Some(self.timeout),
                )
                .await;
        });
        futures::future::join_all(notices).await;
        live
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

/// Whether `session`'s peer is the run `instance` of the node named `node` (see
/// [`peer_node`] for ractor_cluster's name of a node server).
fn peer_is(session: &NodeServerSessionInformation, node: &str, instance: &str) -> bool {
    session
        .peer_name
        .as_ref()
        .and_then(|p| peer_node(&p.name))
        .is_some_and(|(name, run)| name == node && run == instance)
}

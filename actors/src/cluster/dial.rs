//! Dialling a node's configured peers: backoff per address, a connect bounded by
//! `NodeConfig::connect_timeout`, and what went wrong — the connect error, or a cookie
//! handshake the peer closed — which the membership task publishes as the reason the
//! address is missing (`ClientNode::wait_connected` and the cluster list report it).
//!
//! ractor_cluster does not say why a handshake ended, so a failed authentication is
//! inferred from its node-server events: an outgoing session that received the peer's
//! challenge (its name is known) and closed before it authenticated. A session refused
//! for being a simultaneous duplicate connection ends before the challenge and is not
//! counted.

use super::{Missing, NodeConfig};
use ractor::{ActorId, ActorRef};
use ractor_cluster::NodeServerMessage;
use ractor_cluster::node::{NodeEventSubscription, NodeServerSessionInformation};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the node server reports about its sessions (forwarded to the dialler).
enum SessionEvent {
    Authenticated(ActorId),
    Disconnected(NodeServerSessionInformation),
}

struct Events(mpsc::UnboundedSender<SessionEvent>);

impl NodeEventSubscription for Events {
    fn node_session_opened(&self, _ses: NodeServerSessionInformation) {}
    fn node_session_disconnected(&self, ses: NodeServerSessionInformation) {
        let _ = self.0.send(SessionEvent::Disconnected(ses));
    }
    fn node_session_authenticated(&self, ses: NodeServerSessionInformation) {
        let _ = self.0.send(SessionEvent::Authenticated(ses.actor.get_id()));
    }
}

/// State of one configured address.
struct Dial {
    failures: u32,
    next_at: Option<Instant>,
    /// Where the address resolved to at the last dial.
    resolved: Vec<SocketAddr>,
    /// Why it is not connected (`Pending` until a dial failed).
    state: Missing,
    /// Name of the node last reached at this address.
    node: Option<String>,
    connected: bool,
}

impl Default for Dial {
    fn default() -> Self {
        Self {
            failures: 0,
            next_at: None,
            resolved: Vec::new(),
            state: Missing::Pending,
            node: None,
            connected: false,
        }
    }
}

/// The dialler of one node server.
pub(crate) struct Dialer {
    server: ActorRef<NodeServerMessage>,
    heartbeat: Duration,
    /// Time a connected socket gets to finish the handshake before it is dialled again
    /// (the heartbeat timeout).
    handshake: Duration,
    connect_timeout: Duration,
    dials: Vec<(String, Dial)>,
    events: mpsc::UnboundedReceiver<SessionEvent>,
    authenticated: HashSet<ActorId>,
}

impl Dialer {
    /// Subscribes to `server`'s session events (before any dial, so none is missed).
    pub(crate) fn new(server: ActorRef<NodeServerMessage>, config: &NodeConfig) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let _ = server.cast(NodeServerMessage::SubscribeToEvents {
            id: "foya.dialer".into(),
            subscription: Box::new(Events(tx)),
        });
        Self {
            server,
            heartbeat: config.heartbeat,
            handshake: config.heartbeat_timeout,
            connect_timeout: config.connect_timeout,
            dials: peers_to_dial(config.listen, &config.connect)
                .into_iter()
                .map(|a| (a, Dial::default()))
                .collect(),
            events,
            authenticated: HashSet::new(),
        }
    }

    /// Dials every configured address that has no session (with backoff), concurrently,
    /// each connect bounded by the connect timeout.
    pub(crate) async fn dial(&mut self, sessions: &[NodeServerSessionInformation]) {
        self.drain_events();
        let timeout = self.connect_timeout;
        let resolves = self.dials.iter().map(|(addr, _)| async move {
            tokio::time::timeout(timeout, tokio::net::lookup_host(addr.as_str()))
                .await
                .ok()
                .and_then(Result::ok)
                .map(Iterator::collect::<Vec<SocketAddr>>)
                .unwrap_or_default()
        });
        let resolved = futures::future::join_all(resolves).await;
        let now = Instant::now();
        let mut due = Vec::new();
        for ((addr, dial), resolved) in self.dials.iter_mut().zip(resolved) {
            if !resolved.is_empty() {
                dial.resolved = resolved;
            }
            let session = sessions.iter().find(|s| {
                s.peer_addr
                    .parse::<SocketAddr>()
                    .is_ok_and(|p| dial.resolved.contains(&p))
            });
            if let Some(s) = session {
                let node = s
                    .peer_name
                    .as_ref()
                    .and_then(|p| super::node::peer_node(&p.name));
                *dial = Dial {
                    resolved: std::mem::take(&mut dial.resolved),
                    node: node.map(|(name, _)| name.to_owned()).or(dial.node.take()),
                    connected: true,
                    ..Dial::default()
                };
                continue;
            }
            dial.connected = false;
            if dial.next_at.is_none_or(|at| now >= at) {
                due.push(addr.clone());
            }
        }
        let server = &self.server;
        let attempts = due.into_iter().map(|addr| async move {
            let result = tokio::time::timeout(
                timeout,
                ractor_cluster::client_connect(server, addr.as_str()),
            )
            .await;
            let result = match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(ractor_cluster::ClientConnectErr::Socket(e))) => Err(e.to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            };
            (addr, result)
        });
        let (heartbeat, handshake) = (self.heartbeat, self.handshake);
        for (addr, result) in futures::future::join_all(attempts).await {
            let Some(dial) = self.dial_mut(&addr) else {
                continue;
            };
            match result {
                // Give the handshake time before dialling again.
                Ok(()) => {
                    dial.state = Missing::Pending;
                    dial.next_at = Some(now + handshake);
                }
                Err(reason) => {
                    tracing::debug!(%addr, %reason, "dial failed");
                    dial.state = Missing::Connect(reason);
                    Self::back_off(dial, heartbeat, now);
                }
            }
        }
    }

    fn dial_mut(&mut self, addr: &str) -> Option<&mut Dial> {
        self.dials
            .iter_mut()
            .find(|(a, _)| a == addr)
            .map(|(_, d)| d)
    }

    fn back_off(dial: &mut Dial, heartbeat: Duration, now: Instant) {
        dial.failures = dial.failures.saturating_add(1);
        let factor = 1u32 << dial.failures.min(5);
        dial.next_at = Some(now + heartbeat * factor);
    }

    /// Notes authentications, and outgoing sessions closed during the cookie handshake.
    fn drain_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            match event {
                SessionEvent::Authenticated(id) => {
                    self.authenticated.insert(id);
                }
                SessionEvent::Disconnected(ses) => {
                    let was_authenticated = self.authenticated.remove(&ses.actor.get_id());
                    if was_authenticated || ses.is_server || ses.peer_name.is_none() {
                        continue;
                    }
                    let Ok(peer) = ses.peer_addr.parse::<SocketAddr>() else {
                        continue;
                    };
                    let now = Instant::now();
                    for (addr, dial) in &mut self.dials {
                        if dial.resolved.contains(&peer) {
                            if dial.state != Missing::Auth {
                                tracing::info!(%addr, "cluster handshake refused: the cookies differ");
                            }
                            dial.state = Missing::Auth;
                            Self::back_off(dial, self.heartbeat, now);
                        }
                    }
                }
            }
        }
    }

    /// The configured addresses without a session: keyed by the name of the node last
    /// reached there, or by the address.
    pub(crate) fn missing(&self) -> HashMap<String, Missing> {
        self.dials
            .iter()
            .filter(|(_, d)| !d.connected)
            .map(|(addr, d)| {
                (
                    d.node.clone().unwrap_or_else(|| addr.clone()),
                    d.state.clone(),
                )
            })
            .collect()
    }
}

/// The configured addresses minus the node's own listen address: a node given the whole
/// cluster's address list (itself included) does not dial itself, nor report itself
/// unreachable.
fn peers_to_dial(listen: std::net::SocketAddr, connect: &[String]) -> Vec<String> {
    connect
        .iter()
        .filter(|a| a.parse::<std::net::SocketAddr>().ok() != Some(listen))
        .cloned()
        .collect()
}

#[cfg(test)]
mod peer_tests {
    #![allow(clippy::unwrap_used)]
    use super::peers_to_dial;

    #[test]
    fn a_node_does_not_dial_its_own_listen_address() {
        let listen = "127.0.0.1:4477".parse().unwrap();
        let connect = vec![
            "127.0.0.1:4477".to_owned(),
            "127.0.0.1:4478".to_owned(),
            "peer.example:4477".to_owned(),
        ];
        assert_eq!(
            peers_to_dial(listen, &connect),
            vec!["127.0.0.1:4478".to_owned(), "peer.example:4477".to_owned()]
        );
    }
}

//! Dialling a node's configured peers: backoff per address, a connect and handshake
//! bounded by `NodeConfig::connect_timeout`, and what went wrong — the connect error, a
//! cookie handshake the peer closed, or a handshake the peer never completed — which the
//! membership task publishes as the reason the address is missing
//! (`ClientNode::wait_connected` and the cluster list report it). A node logs one warning
//! per unreachable address (address and reason) until it is reached again.
//!
//! The whole dial is bounded: the TCP connect gets `connect_timeout`, and an outgoing
//! session still in its handshake `connect_timeout` after the dial started (a peer that
//! accepts the connection and stays silent, or is no ractor_cluster node) is stopped and
//! the address reported as [`Missing::Handshake`]; it is dialled again with backoff. A
//! peer that accepts and closes the connection before its challenge (no cluster node: an
//! HTTP server, a transparent proxy answering for an unreachable address) is redialled
//! until `connect_timeout` after the first such dial, then reported as
//! [`Missing::Closed`] (a single early close is no failure: a simultaneous duplicate
//! connection ends that way, and the next dial gets through).
//!
//! ractor_cluster does not say why a handshake ended, so a failed authentication is
//! inferred from its node-server events: an outgoing session that received the peer's
//! challenge (its name is known) and closed before it authenticated. A session refused
//! for being a simultaneous duplicate connection ends before the challenge and is no
//! authentication failure.

use super::{Missing, NodeConfig};
use ractor::{ActorId, ActorRef};
use ractor_cluster::node::{NodeEventSubscription, NodeServerSessionInformation};
use ractor_cluster::{NodeServerMessage, NodeSessionMessage};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the node server reports about its sessions (forwarded to the dialler).
enum SessionEvent {
    Opened(NodeServerSessionInformation),
    Authenticated(ActorId),
    Disconnected(NodeServerSessionInformation),
}

struct Events(mpsc::UnboundedSender<SessionEvent>);

impl NodeEventSubscription for Events {
    fn node_session_opened(&self, ses: NodeServerSessionInformation) {
        let _ = self.0.send(SessionEvent::Opened(ses));
    }
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
    /// When the handshake of the last successful TCP connect must be done.
    handshake_by: Option<Instant>,
    /// The kind of failure last reported for this address since it was last connected.
    reported: Option<std::mem::Discriminant<Missing>>,
    /// Set when an outgoing session closed before the peer's challenge: when the address
    /// is still not connected at this instant (the connect timeout after that dial
    /// started), it is reported as [`Missing::Closed`].
    closing_by: Option<Instant>,
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
            handshake_by: None,
            reported: None,
            closing_by: None,
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
    /// Outgoing sessions opened and neither authenticated nor closed yet: peer address
    /// and session actor.
    handshaking: HashMap<ActorId, (SocketAddr, ActorRef<NodeSessionMessage>)>,
    /// Sessions stopped because their handshake timed out (their close is no
    /// authentication failure).
    abandoned: HashSet<ActorId>,
    /// Log unreachable addresses at `warn` (a node) rather than `debug` (a client-only
    /// member, whose caller reports the error itself).
    warn: bool,
}

impl Dialer {
    /// Subscribes to `server`'s session events (before any dial, so none is missed).
    /// `warn`: log each unreachable address once at `warn` (else at `debug`).
    pub(crate) fn new(
        server: ActorRef<NodeServerMessage>,
        config: &NodeConfig,
        warn: bool,
    ) -> Self {
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
            handshaking: HashMap::new(),
            abandoned: HashSet::new(),
            warn,
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
                if dial.reported.is_some() {
                    tracing::info!("peer {addr} is reachable again");
                }
                *dial = Dial {
                    resolved: std::mem::take(&mut dial.resolved),
                    node: node.map(|(name, _)| name.to_owned()).or(dial.node.take()),
                    connected: true,
                    ..Dial::default()
                };
                continue;
            }
            dial.connected = false;
            let handshaking: Vec<ActorId> = self
                .handshaking
                .iter()
                .filter(|(_, (peer, _))| dial.resolved.contains(peer))
                .map(|(id, _)| *id)
                .collect();
            if !handshaking.is_empty() {
                // Not dialled again while a handshake is under way, until it is late.
                let by = *dial.handshake_by.get_or_insert(now + timeout);
                if now >= by {
                    for id in handshaking {
                        if let Some((_, session)) = self.handshaking.remove(&id) {
                            session.stop(Some("handshake timeout".into()));
                            self.abandoned.insert(id);
                        }
                    }
                    dial.handshake_by = None;
                    dial.state = Missing::Handshake(timeout);
                    Self::report(self.warn, addr, dial);
                    Self::back_off(dial, self.heartbeat, now);
                }
                continue;
            }
            dial.handshake_by = None;
            if dial.closing_by.is_some_and(|by| now >= by) {
                // Every dial since the first early close was closed in its handshake.
                dial.closing_by = None;
                dial.state = Missing::Closed(timeout);
                Self::report(self.warn, addr, dial);
                Self::back_off(dial, self.heartbeat, now);
                continue;
            }
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
        let (heartbeat, handshake, warn) = (self.heartbeat, self.handshake, self.warn);
        for (addr, result) in futures::future::join_all(attempts).await {
            let Some(dial) = self.dial_mut(&addr) else {
                continue;
            };
            match result {
                // Give the handshake time before dialling again; it must be done
                // within the connect timeout of the dial's start.
                Ok(()) => {
                    dial.state = Missing::Pending;
                    dial.next_at = Some(now + handshake);
                    dial.handshake_by = Some(now + timeout);
                }
                Err(reason) => {
                    dial.closing_by = None;
                    dial.state = Missing::Connect(reason);
                    Self::report(warn, &addr, dial);
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

    /// Logs why the address is unreachable (address and reason only: no cookie): once
    /// until it is connected again, and again only for another kind of failure (a
    /// refused connect, then a cookie mismatch).
    fn report(warn: bool, addr: &str, dial: &mut Dial) {
        let kind = std::mem::discriminant(&dial.state);
        if dial.reported == Some(kind) {
            return;
        }
        let reason = match &dial.state {
            Missing::Connect(reason) => reason.clone(),
            Missing::Auth => "authentication failed (the cookies differ)".to_owned(),
            Missing::Handshake(timeout) => format!(
                "it accepted the connection but did not complete the cluster handshake \
                 within {timeout:?}"
            ),
            Missing::Closed(timeout) => format!(
                "it accepted the connection but closed it before completing the cluster \
                 handshake, on every dial for {timeout:?} (is it a foya node?)"
            ),
            Missing::Gone | Missing::Pending => return,
        };
        dial.reported = Some(kind);
        if warn {
            tracing::warn!("peer {addr} is unreachable: {reason}; retrying with backoff");
        } else {
            tracing::debug!("peer {addr} is unreachable: {reason}");
        }
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
                SessionEvent::Opened(ses) => {
                    if let (false, Ok(peer)) = (ses.is_server, ses.peer_addr.parse()) {
                        self.handshaking
                            .insert(ses.actor.get_id(), (peer, ses.actor));
                    }
                }
                SessionEvent::Authenticated(id) => {
                    self.handshaking.remove(&id);
                    self.authenticated.insert(id);
                }
                SessionEvent::Disconnected(ses) => {
                    let id = ses.actor.get_id();
                    self.handshaking.remove(&id);
                    let abandoned = self.abandoned.remove(&id);
                    let was_authenticated = self.authenticated.remove(&id);
                    if abandoned || was_authenticated || ses.is_server {
                        continue;
                    }
                    let Ok(peer) = ses.peer_addr.parse::<SocketAddr>() else {
                        continue;
                    };
                    let now = Instant::now();
                    if ses.peer_name.is_none() {
                        // Closed before the challenge: given until the connect timeout
                        // after this dial started (its handshake deadline) to connect.
                        let timeout = self.connect_timeout;
                        for (_, dial) in &mut self.dials {
                            if dial.resolved.contains(&peer) {
                                let by = dial.handshake_by.unwrap_or(now + timeout);
                                dial.closing_by.get_or_insert(by);
                            }
                        }
                        continue;
                    }
                    for (addr, dial) in &mut self.dials {
                        if dial.resolved.contains(&peer) {
                            dial.closing_by = None;
                            dial.state = Missing::Auth;
                            Self::report(self.warn, addr, dial);
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
    // Port 0 is no address anyone listens on (a client joining to list sessions uses it
    // as a placeholder): a peer given as that address is dialled and fails at once.
    connect
        .iter()
        .filter(|a| listen.port() == 0 || a.parse::<std::net::SocketAddr>().ok() != Some(listen))
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
        // A client's placeholder listen address (port 0) drops nothing.
        let zero = vec!["127.0.0.1:0".to_owned()];
        assert_eq!(peers_to_dial("127.0.0.1:0".parse().unwrap(), &zero), zero);
    }
}

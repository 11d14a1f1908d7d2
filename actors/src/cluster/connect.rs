//! [`ClientNode`]: a client-only member of a cluster — a node server and the membership
//! task, no runtime and no gateway — for programs (such as `foya sessions list
//! --cluster`) that only talk to the nodes they dial.

use super::dial::Dialer;
use super::membership::Membership;
use super::node::{new_instance, spawn_server, stop_server};
use super::{ClusterClient, ClusterError, Gateways, Missing, NodeConfig};
use ractor::ActorRef;
use ractor_cluster::NodeServerMessage;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A connection to a cluster without serving sessions: it dials `config.connect` (and
/// keeps them connected, as a node does), and its [`ClientNode::client`] reaches their
/// gateways. Other nodes never list it (it has no gateway). Call
/// [`ClientNode::shutdown`] when done.
#[derive(Debug)]
pub struct ClientNode {
    name: String,
    connect: Vec<String>,
    server: ActorRef<NodeServerMessage>,
    membership: JoinHandle<()>,
    gateways: watch::Receiver<Gateways>,
    call_timeout: Duration,
    gather_timeout: Duration,
}

impl ClientNode {
    /// Starts the node server on `config.listen` (`127.0.0.1:0` is fine: nobody dials a
    /// client) and the membership task, which dials `config.connect` every
    /// `config.heartbeat` until connected.
    ///
    /// # Errors
    /// [`ClusterError::Actor`] when the node server cannot start.
    pub async fn connect(config: NodeConfig) -> Result<ClientNode, ClusterError> {
        let instance = new_instance();
        let server = spawn_server(&config, &instance).await?;
        let (tx, gateways) = watch::channel(Gateways::default());
        let membership = Membership {
            server: server.clone(),
            name: config.name.clone(),
            instance,
            own_gateway: None,
            dialer: Dialer::new(server.clone(), &config, false),
            heartbeat: config.heartbeat,
            timeout: config.heartbeat_timeout,
            gateways: tx,
            // A client-only member has no gateway: no name to be refused for.
            refused: watch::channel(None).0,
        };
        Ok(ClientNode {
            name: config.name,
            connect: config.connect,
            server,
            membership: tokio::spawn(membership.run()),
            gateways,
            call_timeout: config.call_timeout,
            gather_timeout: config.gather_timeout,
        })
    }

    /// Waits until at least one node's gateway is live, for at most `timeout`; returns
    /// the live nodes' names, sorted. Returns early with the first address's error once
    /// every configured address failed: a refused connection fails at once, a silent
    /// address after `NodeConfig::connect_timeout`, a wrong cookie after the handshake,
    /// a peer that accepts the connection but never completes the handshake
    /// `NodeConfig::connect_timeout` after the dial (plus at most one `heartbeat`), one
    /// that accepts and closes every connection before the handshake's challenge
    /// `NodeConfig::connect_timeout` after the first such dial.
    ///
    /// # Errors
    /// [`ClusterError::ConnectFailed`] (naming the address and the OS error or timeout),
    /// [`ClusterError::AuthFailed`] (the node closed the cookie handshake),
    /// [`ClusterError::HandshakeTimeout`] (connected, no handshake),
    /// [`ClusterError::HandshakeClosed`] (connected, closed by the peer), or, when `timeout`
    /// passed with the nodes authenticated but no gateway answering,
    /// [`ClusterError::NodeUnreachable`] naming the configured addresses.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<Vec<String>, ClusterError> {
        let mut rx = self.gateways.clone();
        let failed = |g: &Gateways| {
            !self.connect.is_empty()
                && self.connect.iter().all(|a| {
                    matches!(
                        g.1.get(a),
                        Some(
                            Missing::Connect(_)
                                | Missing::Auth
                                | Missing::Handshake(_)
                                | Missing::Closed(_)
                        )
                    )
                })
        };
        let waited = tokio::time::timeout(timeout, rx.wait_for(|g| !g.0.is_empty() || failed(g)));
        let view = match waited.await {
            Ok(Ok(g)) => g.clone(),
            _ => return Err(ClusterError::NodeUnreachable(self.connect.join(", "))),
        };
        if !view.0.is_empty() {
            return Ok(view.0.keys().cloned().collect());
        }
        let addr = self.connect.first().cloned().unwrap_or_default();
        Err(match view.1.get(&addr) {
            Some(Missing::Auth) => ClusterError::AuthFailed { addr },
            Some(Missing::Handshake(timeout)) => ClusterError::HandshakeTimeout {
                addr,
                timeout: *timeout,
            },
            Some(Missing::Closed(timeout)) => ClusterError::HandshakeClosed {
                addr,
                timeout: *timeout,
            },
            Some(Missing::Connect(reason)) => ClusterError::ConnectFailed {
                addr,
                reason: reason.clone(),
            },
            _ => ClusterError::NodeUnreachable(addr),
        })
    }

    /// A client of the nodes this member is connected to (`create_session` needs an
    /// explicit target node: there is no local one).
    #[must_use]
    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.name.clone(), self.gateways.clone(), self.call_timeout)
            .with_gather_timeout(self.gather_timeout)
    }

    /// Stops the membership task and the node server (closing its sessions).
    pub async fn shutdown(self) {
        self.membership.abort();
        stop_server(&self.server).await;
    }
}

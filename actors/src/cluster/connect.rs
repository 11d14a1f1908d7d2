//! [`ClientNode`]: a client-only member of a cluster — a node server and the membership
//! task, no runtime and no gateway — for programs (such as `foya sessions list
//! --cluster`) that only talk to the nodes they dial.

use super::membership::Membership;
use super::node::{spawn_server, stop_server};
use super::{ClusterClient, ClusterError, Gateways, NodeConfig};
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
}

impl ClientNode {
    /// Starts the node server on `config.listen` (`127.0.0.1:0` is fine: nobody dials a
    /// client) and the membership task, which dials `config.connect` every
    /// `config.heartbeat` until connected.
    ///
    /// # Errors
    /// [`ClusterError::Actor`] when the node server cannot start.
    pub async fn connect(config: NodeConfig) -> Result<ClientNode, ClusterError> {
        let server = spawn_server(&config).await?;
        let (tx, gateways) = watch::channel(Gateways::default());
        let membership = Membership {
            server: server.clone(),
            name: config.name.clone(),
            own_gateway: None,
            connect: config.connect.clone(),
            heartbeat: config.heartbeat,
            timeout: config.heartbeat_timeout,
            gateways: tx,
        };
        Ok(ClientNode {
            name: config.name,
            connect: config.connect,
            server,
            membership: tokio::spawn(membership.run()),
            gateways,
            call_timeout: config.call_timeout,
        })
    }

    /// Waits until at least one node's gateway is live, for at most `timeout`; returns
    /// the live nodes' names, sorted.
    ///
    /// # Errors
    /// [`ClusterError::NodeUnreachable`] (naming the configured addresses) when none
    /// answered in time.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn wait_connected(&self, timeout: Duration) -> Result<Vec<String>, ClusterError> {
        let mut rx = self.gateways.clone();
        match tokio::time::timeout(timeout, rx.wait_for(|g| !g.0.is_empty())).await {
            Ok(Ok(g)) => Ok(g.0.keys().cloned().collect()),
            _ => Err(ClusterError::NodeUnreachable(self.connect.join(", "))),
        }
    }

    /// A client of the nodes this member is connected to (`create_session` needs an
    /// explicit target node: there is no local one).
    #[must_use]
    pub fn client(&self) -> ClusterClient {
        ClusterClient::new(self.name.clone(), self.gateways.clone(), self.call_timeout)
    }

    /// Stops the membership task and the node server (closing its sessions).
    pub async fn shutdown(self) {
        self.membership.abort();
        stop_server(&self.server).await;
    }
}

//! [`ClusterClient`]: requests to the gateways of a cluster, by node name.
//!
//! The client knows the live gateways from its node's membership task. Which node holds
//! a session is remembered from `create_session`/`list_sessions`; an unknown session is
//! looked up through every gateway's list. Cluster-wide lists gather with a per-node
//! timeout and name the nodes that did not answer ([`ClusterListing`]).

use super::subscription::ClusterSubscription;
use super::wire::{GatewayMsg, GatewayReply, GatewayRequest};
use super::{ClusterError, Gateways};
use crate::kernel::RuntimeError;
use crate::subscription::SubscribeOptions;
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, Input, InputId, Seq, SessionConfig, SessionId,
    SessionSummary,
};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

/// A client of the cluster; cheap to clone.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    local: String,
    gateways: watch::Receiver<Gateways>,
    placement: Arc<Mutex<HashMap<SessionId, String>>>,
    timeout: Duration,
    gather_timeout: Duration,
    subscriber_buffer: usize,
}

/// The sessions of a cluster, and which nodes are missing from them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterListing {
    /// Sessions of the nodes that answered, `node` set, most recently updated first.
    pub sessions: Vec<SessionSummary>,
    /// Nodes that did not answer, sorted: names of nodes seen live before (or live but
    /// silent past the gather timeout), and configured addresses never reached. Empty
    /// when the list is complete.
    pub unreachable: Vec<String>,
}

impl ClusterListing {
    /// Whether every known node answered.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.unreachable.is_empty()
    }
}

impl ClusterClient {
    pub(crate) fn new(
        local: String,
        gateways: watch::Receiver<Gateways>,
        timeout: Duration,
    ) -> Self {
        Self {
            local,
            gateways,
            placement: Arc::default(),
            timeout,
            gather_timeout: timeout,
            subscriber_buffer: crate::runtime::DEFAULT_SUBSCRIBER_BUFFER,
        }
    }

    /// This client with `timeout` as the bound of each request to a node (default
    /// [`NodeConfig::call_timeout`](super::NodeConfig::call_timeout)): a node that does
    /// not answer within it fails the call with [`ClusterError::Timeout`].
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets how many updates a subscription of this client holds for its reader before
    /// cutting it off with `Lagged` (a node's client: its runtime's `subscriber_buffer`).
    pub(crate) fn with_subscriber_buffer(mut self, buffer: usize) -> Self {
        self.subscriber_buffer = buffer.max(1);
        self
    }

    /// A handle to the session `session_id`, wherever it lives in the cluster, with the
    /// methods of a local [`SessionHandle`](crate::SessionHandle) (see
    /// [`SessionApi`](crate::SessionApi)).
    #[must_use]
    pub fn session(&self, session_id: SessionId) -> super::RemoteSession {
        super::RemoteSession::new(self.clone(), session_id)
    }

    /// Sets how long a cluster-wide list waits for each node.
    pub(crate) fn with_gather_timeout(mut self, gather_timeout: Duration) -> Self {
        self.gather_timeout = gather_timeout;
        self
    }

    /// Names of the nodes whose gateways answer heartbeats (this one included once its
    /// first heartbeat ran), sorted.
    #[must_use]
    pub fn nodes(&self) -> Vec<String> {
        self.gateways.borrow().0.keys().cloned().collect()
    }

    /// Waits until `node`'s gateway is live, at most `timeout`.
    ///
    /// # Errors
    /// [`ClusterError::NodeUnreachable`] when it is not live within `timeout` (or this
    /// client stopped).
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn wait_for_node(&self, node: &str, timeout: Duration) -> Result<(), ClusterError> {
        let mut rx = self.gateways.clone();
        match tokio::time::timeout(timeout, rx.wait_for(|g| g.0.contains_key(node))).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ClusterError::NodeUnreachable(node.to_owned())),
        }
    }

    pub(crate) fn gateway(&self, node: &str) -> Result<ActorRef<GatewayMsg>, ClusterError> {
        self.gateways
            .borrow()
            .0
            .get(node)
            .cloned()
            .ok_or_else(|| ClusterError::NodeUnreachable(node.to_owned()))
    }

    pub(crate) fn watch(&self) -> watch::Receiver<Gateways> {
        self.gateways.clone()
    }

    pub(crate) async fn request_to(
        &self,
        gateway: &ActorRef<GatewayMsg>,
        request: GatewayRequest,
    ) -> Result<GatewayReply, ClusterError> {
        self.request_within(gateway, request, self.timeout).await
    }

    async fn request_within(
        &self,
        gateway: &ActorRef<GatewayMsg>,
        request: GatewayRequest,
        timeout: Duration,
    ) -> Result<GatewayReply, ClusterError> {
        match gateway
            .call(|reply| GatewayMsg::Request(request, reply), Some(timeout))
            .await
        {
            Ok(CallResult::Success(GatewayReply::Failed { message, error })) => {
                Err(error.map_or(ClusterError::Remote(message), ClusterError::Runtime))
            }
            Ok(CallResult::Success(reply)) => Ok(reply),
            Ok(CallResult::Timeout) => Err(ClusterError::Timeout(timeout)),
            Ok(CallResult::SenderError) => Err(ClusterError::NoAnswer("connection lost".into())),
            Err(e) => Err(ClusterError::NoAnswer(e.to_string())),
        }
    }

    async fn request(
        &self,
        node: &str,
        request: GatewayRequest,
    ) -> Result<GatewayReply, ClusterError> {
        let gateway = self.gateway(node)?;
        self.request_to(&gateway, request).await
    }

    /// `request` about `session_id`, sent to the node holding it; when that node is
    /// not its owner any more (its shard moved: [`RuntimeError::NotOwner`]) or does not
    /// answer (dead, cut off), the owner is resolved again — the one the refusal names,
    /// else each other node in turn — and the request sent there (requests are
    /// idempotent: inputs carry their id). The node that took it is remembered.
    async fn routed(
        &self,
        session_id: SessionId,
        request: GatewayRequest,
    ) -> Result<GatewayReply, ClusterError> {
        let first = self.locate(session_id).await?;
        let mut error = match self.request(&first, request.clone()).await {
            Ok(reply) => return Ok(reply),
            Err(e) if moved(&e) => e,
            Err(e) => return Err(e),
        };
        let mut tried = vec![first];
        loop {
            let hint = match &error {
                ClusterError::Runtime(RuntimeError::NotOwner { owner, .. }) => owner.clone(),
                _ => None,
            };
            let Some(next) = self.next_node(&tried, hint.as_deref()) else {
                return Err(error);
            };
            match self.request(&next, request.clone()).await {
                Ok(reply) => {
                    self.placement
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(session_id, next);
                    return Ok(reply);
                }
                Err(e) if moved(&e) || is_not_found(&e) => {
                    tried.push(next);
                    if moved(&e) {
                        error = e;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The next node to ask for a session's owner: `hint` when it is reachable and not
    /// tried yet, else the first reachable node (by name) not in `tried`.
    pub(crate) fn next_node(&self, tried: &[String], hint: Option<&str>) -> Option<String> {
        let gateways = self.gateways.borrow();
        if let Some(hint) = hint
            && gateways.0.contains_key(hint)
            && !tried.iter().any(|t| t == hint)
        {
            return Some(hint.to_owned());
        }
        let mut names: Vec<&String> = gateways.0.keys().collect();
        names.sort();
        names.into_iter().find(|n| !tried.contains(n)).cloned()
    }

    /// The node holding `session_id` (asking every gateway when not known yet).
    ///
    /// # Errors
    /// [`ClusterError::SessionNotFound`] when no reachable node has it.
    pub async fn locate(&self, session_id: SessionId) -> Result<String, ClusterError> {
        let known = self
            .placement
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&session_id)
            .cloned();
        if let Some(node) = known {
            return Ok(node);
        }
        self.list_cluster().await;
        self.placement
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&session_id)
            .cloned()
            .ok_or(ClusterError::SessionNotFound(session_id))
    }

    /// Creates a session on `target_node` (default: this node).
    ///
    /// # Errors
    /// [`ClusterError::NodeUnreachable`], [`ClusterError::Runtime`] (storage),
    /// [`ClusterError::Timeout`], [`ClusterError::NoAnswer`].
    pub async fn create_session(
        &self,
        target_node: Option<&str>,
        config: SessionConfig,
    ) -> Result<SessionId, ClusterError> {
        let node = target_node.unwrap_or(&self.local).to_owned();
        match self
            .request(&node, GatewayRequest::CreateSession { config })
            .await?
        {
            GatewayReply::Created { session_id } => {
                self.placement
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(session_id, node);
                Ok(session_id)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Submits an input under a client-chosen id; retrying with the same id after a
    /// lost answer applies it once.
    ///
    /// # Errors
    /// As [`Self::create_session`], and [`ClusterError::SessionNotFound`].
    pub async fn submit_with_id(
        &self,
        session_id: SessionId,
        input_id: InputId,
        input: Input,
    ) -> Result<InputId, ClusterError> {
        let request = GatewayRequest::Submit {
            session_id,
            input_id,
            input,
        };
        match self.routed(session_id, request).await? {
            GatewayReply::Submitted { input_id } => Ok(input_id),
            other => Err(unexpected(&other)),
        }
    }

    /// Cancels the session's active turn.
    ///
    /// # Errors
    /// As [`Self::submit_with_id`].
    pub async fn cancel(&self, session_id: SessionId) -> Result<(), ClusterError> {
        self.done(session_id, GatewayRequest::Cancel { session_id })
            .await
    }

    /// Deletes the session.
    ///
    /// # Errors
    /// As [`Self::submit_with_id`].
    pub async fn delete(&self, session_id: SessionId) -> Result<(), ClusterError> {
        self.done(session_id, GatewayRequest::Delete { session_id })
            .await
    }

    /// Answers a pending approval request of the session.
    ///
    /// # Errors
    /// As [`Self::submit_with_id`]; an unknown request is [`ClusterError::Remote`].
    pub async fn decide_approval(
        &self,
        session_id: SessionId,
        request_id: ApprovalRequestId,
        decision: ApprovalDecision,
        message: Option<String>,
    ) -> Result<(), ClusterError> {
        let request = GatewayRequest::DecideApproval {
            session_id,
            request_id,
            decision,
            message,
        };
        self.done(session_id, request).await
    }

    async fn done(
        &self,
        session_id: SessionId,
        request: GatewayRequest,
    ) -> Result<(), ClusterError> {
        match self.routed(session_id, request).await? {
            GatewayReply::Done => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Every session of every node (`node` set), most recently updated first.
    ///
    /// # Errors
    /// [`ClusterError::Partial`] naming the nodes that did not answer (see
    /// [`Self::list_cluster`] for what the others hold).
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>, ClusterError> {
        let listing = self.list_cluster().await;
        if listing.is_complete() {
            Ok(listing.sessions)
        } else {
            Err(ClusterError::Partial(listing.unreachable))
        }
    }

    /// The sessions of every live node, asked at once, each within the gather timeout
    /// (`NodeConfig::gather_timeout`), most recently updated first; the nodes that did
    /// not answer in time, and the nodes missing from this node's view (seen live
    /// before, or configured and never reached), are named in
    /// [`ClusterListing::unreachable`].
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn list_cluster(&self) -> ClusterListing {
        let gateways = self.gateways.borrow().clone();
        let asks = gateways.0.iter().map(|(node, gw)| async move {
            let answer = self
                .request_within(gw, GatewayRequest::ListSessions, self.gather_timeout)
                .await;
            (node, answer)
        });
        let mut all = Vec::new();
        let mut unreachable: Vec<String> = gateways.1.keys().cloned().collect();
        for (node, answer) in futures::future::join_all(asks).await {
            match answer {
                Ok(GatewayReply::Sessions { sessions }) => all.extend(sessions),
                other => {
                    tracing::debug!(%node, answer = ?other, "no session list");
                    unreachable.push(node.clone());
                }
            }
        }
        self.remember(&all);
        all.sort_by(|a, b| b.updated_at_ms.cmp(&a.updated_at_ms).then(a.id.cmp(&b.id)));
        unreachable.sort();
        unreachable.dedup();
        ClusterListing {
            sessions: all,
            unreachable,
        }
    }

    fn remember(&self, sessions: &[SessionSummary]) {
        let mut placement = self
            .placement
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for s in sessions {
            if let Some(node) = &s.node {
                placement.insert(s.id, node.clone());
            }
        }
    }

    /// The sessions of every node that `node` sees (its own included), each with `node`
    /// set, most recently updated first — gathered by `node`'s gateway, so a client
    /// connected to that one node lists the whole cluster. The nodes `node` could not
    /// reach are in [`ClusterListing::unreachable`].
    ///
    /// # Errors
    /// [`ClusterError::NodeUnreachable`] when `node` itself is not live here;
    /// [`ClusterError::NoAnswer`], [`ClusterError::Remote`].
    pub async fn list_sessions_through(&self, node: &str) -> Result<ClusterListing, ClusterError> {
        match self
            .request(node, GatewayRequest::ListClusterSessions)
            .await?
        {
            GatewayReply::ClusterSessions {
                sessions,
                unreachable,
            } => {
                self.remember(&sessions);
                Ok(ClusterListing {
                    sessions,
                    unreachable,
                })
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Subscribes to a session wherever it lives, from `from_seq` (1 = everything).
    /// The subscription survives reconnects and restarts of that node: it resumes from
    /// its last seq, with no gap and no duplicate.
    ///
    /// # Errors
    /// [`ClusterError::SessionNotFound`], [`ClusterError::Actor`].
    pub async fn subscribe(
        &self,
        session_id: SessionId,
        from_seq: Seq,
    ) -> Result<ClusterSubscription, ClusterError> {
        self.subscribe_with(session_id, from_seq, SubscribeOptions::default())
            .await
    }

    /// As [`Self::subscribe`], with options: `approver: true` makes this subscription
    /// the session's approver on its node (requests needing approval then wait for
    /// [`Self::decide_approval`] instead of being denied). The approver is attached once
    /// the first update of the subscription arrived (the session's node replays, then
    /// follows, through one local subscription).
    ///
    /// # Errors
    /// As [`Self::subscribe`].
    pub async fn subscribe_with(
        &self,
        session_id: SessionId,
        from_seq: Seq,
        options: SubscribeOptions,
    ) -> Result<ClusterSubscription, ClusterError> {
        let node = self.locate(session_id).await?;
        let buffer = self.subscriber_buffer;
        ClusterSubscription::start(self.clone(), node, session_id, from_seq, options, buffer).await
    }
}

fn unexpected(reply: &GatewayReply) -> ClusterError {
    ClusterError::Remote(format!("unexpected answer: {reply:?}"))
}

/// Whether `e` says the session's node is not (or no longer) where it runs: its shard
/// moved, or the node did not answer.
pub(crate) fn moved(e: &ClusterError) -> bool {
    matches!(
        e,
        ClusterError::Runtime(RuntimeError::NotOwner { .. })
            | ClusterError::NodeUnreachable(_)
            | ClusterError::NoAnswer(_)
            | ClusterError::Timeout(_)
    )
}

/// Whether `e` says a node does not have the session (another node may).
fn is_not_found(e: &ClusterError) -> bool {
    matches!(
        e,
        ClusterError::SessionNotFound(_) | ClusterError::Runtime(RuntimeError::SessionNotFound(_))
    )
}

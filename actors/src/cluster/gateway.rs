//! The gateway actor: one per node, member of process group [`GATEWAY_GROUP`], reachable
//! from every node of the cluster. It applies [`GatewayRequest`]s to the local
//! [`Runtime`] and pushes subscription updates to subscriber actors on other nodes.
//!
//! Each request runs in its own task (a slow delete never blocks a heartbeat); each
//! subscription is a forwarder task owned by the gateway (aborted when it stops) that
//! replays from the asked seq, follows live updates and casts them to the subscriber;
//! it ends when the subscriber is gone (its node disconnected) or the session closed.
//! `ListClusterSessions` is answered from this node's view of the cluster (every
//! gateway its membership task sees live), so a client connected to one node lists all;
//! the nodes that did not answer are named in the reply. `Ping` (identity: name,
//! instance, listen address) and `NameTaken` (this node lost its name: it leaves the
//! cluster) are answered in the handler.

use super::ClusterError;
use super::client::ClusterClient;
use super::wire::{GATEWAY_GROUP, GatewayMsg, GatewayReply, GatewayRequest, Push, WireUpdate};
use crate::kernel::RuntimeError;
use crate::runtime::Runtime;
use crate::subscription::SubscribeOptions;
use foya_protocol::event::Notice;
use foya_protocol::{Seq, SessionId, SessionUpdate};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long a forwarder waits for the subscriber's process group to be visible here.
const SUBSCRIBER_LOOKUP: Duration = Duration::from_secs(5);
/// Interval of that lookup.
const SUBSCRIBER_POLL: Duration = Duration::from_millis(10);

pub(crate) struct GatewayActor;

pub(crate) struct GatewayArgs {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) node: String,
    /// This run of the node (answered to pings).
    pub(crate) instance: String,
    /// The address the node listens on (answered to pings).
    pub(crate) listen: String,
    /// This node's view of the cluster (answers `ListClusterSessions`).
    pub(crate) cluster: ClusterClient,
    /// Set when another node says this node's name is taken.
    pub(crate) refused: watch::Sender<Option<ClusterError>>,
}

pub(crate) struct GatewayState {
    runtime: Arc<Runtime>,
    node: String,
    instance: String,
    listen: String,
    cluster: ClusterClient,
    refused: watch::Sender<Option<ClusterError>>,
    /// Forwarders and request tasks; dropping the set aborts them.
    tasks: JoinSet<()>,
}

impl Actor for GatewayActor {
    type Msg = GatewayMsg;
    type State = GatewayState;
    type Arguments = GatewayArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<GatewayMsg>,
        args: GatewayArgs,
    ) -> Result<GatewayState, ActorProcessingErr> {
        ractor::pg::join(GATEWAY_GROUP.to_owned(), vec![myself.get_cell()]);
        Ok(GatewayState {
            runtime: args.runtime,
            node: args.node,
            instance: args.instance,
            listen: args.listen,
            cluster: args.cluster,
            refused: args.refused,
            tasks: JoinSet::new(),
        })
    }

    /// Aborts the forwarders and request tasks and waits until they are gone, so the
    /// runtime they hold is released when the node shuts down.
    async fn post_stop(
        &self,
        _myself: ActorRef<GatewayMsg>,
        state: &mut GatewayState,
    ) -> Result<(), ActorProcessingErr> {
        state.tasks.shutdown().await;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<GatewayMsg>,
        msg: GatewayMsg,
        state: &mut GatewayState,
    ) -> Result<(), ActorProcessingErr> {
        // Reap finished tasks so the set does not grow.
        while state.tasks.try_join_next().is_some() {}
        let GatewayMsg::Request(request, reply) = msg;
        let runtime = Arc::clone(&state.runtime);
        let node = state.node.clone();
        match request {
            GatewayRequest::Ping => {
                let _ = reply.send(GatewayReply::Pong {
                    node,
                    instance: state.instance.clone(),
                    listen: state.listen.clone(),
                });
                return Ok(());
            }
            GatewayRequest::NameTaken { node: name, holder } => {
                if name == state.node {
                    tracing::info!(%name, %holder, "told this node's name is taken");
                    state.refused.send_if_modified(|current| {
                        let first = current.is_none();
                        if first {
                            *current = Some(ClusterError::NameTaken { name, holder });
                        }
                        first
                    });
                }
                let _ = reply.send(GatewayReply::Done);
                return Ok(());
            }
            GatewayRequest::ListClusterSessions => {
                let cluster = state.cluster.clone();
                state.tasks.spawn(async move {
                    let listing = cluster.list_cluster().await;
                    let _ = reply.send(GatewayReply::ClusterSessions {
                        sessions: listing.sessions,
                        unreachable: listing.unreachable,
                    });
                });
                return Ok(());
            }
            _ => {}
        }
        if let GatewayRequest::Subscribe {
            session_id,
            from_seq,
            group,
            epoch,
            approver,
        } = request
        {
            // Check the session before answering, then forward in the background.
            let answer = match runtime.session(session_id).await {
                Ok(_) => GatewayReply::Done,
                Err(e) => failed(&e),
            };
            let ok = answer == GatewayReply::Done;
            let _ = reply.send(answer);
            if ok {
                let sub = Forwarder {
                    runtime,
                    session_id,
                    group,
                    epoch,
                    approver,
                };
                state.tasks.spawn(sub.run(from_seq));
            }
            return Ok(());
        }
        state.tasks.spawn(async move {
            let answer = apply(&runtime, &node, request).await;
            let _ = reply.send(answer);
        });
        Ok(())
    }
}

fn failed(e: &RuntimeError) -> GatewayReply {
    GatewayReply::Failed {
        message: e.to_string(),
        error: Some(e.clone()),
    }
}

/// Applies one request to the local runtime.
async fn apply(runtime: &Runtime, node: &str, request: GatewayRequest) -> GatewayReply {
    let result = match request {
        GatewayRequest::CreateSession { config } => runtime
            .create_session(config)
            .await
            .map(|h| GatewayReply::Created { session_id: h.id() }),
        GatewayRequest::Submit {
            session_id,
            input_id,
            input,
        } => match runtime.session(session_id).await {
            Ok(h) => h
                .submit_with_id(input_id, input)
                .await
                .map(|input_id| GatewayReply::Submitted { input_id }),
            Err(e) => Err(e),
        },
        GatewayRequest::Cancel { session_id } => match runtime.session(session_id).await {
            Ok(h) => h.cancel().await.map(|()| GatewayReply::Done),
            Err(e) => Err(e),
        },
        GatewayRequest::Delete { session_id } => match runtime.session(session_id).await {
            Ok(h) => h.delete().await.map(|()| GatewayReply::Done),
            Err(e) => Err(e),
        },
        GatewayRequest::DecideApproval {
            session_id,
            request_id,
            decision,
            message,
        } => match runtime.session(session_id).await {
            Ok(h) => h
                .decide_approval(request_id, decision, message)
                .await
                .map(|()| GatewayReply::Done),
            Err(e) => Err(e),
        },
        GatewayRequest::ListSessions => runtime.list_sessions().await.map(|mut sessions| {
            for s in &mut sessions {
                s.node = Some(node.to_owned());
            }
            GatewayReply::Sessions { sessions }
        }),
        GatewayRequest::Ping
        | GatewayRequest::NameTaken { .. }
        | GatewayRequest::Subscribe { .. }
        | GatewayRequest::ListClusterSessions => Ok(GatewayReply::Failed {
            message: "handled by the gateway actor".into(),
            error: None,
        }),
        GatewayRequest::Undecodable(message) => Ok(GatewayReply::Failed {
            message: format!("undecodable request: {message}"),
            error: None,
        }),
    };
    result.unwrap_or_else(|e| failed(&e))
}

/// Forwards one session's updates to a subscriber actor on another node.
struct Forwarder {
    runtime: Arc<Runtime>,
    session_id: SessionId,
    group: String,
    epoch: u64,
    approver: bool,
}

impl Forwarder {
    async fn subscriber(&self) -> Option<ActorRef<Push>> {
        let deadline = tokio::time::Instant::now() + SUBSCRIBER_LOOKUP;
        loop {
            if let Some(cell) = ractor::pg::get_members(&self.group).into_iter().next() {
                return Some(ActorRef::from(cell));
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(SUBSCRIBER_POLL).await;
        }
    }

    async fn run(self, from_seq: Seq) {
        let Some(target) = self.subscriber().await else {
            tracing::warn!("subscriber group never appeared; dropping the subscription");
            return;
        };
        let mut next = from_seq.max(Seq::FIRST);
        loop {
            let handle = match self.runtime.session(self.session_id).await {
                Ok(h) => h,
                Err(crate::kernel::RuntimeError::NotOwner { .. }) => {
                    // The session's shard moved to another node: the subscriber
                    // resubscribes from where it is, and finds the new owner.
                    let notice = Notice::Lagged {
                        session_id: self.session_id,
                        last_seq: Seq(next.0.saturating_sub(1)),
                    };
                    let _ = self.send(&target, &SessionUpdate::Notice(notice));
                    return;
                }
                Err(e) => {
                    let notice = Notice::Closed {
                        session_id: self.session_id,
                        reason: e.to_string(),
                    };
                    let _ = self.send(&target, &SessionUpdate::Notice(notice));
                    return;
                }
            };
            let options = SubscribeOptions {
                approver: self.approver,
            };
            let Ok(mut sub) = handle.subscribe(next, options).await else {
                return;
            };
            while let Some(update) = sub.recv().await {
                match &update {
                    // Resubscribe locally from where this subscriber is (after `Moved`,
                    // this node answers `NotOwner`: the subscriber looks elsewhere).
                    SessionUpdate::Notice(
                        Notice::Lagged { last_seq, .. } | Notice::Moved { last_seq, .. },
                    ) => {
                        next = Seq(last_seq.0 + 1);
                        break;
                    }
                    SessionUpdate::Event(event) => next = Seq(event.seq.0 + 1),
                    _ => {}
                }
                let closed = matches!(update, SessionUpdate::Notice(Notice::Closed { .. }));
                if !self.send(&target, &update) || closed {
                    return;
                }
            }
        }
    }

    /// Casts one update; false when the subscriber is gone.
    fn send(&self, target: &ActorRef<Push>, update: &SessionUpdate) -> bool {
        let Ok(update) = WireUpdate::from_update(update) else {
            return true;
        };
        target
            .cast(Push::Update {
                epoch: self.epoch,
                update,
            })
            .is_ok()
    }
}

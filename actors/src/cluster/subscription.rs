//! [`ClusterSubscription`]: a session's updates from whichever node holds it, resumed
//! across reconnects.
//!
//! A subscriber actor on the client's node joins a process group of its own
//! (`foya.sub.<uuid>`); the remote gateway's forwarder casts [`Push`]es to it. A driver
//! task asks the gateway to subscribe from `last_seq + 1` under a new epoch whenever the
//! node's gateway changes (its node restarted or reconnected) or the remote side reports
//! `Lagged`, drops pushes of older epochs and events at or below `last_seq`, so the
//! stream has no gap and no duplicate.

use super::ClusterError;
use super::client::ClusterClient;
use super::wire::{GatewayRequest, Push};
use crate::subscription::SubscribeOptions;
use foya_protocol::event::Notice;
use foya_protocol::{Seq, SessionId, SessionUpdate};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Pause before retrying a subscribe request that got no answer.
const RETRY: Duration = Duration::from_millis(200);

struct SubscriberActor;

impl Actor for SubscriberActor {
    type Msg = Push;
    type State = mpsc::UnboundedSender<Push>;
    type Arguments = (String, mpsc::UnboundedSender<Push>);

    async fn pre_start(
        &self,
        myself: ActorRef<Push>,
        (group, tx): (String, mpsc::UnboundedSender<Push>),
    ) -> Result<Self::State, ActorProcessingErr> {
        ractor::pg::join(group, vec![myself.get_cell()]);
        Ok(tx)
    }

    async fn handle(
        &self,
        myself: ActorRef<Push>,
        msg: Push,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if tx.send(msg).is_err() {
            myself.stop(None);
        }
        Ok(())
    }
}

/// A session's updates across the cluster; also a `futures::Stream`. Dropping it ends
/// the subscription (the remote forwarder stops when its next push fails).
#[derive(Debug)]
pub struct ClusterSubscription {
    rx: mpsc::UnboundedReceiver<SessionUpdate>,
    last_seq: Arc<AtomicU64>,
    driver: JoinHandle<()>,
    actor: ActorRef<Push>,
}

impl Drop for ClusterSubscription {
    fn drop(&mut self) {
        self.driver.abort();
        self.actor.stop(None);
    }
}

impl ClusterSubscription {
    pub(crate) async fn start(
        client: ClusterClient,
        node: String,
        session_id: SessionId,
        from_seq: Seq,
        options: SubscribeOptions,
    ) -> Result<ClusterSubscription, ClusterError> {
        let group = format!("foya.sub.{}", uuid::Uuid::now_v7());
        let (push_tx, pushes) = mpsc::unbounded_channel();
        let (actor, _) = Actor::spawn(None, SubscriberActor, (group.clone(), push_tx))
            .await
            .map_err(|e| ClusterError::Actor(e.to_string()))?;
        let last = from_seq.0.max(1) - 1;
        let last_seq = Arc::new(AtomicU64::new(last));
        let (out, rx) = mpsc::unbounded_channel();
        let driver = Driver {
            client,
            node,
            session_id,
            group,
            approver: options.approver,
            last: Seq(last),
            pushes,
            out,
            shared_last: Arc::clone(&last_seq),
        };
        let driver = tokio::spawn(driver.run());
        Ok(ClusterSubscription {
            rx,
            last_seq,
            driver,
            actor,
        })
    }

    /// Seq of the last event delivered (`from_seq - 1` before any).
    #[must_use]
    pub fn last_seq(&self) -> Seq {
        Seq(self.last_seq.load(Ordering::Acquire))
    }

    /// The next update; `None` after `Notice::Closed` was delivered.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Option<SessionUpdate> {
        self.rx.recv().await
    }
}

impl futures::Stream for ClusterSubscription {
    type Item = SessionUpdate;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SessionUpdate>> {
        self.get_mut().rx.poll_recv(cx)
    }
}

struct Driver {
    client: ClusterClient,
    node: String,
    session_id: SessionId,
    group: String,
    approver: bool,
    last: Seq,
    pushes: mpsc::UnboundedReceiver<Push>,
    out: mpsc::UnboundedSender<SessionUpdate>,
    shared_last: Arc<AtomicU64>,
}

/// What ended one attempt.
enum Next {
    Resubscribe,
    Stop,
}

impl Driver {
    async fn run(mut self) {
        let mut watch = self.client.watch();
        let mut epoch = 0u64;
        loop {
            let gateway = loop {
                if let Ok(gw) = self.client.gateway(&self.node) {
                    break gw;
                }
                if watch.changed().await.is_err() {
                    return;
                }
            };
            epoch += 1;
            let request = GatewayRequest::Subscribe {
                session_id: self.session_id,
                from_seq: Seq(self.last.0 + 1),
                group: self.group.clone(),
                epoch,
                approver: self.approver,
            };
            match self.client.request_to(&gateway, request).await {
                Ok(_) => {}
                Err(e @ (ClusterError::Remote(_) | ClusterError::Runtime(_))) => {
                    let reason = match e {
                        ClusterError::Remote(reason) => reason,
                        other => other.to_string(),
                    };
                    let notice = Notice::Closed {
                        session_id: self.session_id,
                        reason,
                    };
                    let _ = self.out.send(SessionUpdate::Notice(notice));
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "subscribe got no answer; retrying");
                    let _ = tokio::time::timeout(RETRY, watch.changed()).await;
                    continue;
                }
            }
            match self.follow(epoch, &gateway, &mut watch).await {
                Next::Resubscribe => {}
                Next::Stop => return,
            }
        }
    }

    async fn follow(
        &mut self,
        epoch: u64,
        gateway: &ActorRef<super::wire::GatewayMsg>,
        watch: &mut tokio::sync::watch::Receiver<super::Gateways>,
    ) -> Next {
        loop {
            tokio::select! {
                push = self.pushes.recv() => {
                    let Some(push) = push else { return Next::Stop };
                    let Push::Update { epoch: e, update } = push else { continue };
                    if e != epoch {
                        continue;
                    }
                    let Ok(update) = update.into_update() else { return Next::Resubscribe };
                    match update {
                        SessionUpdate::Event(event) => {
                            if event.seq <= self.last {
                                continue;
                            }
                            self.last = event.seq;
                            self.shared_last.store(event.seq.0, Ordering::Release);
                            if self.out.send(SessionUpdate::Event(event)).is_err() {
                                return Next::Stop;
                            }
                        }
                        SessionUpdate::Notice(Notice::Lagged { .. }) => return Next::Resubscribe,
                        update @ SessionUpdate::Notice(Notice::Closed { .. }) => {
                            let _ = self.out.send(update);
                            return Next::Stop;
                        }
                        update => {
                            if self.out.send(update).is_err() {
                                return Next::Stop;
                            }
                        }
                    }
                }
                changed = watch.changed() => {
                    if changed.is_err() {
                        return Next::Stop;
                    }
                    let current = self.client.gateway(&self.node).ok().map(|g| g.get_id());
                    if current != Some(gateway.get_id()) {
                        return Next::Resubscribe;
                    }
                }
            }
        }
    }
}

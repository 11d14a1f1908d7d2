//! [`ClusterSubscription`]: a session's updates from whichever node holds it, resumed
//! across reconnects.
//!
//! A subscriber actor on the client's node joins a process group of its own
//! (`foya.sub.<uuid>`); the remote gateway's forwarder casts [`Push`]es to it. A driver
//! task asks the gateway to subscribe from `last_seq + 1` under a new epoch whenever the
//! node's gateway changes (its node restarted or reconnected) or the remote side reports
//! `Lagged`, drops pushes of older epochs and events at or below `last_seq`, so the
//! stream has no gap and no duplicate.
//!
//! The updates wait for the reader in a channel bounded like a local subscriber's
//! (`RuntimeConfig::subscriber_buffer` of the client's node): a reader that falls that
//! far behind is cut off, and gets `Notice::Lagged{last_seq}` once, as a local
//! [`Subscription`](crate::Subscription) does — resubscribe from `last_seq + 1`.

use super::ClusterError;
use super::client::ClusterClient;
use super::wire::{GatewayRequest, Push};
use crate::kernel::RuntimeError;
use crate::subscription::SubscribeOptions;
use foya_protocol::event::Notice;
use foya_protocol::{Seq, SessionId, SessionUpdate};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::pin::Pin;
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
///
/// A reader that falls [`Self::capacity`] updates behind is cut off: it gets
/// [`Notice::Lagged`] with the seq of the last event it received, once, then `None` —
/// as a local [`Subscription`](crate::Subscription) does.
#[derive(Debug)]
pub struct ClusterSubscription {
    session_id: SessionId,
    rx: mpsc::Receiver<SessionUpdate>,
    last_seq: Seq,
    ended: bool,
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
        buffer: usize,
    ) -> Result<ClusterSubscription, ClusterError> {
        let group = format!("foya.sub.{}", uuid::Uuid::now_v7());
        let (push_tx, pushes) = mpsc::unbounded_channel();
        let (actor, _) = Actor::spawn(None, SubscriberActor, (group.clone(), push_tx))
            .await
            .map_err(|e| ClusterError::Actor(e.to_string()))?;
        let last = from_seq.0.max(1) - 1;
        let (out, rx) = mpsc::channel(buffer.max(1));
        let driver = Driver {
            client,
            node,
            session_id,
            group,
            approver: options.approver,
            last: Seq(last),
            pushes,
            out,
        };
        let driver = tokio::spawn(driver.run());
        Ok(ClusterSubscription {
            session_id,
            rx,
            last_seq: Seq(last),
            ended: false,
            driver,
            actor,
        })
    }

    /// Seq of the last event delivered (`from_seq - 1` before any).
    #[must_use]
    pub fn last_seq(&self) -> Seq {
        self.last_seq
    }

    /// How many updates may wait for the reader before it is cut off with
    /// [`Notice::Lagged`] (the client node's `RuntimeConfig::subscriber_buffer`).
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.rx.max_capacity()
    }

    /// How many updates wait for the reader now (at most [`Self::capacity`]).
    #[must_use]
    pub fn queued(&self) -> usize {
        self.rx.len()
    }

    /// Whether the driver stopped (cut this reader off, or the subscription closed).
    #[cfg(test)]
    pub(crate) fn is_cut_off(&self) -> bool {
        self.rx.is_closed()
    }

    /// The next update; `None` after `Notice::Closed` or `Notice::Lagged` was delivered.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Option<SessionUpdate> {
        std::future::poll_fn(|cx| self.poll_update(cx)).await
    }

    fn poll_update(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionUpdate>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let update = match self.rx.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(update)) => update,
            // The driver stopped without `Closed`: it cut this reader off.
            Poll::Ready(None) => SessionUpdate::Notice(Notice::Lagged {
                session_id: self.session_id,
                last_seq: self.last_seq,
            }),
        };
        match &update {
            SessionUpdate::Event(event) => self.last_seq = event.seq,
            SessionUpdate::Notice(
                Notice::Closed { .. } | Notice::Lagged { .. } | Notice::Moved { .. },
            ) => {
                self.ended = true;
            }
            SessionUpdate::Delta(_) => {}
        }
        Poll::Ready(Some(update))
    }
}

impl futures::Stream for ClusterSubscription {
    type Item = SessionUpdate;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SessionUpdate>> {
        self.get_mut().poll_update(cx)
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
    out: mpsc::Sender<SessionUpdate>,
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
        // Nodes asked in vain since the session's node stopped serving it (its shard
        // moved, or it went away): the owner is looked for among the others.
        let mut tried: Vec<String> = Vec::new();
        loop {
            let gateway = loop {
                if let Ok(gw) = self.client.gateway(&self.node) {
                    break gw;
                }
                match tokio::time::timeout(RETRY, watch.changed()).await {
                    Ok(Err(_)) => return,
                    Ok(Ok(())) => {}
                    // Gone for a while: its shards may have moved; ask another node.
                    Err(_) => self.look_elsewhere(&mut tried, None),
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
                Ok(_) => tried.clear(),
                Err(ClusterError::Runtime(RuntimeError::NotOwner { owner, .. })) => {
                    self.look_elsewhere(&mut tried, owner.as_deref());
                    let _ = tokio::time::timeout(RETRY, watch.changed()).await;
                    continue;
                }
                Err(ClusterError::Runtime(RuntimeError::SessionNotFound(_)))
                    if !tried.is_empty() =>
                {
                    self.look_elsewhere(&mut tried, None);
                    let _ = tokio::time::timeout(RETRY, watch.changed()).await;
                    continue;
                }
                Err(e @ (ClusterError::Remote(_) | ClusterError::Runtime(_))) => {
                    let reason = match e {
                        ClusterError::Remote(reason) => reason,
                        other => other.to_string(),
                    };
                    let notice = Notice::Closed {
                        session_id: self.session_id,
                        reason,
                    };
                    let _ = self.out.try_send(SessionUpdate::Notice(notice));
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "subscribe got no answer; retrying");
                    if !tried.is_empty() {
                        self.look_elsewhere(&mut tried, None);
                    }
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

    /// Moves to the next node that may own the session (`hint` first), remembering
    /// this one as tried; after every node was tried, starts over from this one.
    fn look_elsewhere(&mut self, tried: &mut Vec<String>, hint: Option<&str>) {
        tried.push(self.node.clone());
        match self.client.next_node(tried, hint) {
            Some(next) => self.node = next,
            None => {
                // Every node asked: back to the first one (it may come back).
                self.node = tried.swap_remove(0);
                tried.clear();
            }
        }
    }

    /// Queues `update` for the reader, never waiting: `false` when the reader is gone
    /// or is `capacity` updates behind (the driver then stops, and the reader, once it
    /// drained the queue, gets `Lagged`).
    fn deliver(&self, update: SessionUpdate) -> bool {
        match self.out.try_send(update) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::debug!(session_id = %self.session_id, "cluster subscriber lagged");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
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
                            if !self.deliver(SessionUpdate::Event(event)) {
                                return Next::Stop;
                            }
                        }
                        // Resubscribed; after `Moved` the node answers `NotOwner` and the
                        // owner is looked for elsewhere.
                        SessionUpdate::Notice(Notice::Lagged { .. } | Notice::Moved { .. }) => {
                            return Next::Resubscribe;
                        }
                        update @ SessionUpdate::Notice(Notice::Closed { .. }) => {
                            let _ = self.deliver(update);
                            return Next::Stop;
                        }
                        update => {
                            if !self.deliver(update) {
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

//! A subscriber's view of a session: replayed committed events, then live ones.
//!
//! The session registers the subscriber and reports the last committed seq `c`; the
//! replay covers `from_seq..=c` from the store and the channel carries only what the
//! session commits after registration, so there is no gap and no duplicate. If the
//! session drops the subscriber (its channel was full, or the session restarted), the
//! channel ends without `Notice::Closed` and the subscription yields
//! `Notice::Lagged{last_seq}` once: resubscribe from `last_seq + 1`. A session a cluster
//! node hands off ends its subscriptions with `Notice::Moved{last_seq}`: resubscribe
//! from `last_seq + 1` on the node that serves it now.

use foya_protocol::event::Notice;
use foya_protocol::{Event, Seq, SessionId, SessionUpdate};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Options of `SessionHandle::subscribe`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// This subscriber answers approval requests; while at least one approver is
    /// attached, calls that need approval wait for a decision instead of being denied.
    pub approver: bool,
}

/// A live subscription; also a `futures::Stream` of [`SessionUpdate`].
#[derive(Debug)]
pub struct Subscription {
    session_id: SessionId,
    from_seq: Seq,
    last_seq: Seq,
    replay_end: Seq,
    backlog: VecDeque<Event>,
    rx: mpsc::Receiver<Box<SessionUpdate>>,
    ended: bool,
    /// Dropped after `rx` (fields drop in order): tells the session this subscriber left.
    _watch: Option<crate::session::WatchGuard>,
}

impl Subscription {
    pub(crate) fn new(
        session_id: SessionId,
        from_seq: Seq,
        replay_end: Seq,
        backlog: Vec<Event>,
        rx: mpsc::Receiver<Box<SessionUpdate>>,
        watch: Option<crate::session::WatchGuard>,
    ) -> Self {
        let last_seq = Seq(from_seq.0.saturating_sub(1));
        Self {
            session_id,
            from_seq,
            last_seq,
            replay_end,
            backlog: backlog.into(),
            rx,
            ended: false,
            _watch: watch,
        }
    }

    /// A subscription from `from_seq`: the session's live channel and the seq committed
    /// when it was registered (`SessionMsg::Subscribe`'s answer), with the committed
    /// events from `from_seq` up to that seq read from `store` as the backlog.
    pub(crate) async fn replaying(
        session_id: SessionId,
        from_seq: Seq,
        (rx, committed, watch): crate::session::Subscribed,
        store: &foya_storage::LogStore,
    ) -> Result<Self, crate::kernel::RuntimeError> {
        use foya_storage::EventLog as _;
        let backlog = store
            .read_from(session_id, from_seq.max(Seq::FIRST))
            .await
            .map_err(|e| crate::kernel::RuntimeError::Storage(crate::kernel::StorageError::of(e)))?
            .into_iter()
            .filter(|e| e.seq <= committed)
            .collect();
        Ok(Self::new(
            session_id,
            from_seq,
            committed,
            backlog,
            rx,
            Some(watch),
        ))
    }

    /// Seq of the last event delivered (`from_seq - 1` before any).
    #[must_use]
    pub fn last_seq(&self) -> Seq {
        self.last_seq
    }

    /// The session's last committed seq when this subscription was registered: events
    /// up to it are replayed from the store, later ones (and every live delta) arrive as
    /// the session commits or streams them. So a turn whose `turn_started` has a greater
    /// seq ran entirely while subscribed: none of its live deltas were missed.
    #[must_use]
    pub fn replay_end(&self) -> Seq {
        self.replay_end
    }

    /// The next update; `None` after the subscription ended.
    ///
    /// # Cancel safety
    /// Cancel-safe: an update is never lost by dropping the future.
    pub async fn recv(&mut self) -> Option<SessionUpdate> {
        std::future::poll_fn(|cx| self.poll_update(cx)).await
    }

    fn poll_update(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionUpdate>> {
        if let Some(event) = self.backlog.pop_front() {
            self.last_seq = event.seq;
            return Poll::Ready(Some(SessionUpdate::Event(event)));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            match self.rx.poll_recv(cx).map(|u| u.map(|u| *u)) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(SessionUpdate::Event(event))) => {
                    if event.seq < self.from_seq || event.seq <= self.last_seq {
                        continue;
                    }
                    self.last_seq = event.seq;
                    return Poll::Ready(Some(SessionUpdate::Event(event)));
                }
                Poll::Ready(Some(update @ SessionUpdate::Notice(Notice::Closed { .. }))) => {
                    self.ended = true;
                    return Poll::Ready(Some(update));
                }
                Poll::Ready(Some(SessionUpdate::Notice(Notice::Moved { reason, .. }))) => {
                    self.ended = true;
                    return Poll::Ready(Some(SessionUpdate::Notice(Notice::Moved {
                        session_id: self.session_id,
                        last_seq: self.last_seq,
                        reason,
                    })));
                }
                Poll::Ready(Some(update)) => return Poll::Ready(Some(update)),
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(Some(SessionUpdate::Notice(Notice::Lagged {
                        session_id: self.session_id,
                        last_seq: self.last_seq,
                    })));
                }
            }
        }
    }
}

impl futures::Stream for Subscription {
    type Item = SessionUpdate;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<SessionUpdate>> {
        self.get_mut().poll_update(cx)
    }
}

//! Hibernation: an idle session lets go of everything it holds in memory. Once the
//! session has been idle — no turn, nothing queued, no approval waiting, no live
//! subscriber, no child actor (a title request) — for
//! [`RuntimeConfig::hibernate_after`](crate::runtime::RuntimeConfig::hibernate_after),
//! its SessionActor stops (reason [`HIBERNATED`]): the supervisor drops it from the
//! registry, and its log and fold go with it. Nothing is lost: everything it knew is in
//! its log, and the next input, subscription or any other call loads it from the log
//! again (as after a restart, with nothing to recover), its queue and state as they
//! were.
//!
//! While idle the session checks once per period (a `send_after` timer, armed only
//! while it is idle): a subscriber that went away without a word is noticed at the next
//! check.

use super::SessionMsg;
use super::actor::Session;
use ractor::ActorRef;

/// The stop reason of a hibernating session.
pub(crate) const HIBERNATED: &str = "hibernated";

impl Session {
    /// Notes activity (any message but the hibernation check itself).
    pub(super) fn touched(&mut self) {
        self.last_activity = tokio::time::Instant::now();
    }

    /// Arms the hibernation check if the session is idle and none is armed.
    pub(super) fn arm_hibernation(&mut self, myself: &ActorRef<SessionMsg>) {
        let Some(after) = self.deps.hibernate_after else {
            return;
        };
        if self.hibernation_armed || !self.is_idle() {
            return;
        }
        let due =
            (self.last_activity + after).saturating_duration_since(tokio::time::Instant::now());
        self.hibernation_armed = true;
        drop(myself.send_after(due, || SessionMsg::Hibernate));
    }

    /// The hibernation check: stops the session when it has been idle, unwatched, for
    /// the whole period; re-arms while it stays idle.
    pub(super) fn check_hibernation(&mut self, myself: &ActorRef<SessionMsg>) {
        self.hibernation_armed = false;
        let Some(after) = self.deps.hibernate_after else {
            return;
        };
        self.subscribers.retain(|s| !s.is_closed());
        let quiet = self.last_activity.elapsed() >= after;
        if quiet
            && self.is_idle()
            && self.subscribers.is_empty()
            && myself.get_children().is_empty()
        {
            tracing::debug!(session.id = %self.fold.id, "session hibernates");
            myself.stop(Some(HIBERNATED.into()));
            return;
        }
        if quiet {
            // Watched or busy with a child: look again one period from now.
            self.touched();
        }
        self.arm_hibernation(myself);
    }

    /// No turn, nothing queued, no approval waiting, not being deleted or shut down.
    fn is_idle(&self) -> bool {
        !self.busy()
            && self.fold.queue.is_empty()
            && self.approvals.is_empty()
            && self.deleting.is_none()
            && self.shutdown.is_none()
    }
}

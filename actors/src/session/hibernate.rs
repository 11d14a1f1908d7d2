//! Hibernation: an idle session lets go of everything it holds in memory. Once the
//! session has been idle — no turn, nothing queued, no approval waiting, no live
//! subscriber, no child actor (a title request) — for
//! [`RuntimeConfig::hibernate_after`](crate::runtime::RuntimeConfig::hibernate_after),
//! its SessionActor stops (reason [`HIBERNATED`](super::machine::HIBERNATED)): the
//! supervisor drops it from the registry, and its log and fold go with it. Nothing is
//! lost: everything it knew is in its log, and the next input, subscription or any other
//! call loads it from the log again (as after a restart, with nothing to recover), its
//! queue and state as they were.
//!
//! While idle the session checks once per period (a `send_after` timer, armed only
//! while it is idle): a subscriber that went away without a word is noticed at the next
//! check. The timer is the driver's; whether to stop is the machine's
//! ([`SessionInput::HibernateCheck`]).

use super::SessionMsg;
use super::actor::Session;
use super::machine::SessionInput;
use ractor::{ActorProcessingErr, ActorRef};

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
        if self.hibernation_armed || self.stopping || !self.machine.is_idle() {
            return;
        }
        let due =
            (self.last_activity + after).saturating_duration_since(tokio::time::Instant::now());
        self.hibernation_armed = true;
        drop(myself.send_after(due, || SessionMsg::Hibernate));
    }

    /// The hibernation check: the machine stops the session when it has been idle,
    /// unwatched, for the whole period; the check is re-armed while it stays idle.
    pub(super) async fn check_hibernation(
        &mut self,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        self.hibernation_armed = false;
        let Some(after) = self.deps.hibernate_after.filter(|_| !self.stopping) else {
            return Ok(());
        };
        self.subscribers.retain(|s| !s.tx.is_closed());
        let quiet = self.last_activity.elapsed() >= after;
        let watched = !self.subscribers.is_empty() || !myself.get_children().is_empty();
        self.run(
            myself,
            SessionInput::HibernateCheck { quiet, watched },
            None,
        )
        .await?;
        if self.stopping {
            tracing::debug!(session.id = %self.machine.fold().id, "session hibernates");
            return Ok(());
        }
        if quiet {
            // Watched or busy: look again one period from now.
            self.touched();
        }
        self.arm_hibernation(myself);
        Ok(())
    }
}

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
//! Above [`RuntimeConfig::hibernate_at_once_above`](crate::runtime::RuntimeConfig::hibernate_at_once_above)
//! loaded sessions, a session does not wait out the period: it hibernates as soon as it
//! is idle and unwatched — when its turn ends, when its last subscription is dropped
//! (the subscription's [`WatchGuard`](super::WatchGuard) tells it), when its title
//! request ends, after any call that leaves it so.
//!
//! While idle the session checks once per period (a `send_after` timer, armed only
//! while it is idle): a subscriber that went away without a word is noticed at the next
//! check. The timer is the driver's; whether to stop is the machine's
//! ([`SessionInput::HibernateCheck`]). The session holds the timer's task and a stopped
//! session's timer is aborted with its state: the task holds a reference to the actor,
//! which would keep its cell — the first blocks of its two mailbox channels, about
//! 8 KiB — allocated for up to `hibernate_after` after it hibernated (at 100 000
//! sessions hibernating at once, most of the run's peak RSS).

use super::SessionMsg;
use super::actor::Session;
use super::machine::SessionInput;
use crate::task::AbortOnDropHandle;
use ractor::{ActorProcessingErr, ActorRef, MessagingErr};

/// The hibernation check's timer task (aborted when dropped).
pub(super) type Timer = AbortOnDropHandle<Result<(), MessagingErr<SessionMsg>>>;

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
        if self.hibernation_timer.is_some() || self.stopping || !self.machine.is_idle() {
            return;
        }
        let due =
            (self.last_activity + after).saturating_duration_since(tokio::time::Instant::now());
        let timer = myself.send_after(due, || SessionMsg::Hibernate);
        self.hibernation_timer = Some(AbortOnDropHandle::new(timer));
    }

    /// The hibernation check: the machine stops the session when it has been idle,
    /// unwatched, for the whole period; the check is re-armed while it stays idle.
    pub(super) async fn check_hibernation(
        &mut self,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        self.hibernation_timer = None;
        let Some(after) = self.deps.hibernate_after.filter(|_| !self.stopping) else {
            return Ok(());
        };
        let quiet = self.last_activity.elapsed() >= after;
        let watched = self.watched(myself);
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

    /// Whether a live subscriber or a running child (a title request; a turn) holds the
    /// session; drops the channels of subscribers that went away.
    fn watched(&mut self, myself: &ActorRef<SessionMsg>) -> bool {
        self.subscribers.retain(|s| !s.tx.is_closed());
        // A child that exited may still be listed while its exit is being handled.
        !self.subscribers.is_empty()
            || myself
                .get_children()
                .iter()
                .any(|c| super::is_alive(c.get_status()))
    }

    /// Hibernates at once when the session is idle and unwatched and the runtime has more
    /// sessions loaded than `hibernate_at_once_above` (the machine decides, as for the
    /// periodic check).
    pub(super) async fn hibernate_if_unwatched(
        &mut self,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let Some(above) = self.deps.hibernate_at_once_above else {
            return Ok(());
        };
        // A sub-agent's child session is held by its SubAgentActor (which stops it).
        if self.stopping
            || self.deps.hibernate_after.is_none()
            || self.machine.fold().config.parent.is_some()
            || !self.machine.is_idle()
        {
            return Ok(());
        }
        if self.deps.stats.read().sessions_live <= above as u64 || self.watched(myself) {
            return Ok(());
        }
        let input = SessionInput::HibernateCheck {
            quiet: true,
            watched: false,
        };
        self.run(myself, input, None).await?;
        if self.stopping {
            tracing::debug!(session.id = %self.machine.fold().id, "session hibernates at once");
        }
        Ok(())
    }
}

//! `foya node --store postgres://…`: shard ownership and failover (docs/cluster.md,
//! "Placement, leases and failover").
//!
//! Before its runtime starts, the node registers a lease under its name in the store
//! ([`NodeLease::register_at`], address: `NodeAddress`) and starts its
//! [`LeaseKeeper`]; the runtime gets a [`ShardOwnership`] over it. Then
//! `ShardNode::run` keeps placement, every `PLACEMENT_TICK`:
//!
//! - it reads the live nodes ([`NodeLease::live_nodes`]) and computes, by rendezvous
//!   hashing ([`foya_storage_pg::shard::owner`]), the shards this node should own;
//! - it claims each of them it does not hold (a shard another live lease owns is
//!   answered `Held` and tried again on the next tick, until its owner releases it or
//!   its lease expires), then recovers the claimed shards' unfinished sessions exactly as
//!   a restart does (the recovery index, filtered by shard: each is loaded, and loading
//!   closes an open turn as interrupted, pairs its calls "outcome unknown", runs what
//!   was queued);
//! - it hands off each held shard it should no longer own: no more loads, creations or
//!   inputs for it (refused `NotOwner`: clients retry on the new owner), its running
//!   turns let finish for at most the handoff's drain (`--handoff-drain`, default 10 s),
//!   then those still running cancelled (`turn_cancelled{"shard handed off to another
//!   node"}`, `turn_complete{cancelled}` written under its fence, waiting at most
//!   `HANDOFF_CANCEL_GRACE`), its sessions dropped, then the shard released so its new
//!   owner claims it at once.
//!
//! **Serving only once placed.** Before the node announces itself (its listening line,
//! its HTTP gateway, the cluster's calls), `ShardNode::settle` runs placement rounds
//! until the node holds every shard placement gives it, at most `settle_bound` (the
//! lease's TTL, the handoff's drain and cancel grace and two ticks: a live holder hands
//! its shards over within its next round and its drain, a dead one's lease expires
//! within its TTL), so a
//! client is not refused `NoShard` by a node that has just started. The first node of an
//! empty cluster claims every shard in its first round; a node whose shards another
//! live node holds serves once they were handed over, or when the bound ends (then it
//! serves what it holds, and placement goes on every tick).
//!
//! A release the database did not confirm (PostgreSQL unreachable for a moment) is tried
//! again at every round: the shard is not written meanwhile (it left the lease's held
//! shards first), and its new owner can claim it once the row says so.
//!
//! **Self-fence.** When the keeper reports the lease lost (not renewed before the
//! lease's margin: PostgreSQL unreachable, this process paused), the loop ends at once:
//! every loaded session is dropped without writing (their turns, streams and tools'
//! processes killed with their actors; the local fences already refuse every write), and
//! the node exits with status 1 and a line saying why: its shards are claimed by the
//! others, and an operator (or a supervisor such as systemd) restarts it to rejoin under
//! a fresh lease.
//!
//! **SIGTERM** (or SIGINT, SIGHUP): every held shard is handed off as above (new inputs
//! refused, running turns let finish for at most the drain, then cancelled with the
//! reason "node stopping: shard handed off to another node"), then every shard is
//! released and the lease ended, so the others claim at once — before the node leaves
//! the cluster.

use crate::node_http::NodeAddress;
use anyhow::Context as _;
use foya_actors::{HANDOFF_CANCEL_GRACE, Runtime, StopCause};
use foya_storage::Ownership as _;
use foya_storage_pg::{
    ClaimError, LeaseKeeper, LeaseOptions, LeaseStatus, NodeLease, PgLog, ShardOwnership,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How often placement is computed again and wanted shards are claimed.
pub(crate) const PLACEMENT_TICK: Duration = Duration::from_millis(500);

/// A node's lease, its keeper and its ownership.
pub(crate) struct ShardNode {
    keeper: LeaseKeeper,
    ownership: Arc<ShardOwnership>,
    fenced: tokio::sync::mpsc::UnboundedReceiver<u32>,
    log: PgLog,
    /// Shards let go of (handed off, fenced) whose release the database did not confirm:
    /// released again at every round.
    unreleased: BTreeSet<u32>,
    /// The runtime's `handoff_drain` (`--handoff-drain`): how long a handoff lets turns
    /// finish.
    drain: Duration,
}

/// Registers node `name`'s lease in the store at `url` and starts keeping it.
///
/// # Errors
/// The name is held by another live lease, or the store cannot be reached.
pub(crate) async fn register(
    url: &str,
    log: PgLog,
    name: &str,
    address: &NodeAddress,
    drain: Duration,
) -> anyhow::Result<ShardNode> {
    let rendered = address.render();
    let lease = NodeLease::register_at(url, name, Some(&rendered), LeaseOptions::default())
        .await
        .with_context(|| format!("node {name:?} cannot register its lease in the store"))?;
    let keeper = LeaseKeeper::spawn(lease.clone());
    let (ownership, fenced) = ShardOwnership::new(lease);
    Ok(ShardNode {
        keeper,
        ownership: Arc::new(ownership),
        fenced,
        log,
        unreleased: BTreeSet::new(),
        drain,
    })
}

impl ShardNode {
    /// The runtime's ownership seam.
    pub(crate) fn ownership(&self) -> Arc<dyn foya_storage::Ownership> {
        Arc::clone(&self.ownership) as Arc<dyn foya_storage::Ownership>
    }

    fn lease(&self) -> &NodeLease {
        self.keeper.lease()
    }

    /// How long [`Self::settle`] waits at most: the lease's TTL (a dead holder's lease
    /// expires), the handoff's drain and cancel grace and two rounds (a live holder hands
    /// over at its next round, after its drain; this node claims at its next).
    fn settle_bound(&self) -> Duration {
        self.lease()
            .options()
            .ttl
            .saturating_add(self.drain)
            .saturating_add(HANDOFF_CANCEL_GRACE)
            .saturating_add(2 * PLACEMENT_TICK)
    }

    /// The node's first placement, before it serves: rounds every `PLACEMENT_TICK` until
    /// it holds every shard placement gives it, or [`Self::settle_bound`] passed (it
    /// then serves what it holds; placement goes on in [`Self::run`]). Returns whether
    /// it settled.
    ///
    /// # Errors
    /// The lease was lost meanwhile (why): every session was dropped without writing.
    pub(crate) async fn settle(&mut self, runtime: &Runtime) -> Result<bool, String> {
        // A bound past what an `Instant` holds (a drain of centuries) is no bound.
        let deadline = Instant::now().checked_add(self.settle_bound());
        let status = self.keeper.status();
        let mut tick = tokio::time::interval(PLACEMENT_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let LeaseStatus::Lost { reason } = &*status.borrow() {
                let dropped = runtime.drop_sessions(|_| true);
                tracing::error!(dropped, %reason, "self-fenced before serving: the lease is lost");
                return Err(reason.clone());
            }
            if self.rebalance(runtime).await {
                return Ok(true);
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                tracing::warn!(
                    held = self.lease().held().len(),
                    "placement did not settle before the bound; serving the shards held"
                );
                return Ok(false);
            }
        }
    }

    /// Keeps placement until the lease is lost; then drops every session without
    /// writing and returns why the lease was lost.
    pub(crate) async fn run(&mut self, runtime: &Runtime) -> String {
        let mut status = self.keeper.status();
        let mut tick = tokio::time::interval(PLACEMENT_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let LeaseStatus::Lost { reason } = &*status.borrow_and_update() {
                let reason = reason.clone();
                let dropped = runtime.drop_sessions(|_| true);
                tracing::error!(dropped, %reason, "self-fenced: the lease is lost");
                return reason;
            }
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
                Some(shard) = self.fenced.recv() => {
                    // The runtime dropped the shard's sessions; forget it (claimed
                    // again if placement still says so).
                    self.release(shard).await;
                }
                _ = tick.tick() => {
                    self.rebalance(runtime).await;
                }
            }
        }
    }

    /// Releases `shard` in the database (it left the lease's held shards first: nothing
    /// writes it any more); one the database did not confirm is released again at the
    /// next round.
    async fn release(&mut self, shard: u32) {
        match self.lease().release(shard).await {
            Ok(_) => {
                self.unreleased.remove(&shard);
            }
            Err(e) => {
                tracing::warn!(shard, error = %e, "releasing a shard failed; retrying at the next round");
                self.unreleased.insert(shard);
            }
        }
        self.ownership.released(shard);
    }

    /// One placement round: claim what is ours and recover it, hand off what is not.
    /// Returns whether this node holds every shard placement gives it.
    async fn rebalance(&mut self, runtime: &Runtime) -> bool {
        let live = match self.lease().live_nodes().await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the live nodes; placement unchanged");
                return false;
            }
        };
        let lease = self.lease().clone();
        let names: Vec<String> = live.into_iter().map(|n| n.node).collect();
        self.ownership.set_live(names.clone());
        let me = lease.node();
        let shards = lease.shards();
        let want: BTreeSet<u32> = shards
            .all()
            .filter(|s| foya_storage_pg::shard::owner(*s, &names) == Some(me))
            .collect();
        let held: BTreeSet<u32> = lease.held().keys().copied().collect();
        // Releases the database did not confirm: again, unless placement gives the shard
        // back (the claim below then finds it still this lease's).
        for shard in std::mem::take(&mut self.unreleased) {
            if !want.contains(&shard) {
                self.release(shard).await;
            }
        }
        let mut claimed = Vec::new();
        for &shard in want.difference(&held) {
            match lease.claim(shard).await {
                Ok(_) => {
                    self.ownership.claimed(shard);
                    claimed.push(shard);
                }
                Err(ClaimError::Held { .. }) => {} // again on the next tick
                Err(ClaimError::LeaseLost) => return false,
                Err(e) => {
                    // The database failed: the other claims of this round would fail
                    // alike (one line a round, not one per shard: a damaged schema
                    // logged 256 lines every half second).
                    let waiting = want.difference(&held).count() - claimed.len();
                    tracing::warn!(shard, waiting, error = %e, "claiming shards failed; retrying at the next round");
                    break;
                }
            }
        }
        if !claimed.is_empty() {
            tracing::info!(shards = claimed.len(), "claimed shards");
            self.recover(runtime, &claimed).await;
        }
        let leaving: BTreeSet<u32> = held.difference(&want).copied().collect();
        if !leaving.is_empty() {
            self.hand_off(runtime, &leaving, StopCause::HandedOff).await;
        }
        let held = lease.held();
        want.iter().all(|s| held.contains_key(s))
    }

    /// Loads the unfinished sessions of `shards` (recovery runs as they load).
    async fn recover(&self, runtime: &Runtime, shards: &[u32]) {
        let pending = match self.log.pending_sessions_in(shards).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the recovery index of claimed shards");
                return;
            }
        };
        for id in pending {
            match runtime.session(id).await {
                Ok(_)
                | Err(
                    foya_actors::RuntimeError::SessionDeleted(_)
                    | foya_actors::RuntimeError::SessionNotFound(_),
                ) => {}
                Err(e) => tracing::warn!(session.id = %id, error = %e, "recovery failed"),
            }
        }
    }

    /// Hands `shards` off: refuse new inputs, let their turns finish within the drain,
    /// cancel those still running (`cause`), drop their sessions, release them.
    async fn hand_off(&mut self, runtime: &Runtime, shards: &BTreeSet<u32>, cause: StopCause) {
        let started = Instant::now();
        for &shard in shards {
            self.ownership.drain(shard);
        }
        let ownership = Arc::clone(&self.ownership);
        let outcome = runtime
            .hand_off(|id| shards.contains(&ownership.shard_of(id, None)), cause)
            .await;
        if !outcome.drained {
            tracing::info!(
                drain = ?self.drain,
                "handed-off turns still running after the drain; cancelled"
            );
        }
        if !outcome.ended {
            tracing::warn!("handed-off turns still running after the cancel's grace; dropped");
        }
        for &shard in shards {
            self.release(shard).await;
        }
        tracing::info!(
            shards = shards.len(),
            sessions = outcome.sessions,
            elapsed = ?started.elapsed(),
            "handed shards off"
        );
    }

    /// SIGTERM's handoff: every held shard handed off (new inputs refused, running turns
    /// let finish within the drain, then cancelled as the node stops) and released, so
    /// the others claim at their next round.
    pub(crate) async fn hand_off_all(&mut self, runtime: &Runtime) {
        let held: BTreeSet<u32> = self.lease().held().keys().copied().collect();
        if !held.is_empty() {
            self.hand_off(runtime, &held, StopCause::NodeStopping).await;
        }
    }

    /// Graceful end: releases every shard and ends the lease (the others claim at once).
    pub(crate) async fn shutdown(self) {
        if let Err(e) = self.keeper.shutdown().await {
            tracing::warn!(error = %e, "releasing the lease failed; it expires by its TTL");
        }
    }
}

//! [`ShardOwnership`]: the runtime's ownership seam ([`foya_storage::Ownership`]) over a
//! node's [`NodeLease`]. A shard is written while the lease holds it (its fence); it is
//! admitted (loaded, created in, given inputs) while held and not being handed off; a
//! write the store refused as fenced revokes it locally at once (no more writes, even
//! before the node's placement loop hears of it).

use crate::lease::NodeLease;
use crate::shard::{Shards, owner};
use foya_protocol::SessionId;
use foya_storage::{Fence, NotOwner, Ownership};
use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// The ownership of a cluster node: its lease's shards. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct ShardOwnership {
    lease: NodeLease,
    shards: Shards,
    state: Mutex<State>,
    fenced: tokio::sync::mpsc::UnboundedSender<u32>,
}

#[derive(Debug, Default)]
struct State {
    /// Held but being handed off: still written (turns end), not admitted.
    draining: BTreeSet<u32>,
    /// Refused by the store as fenced: neither written nor admitted until claimed again.
    revoked: BTreeSet<u32>,
    /// The live nodes' names as last seen (to name a shard's owner in refusals).
    live: Vec<String>,
}

/// How many random ids [`ShardOwnership::mint_session_id`] tries before giving up (the
/// expected count is the store's shard count over the shards it may pick from).
const MINT_TRIES: u32 = 1 << 20;

impl ShardOwnership {
    /// The ownership over `lease`; the receiver hears of every shard a write was fenced
    /// in (the node's placement loop forgets it and may claim it again later).
    #[must_use]
    pub fn new(lease: NodeLease) -> (Self, tokio::sync::mpsc::UnboundedReceiver<u32>) {
        let (fenced, heard) = tokio::sync::mpsc::unbounded_channel();
        let shards = lease.shards();
        (
            Self {
                lease,
                shards,
                state: Mutex::new(State::default()),
                fenced,
            },
            heard,
        )
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease it is over.
    #[must_use]
    pub fn lease(&self) -> &NodeLease {
        &self.lease
    }

    /// Records the live nodes' names (placement's input), for refusals' owner names.
    pub fn set_live(&self, live: Vec<String>) {
        self.state().live = live;
    }

    /// `shard` was (re)claimed: written and admitted again.
    pub fn claimed(&self, shard: u32) {
        let mut state = self.state();
        state.revoked.remove(&shard);
        state.draining.remove(&shard);
    }

    /// `shard` is being handed off: no more loads, creations or inputs; still written.
    pub fn drain(&self, shard: u32) {
        self.state().draining.insert(shard);
    }

    /// `shard` was released (or lost): forgotten.
    pub fn released(&self, shard: u32) {
        let mut state = self.state();
        state.draining.remove(&shard);
        state.revoked.remove(&shard);
    }

    /// Whether `shard` is being handed off.
    #[must_use]
    pub fn is_draining(&self, shard: u32) -> bool {
        self.state().draining.contains(&shard)
    }

    fn not_owner(&self, shard: u32) -> NotOwner {
        let state = self.state();
        let others: Vec<&str> = state
            .live
            .iter()
            .map(String::as_str)
            .filter(|n| *n != self.lease.node() || !state.draining.contains(&shard))
            .collect();
        NotOwner {
            shard,
            owner: owner(shard, &others).map(str::to_owned),
        }
    }

    /// The shards new sessions may be created in now.
    fn admitted(&self) -> BTreeSet<u32> {
        let held = self.lease.held();
        let state = self.state();
        held.keys()
            .copied()
            .filter(|s| !state.draining.contains(s) && !state.revoked.contains(s))
            .collect()
    }
}

impl Ownership for ShardOwnership {
    fn shard_of(&self, session: SessionId, parent: Option<SessionId>) -> u32 {
        self.shards.of(parent.unwrap_or(session))
    }

    fn fence(&self, shard: u32) -> Result<Fence, NotOwner> {
        if self.state().revoked.contains(&shard) {
            return Err(self.not_owner(shard));
        }
        self.lease.fence(shard).ok_or_else(|| self.not_owner(shard))
    }

    fn admit(&self, shard: u32) -> Result<(), NotOwner> {
        self.fence(shard)?;
        if self.is_draining(shard) {
            return Err(self.not_owner(shard));
        }
        Ok(())
    }

    fn mint_session_id(&self, in_shard: Option<u32>) -> Option<SessionId> {
        let allowed = match in_shard {
            Some(shard) => BTreeSet::from([shard]),
            None => self.admitted(),
        };
        if allowed.is_empty() {
            return None;
        }
        (0..MINT_TRIES)
            .map(|_| SessionId::new())
            .find(|id| allowed.contains(&self.shards.of(*id)))
    }

    fn fenced(&self, fence: Fence) {
        if let Fence::Epoch { shard, .. } = fence {
            self.state().revoked.insert(shard);
            let _ = self.fenced.send(shard);
        }
    }
}

//! Shards: which shard a session belongs to, and which live node should own a shard.
//!
//! A cluster's store has a fixed number of shards ([`Shards::count`], recorded in
//! `foya_meta` when the store is created: [`DEFAULT_SHARDS`] unless
//! [`crate::PgOptions::shards`] said otherwise; an existing store keeps its count). A root
//! session's shard is a hash of its id ([`Shards::of`]); a sub-agent's child lives in its
//! parent's shard ([`Shards::of_child`], and the store records it so from the child's
//! `session_created`), so a parent and its children always have one owner and fail over
//! together.
//!
//! **Placement is rendezvous hashing** ([`owner`], [`placement`]): for each shard, every
//! live node gets a score `hash(shard, node name)` and the highest score owns it. It is
//! pure (every node computes the same map from the same set of live names, no
//! coordination), balanced (each node gets about `count / nodes` shards), and minimal on
//! change: when a node joins it takes about `count / (nodes + 1)` shards, only from the
//! others' shares; when one leaves, only its shards move, spread over the survivors.
//! Least-loaded placement would balance sessions rather than shards, but needs a shared,
//! coordinated view of the load and moves shards on every fluctuation; shards are many
//! (256) and sessions spread evenly over them by hash, so shard counts are a good proxy.
//! Placement only says who *should* own a shard: ownership itself is the epoch a node
//! bumps in the store ([`crate::lease`]), which is what fences writers.

use foya_protocol::SessionId;

/// The shard count of a store created without [`crate::PgOptions::shards`].
pub const DEFAULT_SHARDS: u32 = 256;

/// The most shards a store may have.
pub const MAX_SHARDS: u32 = 65_536;

/// A store's shard count, and the shard of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shards {
    count: u32,
}

impl Default for Shards {
    fn default() -> Self {
        Self {
            count: DEFAULT_SHARDS,
        }
    }
}

/// 64-bit FNV-1a over `bytes`, continuing from `hash`.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// A final avalanche (splitmix64's), so that scores of similar inputs are independent.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Shards {
    /// `count` shards; `None` unless `1 <= count <= MAX_SHARDS`.
    #[must_use]
    pub fn new(count: u32) -> Option<Self> {
        (1..=MAX_SHARDS).contains(&count).then_some(Self { count })
    }

    /// The number of shards.
    #[must_use]
    pub fn count(self) -> u32 {
        self.count
    }

    /// The shard of a root session: FNV-1a over all 16 bytes of its id (UUIDv7s share
    /// their leading time bytes), modulo the count.
    #[must_use]
    pub fn of(self, session: SessionId) -> u32 {
        let hash = fnv1a(FNV_OFFSET, session.as_bytes());
        u32::try_from(hash % u64::from(self.count)).unwrap_or(0)
    }

    /// The shard of a sub-agent's child session: its parent's (`parent_shard`, the
    /// shard the parent was recorded in — [`crate::PgLog::session_shard`]), whatever the
    /// child's own id hashes to. The store does the same when it records a child's
    /// `session_created` (from the config's `parent`).
    #[must_use]
    pub fn of_child(self, parent_shard: u32) -> u32 {
        parent_shard
    }

    /// Every shard, in order.
    pub fn all(self) -> impl Iterator<Item = u32> {
        0..self.count
    }
}

/// The rendezvous score of `node` for `shard`.
fn score(shard: u32, node: &str) -> u64 {
    mix(fnv1a(
        fnv1a(FNV_OFFSET, &shard.to_le_bytes()),
        node.as_bytes(),
    ))
}

/// The node that should own `shard` among `live` nodes (names): the highest rendezvous
/// score, ties (never in practice) to the smaller name. `None` when `live` is empty.
/// Duplicates in `live` do not matter, nor does its order.
#[must_use]
pub fn owner<S: AsRef<str>>(shard: u32, live: &[S]) -> Option<&str> {
    live.iter()
        .map(AsRef::as_ref)
        .max_by(|a, b| score(shard, a).cmp(&score(shard, b)).then_with(|| b.cmp(a)))
}

/// [`owner`] of every shard of `shards`, indexed by shard.
#[must_use]
pub fn placement<S: AsRef<str>>(shards: Shards, live: &[S]) -> Vec<Option<&str>> {
    shards.all().map(|shard| owner(shard, live)).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn counts<'a>(map: &[Option<&'a str>]) -> BTreeMap<&'a str, usize> {
        let mut out = BTreeMap::new();
        for node in map.iter().flatten() {
            *out.entry(*node).or_default() += 1;
        }
        out
    }

    #[test]
    fn shard_counts_are_bounded() {
        assert_eq!(Shards::new(0), None);
        assert_eq!(Shards::new(MAX_SHARDS + 1), None);
        assert_eq!(Shards::new(1).unwrap().count(), 1);
        assert_eq!(Shards::default().count(), DEFAULT_SHARDS);
    }

    #[test]
    fn sessions_spread_over_shards_and_children_stay_with_their_parent() {
        let shards = Shards::default();
        let mut hits = vec![0u32; DEFAULT_SHARDS as usize];
        for _ in 0..25_600 {
            let shard = shards.of(SessionId::new());
            assert!(shard < DEFAULT_SHARDS);
            hits[shard as usize] += 1;
        }
        // About 100 each: no shard empty or more than twice its share.
        assert!(hits.iter().all(|h| (20..200).contains(h)), "{hits:?}");
        let parent = SessionId::new();
        let parent_shard = shards.of(parent);
        assert_eq!(shards.of_child(parent_shard), parent_shard);
        // The hash is stable (it is persisted in the store): a known value.
        let fixed = SessionId::from_bytes([7; 16]);
        assert_eq!(shards.of(fixed), shards.of(fixed));
        assert_eq!(
            Shards::new(1 << 16).unwrap().of(fixed) % 256,
            shards.of(fixed)
        );
    }

    #[test]
    fn placement_is_deterministic_whatever_the_order_of_the_live_nodes() {
        let shards = Shards::default();
        let a = placement(shards, &["a", "b", "c"]);
        let b = placement(shards, &["c", "a", "b", "a"]);
        assert_eq!(a, b);
        assert!(
            placement(shards, &[] as &[&str])
                .iter()
                .all(Option::is_none)
        );
        assert!(
            placement(shards, &["only"])
                .iter()
                .all(|o| *o == Some("only"))
        );
    }

    #[test]
    fn placement_is_balanced() {
        let shards = Shards::default();
        let nodes: Vec<String> = (0..4).map(|i| format!("node-{i}")).collect();
        let map = placement(shards, &nodes);
        let counts = counts(&map);
        assert_eq!(counts.len(), 4);
        // 64 each on average; rendezvous hashing keeps each within a loose band.
        assert!(counts.values().all(|c| (40..=90).contains(c)), "{counts:?}");
    }

    #[test]
    fn a_join_moves_only_the_joiners_share_and_a_leave_only_the_leavers() {
        let shards = Shards::default();
        let three = ["a", "b", "c"];
        let four = ["a", "b", "c", "d"];
        let before = placement(shards, &three);
        let after = placement(shards, &four);
        let mut moved = 0;
        for (old, new) in before.iter().zip(&after) {
            if old != new {
                moved += 1;
                assert_eq!(*new, Some("d"), "a shard moved between old nodes");
            }
        }
        // About a quarter of the shards move, all to the joiner.
        assert!((40..=90).contains(&moved), "{moved}");
        // "b" leaves: only its shards move.
        let without_b = placement(shards, &["a", "c", "d"]);
        for (old, new) in after.iter().zip(&without_b) {
            if *old != Some("b") {
                assert_eq!(old, new);
            } else {
                assert_ne!(*new, Some("b"));
            }
        }
    }
}

//! `ShardOwnership`, the runtime's ownership seam over a node's lease: fences only for
//! held shards, ids minted in admitted shards (a child's in its parent's), a shard being
//! handed off written but not admitted, a fenced shard revoked at once, and every fence
//! gone with the lease.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_protocol::SessionId;
use foya_storage::{Fence, Ownership as _};
use foya_storage_pg::{LeaseOptions, NodeLease, PgLog, PgOptions, ShardOwnership, testkit};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ownership_fences_admits_and_mints_only_in_held_shards() {
    let url = testkit::fresh_url().await;
    let options = PgOptions {
        shards: 8,
        ..PgOptions::default()
    };
    let log = PgLog::open(&url, options).await.unwrap();
    let lease = NodeLease::register(&url, "n", LeaseOptions::default())
        .await
        .unwrap();
    let (ownership, mut fenced) = ShardOwnership::new(lease.clone());

    // Nothing held: no fence, no admission, no id to create a session with.
    assert_eq!(ownership.fence(3).unwrap_err().shard, 3);
    assert!(ownership.admit(3).is_err());
    assert_eq!(ownership.mint_session_id(None), None);

    let fence = lease.claim(3).await.unwrap();
    lease.claim(5).await.unwrap();
    ownership.claimed(3);
    ownership.claimed(5);
    assert_eq!(ownership.fence(3).unwrap(), fence);
    ownership.admit(3).unwrap();
    for _ in 0..50 {
        let id = ownership.mint_session_id(None).unwrap();
        assert!([3, 5].contains(&log.shards().of(id)));
    }
    // A sub-agent's child: an id in its parent's shard, and its shard is the parent's.
    let parent = ownership.mint_session_id(Some(5)).unwrap();
    assert_eq!(log.shards().of(parent), 5);
    let child = ownership.mint_session_id(Some(5)).unwrap();
    assert_eq!(log.shards().of(child), 5);
    let legacy_child = SessionId::new();
    assert_eq!(ownership.shard_of(legacy_child, Some(parent)), 5);

    // Handed off: still written (turns end), no longer admitted nor minted in.
    ownership.drain(5);
    ownership.fence(5).unwrap();
    assert!(ownership.admit(5).is_err());
    for _ in 0..50 {
        assert_eq!(log.shards().of(ownership.mint_session_id(None).unwrap()), 3);
    }

    // A fenced write revokes the shard at once and tells the node.
    ownership.fenced(fence);
    assert!(ownership.fence(3).is_err());
    assert_eq!(fenced.recv().await, Some(3));
    assert_eq!(ownership.mint_session_id(None), None);
    assert!(matches!(fence, Fence::Epoch { shard: 3, .. }));

    // The lease released: no fence for any shard.
    lease.shutdown().await.unwrap();
    assert!(ownership.fence(5).is_err());
}

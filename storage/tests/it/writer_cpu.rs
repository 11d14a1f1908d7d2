//! `Store::writer_cpu`: the writer thread's own CPU time, published after each commit —
//! zero before anything was written, positive once an append resolved, never going back,
//! and growing with more commits; final after close.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::log;
use foya_protocol::SessionId;
use foya_storage::{Durability, Store, StoreOptions};
use std::time::Duration;

#[tokio::test]
async fn the_writers_cpu_grows_with_its_commits_and_never_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &dir.path().join("foya.redb"),
        StoreOptions {
            durability: Durability::None,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    // Opening commits the tables on the opening thread, not the writer's.
    assert_eq!(store.writer_cpu(), Duration::ZERO);

    let session = SessionId::new();
    store.append(log(session, 1, 1)).await.unwrap();
    let first = store.writer_cpu();
    assert!(first > Duration::ZERO, "{first:?}");

    // Each resolved append has its commit counted: the total never goes back…
    let mut last = first;
    for seq in 2..=201 {
        store.append(log(session, seq, seq)).await.unwrap();
        let now = store.writer_cpu();
        assert!(now >= last, "{now:?} < {last:?}");
        last = now;
    }
    // …and 200 commits later it has grown.
    assert!(
        last > first,
        "{last:?} after 200 commits, {first:?} after 1"
    );
    assert_eq!(store.stats().commits, 201);

    // Closing publishes the final total; it stays put afterwards.
    store.close().await;
    let closed = store.writer_cpu();
    assert!(closed >= last);
    assert_eq!(store.writer_cpu(), closed);
}

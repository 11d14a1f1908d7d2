//! Smoke test of the public API (append then read).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_protocol::{Event, EventKind, Seq, SessionConfig, SessionId};
use foya_storage::{Store, StoreOptions};

#[tokio::test]
async fn append_then_read_back() {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let id = SessionId::new();
    let ev = Event {
        session_id: id,
        seq: Seq(1),
        run_id: None,
        at_ms: 5,
        kind: EventKind::SessionCreated {
            config: SessionConfig::new("/tmp"),
        },
    };
    store.append(vec![ev.clone()]).await.unwrap();
    assert_eq!(store.read_from(id, Seq(1)).unwrap(), vec![ev]);
    assert_eq!(store.last_seq(id).unwrap(), Some(Seq(1)));
    store.close().await;
}

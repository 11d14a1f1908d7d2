//! The storage seam's conformance suite ([`crate::conformance`]) on the redb store, in
//! memory and in a file.
#![allow(clippy::unwrap_used)]

use crate::{Store, StoreOptions};

async fn fresh() -> Store {
    Store::open_in_memory(StoreOptions::default()).unwrap()
}

crate::conformance_tests!(fresh);

/// redb is a single-node store: always the owner of every shard.
async fn fresh_owned() -> (Store, crate::conformance::SingleNode) {
    (fresh().await, crate::conformance::SingleNode)
}

crate::fencing_conformance_tests!(fresh_owned);

mod file {
    use crate::{Store, StoreOptions};

    async fn fresh() -> Store {
        // The directory lives as long as the test process; the file is closed by each test.
        let dir = tempfile::tempdir().unwrap().keep();
        Store::open(&dir.join("foya.redb"), StoreOptions::default()).unwrap()
    }

    crate::conformance_tests!(fresh);
}

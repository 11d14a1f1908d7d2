//! The integration tests of `foya-storage-pg`, in one test binary (`cargo test -p
//! foya-storage-pg --test it`), a module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod conformance;
mod leases;
mod ownership;

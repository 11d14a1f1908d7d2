//! The core's public API, used as its driver (the runtime's actors) uses it: one test
//! binary for the crate (`autotests = false`), a module per part.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod retry;
mod session;

//! The context compiler's public API: one test binary for the crate
//! (`autotests = false`), a module per part.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod commands;

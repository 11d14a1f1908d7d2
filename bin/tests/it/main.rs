//! The integration tests of the `foya` binary, in one test binary (`cargo test -p foya
//! --test it`), a module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sessions_delete;

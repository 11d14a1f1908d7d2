//! The integration tests of `foya-storage`, in one test binary (`cargo test -p
//! foya-storage --test it`; one module per area, filter with `-- crash::`). `common` is
//! their shared test data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod codec;
mod common;
mod crash;
mod damage;
mod interleavings;
mod read_only;
mod recovery;
mod writer_cpu;

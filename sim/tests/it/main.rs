//! The integration tests of `foya-sim`, in one test binary (`cargo test -p foya-sim --test
//! it`), a module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod wire;

//! Shared harness for the end-to-end tests: the mock provider (real wire formats over
//! real HTTP) and the path of the real `foya` binary.
pub mod foya_bin;
pub mod mock_provider;
pub mod procs;

pub use foya_bin::foya_bin;

//! Shared harness for the end-to-end tests: the mock provider and the `foya` binary.
pub mod foya_bin;
pub mod mock_provider;

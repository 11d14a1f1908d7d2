//! Shared harness for the end-to-end tests. (Being built.)
pub mod foya_bin;
pub mod mock_provider;

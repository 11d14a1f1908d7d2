//! Shared harness for the end-to-end tests. (Being built.)
pub mod mock_provider;
pub mod foya_bin;

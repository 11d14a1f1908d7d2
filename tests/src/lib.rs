//! Shared harness for the end-to-end tests: the mock provider (real wire formats over
//! real HTTP), the path of the real `foya` binary and its child processes' piped stdio,
//! and real headless Chromium driven over WebDriver (`browser`).
pub mod browser;
pub mod child;
pub mod foya_bin;
pub mod hook_project;
pub mod mcp;
pub mod mock_provider;
pub mod otlp;

pub use foya_actors::testkit::procs;
pub use foya_bin::foya_bin;

//! The real `foya` binary for process-level tests: built once per test binary with
//! escargot (same profile as the tests), then run as a child process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Path of the built `foya` binary (built on first use).
///
/// # Panics
/// When cargo cannot build it (a test harness: failing loudly is the point).
#[allow(clippy::expect_used)]
pub fn foya_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        escargot::CargoBuild::new()
            .package("foya")
            .bin("foya")
            .current_release()
            .current_target()
            .run()
            .expect("building the foya binary")
            .path()
            .to_path_buf()
    })
}

/// A `foya` command with a clean environment for tests: no provider keys, no user
/// config, colours off.
#[must_use]
pub fn foya() -> Command {
    let mut command = Command::new(foya_path());
    command
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("FOYA_DATA_DIR")
        .env("NO_COLOR", "1");
    command
}

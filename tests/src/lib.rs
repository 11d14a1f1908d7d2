//! Shared harness for the end-to-end tests: the mock provider server (real wire formats
//! over real HTTP) and the path of the real `foya` binary.
pub mod mock_provider;

use std::path::PathBuf;
use std::sync::OnceLock;

/// Path of the `foya` binary of this workspace, built once per test process with cargo
/// (same profile as the tests). Panics with cargo's message when the build fails: a test
/// cannot run without it.
///
/// # Panics
/// When the binary cannot be built.
#[must_use]
pub fn foya_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        #[expect(
            clippy::expect_used,
            reason = "a test harness cannot go on without the binary"
        )]
        let run = escargot::CargoBuild::new()
            .package("foya")
            .bin("foya")
            .current_release()
            .current_target()
            .run()
            .expect("cargo build -p foya");
        run.path().to_path_buf()
    })
    .clone()
}

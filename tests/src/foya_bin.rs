//! The real `foya` binary for end-to-end tests, built once per test binary with
//! `escargot` (the same profile as the tests).

use std::path::PathBuf;
use std::sync::OnceLock;

/// Path of the built `foya` binary.
///
/// # Panics
/// When the build fails (the test cannot run without the binary).
pub fn foya_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        #[expect(clippy::expect_used, reason = "test harness: no binary, no test")]
        let run = escargot::CargoBuild::new()
            .package("foya")
            .bin("foya")
            .run()
            .expect("build the foya binary");
        run.path().to_path_buf()
    })
    .clone()
}

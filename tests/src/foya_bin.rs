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
        // The small sandbox helper first: `foya` runs it for every exec tool call when
        // it sits next to it (the same `target/<profile>/`), as after `cargo build`.
        build_bin("foya", "foya-sandbox");
        build_bin("foya", "foya")
    })
    .clone()
}

/// Builds the binary `bin` of `package` (the same profile as the tests); its path.
fn build_bin(package: &str, bin: &str) -> PathBuf {
    let mut build = escargot::CargoBuild::new().package(package).bin(bin);
    // The variables cargo sets for a test process would reach build scripts that
    // watch them (`rerun-if-env-changed`) and make this build and the next
    // `cargo test` rebuild each other's dependencies.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&key)
        {
            build = build.env_remove(key);
        }
    }
    #[expect(clippy::expect_used, reason = "test harness: no binary, no test")]
    let run = build.run().expect("build the foya binaries");
    run.path().to_path_buf()
}

/// The `HOME` of every [`foya`] command of this test process: a directory of its own,
/// so the user's real config and trust list (`~/.config/foya`) neither affect a test nor
/// are changed by one ([`trust_project`] writes here). It is new for every process (a
/// name made of the process id alone would hand an earlier process's trust list to a
/// later one with the same id); like the other temporary folders of a test process it
/// is left in the temp dir (a static is never dropped).
///
/// # Panics
/// When the directory cannot be created.
pub fn test_home() -> PathBuf {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| {
        #[expect(clippy::expect_used, reason = "test harness")]
        tempfile::Builder::new()
            .prefix("foya-test-home-")
            .tempdir()
            .expect("create the test home")
    })
    .path()
    .to_path_buf()
}

/// Trusts `project` with `foya trust` in [`test_home`], so its `.foya/config.toml`
/// (profiles, hooks) applies to the [`foya`] commands of this test process.
///
/// # Panics
/// When `foya trust` fails.
pub fn trust_project(project: &std::path::Path) {
    #[expect(clippy::expect_used, reason = "test harness")]
    let out = foya()
        .arg("trust")
        .arg(project)
        .output()
        .expect("run foya trust");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `foya` command with a clean environment for tests: no provider keys, no data dir
/// from the environment, colours off, `HOME` the [`test_home`] and no `XDG_CONFIG_HOME`
/// (so the user config directory is `HOME/.config/foya`, never the machine's).
#[must_use]
pub fn foya() -> std::process::Command {
    let mut command = std::process::Command::new(foya_bin());
    command
        .env("HOME", test_home())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("FOYA_DATA_DIR")
        .env("NO_COLOR", "1");
    command
}

/// `foya COMMAND --provider scripted --approval APPROVAL --script SCRIPT --data-dir DATA
/// --cwd CWD` (a [`foya`] command: clean environment); add the rest (`--json`, the
/// prompt) to it.
#[must_use]
pub fn scripted(
    command: &str,
    approval: &str,
    script: &std::path::Path,
    data: &std::path::Path,
    cwd: &std::path::Path,
) -> std::process::Command {
    let mut foya = foya();
    foya.args([command, "--provider", "scripted", "--approval", approval])
        .arg("--script")
        .arg(script)
        .arg("--data-dir")
        .arg(data)
        .arg("--cwd")
        .arg(cwd);
    foya
}

/// Runs `command` (a [`foya`] command, perhaps with more environment) with `args`,
/// `--data-dir DATA` and `RUST_LOG=warn`; its output.
///
/// # Panics
/// When the binary cannot be run.
#[must_use]
pub fn output_in(
    mut command: std::process::Command,
    args: &[&str],
    data: &std::path::Path,
) -> std::process::Output {
    command
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("cannot run foya: {e}"))
}

/// The JSON lines a successful command printed.
///
/// # Panics
/// When it failed (naming its stderr) or printed a line that is not JSON.
#[must_use]
pub fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The JSON events of the only session stored in `data` (`sessions list`, then `show`).
///
/// # Panics
/// When either command fails or `data` holds no session.
#[must_use]
pub fn only_session_log(data: &std::path::Path) -> Vec<serde_json::Value> {
    let sessions = json_lines(&output_in(foya(), &["sessions", "list", "--json"], data));
    let id = sessions[0]["id"].as_str().unwrap_or_default().to_owned();
    json_lines(&output_in(
        foya(),
        &["sessions", "show", &id, "--json"],
        data,
    ))
}

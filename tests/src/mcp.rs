//! Third-party MCP servers for the end-to-end MCP tests, installed by `.ci/setup-mcp`
//! into the repository's gitignored `.mcp-deps/`: the reference
//! `@modelcontextprotocol/server-everything` (node) and a venv with the official Python
//! `mcp` package (which runs `tests/mcp/failing_server.py`).

use std::path::{Path, PathBuf};

/// The repository root (the parent of this crate's folder).
#[must_use]
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn installed(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run .ci/setup-mcp (it installs the MCP servers \
         these tests run against into .mcp-deps/)",
        path.display()
    );
    path
}

/// `dist/index.js` of server-everything (run as `node index.js stdio|streamableHttp`).
///
/// # Panics
/// When `.ci/setup-mcp` has not been run.
#[must_use]
pub fn everything_js() -> PathBuf {
    installed(
        repo_root().join(
            ".mcp-deps/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        ),
        "@modelcontextprotocol/server-everything",
    )
}

/// The venv's python, which has the `mcp` package.
///
/// # Panics
/// When `.ci/setup-mcp` has not been run.
#[must_use]
pub fn python() -> PathBuf {
    installed(
        repo_root().join(".mcp-deps/venv/bin/python"),
        "the Python venv with the mcp package",
    )
}

/// `tests/mcp/failing_server.py`.
#[must_use]
pub fn failing_server() -> PathBuf {
    repo_root().join("tests/mcp/failing_server.py")
}

/// `tests/mcp/named_server.py` (tools named by `MCP_TOOLS`, answering `MCP_LABEL/tool`).
#[must_use]
pub fn named_server() -> PathBuf {
    repo_root().join("tests/mcp/named_server.py")
}

/// Writes `toml` as the user's config (`HOME/.config/foya/config.toml`).
///
/// # Panics
/// When the file cannot be written.
pub fn write_user_config(home: &Path, toml: &str) {
    let dir = home.join(".config/foya");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    std::fs::write(dir.join("config.toml"), toml)
        .unwrap_or_else(|e| panic!("cannot write the config: {e}"));
}

/// A TOML string literal of `path`.
#[must_use]
pub fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// `foya run --json` of `prompt` in `work` against the mock provider at `base_url`
/// speaking `kind` (model `m`, approval `bypass`), with `HOME` = `home` (where
/// [`write_user_config`] put the MCP servers) and the data dir `data`.
#[must_use]
pub fn run_against(
    kind: &str,
    base_url: &str,
    home: &Path,
    data: &Path,
    work: &Path,
    prompt: &str,
) -> std::process::Command {
    let mut command = crate::foya_bin::foya();
    command
        .env("HOME", home)
        .args(["run", "--json", "--provider", kind, "--base-url", base_url])
        .args(["--model", "m", "--approval", "bypass", "--data-dir"])
        .arg(data)
        .arg("--cwd")
        .arg(work)
        .arg(prompt);
    command
}

/// The bytes of the attachment `id` in the data dir `data`.
///
/// # Panics
/// When it is not there.
#[must_use]
pub fn attachment(data: &Path, id: &str) -> Vec<u8> {
    let path = data.join("attachments").join(id);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

//! The built-in tools: file access (`read_file`, `list_dir`, `glob`, `grep`,
//! `write_file`, `edit_file`) and `shell`.
//!
//! Owns: the shared helpers of the built-ins (spec construction, argument access,
//! running blocking file work off the async workers). Paths are relative to
//! `ToolContext::cwd` and confined to it (see `tools::paths`).

pub mod agent;
mod edit_file;
mod list_dir;
mod output;
mod read_file;
mod search;
mod shell;
mod write_file;

pub use edit_file::EditFile;
pub use list_dir::{LIST_MAX_ENTRIES, ListDir};
pub use output::{CappedOutput, OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES};
pub use read_file::{
    READ_DEFAULT_LIMIT_LINES, READ_MAX_FILE_BYTES, READ_MAX_LINE_CHARS, READ_MAX_OUTPUT_BYTES,
    ReadFile,
};
pub use search::{
    GLOB_MAX_RESULTS, GREP_MAX_FILE_BYTES, GREP_MAX_LINE_CHARS, GREP_MAX_MATCHES, Glob, Grep,
};
pub use shell::{SHELL_DEFAULT_TIMEOUT_MS, SHELL_MAX_TIMEOUT_MS, Shell};
pub use write_file::WriteFile;

use super::sandbox::SandboxRunner;
use super::{SideEffect, Tool, ToolOutput, ToolSpec};
use std::sync::Arc;

/// Default timeout of the file tools, in milliseconds.
const FILE_TOOL_TIMEOUT_MS: u64 = 30_000;

/// Every built-in, in the order they are exposed; `shell` runs through `runner`.
#[must_use]
pub fn all(runner: SandboxRunner) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile::new()),
        Arc::new(ListDir::new()),
        Arc::new(Glob::new()),
        Arc::new(Grep::new()),
        Arc::new(WriteFile::new()),
        Arc::new(EditFile::new()),
        Arc::new(Shell::new(runner)),
    ]
}

fn file_spec(
    name: &str,
    description: &str,
    parameters: serde_json::Value,
    side_effect: SideEffect,
) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters,
        parallel_safe: side_effect == SideEffect::None,
        side_effect,
        cancellable: true,
        default_timeout_ms: FILE_TOOL_TIMEOUT_MS,
    }
}

/// The string argument `key` (validated by the schema before the call).
fn str_arg<'a>(args: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(serde_json::Value::as_str)
}

/// The non-negative integer argument `key`.
fn u64_arg(args: &serde_json::Value, key: &str) -> Option<u64> {
    args.get(key).and_then(serde_json::Value::as_u64)
}

/// Runs blocking file-system work on the blocking pool.
async fn blocking(work: impl FnOnce() -> ToolOutput + Send + 'static) -> ToolOutput {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| ToolOutput::error(format!("the tool failed internally: {e}")))
}

/// Whether the first 8 KiB of `bytes` look binary (contain a NUL byte), like ripgrep.
fn looks_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0)
}

//! The built-in tools: file access (`read_file`, `list_dir`, `glob`, `grep`,
//! `write_file`, `edit_file`) and `shell`.
//!
//! Owns: the shared helpers of the built-ins (making a file tool, running blocking file
//! work off the async workers). Each tool declares its arguments once, as a
//! `Deserialize + JsonSchema` struct: the schema the model sees is generated from it
//! (`typed::builtin_parameters_of`) and each call's arguments are read into it
//! (`typed::arguments`; a mismatch is an `is_error` result). The file tools are
//! [`TypedTool`]s, as an embedder's tools are; `shell` (live output) and `agent` implement
//! [`Tool`] themselves. Paths are relative to `ToolContext::cwd` and confined to it (see
//! `tools::paths`).

pub mod agent;
mod edit_file;
mod list_dir;
mod output;
mod read_file;
mod search;
mod shell;
mod write_file;

#[cfg(test)]
mod tests;

pub use edit_file::edit_file;
pub use list_dir::list_dir;
pub use output::{CappedOutput, OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES};
pub use read_file::read_file;
pub use search::{glob, grep};
pub use shell::{SHELL_DEFAULT_TIMEOUT_MS, Shell};
pub use write_file::write_file;

use super::sandbox::SandboxRunner;
use super::typed::arguments;
use super::{SideEffect, Tool, ToolContext, ToolOutput, TypedTool};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Default timeout of the file tools, in milliseconds.
const FILE_TOOL_TIMEOUT_MS: u64 = 30_000;

/// Every built-in, in the order they are exposed; `shell` runs through `runner`.
#[must_use]
pub fn all(runner: SandboxRunner) -> Vec<Arc<dyn Tool>> {
    let mut tools = read_only();
    tools.extend([
        Arc::new(write_file()) as Arc<dyn Tool>,
        Arc::new(edit_file()),
        Arc::new(Shell::new(runner)),
    ]);
    tools
}

/// The built-ins without side effects: `read_file`, `list_dir`, `glob`, `grep`.
#[must_use]
pub fn read_only() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(read_file()),
        Arc::new(list_dir()),
        Arc::new(glob()),
        Arc::new(grep()),
    ]
}

/// One call of a file tool: its work on the blocking pool ([`blocking`]).
type FileCall = Pin<Box<dyn Future<Output = Result<ToolOutput, Infallible>> + Send>>;

/// A file tool: a [`TypedTool`] of its argument type `A` whose calls run `work` with the
/// call's context and arguments on the blocking pool ([`blocking`], stopped by the call's
/// cancellation, `ToolContext::cancel`). Parallel-safe when it has no side effect,
/// cancellable, [`FILE_TOOL_TIMEOUT_MS`]; its schema is [`TypedTool::builtin_schema`].
fn file_tool<A>(
    name: &str,
    description: &str,
    side_effect: SideEffect,
    work: fn(&ToolContext, &A) -> ToolOutput,
) -> TypedTool<A, impl Fn(A, ToolContext) -> FileCall + Send + Sync + 'static + use<A>>
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
{
    let handler = move |args: A, ctx: ToolContext| -> FileCall {
        Box::pin(async move {
            let cancel = ctx.cancel.clone();
            Ok(blocking(&cancel, move || {
                if side_effect == SideEffect::Write {
                    // Before the model's first write in its working directory: what it
                    // plants cannot hide the nested protected paths there from the
                    // commands' shield (`sandbox::remembered`).
                    crate::sandbox::remember_protected_paths_now(&ctx.cwd);
                }
                work(&ctx, &args)
            })
            .await)
        })
    };
    TypedTool::new(name, description, side_effect, handler)
        .builtin_schema()
        .parallel_safe(side_effect == SideEffect::None)
        .timeout_ms(FILE_TOOL_TIMEOUT_MS)
}

/// Most file-tool calls doing blocking work at once, across every session: a call that
/// somehow blocks (a file system that stops answering) holds one of these, never more
/// than this share of tokio's blocking pool.
const MAX_BLOCKING_CALLS: usize = 32;

/// Runs blocking file-system work on the blocking pool, at most [`MAX_BLOCKING_CALLS`]
/// at once. A cancel returns at once, whether the work was waiting for its turn or
/// running; the file tools never block on their own (special files are refused before
/// they are opened, [`read_regular`]), so a running piece of work ends soon after.
async fn blocking(
    cancel: &CancellationToken,
    work: impl FnOnce() -> ToolOutput + Send + 'static,
) -> ToolOutput {
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_BLOCKING_CALLS);
    let cancelled = || ToolOutput::error("cancelled");
    let permit = tokio::select! {
        () = cancel.cancelled() => return cancelled(),
        permit = SLOTS.acquire() => match permit {
            Ok(permit) => permit,
            Err(_) => return ToolOutput::error("the file tools are shut down"),
        },
    };
    let task = tokio::task::spawn_blocking(move || {
        let output = work();
        drop(permit);
        output
    });
    tokio::select! {
        () = cancel.cancelled() => cancelled(),
        joined = task => joined
            .unwrap_or_else(|e| ToolOutput::error(format!("the tool failed internally: {e}"))),
    }
}

/// Reads a regular file of at most `max_bytes`, refusing anything else before it can
/// block: it is opened with `O_NONBLOCK` (a FIFO's open does not wait for a writer) and
/// checked with `fstat` on the opened descriptor (no race with a rename), so FIFOs,
/// sockets and devices are refused without being read.
///
/// # Errors
/// The I/O error, or `InvalidInput` naming the kind of special file, or `FileTooLarge`
/// with the size.
fn read_regular(path: &std::path::Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    use nix::fcntl::OFlag;
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::File::options()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)?;
    let meta = file.metadata()?;
    refuse_special(&meta, "reading")?;
    if meta.len() > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{}", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.by_ref().take(max_bytes).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Refuses what `meta` (of a descriptor opened with `O_NONBLOCK`) describes unless it is
/// a regular file: a FIFO, socket or device is refused without `action` it (reading,
/// writing).
///
/// # Errors
/// `InvalidInput` naming the kind of special file, `IsADirectory` for a directory.
fn refuse_special(meta: &std::fs::Metadata, action: &str) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    let kind = meta.file_type();
    let special = if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_dir() {
        return Err(std::io::ErrorKind::IsADirectory.into());
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {special}, not a regular file; refused without {action} it"),
    ))
}

/// Whether the first 8 KiB of `bytes` look binary (contain a NUL byte), like ripgrep.
fn looks_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0)
}

/// Writes `content` over the regular file at `path` (made when missing), as
/// `std::fs::write` does, except that:
/// - anything but a regular file is refused, without blocking: opening a FIFO for
///   writing waits for a reader (a sandboxed `mkfifo` then hung the runtime's write), and
///   a device is no file to replace;
/// - an existing set-user-ID or set-group-ID file loses those bits first: what the
///   kernel does for a writer without `CAP_FSETID`, which the runtime run as root has.
///   Else a model's `write_file` or `edit_file` could change the program of a set-ID
///   file in the workspace and keep it set-ID (as a sandboxed command cannot:
///   docs/security.md).
pub(crate) fn write_in_place(path: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    refuse_special(&metadata, "writing")?;
    let mode = metadata.permissions().mode();
    if mode & 0o6000 != 0 {
        // Refused only to a writer that does not own the file and lacks `CAP_FOWNER`:
        // one without `CAP_FSETID` too, whose write the kernel clears the bits for.
        let _ = file.set_permissions(std::fs::Permissions::from_mode(mode & 0o1777));
    }
    file.set_len(0)?;
    std::io::Write::write_all(&mut file, content)
}

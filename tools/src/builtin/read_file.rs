//! `read_file`: a text file's lines, numbered, with an optional window.

use super::{FileCall, file_tool, looks_binary};
use crate::{SideEffect, Tool, ToolContext, ToolOutput, TypedTool, paths};
use std::fmt::Write as _;

/// Files larger than this (bytes) are refused.
pub(crate) const READ_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Lines returned when `limit` is not given.
pub(crate) const READ_DEFAULT_LIMIT_LINES: usize = 2_000;
/// Longer lines are cut to this many characters.
pub(crate) const READ_MAX_LINE_CHARS: usize = 2_000;
/// The result stops after this many bytes of text.
pub(crate) const READ_MAX_OUTPUT_BYTES: usize = 256 * 1024;

// The arguments of `read_file` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    /// File path, relative to the working directory.
    path: String,
    /// First line to return (1-based).
    #[schemars(range(min = 1))]
    offset: Option<u64>,
    /// Maximum number of lines to return (default 2000).
    #[schemars(range(min = 1))]
    limit: Option<u64>,
}

/// `read_file`: reads a text file, `{path, offset?, limit?}` → `cat -n`-style numbered
/// lines.
#[must_use]
pub fn read_file() -> impl Tool {
    typed()
}

/// [`read_file`] as the [`TypedTool`] of its arguments.
pub(super) fn typed()
-> TypedTool<ReadArgs, impl Fn(ReadArgs, ToolContext) -> FileCall + Send + Sync + 'static> {
    file_tool(
        "read_file",
        "Read a text file from the working directory. Returns lines prefixed with their \
         1-based line number and a tab. Use offset and limit to read a window of a long file.",
        SideEffect::None,
        read,
    )
}

fn read(ctx: &ToolContext, args: &ReadArgs) -> ToolOutput {
    let raw = args.path.as_str();
    let path = match paths::resolve(ctx, raw) {
        Ok(path) => path,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let bytes = match super::read_regular(&path, READ_MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
            return ToolOutput::error(format!("{raw:?} is a directory; use list_dir to list it"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            return ToolOutput::error(format!(
                "{raw:?} is {e} bytes, more than the {READ_MAX_FILE_BYTES}-byte limit of \
                 read_file; use grep, or shell with head/sed, to read part of it"
            ));
        }
        Err(e) => return ToolOutput::error(format!("cannot read {raw:?}: {e}")),
    };
    if looks_binary(&bytes) {
        return ToolOutput::error(format!(
            "{raw:?} is a binary file ({} bytes); not shown",
            bytes.len()
        ));
    }
    let text = String::from_utf8_lossy(&bytes);
    let total = text.lines().count();
    let offset = usize::try_from(args.offset.unwrap_or(1))
        .unwrap_or(usize::MAX)
        .max(1);
    let limit = args.limit.map_or(READ_DEFAULT_LIMIT_LINES, |l| {
        usize::try_from(l).unwrap_or(usize::MAX)
    });
    if total == 0 {
        return ToolOutput::ok(format!("({raw:?} is empty)"));
    }
    if offset > total {
        return ToolOutput::error(format!(
            "offset {offset} is past the end of {raw:?}, which has {total} lines"
        ));
    }
    let mut out = String::new();
    let mut last = offset - 1;
    for (index, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        if out.len() >= READ_MAX_OUTPUT_BYTES {
            break;
        }
        let line = match line.char_indices().nth(READ_MAX_LINE_CHARS) {
            Some((at, _)) => format!("{}… [line cut]", &line[..at]),
            None => line.to_owned(),
        };
        let _ = writeln!(out, "{:>6}\t{line}", index + 1);
        last = index + 1;
    }
    if last < total {
        let _ = writeln!(
            out,
            "[showing lines {offset}-{last} of {total}; call read_file with offset {} to read more]",
            last + 1
        );
    }
    ToolOutput::ok(out)
}

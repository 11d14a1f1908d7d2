//! `write_file`: creates or overwrites a file (and its parent directories).

use super::{FileCall, file_tool};
use crate::{SideEffect, Tool, ToolContext, ToolOutput, TypedTool, paths};

// The arguments of `write_file` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct WriteArgs {
    /// File path, relative to the working directory.
    path: String,
    /// The complete new content of the file.
    content: String,
}

/// `write_file`: writes a whole file, `{path, content}`.
#[must_use]
pub fn write_file() -> impl Tool {
    typed()
}

/// [`write_file`] as the [`TypedTool`] of its arguments.
pub(super) fn typed()
-> TypedTool<WriteArgs, impl Fn(WriteArgs, ToolContext) -> FileCall + Send + Sync + 'static> {
    file_tool(
        "write_file",
        "Create or overwrite a file in the working directory with the given content. \
         Missing parent directories are created. Prefer edit_file for changing part of a file.",
        SideEffect::Write,
        write,
    )
}

fn write(ctx: &ToolContext, args: &WriteArgs) -> ToolOutput {
    let raw = args.path.as_str();
    let content = args.content.as_str();
    let path = match paths::resolve(ctx, raw) {
        Ok(path) => path,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    if let Err(message) = paths::check_write(ctx, &path, raw) {
        return ToolOutput::error(message);
    }
    if path.is_dir() {
        return ToolOutput::error(format!("{raw:?} is a directory; give a file path"));
    }
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!("cannot create the directories of {raw:?}: {e}"));
    }
    let existed = path.exists();
    match super::write_in_place(&path, content.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!(
            "{} {raw:?} ({} bytes)",
            if existed { "overwrote" } else { "created" },
            content.len()
        )),
        Err(e) => ToolOutput::error(format!("cannot write {raw:?}: {e}")),
    }
}

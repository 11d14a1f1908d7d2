//! `list_dir`: the entries of one directory.

use super::{FileCall, file_tool};
use crate::{SideEffect, Tool, ToolContext, ToolOutput, TypedTool, paths};

/// At most this many entries are listed.
pub(crate) const LIST_MAX_ENTRIES: usize = 1_000;

// The arguments of `list_dir` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ListArgs {
    /// Directory path, relative to the working directory ('.' for the working directory itself).
    path: String,
}

/// `list_dir`: lists a directory, `{path}` → one entry per line, sorted, directories
/// with a trailing `/`, symlinks with a trailing `@`.
#[must_use]
pub fn list_dir() -> impl Tool {
    typed()
}

/// [`list_dir`] as the [`TypedTool`] of its arguments.
pub(super) fn typed()
-> TypedTool<ListArgs, impl Fn(ListArgs, ToolContext) -> FileCall + Send + Sync + 'static> {
    file_tool(
        "list_dir",
        "List the entries of a directory in the working directory, sorted by name. \
         Directories end with '/', symbolic links with '@'.",
        SideEffect::None,
        list,
    )
}

fn list(ctx: &ToolContext, args: &ListArgs) -> ToolOutput {
    let raw = args.path.as_str();
    let path = match paths::resolve(ctx, raw) {
        Ok(path) => path,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let read_dir = match std::fs::read_dir(&path) {
        Ok(read_dir) => read_dir,
        Err(e) => return ToolOutput::error(format!("cannot list {raw:?}: {e}")),
    };
    let mut names: Vec<String> = read_dir
        .filter_map(Result::ok)
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(t) if t.is_symlink() => format!("{name}@"),
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    if names.is_empty() {
        return ToolOutput::ok(format!("({raw:?} is empty)"));
    }
    names.sort();
    let total = names.len();
    names.truncate(LIST_MAX_ENTRIES);
    let mut out = names.join("\n");
    out.push('\n');
    if total > LIST_MAX_ENTRIES {
        out.push_str(&format!(
            "[{} more entries not shown]\n",
            total - LIST_MAX_ENTRIES
        ));
    }
    ToolOutput::ok(out)
}

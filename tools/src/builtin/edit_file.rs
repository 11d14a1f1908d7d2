//! `edit_file`: exact-string replacement in one file.

use super::{FileCall, file_tool};
use crate::{SideEffect, Tool, ToolContext, ToolOutput, TypedTool, paths};

// The arguments of `edit_file` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EditArgs {
    /// File path, relative to the working directory.
    path: String,
    /// Exact text to replace.
    #[schemars(length(min = 1))]
    old_string: String,
    /// Replacement text.
    new_string: String,
    /// Replace every occurrence (default false).
    replace_all: Option<bool>,
}

/// `edit_file`: replaces text, `{path, old_string, new_string, replace_all?}`.
/// `old_string` must occur exactly once unless `replace_all` is true.
#[must_use]
pub fn edit_file() -> impl Tool {
    typed()
}

/// [`edit_file`] as the [`TypedTool`] of its arguments.
pub(super) fn typed()
-> TypedTool<EditArgs, impl Fn(EditArgs, ToolContext) -> FileCall + Send + Sync + 'static> {
    file_tool(
        "edit_file",
        "Replace an exact string in a file in the working directory. old_string must match \
         the file's text exactly (including whitespace) and occur exactly once, unless \
         replace_all is true. Include surrounding lines to make it unique.",
        SideEffect::Write,
        edit,
    )
}

/// Largest file `edit_file` reads (as `read_file`'s limit).
const EDIT_MAX_FILE_BYTES: u64 = super::read_file::READ_MAX_FILE_BYTES;

fn edit(ctx: &ToolContext, args: &EditArgs) -> ToolOutput {
    let raw = args.path.as_str();
    let old = args.old_string.as_str();
    let new = args.new_string.as_str();
    let replace_all = args.replace_all.unwrap_or(false);
    if old.is_empty() {
        return ToolOutput::error("old_string is empty; give the exact text to replace");
    }
    if old == new {
        return ToolOutput::error("old_string and new_string are identical; nothing to change");
    }
    let path = match paths::resolve(ctx, raw) {
        Ok(path) => path,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    if let Err(message) = paths::check_write(ctx, &path, raw) {
        return ToolOutput::error(message);
    }
    // A regular file only, read without blocking (a FIFO's open waits for a writer, a
    // device such as `/dev/zero` never ends), of a size the model could have read.
    let text = match super::read_regular(&path, EDIT_MAX_FILE_BYTES).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => {
            return ToolOutput::error(format!("cannot read {raw:?}: it is not UTF-8 text"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
            return ToolOutput::error(format!(
                "{raw:?} is {e} bytes, more than the {EDIT_MAX_FILE_BYTES}-byte limit of \
                 edit_file; change it with a command"
            ));
        }
        Err(e) => return ToolOutput::error(format!("cannot read {raw:?}: {e}")),
    };
    let count = text.matches(old).count();
    if count == 0 {
        return ToolOutput::error(format!(
            "old_string was not found in {raw:?} (0 matches); read the file and copy the text exactly"
        ));
    }
    if count > 1 && !replace_all {
        return ToolOutput::error(format!(
            "old_string matches {count} times in {raw:?}; include more surrounding text to make \
             it unique, or set replace_all to true"
        ));
    }
    let updated = if replace_all {
        text.replace(old, new)
    } else {
        text.replacen(old, new, 1)
    };
    match super::write_in_place(&path, updated.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!(
            "replaced {count} occurrence{} in {raw:?}",
            if count == 1 { "" } else { "s" }
        )),
        Err(e) => ToolOutput::error(format!("cannot write {raw:?}: {e}")),
    }
}

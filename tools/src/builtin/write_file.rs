//! `write_file`: creates or overwrites a file (and its parent directories).

use super::{arguments, blocking, file_spec};
use crate::{ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolSpec, paths};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

// The arguments of `write_file` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// File path, relative to the working directory.
    path: String,
    /// The complete new content of the file.
    content: String,
}

/// Writes a whole file: `{path, content}`.
#[derive(Debug)]
pub struct WriteFile {
    spec: ToolSpec,
}

impl WriteFile {
    /// The tool.
    #[must_use]
    pub fn new() -> Self {
        let spec = file_spec::<WriteArgs>(
            "write_file",
            "Create or overwrite a file in the working directory with the given content. \
             Missing parent directories are created. Prefer edit_file for changing part of a file.",
            SideEffect::Write,
        );
        Self { spec }
    }
}

impl Default for WriteFile {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let args = match arguments::<WriteArgs>(&self.spec, args) {
            Ok(args) => args,
            Err(invalid) => return invalid,
        };
        let ctx = ctx.clone();
        blocking(&cancel, move || write(&ctx, &args)).await
    }
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
    match std::fs::write(&path, content) {
        Ok(()) => ToolOutput::ok(format!(
            "{} {raw:?} ({} bytes)",
            if existed { "overwrote" } else { "created" },
            content.len()
        )),
        Err(e) => ToolOutput::error(format!("cannot write {raw:?}: {e}")),
    }
}

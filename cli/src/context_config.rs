//! The automatic-compaction switch of `run`, `chat` and `serve`: the `--no-auto-compact`
//! flag and the `[context] auto_compact` key of the project's `.foya/config.toml`.

use clap::Args;
use std::path::Path;

/// `--no-auto-compact`: the runtime never compacts on its own (also `[context]
/// auto_compact = false` in the project's `.foya/config.toml`).
#[derive(Debug, Clone, Copy, Args)]
pub struct CompactionArg {
    /// Never compact automatically (before a step over the threshold, or after a
    /// provider overflow, which then fails the turn); `/compact` still works. Also
    /// `[context] auto_compact = false` in the project's .foya/config.toml.
    #[arg(long)]
    pub no_auto_compact: bool,
}

/// Whether the runtime compacts on its own: not with `--no-auto-compact`, nor with
/// `auto_compact = false` in table `[context]` of a trusted project's config file
/// ([`foya_config::provider::project_file`]); otherwise yes.
///
/// # Errors
/// The file cannot be read or parsed (`auto_compact` not a boolean among them).
pub fn auto_compact(cwd: &Path, flag: CompactionArg) -> anyhow::Result<bool> {
    auto_compact_in(cwd, flag, foya_config::trust::is_trusted(cwd))
}

/// [`auto_compact`], reading the project's file only when the project is `trusted` (an
/// untrusted project's file is ignored, as every other part of it is), through the typed
/// config ([`foya_config::provider::project_auto_compact`]).
fn auto_compact_in(cwd: &Path, flag: CompactionArg, trusted: bool) -> anyhow::Result<bool> {
    if flag.no_auto_compact {
        return Ok(false);
    }
    let on = foya_config::provider::project_auto_compact(cwd, trusted)?;
    Ok(on.unwrap_or(true))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_auto_compact_from_the_flag_and_the_project_config() {
        let dir = tempfile::tempdir().unwrap();
        let on = CompactionArg {
            no_auto_compact: false,
        };
        let off = CompactionArg {
            no_auto_compact: true,
        };
        assert!(auto_compact_in(dir.path(), on, true).unwrap());
        assert!(!auto_compact_in(dir.path(), off, true).unwrap());
        std::fs::create_dir(dir.path().join(".foya")).unwrap();
        let file = dir.path().join(".foya/config.toml");
        std::fs::write(&file, "[context]\nauto_compact = false\n").unwrap();
        assert!(!auto_compact_in(dir.path(), on, true).unwrap());
        // An untrusted project's file is not read.
        assert!(auto_compact_in(dir.path(), on, false).unwrap());
        std::fs::write(&file, "[context]\nauto_compact = true\n").unwrap();
        assert!(auto_compact_in(dir.path(), on, true).unwrap());
        assert!(!auto_compact_in(dir.path(), off, true).unwrap());
        std::fs::write(&file, "[context]\nauto_compact = \"no\"\n").unwrap();
        let err = auto_compact_in(dir.path(), on, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("auto_compact") && err.contains("expected a boolean"),
            "{err}"
        );
    }
}

//! Command hooks for `run`, `chat` and `serve`: the `[hooks]` table of the user's
//! `~/.config/foya/config.toml`, then of the project's `.foya/config.toml` when the user
//! trusts the project (`foya trust`; otherwise `setup::model_client` said it is ignored).
//! The runtime exports each session's log for the hooks under `<data dir>/transcripts`.

use anyhow::Context;
use foya_actors::RuntimeConfig;
use foya_actors::hooks::HookCommands;
use foya_config::provider::{project_file, read_optional, user_file};
use std::path::{Path, PathBuf};

/// The command hooks for a session in `cwd`: the user's, then the trusted project's
/// (marked with the project's root: they apply only to sessions of that project, also
/// in `foya serve`, whose sessions may be anywhere).
///
/// # Errors
/// A file cannot be read or parsed, or its `[hooks]` is not valid (the message names
/// the file and the key).
pub fn load(cwd: &Path) -> anyhow::Result<HookCommands> {
    let mut hooks = HookCommands::default();
    if let Some(user) = user_file() {
        hooks.extend(of_file(&user)?);
    }
    if foya_config::trust::is_trusted(cwd)
        && let Ok(root) = foya_config::trust::project_key(cwd)
    {
        hooks.extend(of_file(&project_file(cwd))?.of_project(&root));
    }
    Ok(hooks)
}

/// Puts `hooks` into `config`, run under the sandbox helper (as the shell tool's
/// commands: they die with `foya` and leave nothing running; `setup::runtime_config`
/// set it, with the user's environment policy), with the transcript directory under
/// `data_dir`.
pub fn apply(config: &mut RuntimeConfig, hooks: HookCommands, data_dir: &Path) {
    config.command_hooks = hooks;
    if config.hook_supervisor.is_none() {
        config.hook_supervisor = Some(foya_actors::tools::sandbox::SandboxRunner::this_binary());
    }
    config.transcript_dir = Some(transcript_dir(data_dir));
}

/// `<data dir>/transcripts`.
pub fn transcript_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("transcripts")
}

/// The `[hooks]` of one config file (none when the file or the table is absent).
fn of_file(path: &Path) -> anyhow::Result<HookCommands> {
    let Some(text) = read_optional(path)? else {
        return Ok(HookCommands::default());
    };
    let value: toml::Table =
        toml::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))?;
    let Some(table) = value.get("hooks") else {
        return Ok(HookCommands::default());
    };
    HookCommands::parse(table).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_the_hooks_of_a_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        assert!(of_file(&file).unwrap().is_empty());
        std::fs::write(&file, "[profiles.x]\nkind = \"anthropic\"\n").unwrap();
        assert!(of_file(&file).unwrap().is_empty());
        std::fs::write(&file, "[hooks]\nstop = [\"./check.sh\", \"make lint\"]\n").unwrap();
        assert_eq!(
            of_file(&file).unwrap().commands(None),
            ["./check.sh", "make lint"]
        );
        std::fs::write(&file, "[hooks]\nstop = \"x\"\n").unwrap();
        assert_eq!(
            of_file(&file).unwrap_err().to_string(),
            format!(
                "{}: [hooks] stop must be an array of strings",
                file.display()
            )
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::create_dir(&file).unwrap();
        assert_eq!(
            of_file(&file).unwrap_err().to_string(),
            format!("cannot read {}: not a regular file", file.display())
        );
    }
}

//! Where the user's configuration lives and how a config file is read: the leaf the
//! trust list (`crate::trust`), the provider profiles (`crate::provider`) and the hook
//! and MCP files stand on. Must not: parse a file's contents or decide trust.

use std::path::{Path, PathBuf};

/// The user's config directory, by the XDG base directory rule: `$XDG_CONFIG_HOME/foya`
/// when `XDG_CONFIG_HOME` is set to an absolute path, else `~/.config/foya` (`None`
/// without either). It holds the user's own `config.toml`, the trust list and the user
/// context files (memory, skills, commands).
#[must_use]
pub fn user_config_dir() -> Option<PathBuf> {
    dirs::config_dir().map(|dir| dir.join("foya"))
}

/// The directory earlier versions used whatever `XDG_CONFIG_HOME` said: `~/.config/foya`.
#[must_use]
pub fn legacy_config_dir() -> Option<PathBuf> {
    dirs::home_dir().map(|home| home.join(".config/foya"))
}

/// The user's config file `name` (`config.toml`, `trusted-projects.toml`): in
/// [`user_config_dir`]; when it is not there but is in [`legacy_config_dir`] (a file
/// written before `XDG_CONFIG_HOME` was honoured), that one, read and updated where it
/// is, so a user's settings and trust list are never lost by moving the rule. `None`
/// without a home.
#[must_use]
pub(crate) fn user_config_file(name: &str) -> Option<PathBuf> {
    let path = user_config_dir()?.join(name);
    if std::fs::symlink_metadata(&path).is_ok() {
        return Some(path);
    }
    match legacy_config_dir().map(|dir| dir.join(name)) {
        Some(old) if std::fs::symlink_metadata(&old).is_ok() => Some(old),
        _ => Some(path),
    }
}

/// A config file that cannot be read (one line, fit to show to a user).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {}: {message}", .path.display())]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// Why: the I/O error, or `not a regular file`.
    pub message: String,
}

/// A config file's text, or `None` when it does not exist.
///
/// # Errors
/// [`ReadError`] when it cannot be read, or is not a regular file (a directory; a FIFO,
/// whose read would block): refused without reading it.
pub fn read_optional(path: &Path) -> Result<Option<String>, ReadError> {
    let failed = |message: String| ReadError {
        path: path.to_owned(),
        message,
    };
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err(failed("not a regular file".to_owned()));
    }
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(failed(e.to_string())),
    }
}

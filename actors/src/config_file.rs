//! Where the user's configuration lives and how a config file is read: the leaf both the
//! trust list (`crate::trust`) and the provider config (`crate::provider::config`) stand
//! on. Must not: parse a file's contents or decide trust.

use std::path::{Path, PathBuf};

/// The user's config directory: `~/.config/foya` (`None` without a home). It holds the
/// user's own `config.toml` and the trust list.
#[must_use]
pub fn user_config_dir() -> Option<PathBuf> {
    dirs::home_dir().map(|home| home.join(".config/foya"))
}

/// A config file's text, or `None` when it does not exist.
///
/// # Errors
/// The reason when it cannot be read, or is not a regular file (a directory; a FIFO,
/// whose read would block): refused without reading it.
pub fn read_optional(path: &Path) -> Result<Option<String>, String> {
    if let Ok(meta) = std::fs::metadata(path)
        && !meta.is_file()
    {
        return Err("not a regular file".to_owned());
    }
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

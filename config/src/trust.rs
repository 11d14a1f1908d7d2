//! Project trust: whether the user trusted a project, so that its own config applies.
//!
//! A cloned repository's files are untrusted text. A project's `.foya/config.toml`
//! (provider profiles, hooks) — and whatever else a project ships that makes the
//! runtime run commands or talk to hosts (MCP servers) — applies only once the user has
//! trusted the project: `foya trust [DIR]`, or a yes at the first-use prompt on a
//! terminal. Trust is recorded in the user's own config directory
//! (`~/.config/foya/trusted-projects.toml`, which no project can write: it is outside
//! every working directory), keyed by the project's canonical root
//! ([`foya_context::project_root`] of the canonical directory).
//!
//! Owns: the trust list and its file. Call [`is_trusted`] to ask whether the project of
//! a working directory is trusted. Must not: prompt or print (the CLI does).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// File name of the trust list inside the user's config directory.
pub const TRUST_FILE: &str = "trusted-projects.toml";

/// A trust-list error (one line, fit to show to a user).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// No home directory to keep the trust list in.
    #[error(
        "no home directory: the trust list lives in $XDG_CONFIG_HOME/foya/{TRUST_FILE} or ~/.config/foya/{TRUST_FILE}"
    )]
    NoHome,
    /// The directory to trust does not exist (or cannot be resolved).
    #[error("cannot trust {path}: {message}")]
    Directory {
        /// The directory given.
        path: PathBuf,
        /// Why it cannot be resolved.
        message: String,
    },
    /// The trust list cannot be read or written.
    #[error("cannot {action} {path}: {message}")]
    File {
        /// `read`, `write` or `lock`.
        action: &'static str,
        /// The trust list file.
        path: PathBuf,
        /// The I/O or parse error.
        message: String,
    },
}

pub use crate::files::user_config_dir;

/// The trust list file: `trusted-projects.toml` in the user config directory
/// (`files::user_config_file`: `$XDG_CONFIG_HOME/foya`, else
/// `~/.config/foya`).
///
/// # Errors
/// [`TrustError::NoHome`].
pub(crate) fn trust_file() -> Result<PathBuf, TrustError> {
    crate::files::user_config_file(TRUST_FILE).ok_or(TrustError::NoHome)
}

/// The trusted projects, by canonical root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustList {
    /// Canonical project roots the user trusted.
    #[serde(default)]
    pub projects: BTreeSet<PathBuf>,
}

impl TrustList {
    /// Reads `path`; a missing file is an empty list.
    ///
    /// # Errors
    /// [`TrustError::File`] when it cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Self, TrustError> {
        let failed = |message: String| TrustError::File {
            action: "read",
            path: path.to_owned(),
            message,
        };
        match crate::files::read_optional(path) {
            Ok(None) => Ok(Self::default()),
            Ok(Some(text)) => toml::from_str(&text).map_err(|e| failed(e.message().to_owned())),
            Err(e) => Err(failed(e.message)),
        }
    }

    /// Writes the list to `path` (creating its directory), replacing it atomically.
    ///
    /// # Errors
    /// [`TrustError::File`] when it cannot be written.
    pub fn save(&self, path: &Path) -> Result<(), TrustError> {
        let failed = |message: String| TrustError::File {
            action: "write",
            path: path.to_owned(),
            message,
        };
        let text = toml::to_string(self).map_err(|e| failed(e.to_string()))?;
        let text = format!(
            "# Projects whose own .foya/config.toml and hooks foya applies (`foya trust`).\n{text}"
        );
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| failed(e.to_string()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| failed(e.to_string()))?;
        std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(|e| failed(e.to_string()))?;
        tmp.persist(path).map_err(|e| failed(e.error.to_string()))?;
        Ok(())
    }

    /// Whether the project of `dir` is trusted.
    #[must_use]
    pub fn trusts(&self, dir: &Path) -> bool {
        project_key(dir).is_ok_and(|root| self.projects.contains(&root))
    }
}

/// The key a project is trusted under: the [`foya_context::project_root`] of `dir`
/// made canonical (symlinks resolved), so `foya trust .` and a run from a subdirectory
/// or through a symlink name the same project.
///
/// # Errors
/// [`TrustError::Directory`] when `dir` does not exist.
pub fn project_key(dir: &Path) -> Result<PathBuf, TrustError> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| TrustError::Directory {
        path: dir.to_owned(),
        message: e.to_string(),
    })?;
    Ok(foya_context::project_root(&canonical))
}

/// Whether the user trusted the project of working directory `cwd` (its canonical
/// project root is in the trust list). `false` when anything is missing or unreadable:
/// an untrusted project's config is never applied by mistake.
#[must_use]
pub fn is_trusted(cwd: &Path) -> bool {
    trust_file()
        .and_then(|file| TrustList::load(&file))
        .is_ok_and(|list| list.trusts(cwd))
}

/// Trusts the project of `dir`; returns its key (canonical root).
///
/// # Errors
/// As [`project_key`], [`TrustList::load`] and [`TrustList::save`].
pub fn trust(dir: &Path) -> Result<PathBuf, TrustError> {
    let key = project_key(dir)?;
    update(&trust_file()?, |list| list.projects.insert(key.clone()))?;
    Ok(key)
}

/// Revokes the trust of the project of `dir` (a directory that no longer exists is
/// matched by its absolute path as given); returns the key and whether it was trusted.
///
/// # Errors
/// As [`TrustList::load`] and [`TrustList::save`].
pub fn revoke(dir: &Path) -> Result<(PathBuf, bool), TrustError> {
    let key = project_key(dir).unwrap_or_else(|_| normalize(dir));
    let removed = update(&trust_file()?, |list| list.projects.remove(&key))?;
    Ok((key, removed))
}

/// Reads the trust list at `path`, applies `change` and writes the list back when
/// `change` says it changed it; returns what `change` returned. The read and the write
/// happen under an exclusive lock on `path`'s lock file ([`lock_file`]): two `foya
/// trust` at once (two terminals, a script, parallel tests) both land — without it each
/// reads the same list and the second rename drops the first one's project.
///
/// # Errors
/// As [`TrustList::load`] and [`TrustList::save`]; [`TrustError::File`] when the lock
/// file cannot be opened or locked.
pub fn update(
    path: &Path,
    change: impl FnOnce(&mut TrustList) -> bool,
) -> Result<bool, TrustError> {
    let _lock = lock(path)?;
    let mut list = TrustList::load(path)?;
    let changed = change(&mut list);
    if changed {
        list.save(path)?;
    }
    Ok(changed)
}

/// The lock file of the trust list at `path`: `trusted-projects.toml.lock` next to it
/// (the list itself is replaced by a rename on every save, so it cannot hold the lock).
#[must_use]
pub fn lock_file(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Opens (creating it and its directory, owner-only) and exclusively locks the lock
/// file of the trust list at `path`; the lock is released when the file is dropped.
fn lock(path: &Path) -> Result<std::fs::File, TrustError> {
    let lock_path = lock_file(path);
    let failed = |e: std::io::Error| TrustError::File {
        action: "lock",
        path: lock_path.clone(),
        message: e.to_string(),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(failed)?;
    file.lock().map_err(failed)?;
    Ok(file)
}

/// `dir` made absolute (against `/`) with `.` and `..` resolved lexically: the key of a
/// directory that no longer exists.
fn normalize(dir: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in Path::new("/").join(dir).components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The trusted projects, sorted.
///
/// # Errors
/// As [`TrustList::load`].
pub fn list() -> Result<Vec<PathBuf>, TrustError> {
    Ok(TrustList::load(&trust_file()?)?
        .projects
        .into_iter()
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::TrustList;

    #[test]
    fn a_project_is_trusted_by_its_canonical_root_from_any_subdirectory() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("p");
        std::fs::create_dir_all(project.join(".git")).unwrap();
        std::fs::create_dir_all(project.join("src/deep")).unwrap();
        std::os::unix::fs::symlink(&project, tmp.path().join("alias")).unwrap();
        let file = tmp.path().join("cfg/trusted-projects.toml");
        let mut list = TrustList::load(&file).unwrap();
        assert!(!list.trusts(&project));
        list.projects
            .insert(super::project_key(&project.join("src")).unwrap());
        list.save(&file).unwrap();
        let list = TrustList::load(&file).unwrap();
        assert!(list.trusts(&project));
        assert!(list.trusts(&project.join("src/deep")));
        assert!(list.trusts(&tmp.path().join("alias/src")));
        assert!(!list.trusts(tmp.path()));
        std::fs::write(&file, "projects = 3").unwrap();
        assert!(TrustList::load(&file).is_err());
    }

    #[test]
    fn concurrent_updates_of_the_trust_list_all_land() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("cfg/trusted-projects.toml");
        let projects: Vec<_> = (0..16).map(|n| tmp.path().join(format!("p{n}"))).collect();
        std::thread::scope(|scope| {
            for project in &projects {
                let file = &file;
                scope.spawn(move || {
                    super::update(file, |list| list.projects.insert(project.clone())).unwrap()
                });
            }
        });
        let list = TrustList::load(&file).unwrap();
        assert_eq!(list.projects, projects.iter().cloned().collect());
        assert!(super::lock_file(&file).ends_with("trusted-projects.toml.lock"));
    }
}

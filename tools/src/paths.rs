//! Path resolution for the built-in file tools: relative to the working directory and,
//! unless the call is unconfined, never outside it.
//!
//! Owns: lexical normalisation and the confinement check (including symlinks).

use super::{SandboxPolicy, ToolContext};
use foya_protocol::ApprovalMode;
use std::path::{Component, Path, PathBuf};

/// `base.join(path)` with `.` and `..` removed lexically (no file-system access).
#[must_use]
pub(crate) fn normalize(base: &Path, path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in base.join(path).components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether file tools of this call may reach outside the working directory: in approval
/// mode `bypass`, or when the Approval Gateway let the call leave the sandbox
/// (`SandboxPolicy::None`).
#[must_use]
pub(crate) fn unconfined(ctx: &ToolContext) -> bool {
    ctx.approval_mode == ApprovalMode::Bypass || ctx.sandbox == SandboxPolicy::None
}

/// Why a confined call's path is refused ([`resolve`]); its text is written for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// The path leaves the working directory lexically (`..`, an absolute path).
    #[error(
        "path {raw:?} resolves to {} which is outside the working directory {}; \
         file tools only access paths inside the working directory",
        .resolved.display(), .cwd.display()
    )]
    Outside {
        /// The argument as given.
        raw: String,
        /// Where it resolves.
        resolved: PathBuf,
        /// The working directory.
        cwd: PathBuf,
    },
    /// An ancestor of the path is a symlink whose target does not exist.
    #[error(
        "path {raw:?} leads through a dangling symlink ({}); refusing to follow it",
        .link.display()
    )]
    DanglingSymlink {
        /// The argument as given.
        raw: String,
        /// The deepest existing ancestor (the dangling link).
        link: PathBuf,
    },
    /// The path leaves the working directory through a symlink.
    #[error(
        "path {raw:?} leads through a symlink to {} which is outside the working \
         directory {}; file tools only access paths inside the working directory",
        .real.display(), .cwd.display()
    )]
    SymlinkOutside {
        /// The argument as given.
        raw: String,
        /// Where it really leads.
        real: PathBuf,
        /// The working directory.
        cwd: PathBuf,
    },
}

/// Resolves a tool's `path` argument against `ctx.cwd`.
///
/// # Errors
/// [`PathError`] when a confined call's path leaves the working directory, lexically
/// (`..`, absolute path) or through a symlink.
pub(crate) fn resolve(ctx: &ToolContext, raw: &str) -> Result<PathBuf, PathError> {
    let cwd = normalize(Path::new("/"), &ctx.cwd);
    let path = normalize(&cwd, Path::new(raw));
    if unconfined(ctx) {
        return Ok(path);
    }
    if !path.starts_with(&cwd) {
        return Err(PathError::Outside {
            raw: raw.to_owned(),
            resolved: path,
            cwd,
        });
    }
    let real_cwd = std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone());
    // The deepest ancestor that exists (symlinks not followed), resolved for real.
    let (existing, rest) = deepest_existing(&path);
    let Ok(mut real) = std::fs::canonicalize(existing) else {
        return Err(PathError::DanglingSymlink {
            raw: raw.to_owned(),
            link: existing.to_owned(),
        });
    };
    real.extend(rest.iter().rev());
    if !real.starts_with(&real_cwd) {
        return Err(PathError::SymlinkOutside {
            raw: raw.to_owned(),
            real,
            cwd,
        });
    }
    Ok(path)
}

/// Whether file tools of this call may write the protected paths: in approval mode
/// `bypass`, or when a person approved this write (`WorkspaceAndProtected`, or `None`
/// outside the working directory).
#[must_use]
pub(crate) fn may_write_protected(ctx: &ToolContext) -> bool {
    unconfined(ctx) || matches!(ctx.sandbox, SandboxPolicy::WorkspaceAndProtected { .. })
}

/// Checks that a file tool may write `path` (resolved by [`resolve`]): not a protected
/// path — as written or once symlinks are followed — unless the call may write those
/// ([`may_write_protected`]); and, when the call is confined to the working directory,
/// not a file with other hard links (a link to a file elsewhere, which a write through
/// it would change). `raw` is the argument as given, for messages.
///
/// # Errors
/// A message for the model saying why the write is refused.
pub(crate) fn check_write(ctx: &ToolContext, path: &Path, raw: &str) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    if !may_write_protected(ctx) {
        let reached = if ctx.protected.is_protected(path) {
            None
        } else {
            ctx.protected.reached_as(path)
        };
        if reached.is_some() || ctx.protected.is_protected(path) {
            return Err(format!(
                "{raw:?} is a protected path (the runtime's config, hooks, instructions or \
                 git metadata{}); writing it needs a person's approval of this exact write",
                reached.map_or_else(String::new, |name| format!(
                    ", reached through a symlink as {}",
                    name.display()
                ))
            ));
        }
    }
    // The file a write reaches: a symlink in the working directory to one of the links
    // (`l -> node_modules/pkg.js`, hard-linked to a store outside) is followed.
    if !unconfined(ctx)
        && let Ok(meta) = std::fs::metadata(path)
        && meta.is_file()
        && meta.nlink() > 1
    {
        return Err(format!(
            "{raw:?} has {} hard links: writing it would also change the same file under \
             its other names, which may be outside the working directory; refused",
            meta.nlink()
        ));
    }
    Ok(())
}

/// The deepest ancestor of `path` that exists (symlinks not followed), and the names
/// below it that do not, innermost first.
fn deepest_existing(path: &Path) -> (&Path, Vec<std::ffi::OsString>) {
    let mut existing = path;
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            break;
        };
        rest.push(name.to_owned());
        existing = parent;
    }
    (existing, rest)
}

/// `path` with symlinks resolved in its deepest existing ancestor (the rest appended); a
/// dangling symlink there is followed to where it points (up to 40 links).
pub(crate) fn real_path(path: &Path) -> PathBuf {
    let mut path = path.to_path_buf();
    for _ in 0..40 {
        let (existing, rest) = deepest_existing(&path);
        let resolved = std::fs::canonicalize(existing);
        let dangling = match &resolved {
            Err(_) => std::fs::read_link(existing).ok(),
            Ok(_) => None,
        };
        let mut real = match (resolved, dangling) {
            (Ok(real), _) => real,
            (Err(_), Some(target)) => {
                let parent = existing.parent().unwrap_or(Path::new("/"));
                normalize(parent, &target)
            }
            (Err(_), None) => existing.to_path_buf(),
        };
        real.extend(rest.iter().rev());
        if real == path {
            return real;
        }
        path = real;
    }
    path
}

/// `path` relative to `cwd` for display, or `path` itself when it is outside.
#[must_use]
pub(crate) fn display_relative(cwd: &Path, path: &Path) -> String {
    let cwd = normalize(Path::new("/"), cwd);
    match path.strip_prefix(&cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;
    use std::path::{Path, PathBuf};

    #[test]
    fn normalize_is_lexical() {
        let cases = [
            ("/w", "a/b", "/w/a/b"),
            ("/w", "./a/../b", "/w/b"),
            ("/w", "../x", "/x"),
            ("/w", "/etc/passwd", "/etc/passwd"),
            ("/w", "../../../..", "/"),
            ("/w/", ".", "/w"),
        ];
        for (base, path, expected) in cases {
            assert_eq!(
                normalize(Path::new(base), Path::new(path)),
                PathBuf::from(expected)
            );
        }
    }
}

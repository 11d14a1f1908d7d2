//! Path resolution for the built-in file tools: relative to the working directory and,
//! unless the call is unconfined, never outside it.
//!
//! Owns: lexical normalisation and the confinement check (including symlinks).

use super::{SandboxPolicy, ToolContext};
use foya_protocol::ApprovalMode;
use std::path::{Component, Path, PathBuf};

/// `base.join(path)` with `.` and `..` removed lexically (no file-system access).
#[must_use]
pub fn normalize(base: &Path, path: &Path) -> PathBuf {
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
pub fn unconfined(ctx: &ToolContext) -> bool {
    ctx.approval_mode == ApprovalMode::Bypass || ctx.sandbox == SandboxPolicy::None
}

/// Resolves a tool's `path` argument against `ctx.cwd`.
///
/// # Errors
/// A message for the model when a confined call's path leaves the working directory,
/// lexically (`..`, absolute path) or through a symlink.
pub fn resolve(ctx: &ToolContext, raw: &str) -> Result<PathBuf, String> {
    let cwd = normalize(Path::new("/"), &ctx.cwd);
    let path = normalize(&cwd, Path::new(raw));
    if unconfined(ctx) {
        return Ok(path);
    }
    if !path.starts_with(&cwd) {
        return Err(format!(
            "path {raw:?} resolves to {} which is outside the working directory {}; \
             file tools only access paths inside the working directory",
            path.display(),
            cwd.display()
        ));
    }
    let real_cwd = std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone());
    // The deepest ancestor that exists (symlinks not followed), resolved for real.
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
            break;
        };
        rest.push(name.to_owned());
        existing = parent;
    }
    let Ok(mut real) = std::fs::canonicalize(existing) else {
        return Err(format!(
            "path {raw:?} leads through a dangling symlink ({}); refusing to follow it",
            existing.display()
        ));
    };
    real.extend(rest.iter().rev());
    if !real.starts_with(&real_cwd) {
        return Err(format!(
            "path {raw:?} leads through a symlink to {} which is outside the working \
             directory {}; file tools only access paths inside the working directory",
            real.display(),
            cwd.display()
        ));
    }
    Ok(path)
}

/// `path` relative to `cwd` for display, or `path` itself when it is outside.
#[must_use]
pub fn display_relative(cwd: &Path, path: &Path) -> String {
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

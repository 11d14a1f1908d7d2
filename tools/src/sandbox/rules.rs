//! The write rules of `WorkspaceWrite` when the kernel gives no namespace for the shield
//! (`shield.rs`): the working directory minus its protected paths, by Landlock alone.
//!
//! Owns: turning "write anywhere below `cwd` except these paths" into Landlock's
//! allow-list. Landlock grants rights beneath a file or directory (by inode) and cannot
//! subtract a subtree, so:
//! - a directory with no protected path below it gets every right beneath it;
//! - a directory on the way to a protected path (the working directory itself, or
//!   `scripts/` holding a hook script) gets no right of its own: nothing can be created,
//!   removed or renamed directly in it (that is what keeps `mkdir .foya`, `mv x
//!   AGENTS.md` or `ln x AGENTS.md` out), and each of its entries is handled the same
//!   way — directories recursively, regular files with read, write and truncate;
//! - a protected path, a symlink, a special file, and a regular file with other hard
//!   links (which may be a protected file under another name) get no rule: read-only.
//!
//! The cost, stated in `docs/security.md` (the fallback): a sandboxed command cannot
//! create or delete entries directly in the working directory (or in a directory holding
//! a hook script).
//! Must not: follow symlinks while listing.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Most directory entries listed before the rest of a directory is left read-only (a
/// working directory with a huge top level still starts quickly).
const MAX_RULES: usize = 4_096;

/// One Landlock write rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteRule {
    /// The file or directory the rule is attached to.
    pub path: PathBuf,
    /// Read, write and truncate only (a regular file); otherwise every file-system right
    /// beneath `path`.
    pub file_only: bool,
}

impl WriteRule {
    /// Every right beneath `path`.
    #[must_use]
    pub(crate) fn all_beneath(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            file_only: false,
        }
    }
}

/// The write rules for `cwd` with `protect` (absolute paths) kept read-only. With
/// nothing to protect inside `cwd`, one rule: everything beneath `cwd`.
#[must_use]
pub(crate) fn write_rules(cwd: &Path, protect: &[PathBuf]) -> Vec<WriteRule> {
    let protect: Vec<&PathBuf> = protect
        .iter()
        .filter(|p| p.starts_with(cwd) && p.as_path() != cwd)
        .collect();
    let mut rules = Vec::new();
    add(cwd, &protect, &mut rules);
    rules
}

fn add(dir: &Path, protect: &[&PathBuf], rules: &mut Vec<WriteRule>) {
    if !protect
        .iter()
        .any(|p| p.starts_with(dir) && p.as_path() != dir)
    {
        rules.push(WriteRule::all_beneath(dir));
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if rules.len() >= MAX_RULES {
            return;
        }
        let path = entry.path();
        if protect.iter().any(|p| p.as_path() == path) {
            continue;
        }
        // `symlink_metadata`: a symlink is not followed (it may point at a protected
        // file or outside the working directory).
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            add(&path, protect, rules);
        } else if meta.is_file() && meta.nlink() == 1 {
            rules.push(WriteRule {
                path,
                file_only: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{WriteRule, write_rules};
    use std::path::PathBuf;

    #[test]
    fn protected_paths_and_their_parents_get_no_rule() {
        let tmp = tempfile::tempdir().unwrap();
        let w = tmp.path();
        for dir in ["src/deep", ".git/hooks", "scripts", "docs"] {
            std::fs::create_dir_all(w.join(dir)).unwrap();
        }
        for file in [
            "README.md",
            "AGENTS.md",
            "scripts/check.sh",
            "scripts/other.sh",
        ] {
            std::fs::write(w.join(file), "x").unwrap();
        }
        std::fs::hard_link(w.join("README.md"), w.join("linked.md")).unwrap();
        std::os::unix::fs::symlink(w.join("AGENTS.md"), w.join("alias.md")).unwrap();
        let protect: Vec<PathBuf> = [".git", ".foya", "AGENTS.md", "FOYA.md", "scripts/check.sh"]
            .iter()
            .map(|p| w.join(p))
            .collect();
        let mut rules = write_rules(w, &protect);
        rules.sort_by(|a, b| a.path.cmp(&b.path));
        let expected = vec![
            WriteRule::all_beneath(&w.join("docs")),
            WriteRule {
                path: w.join("scripts/other.sh"),
                file_only: true,
            },
            WriteRule::all_beneath(&w.join("src")),
        ];
        assert_eq!(rules, expected);
        // Nothing protected inside: the whole directory.
        assert_eq!(
            write_rules(&w.join("src"), &protect),
            vec![WriteRule::all_beneath(&w.join("src"))]
        );
    }
}

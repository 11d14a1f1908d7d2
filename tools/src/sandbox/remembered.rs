//! The nested protected paths a working directory held when this process first let a
//! command write in it, kept for the process's life: each later shielded call protects
//! those that still exist, whatever its own listing finds.
//!
//! A call's helper lists the working directory for nested protected paths (`shield`), and
//! that listing skips what a command may plant: a folder holding a `CACHEDIR.TAG`, and
//! everything past its budgets (20 000 folders, 2 million lookups). Before this, one
//! command could write `vendor/CACHEDIR.TAG` (or make 20 000 folders) and the next could
//! write `vendor/lib/.git/config`, a repository the user had before the session, which
//! the first call had shielded. The listing here runs in the runtime's process before its
//! first command that may write in that folder, so a planted tag or planted folders come
//! too late to hide what was there.
//!
//! Owns: the remembered paths of every working directory this process listed (real
//! paths, bounded), and which of them a call passes to its helper (those under its
//! working directory that exist: a path removed since gets no placeholder, so a command
//! can still make a repository where one was).
//! Must not: forget a path while the process lives (starting over would let a planted
//! tag hide it again), or block an async worker on a listing (see [`for_call`]).

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};

/// Most working directories listed by one process; past it a new one is not listed (its
/// calls have their helper's own listing only).
const MAX_LISTED: usize = 1_024;

/// Most paths remembered by one process, all working directories together (each a real
/// path: a few megabytes at most).
const MAX_REMEMBERED: usize = 65_536;

/// Most remembered paths passed to one call (the shield mounts at most 4 096 anyway).
const MAX_PER_CALL: usize = 8_192;

#[derive(Debug, Default)]
struct Memory {
    /// The working directories listed (real paths).
    listed: HashSet<PathBuf>,
    /// The protected paths found (real paths: the listed directory's real path joined
    /// with what the listing found below it).
    found: BTreeSet<PathBuf>,
}

static MEMORY: LazyLock<Mutex<Memory>> = LazyLock::new(Mutex::default);

fn with_memory<T>(f: impl FnOnce(&mut Memory) -> T) -> T {
    f(&mut MEMORY.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The remembered protected paths under `cwd` that exist now, as paths under `cwd` as
/// given (what `--protect` takes); `cwd` is listed first when this process has not
/// listed it yet (blocking: up to the shield's budgets, about a second for the worst
/// tree, once per working directory).
#[must_use]
pub(crate) fn for_call(cwd: &Path) -> Vec<PathBuf> {
    let real = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    if !is_listed(&real) {
        remember(cwd, &real, super::shield::found_below(cwd));
    }
    present(cwd, &real)
}

/// Whether this process listed the working directory whose real path is `real` (or
/// will not: past [`MAX_LISTED`]).
fn is_listed(real: &Path) -> bool {
    with_memory(|m| m.listed.contains(real) || m.listed.len() >= MAX_LISTED)
}

/// [`for_call`] when `cwd` was listed already; `None` when it must be listed first (for
/// a caller that lists off its async worker).
#[must_use]
pub(crate) fn if_listed(cwd: &Path) -> Option<Vec<PathBuf>> {
    let real = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    is_listed(&real).then(|| present(cwd, &real))
}

/// Keeps `found` (paths under `cwd` as given) for the working directory `real`.
fn remember(cwd: &Path, real: &Path, found: Vec<PathBuf>) {
    with_memory(|m| {
        if m.listed.len() >= MAX_LISTED {
            return;
        }
        m.listed.insert(real.to_path_buf());
        for path in found {
            if m.found.len() >= MAX_REMEMBERED {
                break;
            }
            if let Ok(rel) = path.strip_prefix(cwd)
                && !rel.as_os_str().is_empty()
            {
                m.found.insert(real.join(rel));
            }
        }
    });
}

/// The remembered paths below `real` that exist (not followed: a link is protected as
/// itself), under `cwd` as given.
fn present(cwd: &Path, real: &Path) -> Vec<PathBuf> {
    let below: Vec<PathBuf> = with_memory(|m| {
        m.found
            .range::<Path, _>((std::ops::Bound::Excluded(real), std::ops::Bound::Unbounded))
            .take_while(|p| p.starts_with(real))
            .take(MAX_PER_CALL)
            .cloned()
            .collect()
    });
    below
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .filter_map(|p| Some(cwd.join(p.strip_prefix(real).ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{for_call, if_listed};

    #[test]
    fn what_was_there_at_the_first_listing_is_kept_while_it_exists() {
        let tmp = tempfile::tempdir().unwrap();
        // Reached through a link: the paths come back under the folder as given.
        let real = tmp.path().join("real");
        std::fs::create_dir_all(real.join("vendor/lib/.git")).unwrap();
        std::fs::create_dir_all(real.join("docs")).unwrap();
        std::fs::write(real.join("docs/AGENTS.md"), "Be brief.\n").unwrap();
        let cwd = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &cwd).unwrap();
        assert_eq!(if_listed(&cwd), None);
        let mut first = for_call(&cwd);
        first.sort();
        assert_eq!(
            first,
            [cwd.join("docs/AGENTS.md"), cwd.join("vendor/lib/.git")]
        );
        assert_eq!(if_listed(&cwd).map(|p| p.len()), Some(2));
        assert_eq!(if_listed(&real).map(|p| p.len()), Some(2));

        // Hidden from a listing by a planted tag, or made later: kept, and not added.
        std::fs::write(real.join("vendor/CACHEDIR.TAG"), "Signature: x\n").unwrap();
        std::fs::create_dir_all(real.join("new/.git")).unwrap();
        let mut later = for_call(&real);
        later.sort();
        assert_eq!(
            later,
            [real.join("docs/AGENTS.md"), real.join("vendor/lib/.git")]
        );

        // Removed: not passed (no placeholder where a repository was); back: passed.
        std::fs::remove_dir_all(real.join("vendor/lib")).unwrap();
        assert_eq!(for_call(&cwd), [cwd.join("docs/AGENTS.md")]);
        std::fs::create_dir_all(real.join("vendor/lib/.git")).unwrap();
        assert_eq!(for_call(&cwd).len(), 2);

        // A folder below is its own working directory: what was remembered under it
        // comes with it.
        let vendor = real.join("vendor");
        assert_eq!(for_call(&vendor), [vendor.join("lib/.git")]);
    }
}

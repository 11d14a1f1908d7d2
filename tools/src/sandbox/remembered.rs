//! The nested protected paths a working directory held when this process first let the
//! model write in it, kept for the process's life: each later shielded call protects
//! those that still exist, whatever its own listing finds.
//!
//! A call's helper lists the working directory for nested protected paths (`shield`), and
//! that listing skips what a command may plant: a folder holding a `CACHEDIR.TAG`, and
//! everything past its budgets (20 000 folders, 2 million lookups). Before this, one
//! command could write `vendor/CACHEDIR.TAG` (or make 20 000 folders) and the next could
//! write `vendor/lib/.git/config`, a repository the user had before the session, which
//! the first call had shielded. The listing here runs in the runtime's process before
//! the model's first write there — a file tool's, a command's, a tool server's start —
//! and looks into the cache folders too once the rest is listed (a tag may come with a
//! cloned repository), so a planted tag or planted folders come too late to hide what
//! was there.
//!
//! Owns: the remembered paths of every working directory this process listed (real
//! paths, bounded), and which of them a call passes to its helper (those under its
//! working directory that are not gone: a path removed since gets no placeholder, so a
//! command can still make a repository where one was).
//! Must not: forget a path while the process lives (starting over would let a planted
//! tag hide it again), or block an async worker on a listing (see [`list_once`]).

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};

/// Most working directories listed by one process; past it a new one is not listed (its
/// calls have their helper's own listing only).
const MAX_LISTED: usize = 1_024;

/// Most paths remembered by one process, all working directories together (each a real
/// path: a few megabytes at most); what is gone makes room first. (Fewer in the unit
/// tests, which fill it.)
const MAX_REMEMBERED: usize = if cfg!(test) { 4_096 } else { 65_536 };

/// Most remembered paths passed to one call (the shield mounts at most 4 096 anyway).
const MAX_PER_CALL: usize = 8_192;

/// Most bytes of remembered paths a helper started for one call takes as arguments
/// (`--protect`): the kernel refuses a command line past 2 MiB (700 paths of 3.7 KiB kept
/// local MCP servers from starting). A call of the persistent helper takes them all.
pub(crate) const MAX_ARGUMENT_BYTES: usize = 256 * 1024;

#[derive(Debug, Default)]
struct Memory {
    /// The working directories listed (real paths).
    listed: HashSet<PathBuf>,
    /// The protected paths found outside the cache folders (real paths: the listed
    /// directory's real path joined with what the listing found below it).
    found: BTreeSet<PathBuf>,
    /// The repositories found in the cache folders and `node_modules`, passed after
    /// `found` (the shield's mounts are bounded: what the user's repositories need
    /// comes first).
    in_caches: BTreeSet<PathBuf>,
}

static MEMORY: LazyLock<Mutex<Memory>> = LazyLock::new(Mutex::default);

fn with_memory<T>(f: impl FnOnce(&mut Memory) -> T) -> T {
    f(&mut MEMORY.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The remembered protected paths under `cwd` that are not gone, as paths under `cwd`
/// as given (what `--protect` takes); `cwd` is listed first when this process has not
/// listed it yet (blocking: up to the shield's budgets, about a second for the worst
/// tree, once per working directory).
#[must_use]
pub(crate) fn for_call(cwd: &Path) -> Vec<PathBuf> {
    let real = list(cwd);
    present(cwd, &real, usize::MAX)
}

/// [`for_call`] for a helper started for one call: at most [`MAX_ARGUMENT_BYTES`] of
/// them, the instruction files the first left out.
#[must_use]
pub(crate) fn for_arguments(cwd: &Path) -> Vec<PathBuf> {
    let real = list(cwd);
    present(cwd, &real, MAX_ARGUMENT_BYTES)
}

/// Lists `cwd` unless this process did (blocking); its real path. The working
/// directories listed already below it are not looked into again: what they held was
/// kept when they were listed, and what commands made there since (20 000 folders)
/// must not use up this listing's budget.
pub(crate) fn list(cwd: &Path) -> PathBuf {
    let real = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    if !is_listed(&real) {
        let skip: HashSet<PathBuf> = with_memory(|m| {
            m.listed
                .iter()
                .filter_map(|dir| Some(cwd.join(dir.strip_prefix(&real).ok()?)))
                .filter(|dir| dir.as_path() != cwd)
                .collect()
        });
        let (found, first) = super::shield::found_below_all(cwd, &skip);
        remember(cwd, &real, found, first);
    }
    real
}

/// Lists `cwd` for [`for_call`] unless this process did (off the async workers): call it
/// before anything of the model's may write there (a file tool's write, a command, a
/// tool server started in it).
///
/// # Errors
/// The listing's thread failed (nothing is remembered: the caller must not write).
pub(crate) async fn list_once(cwd: &Path) -> std::io::Result<()> {
    if !is_listed(&std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf())) {
        let dir = cwd.to_path_buf();
        tokio::task::spawn_blocking(move || list(&dir))
            .await
            .map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// Whether this process listed the working directory whose real path is `real` (or
/// will not: past [`MAX_LISTED`]).
pub(super) fn is_listed(real: &Path) -> bool {
    with_memory(|m| m.listed.contains(real) || m.listed.len() >= MAX_LISTED)
}

/// Keeps `found` (paths under `cwd` as given; those from `first` on were found in the
/// cache folders) for the working directory `real`.
fn remember(cwd: &Path, real: &Path, found: Vec<PathBuf>, first: usize) {
    with_memory(|m| {
        if m.listed.len() >= MAX_LISTED {
            return;
        }
        if m.found.len() + m.in_caches.len() + found.len() > MAX_REMEMBERED {
            // Full: what is gone since (a removed workspace's) makes room.
            m.found.retain(|p| !is_gone(p));
            m.in_caches.retain(|p| !is_gone(p));
        }
        m.listed.insert(real.to_path_buf());
        for (i, path) in found.into_iter().enumerate() {
            if m.found.len() + m.in_caches.len() >= MAX_REMEMBERED {
                break;
            }
            // A path spelled through a link (`gitdir: /home/me/…` where `/home` links
            // elsewhere) is kept by its real path when that is inside.
            let inside = match path.strip_prefix(cwd) {
                Ok(rel) => Some(real.join(rel)),
                Err(_) => std::fs::canonicalize(&path)
                    .ok()
                    .filter(|p| p.starts_with(real)),
            };
            // Each path in one set (another working directory's listing may have found
            // it the other way).
            if let Some(inside) = inside.filter(|p| p.as_path() != real) {
                if i < first {
                    m.in_caches.remove(&inside);
                    m.found.insert(inside);
                } else if !m.found.contains(&inside) {
                    m.in_caches.insert(inside);
                }
            }
        }
    });
}

/// The remembered paths below `real` that are not gone (not followed: a link is
/// protected as itself), under `cwd` as given, within [`MAX_PER_CALL`] and `max_bytes`:
/// repositories first (those found outside the cache folders before those in them),
/// then `.foya` and `.mcp.json`, the instruction files last.
fn present(cwd: &Path, real: &Path, max_bytes: usize) -> Vec<PathBuf> {
    let below = |set: &BTreeSet<PathBuf>| -> Vec<PathBuf> {
        set.range::<Path, _>((std::ops::Bound::Excluded(real), std::ops::Bound::Unbounded))
            .take_while(|p| p.starts_with(real))
            .take(MAX_PER_CALL)
            .cloned()
            .collect()
    };
    let (found, in_caches) = with_memory(|m| (below(&m.found), below(&m.in_caches)));
    // Repositories first (what `git status` runs), then `.foya` and `.mcp.json` (which a
    // repository can commit, many of them, to take the mounts ahead of the rest), then
    // what only the model reads.
    let rank = |p: &PathBuf| match p.file_name().and_then(|n| n.to_str()) {
        Some(name)
            if ["AGENTS.md", "FOYA.md"]
                .iter()
                .any(|f| name.eq_ignore_ascii_case(f)) =>
        {
            2
        }
        Some(name)
            if name.eq_ignore_ascii_case(".foya") || name.eq_ignore_ascii_case(".mcp.json") =>
        {
            1
        }
        _ => 0,
    };
    let mut ranked: Vec<PathBuf> = found.into_iter().chain(in_caches).collect();
    ranked.sort_by_key(rank);
    let mut bytes = 0;
    ranked
        .into_iter()
        .filter(|p| !is_gone(p))
        .filter_map(|p| Some(cwd.join(p.strip_prefix(real).ok()?)))
        .take(MAX_PER_CALL)
        .take_while(|p| {
            bytes += p.as_os_str().len() + 1;
            bytes <= max_bytes
        })
        .collect()
}

/// Whether `path` is gone: it, or a folder on the way, does not exist. Any other
/// failure is not: a folder on the way a command made unreadable to this user (`chmod
/// 000 vendor`) hides nothing from the helper, which sees it as its owner.
fn is_gone(path: &Path) -> bool {
    use rustix::io::Errno;
    std::fs::symlink_metadata(path).is_err_and(|e| {
        [Errno::NOENT, Errno::NOTDIR]
            .iter()
            .any(|gone| e.raw_os_error() == Some(gone.raw_os_error()))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{for_call, is_listed};
    use std::path::Path;

    fn listed(cwd: &Path) -> bool {
        is_listed(&std::fs::canonicalize(cwd).unwrap())
    }

    #[test]
    fn what_was_there_at_the_first_listing_is_kept_while_it_exists() {
        let tmp = tempfile::tempdir().unwrap();
        // Reached through a link: the paths come back under the folder as given.
        let real = tmp.path().join("real");
        std::fs::create_dir_all(real.join("vendor/lib/.git")).unwrap();
        std::fs::create_dir_all(real.join("docs")).unwrap();
        std::fs::write(real.join("docs/AGENTS.md"), "Be brief.\n").unwrap();
        std::fs::write(real.join("docs/.mcp.json"), "{}\n").unwrap();
        // A tag the repository came with, or one planted in an earlier run: its folder is
        // looked into all the same, for its repositories only; a tagged `target` and
        // `node_modules` are not (what is protected there would hold the folder, which a
        // build or an install removes as a whole).
        std::fs::create_dir_all(real.join("cache/sub/.git")).unwrap();
        std::fs::write(real.join("cache/sub/AGENTS.md"), "x\n").unwrap();
        std::fs::write(real.join("cache/CACHEDIR.TAG"), "Signature: x\n").unwrap();
        std::fs::create_dir_all(real.join("target/build/out/src/.git")).unwrap();
        std::fs::write(real.join("target/CACHEDIR.TAG"), "Signature: x\n").unwrap();
        std::fs::create_dir_all(real.join("node_modules/pkg/.git")).unwrap();
        std::fs::write(real.join("node_modules/pkg/AGENTS.md"), "x\n").unwrap();
        // But a submodule's pointer in `node_modules` is.
        std::fs::create_dir_all(real.join("node_modules/dep")).unwrap();
        std::fs::write(real.join("node_modules/dep/.git"), "gitdir: x\n").unwrap();
        let cwd = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &cwd).unwrap();
        assert!(!listed(&cwd));
        // What can run code first (the cache folders' after the rest), then what the
        // model reads.
        let first = for_call(&cwd);
        let mut repositories = first[..3].to_vec();
        repositories[1..].sort();
        let all = [
            cwd.join("vendor/lib/.git"),
            cwd.join("cache/sub/.git"),
            cwd.join("node_modules/dep/.git"),
        ];
        assert_eq!(repositories, all);
        assert_eq!(
            first[3..],
            [cwd.join("docs/.mcp.json"), cwd.join("docs/AGENTS.md")]
        );
        assert!(listed(&cwd) && listed(&real));

        // Hidden from a listing by a planted tag, or made later: kept, and not added.
        std::fs::write(real.join("vendor/CACHEDIR.TAG"), "Signature: x\n").unwrap();
        std::fs::create_dir_all(real.join("new/.git")).unwrap();
        let later = for_call(&real);
        assert_eq!(later.len(), 5);
        assert!(later.contains(&real.join("vendor/lib/.git")), "{later:?}");

        // Removed: not passed (no placeholder where a repository was); back: passed. A
        // file where a folder on the way was is removal too.
        std::fs::remove_dir_all(real.join("vendor/lib")).unwrap();
        std::fs::remove_dir_all(real.join("cache")).unwrap();
        std::fs::write(real.join("cache"), "a file").unwrap();
        std::fs::remove_dir_all(real.join("node_modules")).unwrap();
        assert_eq!(
            for_call(&cwd),
            [cwd.join("docs/.mcp.json"), cwd.join("docs/AGENTS.md")]
        );
        std::fs::create_dir_all(real.join("vendor/lib/.git")).unwrap();
        assert_eq!(for_call(&cwd).len(), 3);

        // A folder below is its own working directory: what was remembered under it
        // comes with it.
        let vendor = real.join("vendor");
        assert_eq!(for_call(&vendor), [vendor.join("lib/.git")]);
    }

    #[test]
    fn a_repository_named_through_a_link_is_kept_by_its_real_path() {
        let tmp = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
        std::fs::create_dir_all(work.join("store/lib.git")).unwrap();
        std::fs::create_dir_all(work.join("vendor/lib")).unwrap();
        // `home` leads into the working directory: the `.git` file's absolute path is
        // not spelled under it.
        let home = tmp.path().join("home");
        std::os::unix::fs::symlink(&work, &home).unwrap();
        let pointer = format!("gitdir: {}\n", home.join("store/lib.git").display());
        std::fs::write(work.join("vendor/lib/.git"), pointer).unwrap();
        let found = for_call(&work);
        assert!(found.contains(&work.join("store/lib.git")), "{found:?}");
    }

    #[test]
    fn folders_listed_for_another_working_directory_are_not_listed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
        std::fs::create_dir_all(work.join("zz/inner/.git")).unwrap();
        // Ten repositories beside it: a listing that looked into `zz` again would list it
        // before some of them (in readdir order) and run out there.
        let repositories: Vec<_> = (0..10)
            .map(|i| work.join(format!("vendor{i}/lib/.git")))
            .collect();
        for repository in &repositories {
            std::fs::create_dir_all(repository).unwrap();
        }
        // A session in `zz` first: its listing keeps `zz/inner/.git`.
        assert_eq!(for_call(&work.join("zz")), [work.join("zz/inner/.git")]);
        // Its commands fill `zz` (more folders than a listing reads), and `work` is
        // listed later: its listing does not look into `zz` again, and keeps both.
        for i in 0..25_000 {
            std::fs::create_dir(work.join(format!("zz/{i}"))).unwrap();
        }
        let mut found = for_call(&work);
        found.sort();
        let mut all = repositories;
        all.push(work.join("zz/inner/.git"));
        assert_eq!(found, all);
    }

    #[test]
    fn a_helper_of_its_own_gets_what_fits_on_a_command_line_repositories_first() {
        let tmp = tempfile::tempdir().unwrap();
        let work = std::fs::canonicalize(tmp.path()).unwrap().join("work");
        let deep = "a".repeat(250);
        for i in 0..700 {
            let dir = (0..14).fold(work.join(format!("a/d{i}")), |d, _| d.join(&deep));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("AGENTS.md"), "x\n").unwrap();
        }
        // Sorted after every `a/…`, and kept ahead of them.
        std::fs::create_dir_all(work.join("vendor/lib/.git")).unwrap();
        let given = super::for_arguments(&work);
        let bytes: usize = given.iter().map(|p| p.as_os_str().len() + 1).sum();
        assert!(bytes <= super::MAX_ARGUMENT_BYTES, "{bytes}");
        assert!(given.len() > 60, "{}", given.len());
        assert_eq!(given.first(), Some(&work.join("vendor/lib/.git")));
        // A call of the persistent helper gets them all.
        assert_eq!(for_call(&work).len(), 701);
    }

    #[test]
    fn a_full_memory_makes_room_from_what_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        // Workspaces that fill the memory, each removed after its listing.
        let per = 1_500;
        for w in 0..=(super::MAX_REMEMBERED / per) {
            let work = root.join(format!("w{w}"));
            std::fs::create_dir(&work).unwrap();
            for i in 0..per {
                std::fs::create_dir(work.join(i.to_string())).unwrap();
                std::fs::write(work.join(format!("{i}/AGENTS.md")), "").unwrap();
            }
            let _ = for_call(&work);
            std::fs::remove_dir_all(&work).unwrap();
        }
        let work = root.join("last");
        std::fs::create_dir_all(work.join("vendor/lib/.git")).unwrap();
        assert_eq!(for_call(&work), [work.join("vendor/lib/.git")]);
    }
}

//! The protected paths of `WorkspaceWrite` without taking the workspace away: a private
//! mount namespace (inside a user namespace of its own) where each protected path is
//! bound read-only over itself, so the rest of the working directory stays writable.
//!
//! Owns: entering the namespaces (the helper's main thread, before it starts any thread:
//! the kernel gives a user namespace only to a single-threaded process), listing what to
//! shield, the bind mounts, the placeholders of protected names that do not exist yet,
//! and removing those placeholders again.
//!
//! The helper enters a user namespace (mapping only the user's own ids) and a mount
//! namespace inside it; as root, a mount namespace alone.
//!
//! - Every protected path that exists — `.git`, `.foya`, `AGENTS.md`, `FOYA.md`,
//!   `.mcp.json` in the working directory and in every subdirectory (case-insensitive
//!   for the files), the hook scripts the runtime passes (`--protect`), what any of
//!   them points to, and what git uses beyond a `.git` (a `.git` file's repository, a
//!   `commondir`, the symlinks directly in a repository: [`git_dirs`]) — is bound
//!   read-only over itself: writes below it fail with `EROFS`, and it cannot be
//!   removed, renamed or replaced (`EBUSY`: it is a mount point).
//! - The listing below the working directory, and the walks and reads of what it found,
//!   are bounded ([`Budget`]: lookups, entries, paths kept): past them, with a note in the
//!   command's output, the rest is left to the approval gateway.
//! - Every symlink on the way to a protected path — the name itself (`AGENTS.md ->
//!   CLAUDE.md`, `.foya -> conf`), a hook script's folder (`tools -> scripts`), the links
//!   those lead through — is bound over itself, not followed: it still leads where it
//!   led, and it cannot be removed, renamed or replaced by one that leads elsewhere.
//! - Every directory on the way from the working directory to a nested protected path
//!   is bound over itself (writable): a mount point cannot be renamed, so `mv sub x`
//!   cannot take `sub/AGENTS.md` away to put another in its place.
//! - A protected name that does not exist (no `.foya`, no `AGENTS.md` in the working
//!   directory; a hook script's missing folder) gets a placeholder for the command's
//!   lifetime: an empty directory of mode [`PLACEHOLDER_MODE`], bound read-only, so
//!   nothing can be created at that name. Every sandbox using a placeholder holds a
//!   shared `flock` on it; whoever ends last (takes the lock exclusively) removes it:
//!   the helper when its command ends or when the runtime dies (`supervise`), the
//!   runtime after it killed a helper ([`sweep`]), else the next sandbox at that name.
//!
//! Landlock stays in force on top (the whole working directory writable, the rest of the
//! file system read-only, TCP off). The command runs without `CAP_SYS_ADMIN` (dropped from
//! its bounding set), and Landlock denies every mount operation to it, so it cannot
//! undo the mounts.
//!
//! Must not: leave a placeholder behind that no sandbox uses, remove anything that is not
//! an empty placeholder, or let the command start when a mount it needs failed.

use super::outside::{KeptFlags, remount_read_only};
use crate::protected::{INSTRUCTION_FILES, PROTECTED_DIRS};
use nix::fcntl::{Flock, FlockArg};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, unshare};
use rustix::fs::CWD;
use rustix::mount::{MoveMountFlags, OpenTreeFlags, move_mount, open_tree};
use rustix::process::{getgid, getuid};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Component, Path, PathBuf};

/// When set (not empty) in the helper's environment, the helper behaves as if the kernel
/// refused the namespaces (for tests of the fallback, and for a person who wants it).
pub(crate) const NO_NAMESPACES_ENV: &str = "FOYA_SANDBOX_NO_NAMESPACES";

/// Mode of a placeholder: a directory, sticky, read and search for its owner only. A
/// person's own file or directory practically never has it; only an empty directory of
/// this mode is ever removed.
pub const PLACEHOLDER_MODE: u32 = 0o1500;

/// Most directories listed while looking for nested protected paths.
const MAX_DIRS: usize = 20_000;

/// Most entries read while looking for nested protected paths, and most files looked
/// at for other hard links.
const MAX_ENTRIES: usize = 200_000;

/// Most nested protected paths kept (each up to 4 KiB; past [`MAX_MOUNTS`] they would
/// not be mounted anyway).
const MAX_FOUND: usize = 2 * MAX_MOUNTS;

/// Most mounts for the protected paths themselves (each a mount the kernel counts
/// against `fs.mount-max`, and time at every call): past it, nested ones are left to the
/// approval gateway, as past [`MAX_DIRS`].
const MAX_MOUNTS: usize = 4_096;

/// Directories never looked into for nested protected paths: installed dependencies, and
/// any directory holding a `CACHEDIR.TAG` (cargo's `target/`, caches).
const SKIPPED_DIRS: &[&str] = &["node_modules"];
const CACHE_TAG: &str = "CACHEDIR.TAG";

/// Most path components looked up for the nested protected paths, all walks together
/// (a walk looks up every component of a path again at each step: a path 2 000 folders
/// deep costs 2 million): past it the rest are left to the approval gateway.
const MAX_LOOKUPS: usize = 2_000_000;

/// Most symlinks followed on the way to one protected path (the kernel's own bound).
const MAX_LINKS: usize = 40;

/// Tries at claiming a placeholder while other sandboxes create and remove it.
const CLAIM_ATTEMPTS: usize = 16;

/// The mounts are in place; what must be undone when the command ends.
#[derive(Debug, Default)]
pub(crate) struct Shield {
    /// Placeholders this sandbox uses, with its shared lock on each.
    held: Vec<(PathBuf, Flock<File>)>,
    /// A line for the command's output when the listing stopped early.
    pub note: Option<String>,
}

/// What `enter` achieved.
#[derive(Debug)]
pub(crate) enum Entered {
    /// The protected paths are read-only for this process and what it starts.
    Shielded(Shield),
    /// The kernel gives no namespace here (why): nothing changed; the caller falls back.
    Unavailable(String),
}

/// Whether the kernel gives this process the namespaces [`enter`] needs (the helper's
/// `__sandbox-probe`: it unshares them and exits, changing nothing on disk).
///
/// # Errors
/// Why not (as [`Entered::Unavailable`] would say).
pub(crate) fn probe() -> Result<(), String> {
    if std::env::var_os(NO_NAMESPACES_ENV).is_some_and(|v| !v.is_empty()) {
        return Err(format!(
            "namespaces are switched off ({NO_NAMESPACES_ENV} is set)"
        ));
    }
    let flags = if getuid().is_root() {
        CloneFlags::CLONE_NEWNS
    } else {
        CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS
    };
    unshare(flags).map_err(|e| format!("the kernel refused a namespace ({e})"))
}

/// Enters a user and mount namespace (as root, a mount namespace alone) and shields the protected paths of `cwd` (its protected names, and `protect`,
/// absolute paths inside it). Call it while the process has a single thread.
/// `switched_off`: [`NO_NAMESPACES_ENV`] is set for the command (then nothing changes).
///
/// # Errors
/// A message when the namespaces were entered but a mount failed (the command must not
/// run); what was claimed is released first.
pub(crate) fn enter(
    cwd: &Path,
    protect: &[PathBuf],
    switched_off: bool,
) -> Result<Entered, String> {
    if switched_off {
        return Ok(Entered::Unavailable(format!(
            "namespaces are switched off ({NO_NAMESPACES_ENV} is set)"
        )));
    }
    let (uid, gid) = (getuid(), getgid());
    if uid.is_root() {
        // Root may make a mount namespace alone (and from inside a user namespace it could
        // map only itself, losing its rights over other users' files).
        if let Err(e) = unshare(CloneFlags::CLONE_NEWNS) {
            return Ok(Entered::Unavailable(format!(
                "the kernel refused a mount namespace ({e})"
            )));
        }
    } else {
        if let Err(e) = unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS) {
            return Ok(Entered::Unavailable(format!(
                "the kernel refused a user namespace ({e}; user namespaces may be disabled: \
                 see /proc/sys/user/max_user_namespaces)"
            )));
        }
        map_ids(uid.as_raw(), gid.as_raw())?;
    }
    // Nothing mounted here may reach the runtime's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("cannot make the sandbox's mounts private: {e}"))?;
    let plan = plan(cwd, protect);
    let mut shield = Shield {
        held: Vec::new(),
        note: plan.note.clone(),
    };
    match shield_all(&plan, &mut shield) {
        Ok(()) => Ok(Entered::Shielded(shield)),
        Err(e) => {
            shield.release();
            Err(e)
        }
    }
}

fn shield_all(plan: &Plan, shield: &mut Shield) -> Result<(), String> {
    for step in &plan.steps {
        match step {
            Step::Pin(dir) => bind(dir, false)?,
            Step::ReadOnly(path) => bind(path, true)?,
            Step::Link(link) => bind_link(link)?,
            Step::Placeholder(path) => match claim(path) {
                Ok(Some(lock)) => {
                    shield.held.push((path.clone(), lock));
                    bind(path, true)?;
                }
                // A real entry appeared at that name meanwhile: shield it as it is.
                Ok(None) => bind(path, true)?,
                // A nested name a command may create anyway (see the module docs): a
                // placeholder that cannot be made there (a folder not the user's, a full
                // disk) is left, or one planted link would stop every later call.
                Err(e) if plan.optional.contains(path) => {
                    shield
                        .note
                        .get_or_insert(format!("{e}; the approval gateway alone protects it"));
                }
                Err(e) => return Err(e),
            },
        }
    }
    Ok(())
}

/// Maps the caller's own user and group (not root) into the new user namespace.
pub(super) fn map_ids(uid: u32, gid: u32) -> Result<(), String> {
    let write = |file: &str, text: &str| {
        std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny\n")?;
    write("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))
}

/// Binds `path` over itself; read-only when asked, keeping the bind's other flags
/// (`outside::remount_read_only`, as the command's seal does: the kernel refuses to clear
/// the ones it locks in a user namespace, and clearing `nosymfollow` would loosen it).
fn bind(path: &Path, read_only: bool) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("cannot shield {}: {e}", path.display());
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| failed(&e))?;
    if read_only && let Some(kept) = KeptFlags::of(path).map_err(|e| failed(&e))? {
        remount_read_only(path, kept).map_err(|e| failed(&e))?;
    }
    Ok(())
}

/// Binds the symlink `link` over itself, neither followed: a mount point that still
/// leads where the link did.
fn bind_link(link: &Path) -> Result<(), String> {
    let failed = |e: rustix::io::Errno| format!("cannot shield {}: {e}", link.display());
    let flags = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_SYMLINK_NOFOLLOW;
    let tree = open_tree(CWD, link, flags).map_err(failed)?;
    // Without `MOVE_MOUNT_T_SYMLINKS` the target is the link itself.
    move_mount(
        &tree,
        "",
        CWD,
        link,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(failed)
}

/// Whether `meta` (not followed) is a placeholder: its mode, and `S_ISGID` when it was
/// made in a set-GID directory (which passes that bit on to a directory made in it).
fn is_placeholder(meta: &std::fs::Metadata) -> bool {
    meta.is_dir() && meta.mode() & 0o7777 & !0o2000 == PLACEHOLDER_MODE
}

fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Makes (or joins) the placeholder at `path`: `Some(lock)` holds it shared; `None` when a
/// real entry is there instead.
fn claim(path: &Path) -> Result<Option<Flock<File>>, String> {
    for _ in 0..CLAIM_ATTEMPTS {
        match std::fs::DirBuilder::new()
            .mode(PLACEHOLDER_MODE)
            .create(path)
        {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "cannot keep {} from being created (placeholder: {e})",
                    path.display()
                ));
            }
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue; // removed by another sandbox meanwhile
        };
        if !is_placeholder(&meta) {
            return Ok(None);
        }
        let Ok(dir) = File::open(path) else { continue };
        // Blocks only while another sandbox removes it.
        let Ok(lock) = Flock::lock(dir, FlockArg::LockShared) else {
            continue;
        };
        let still = std::fs::symlink_metadata(path).is_ok_and(|now| same_file(&now, &meta));
        if still && lock.metadata().is_ok_and(|held| same_file(&held, &meta)) {
            return Ok(Some(lock));
        }
    }
    Err(format!(
        "cannot keep {} from being created: its placeholder keeps changing",
        path.display()
    ))
}

/// Removes the placeholder at `path` that `lock` holds when no other sandbox uses it.
fn remove_if_unused(path: &Path, lock: &Flock<File>) {
    if lock.relock(FlockArg::LockExclusiveNonblock).is_err() {
        return;
    }
    let ours = std::fs::symlink_metadata(path)
        .ok()
        .zip(lock.metadata().ok())
        .is_some_and(|(now, held)| same_file(&now, &held) && is_placeholder(&now));
    if ours {
        // Fails (and keeps it) when something was put inside: only empty ones go.
        let _ = std::fs::remove_dir(path);
    }
}

impl Shield {
    /// Undoes the placeholders (call once the command and everything it started ended):
    /// each is unmounted here and removed when no other sandbox uses it.
    pub(crate) fn release(self) {
        for (path, lock) in self.held.iter().rev() {
            let _ = umount2(path, MntFlags::MNT_DETACH);
            remove_if_unused(path, lock);
        }
    }
}

/// Removes the placeholders no sandbox uses any more among the protected names of `cwd`,
/// the paths `protect` and their folders inside `cwd`: the runtime calls it after a call
/// whose helper it killed (a killed helper cannot remove its own). A few `lstat`s when
/// there are none.
pub(crate) fn sweep(cwd: &Path, protect: &[PathBuf]) {
    let mut candidates: Vec<PathBuf> = top_level(cwd).collect();
    for path in protect.iter().filter(|p| p.starts_with(cwd)) {
        candidates.extend(
            path.ancestors()
                .take_while(|a| *a != cwd && a.starts_with(cwd))
                .map(Path::to_path_buf),
        );
    }
    candidates.sort();
    candidates.dedup();
    for path in candidates {
        let placeholder = std::fs::symlink_metadata(&path).is_ok_and(|m| is_placeholder(&m));
        if !placeholder {
            continue;
        }
        if let Ok(dir) = File::open(&path)
            && let Ok(lock) = Flock::lock(dir, FlockArg::LockExclusiveNonblock)
        {
            remove_if_unused(&path, &lock);
        }
    }
}

/// The protected names directly in `cwd`, whether or not they exist.
fn top_level(cwd: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    PROTECTED_DIRS
        .iter()
        .chain(INSTRUCTION_FILES)
        .map(move |name| cwd.join(name))
}

/// Whether a file name is protected wherever it is.
fn protected_name(name: &OsStr) -> bool {
    PROTECTED_DIRS.iter().any(|d| name == *d)
        || INSTRUCTION_FILES
            .iter()
            .any(|f| name.to_string_lossy().eq_ignore_ascii_case(f))
}

/// One mount to make.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Bind a directory over itself (writable): it cannot be renamed or removed.
    Pin(PathBuf),
    /// Bind an existing path over itself, read-only.
    ReadOnly(PathBuf),
    /// Claim a placeholder at a missing name and bind it read-only.
    Placeholder(PathBuf),
    /// Bind a symlink over itself, not followed.
    Link(PathBuf),
}

impl Step {
    fn path(&self) -> &Path {
        match self {
            Self::Pin(p) | Self::ReadOnly(p) | Self::Placeholder(p) | Self::Link(p) => p,
        }
    }
}

#[derive(Debug, Default)]
struct Plan {
    /// Outer first: a directory is pinned before what is inside it is shielded.
    steps: Vec<Step>,
    note: Option<String>,
    /// Placeholders only nested paths asked for: left when they cannot be made.
    optional: HashSet<PathBuf>,
}

/// What to mount for `cwd` (see the module docs).
fn plan(cwd: &Path, protect: &[PathBuf]) -> Plan {
    plan_within(cwd, protect, Budget::default())
}

/// What the listing and the nested paths may cost a call.
#[derive(Debug, Clone, Copy)]
struct Budget {
    /// Path components looked up: see [`MAX_LOOKUPS`].
    lookups: usize,
    /// Entries read: see [`MAX_ENTRIES`].
    entries: usize,
    /// Nested protected paths kept: see [`MAX_FOUND`].
    found: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            lookups: MAX_LOOKUPS,
            entries: MAX_ENTRIES,
            found: MAX_FOUND,
        }
    }
}

/// [`plan`] within `budget`.
fn plan_within(cwd: &Path, protect: &[PathBuf], budget: Budget) -> Plan {
    let mut lookups = budget.lookups;
    let lexical = cwd;
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let mut wanted: Vec<PathBuf> = top_level(&cwd).collect();
    wanted.extend(protect.iter().filter_map(|p| {
        let rel = p.strip_prefix(lexical).ok()?;
        (!rel.as_os_str().is_empty()).then(|| cwd.join(rel))
    }));
    // The repository a top-level `.git` file names is held whatever it costs, as the
    // `.git` itself.
    wanted.extend(git_dirs(&cwd, &cwd.join(".git"), None, None).unwrap_or_default());
    let required = wanted.len();
    // The listing and the nested paths' walks share the budget of lookups.
    let mut note = nested(
        &cwd,
        &mut wanted,
        &mut lookups,
        budget,
        Listing::SkipCaches,
        &mut 0,
    );
    let mut shielded: Vec<Step> = Vec::new();
    // Placeholders asked for by the working directory's own names and the hook
    // scripts, and by the nested paths.
    let mut required_holds: HashSet<PathBuf> = HashSet::new();
    let mut nested_holds: HashSet<PathBuf> = HashSet::new();
    // The folders to pin, counted as they come (each is a mount too).
    let mut way: HashSet<PathBuf> = HashSet::new();
    // The working directory's own names and the hook scripts come first.
    for (i, path) in wanted.into_iter().enumerate() {
        if shielded.len() + way.len() >= MAX_MOUNTS {
            add_note(
                &mut note,
                format!(
                    "the working directory has more protected paths and links to them than \
                 {MAX_MOUNTS} mounts; the others are protected by the approval gateway only"
                ),
            );
            break;
        }
        let from = shielded.len();
        if i < required {
            resolve(&cwd, &path, &mut shielded, None);
        } else if !resolve(&cwd, &path, &mut shielded, Some(&mut lookups)) {
            // Unless the listing already ran out and said so.
            note.get_or_insert_with(|| {
                format!(
                    "the working directory's nested protected paths take more than \
                     {MAX_LOOKUPS} lookups; the others are protected by the approval \
                     gateway only"
                )
            });
            break;
        }
        for step in &shielded[from..] {
            if let Step::Placeholder(p) = step {
                let holds = if i < required {
                    &mut required_holds
                } else {
                    &mut nested_holds
                };
                holds.insert(p.clone());
            }
        }
        way.extend(
            shielded[from..]
                .iter()
                .flat_map(|s| on_the_way(&cwd, s.path()).map(Path::to_path_buf)),
        );
    }
    shielded.sort_by(|a, b| a.path().cmp(b.path()));
    shielded.dedup_by(|b, a| a.path() == b.path());
    // What lies inside another shielded path is covered by it (a path through a link is
    // not inside the link: it is where the link leads). Paths sort by component, so what
    // lies inside a path follows it at once.
    let mut cover: Option<PathBuf> = None;
    let shielded: Vec<Step> = shielded
        .into_iter()
        .filter(|s| {
            if cover.as_ref().is_some_and(|c| s.path().starts_with(c)) {
                return false;
            }
            if !matches!(s, Step::Link(_)) {
                cover = Some(s.path().to_path_buf());
            }
            true
        })
        .collect();
    let mut pins: Vec<PathBuf> = shielded
        .iter()
        .flat_map(|s| on_the_way(&cwd, s.path()).map(Path::to_path_buf))
        .collect();
    pins.sort();
    pins.dedup();
    let room = MAX_MOUNTS.saturating_sub(pins.len() + shielded.len());
    let linked = linked_files(&cwd, &pins, &shielded, (room, budget.entries), &mut note);
    let mut steps: Vec<Step> = pins.into_iter().map(Step::Pin).collect();
    steps.extend(shielded);
    steps.extend(linked);
    steps.sort_by(|a, b| {
        let depth = |s: &Step| s.path().components().count();
        depth(a).cmp(&depth(b)).then_with(|| a.path().cmp(b.path()))
    });
    let optional = nested_holds.difference(&required_holds).cloned().collect();
    Plan {
        steps,
        note,
        optional,
    }
}

/// Adds `line` to the command's note (after what it already says).
fn add_note(note: &mut Option<String>, line: String) {
    *note = Some(match note.take() {
        Some(earlier) => format!("{earlier}; {line}"),
        None => line,
    });
}

/// The folders between `cwd` and `path` (inside it), `path`'s parent first: each is
/// pinned.
fn on_the_way<'a>(cwd: &'a Path, path: &'a Path) -> impl Iterator<Item = &'a Path> {
    path.ancestors()
        .skip(1)
        .take_while(move |a| *a != cwd && a.starts_with(cwd))
}

/// The regular files with other hard links (one of them may be a file outside the
/// working directory, or a protected file, under another name) directly in `cwd` and in
/// the pinned directories, which stay read-only as they did under Landlock alone. Below
/// them every file is writable: looking at each file's link count would cost a `stat`
/// per file on every call.
///
/// `shielded`: sorted by path. At most `room` (the mounts left) and `entries_read`
/// entries looked at, else a `note`.
fn linked_files(
    cwd: &Path,
    pins: &[PathBuf],
    shielded: &[Step],
    (room, entries_read): (usize, usize),
    note: &mut Option<String>,
) -> Vec<Step> {
    let mut out = Vec::new();
    let mut looked_at = 0;
    for dir in std::iter::once(cwd).chain(pins.iter().map(PathBuf::as_path)) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if looked_at == entries_read {
                add_note(
                    note,
                    format!(
                        "the working directory has more than {entries_read} entries where \
                         files with other hard links are looked for; past them such files \
                         are writable"
                    ),
                );
                return out;
            }
            looked_at += 1;
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            let linked = entry.metadata().is_ok_and(|m| m.nlink() > 1);
            if linked && shielded.binary_search_by(|s| s.path().cmp(&path)).is_err() {
                if out.len() == room {
                    add_note(
                        note,
                        format!(
                            "the working directory has more files with other hard links \
                             than {MAX_MOUNTS} mounts allow; past them they are writable"
                        ),
                    );
                    return out;
                }
                out.push(Step::ReadOnly(path));
            }
        }
    }
    out
}

/// The steps that shield `path` (inside `cwd`), from a [`walk`] to it: each symlink
/// inside `cwd` on the way bound as a link; where it ends read-only when it exists (or
/// joined when it is another sandbox's placeholder), a placeholder at its first missing
/// component when it does not; nothing more where it leads outside `cwd` (Landlock keeps
/// that read-only) or to `cwd` itself.
///
/// `lookups`: what is left of a budget of path components looked up (the kernel looks
/// up every component of a path again at each `lstat`); `false` when it ran out.
fn resolve(cwd: &Path, path: &Path, out: &mut Vec<Step>, lookups: Option<&mut usize>) -> bool {
    let walk = walk(cwd, path, lookups);
    if walk.end == End::OutOfLookups {
        return false;
    }
    out.extend(walk.links.into_iter().map(Step::Link));
    let inside = |p: &Path| p.starts_with(cwd) && p != cwd;
    match walk.end {
        End::Exists(real) if inside(&real) => {
            // Another sandbox's placeholder: join it (a shared lock), else that sandbox,
            // ending first, removes it under this one's command, which could then create
            // the name.
            let placeholder = std::fs::symlink_metadata(&real).is_ok_and(|m| is_placeholder(&m));
            out.push(if placeholder {
                Step::Placeholder(real)
            } else {
                Step::ReadOnly(real)
            });
        }
        End::Missing(first) if inside(&first) => match first.parent() {
            Some(parent) if std::fs::symlink_metadata(parent).is_ok_and(|m| m.is_dir()) => {
                out.push(Step::Placeholder(first));
            }
            // A file (a fifo…) where a folder should be: it stays, so that no folder can
            // take its place.
            Some(parent) if inside(parent) => out.push(Step::ReadOnly(parent.to_path_buf())),
            _ => {}
        },
        End::Exists(_) | End::Missing(_) | End::Unresolved | End::OutOfLookups => {}
    }
    true
}

/// Where a [`walk`] ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// At this real path (no symlink in it).
    Exists(PathBuf),
    /// At this first missing component (its parent real).
    Missing(PathBuf),
    /// A link past the [`MAX_LINKS`] followed (a loop, or a chain the kernel would not
    /// follow either), or a path the kernel does not look up (too long, a folder that
    /// cannot be searched): the links met are bound, the rest left.
    Unresolved,
    /// The budget of lookups ran out.
    OutOfLookups,
}

/// The symlinks inside `cwd` a path goes through, and its end.
#[derive(Debug)]
struct Walk {
    links: Vec<PathBuf>,
    end: End,
}

/// Follows `path` (absolute) component by component as the kernel does: a symlink's
/// target read from the folder the link really is in, each `..` from where the walk
/// really is. Collects every symlink it meets inside `cwd` (the link past the last one
/// followed too: replaced by a file, it would end a chain the kernel then follows).
fn walk(cwd: &Path, path: &Path, mut lookups: Option<&mut usize>) -> Walk {
    let mut links: Vec<PathBuf> = Vec::new();
    let mut real = PathBuf::from("/");
    let mut rest = split(path);
    let mut followed = 0;
    while let Some(part) = rest.pop_front() {
        let name = match part {
            Part::Up => {
                real.pop();
                continue;
            }
            Part::Name(name) => name,
        };
        let next = real.join(&name);
        if let Some(left) = lookups.as_deref_mut() {
            let cost = next.components().count();
            if *left < cost {
                return Walk {
                    links,
                    end: End::OutOfLookups,
                };
            }
            *left -= cost;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.is_symlink() => {
                if next.starts_with(cwd) && !links.contains(&next) {
                    links.push(next.clone());
                }
                let target = match std::fs::read_link(&next) {
                    Ok(target) if followed < MAX_LINKS => target,
                    // Gone meanwhile, or one link too many: what was met is bound.
                    _ => {
                        return Walk {
                            links,
                            end: End::Unresolved,
                        };
                    }
                };
                followed += 1;
                if target.is_absolute() {
                    real = PathBuf::from("/");
                }
                for part in split(&target).into_iter().rev() {
                    rest.push_front(part);
                }
            }
            Ok(_) => real = next,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Walk {
                    links,
                    end: End::Missing(next),
                };
            }
            // Longer than the kernel looks up, a folder that cannot be searched: the
            // command cannot reach it by this path either.
            Err(_) => {
                return Walk {
                    links,
                    end: End::Unresolved,
                };
            }
        }
    }
    Walk {
        links,
        end: End::Exists(real),
    }
}

/// A component of a path being walked.
#[derive(Debug)]
enum Part {
    Name(std::ffi::OsString),
    Up,
}

/// `path`'s names and `..`s (`.` and the root dropped).
fn split(path: &Path) -> std::collections::VecDeque<Part> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Part::Name(name.to_os_string())),
            Component::ParentDir => Some(Part::Up),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// The protected paths that exist in `cwd` and below (see `nested`): what Landlock
/// alone keeps read-only when there is no namespace.
#[must_use]
#[cfg_attr(not(feature = "landlock"), allow(dead_code))] // used under Landlock only
pub(crate) fn found_below(cwd: &Path) -> Vec<PathBuf> {
    found_within(cwd, Listing::SkipCaches).0
}

/// What a working directory held before anything of the model's wrote there
/// (`remembered`): [`found_below`] without the folders in `skip` (listed already, for
/// another working directory), then — with what is left of the budget — the
/// repositories in the cache folders but a tagged `target` (a tag can come with a cloned
/// repository or be planted in an earlier run, over the user's repository). The paths,
/// and how many of them come first (those found outside the cache folders).
#[must_use]
pub(crate) fn found_below_all(cwd: &Path, skip: &HashSet<PathBuf>) -> (Vec<PathBuf>, usize) {
    found_within(cwd, Listing::CachesLast { skip })
}

/// The protected paths `listing` finds in `cwd` and below, and how many come before
/// those of the cache folders.
fn found_within(cwd: &Path, listing: Listing<'_>) -> (Vec<PathBuf>, usize) {
    let mut out = git_dirs(cwd, &cwd.join(".git"), None, None).unwrap_or_default();
    let mut lookups = MAX_LOOKUPS;
    let mut first = usize::MAX;
    let _ = nested(
        cwd,
        &mut out,
        &mut lookups,
        Budget::default(),
        listing,
        &mut first,
    );
    let first = first.min(out.len());
    (out, first)
}

/// Whether a listing looks into the folders a call's listing skips.
#[derive(Debug, Clone, Copy)]
enum Listing<'a> {
    /// Never (each call's: cheap, and what a command tagged is skipped).
    SkipCaches,
    /// After everything else, with what is left of the budget, for their repositories
    /// only (`node_modules` for its `.git` files only), and never into a tagged `target`
    /// (what is protected there — `node_modules/pkg/AGENTS.md`, a git dependency's
    /// repository, one a build script cloned into `target/` — would hold the folder:
    /// `cargo clean` and `npm ci` failed); never into `skip`.
    CachesLast { skip: &'a HashSet<PathBuf> },
}

/// Largest `.git` file git reads (its `read_gitfile`'s bound); a larger one names no
/// repository (nor, here, a larger `commondir`, which git would read).
const MAX_GIT_FILE: u64 = 1 << 20;

/// What a `.git` in `cwd` makes git use beyond itself, to be protected as it is: where a
/// `.git` *file* (a worktree's, a submodule's, `git init --separate-git-dir`'s) says the
/// repository is (`gitdir: `), that repository's `commondir` (a `.git` directory's too),
/// and every symlink directly in either (`config -> ../../.repo/…/config`, as
/// git-new-workdir makes them), each read as git reads it. Each file is reached by a
/// [`walk`] and opened with no symlink left to follow, so every lookup is counted.
///
/// `lookups` (as in [`resolve`]) and `entries` (the repositories' entries read, every
/// one: a symlink past the first 64 was left, and git ran what a command wrote through
/// it): what is left of the call's [`Budget`]; `None` when either ran out.
fn git_dirs(
    cwd: &Path,
    dot_git: &Path,
    mut lookups: Option<&mut usize>,
    mut entries: Option<&mut usize>,
) -> Option<Vec<PathBuf>> {
    let mut out = Vec::new();
    let git_dir = match read_pointer(cwd, dot_git, b"gitdir: ", lookups.as_deref_mut())? {
        Some(git_dir) => {
            out.push(git_dir.clone());
            git_dir
        }
        None => dot_git.to_path_buf(),
    };
    let common = read_pointer(cwd, &git_dir.join("commondir"), b"", lookups.as_deref_mut())?;
    out.extend(common.clone());
    for repository in std::iter::once(git_dir).chain(common) {
        if let Some(left) = lookups.as_deref_mut() {
            *left = left.checked_sub(repository.components().count())?;
        }
        let Ok(listing) = std::fs::read_dir(&repository) else {
            continue;
        };
        for entry in listing.flatten() {
            if let Some(left) = entries.as_deref_mut() {
                *left = left.checked_sub(1)?;
            }
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                out.push(entry.path());
            }
        }
    }
    Some(out)
}

/// Longest path the kernel looks up (`PATH_MAX` less its NUL): a longer pointer names
/// nothing git can use.
const MAX_POINTER: usize = 4_095;

/// The path a git pointer file names (`.git`'s `gitdir: …`, `commondir`), read as git
/// reads it: through links, a regular file of at most [`MAX_GIT_FILE`] bytes, trailing
/// `\n` and `\r` dropped, then `prefix`, then a C string (up to a NUL), relative to the
/// file's folder. Only its first bytes are read, as many as a usable path takes: past
/// them a path is longer than [`MAX_POINTER`] (unusable: left), unless only newlines
/// follow (dropped as git drops them). The file must be a regular one before it is
/// opened (a device's open may act), and it is opened with no symlink to follow (one
/// put there since the walk would not be counted).
/// `Some(None)`: none; `None`: `lookups` ran out.
fn read_pointer(
    cwd: &Path,
    file: &Path,
    prefix: &[u8],
    mut lookups: Option<&mut usize>,
) -> Option<Option<PathBuf>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, fstat, openat2};
    use std::io::Read as _;
    use std::os::unix::ffi::OsStrExt as _;
    let real = match walk(cwd, file, lookups.as_deref_mut()).end {
        End::OutOfLookups => return None,
        End::Exists(real) => real,
        End::Missing(_) | End::Unresolved => return Some(None),
    };
    if let Some(left) = lookups {
        // The `lstat` and the `open`.
        *left = left.checked_sub(2 * real.components().count())?;
    }
    if !std::fs::symlink_metadata(&real).is_ok_and(|m| m.is_file()) {
        return Some(None);
    }
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = match openat2(CWD, &real, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS) {
        Ok(fd) => fd,
        // A kernel before 5.6: the last component at least is not followed.
        Err(rustix::io::Errno::NOSYS) => {
            match rustix::fs::openat(CWD, &real, flags | OFlags::NOFOLLOW, Mode::empty()) {
                Ok(fd) => fd,
                Err(_) => return Some(None),
            }
        }
        Err(_) => return Some(None),
    };
    let size = match fstat(&fd) {
        Ok(stat) if rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file() => {
            u64::try_from(stat.st_size).unwrap_or(0)
        }
        _ => return Some(None),
    };
    if size == 0 || size > MAX_GIT_FILE {
        return Some(None);
    }
    let head = u64::try_from(prefix.len() + MAX_POINTER + 1).unwrap_or(u64::MAX);
    let mut bytes = Vec::new();
    if File::from(fd)
        .take(size.min(head))
        .read_to_end(&mut bytes)
        .is_err()
    {
        return Some(None);
    }
    let Some(value) = bytes.strip_prefix(prefix) else {
        return Some(None);
    };
    let value = match value.iter().position(|b| *b == 0) {
        Some(nul) => &value[..nul],
        None => {
            let end = value
                .iter()
                .rposition(|b| *b != b'\n' && *b != b'\r')
                .map_or(0, |i| i + 1);
            &value[..end]
        }
    };
    if value.is_empty() || value.len() > MAX_POINTER {
        return Some(None);
    }
    Some(Some(
        file.parent().unwrap_or(file).join(OsStr::from_bytes(value)),
    ))
}

/// Adds the protected paths found below `cwd` to `out` (not following symlinks, not
/// looking inside protected directories, [`SKIPPED_DIRS`] or cache directories), with
/// the git directories their `.git` files point to; a note when it stopped after
/// [`MAX_DIRS`] directories, or when `lookups` (each listing looks up every component of
/// the folder's path: a tree 2 000 folders deep cost seconds per call) ran out.
fn nested(
    cwd: &Path,
    out: &mut Vec<PathBuf>,
    lookups: &mut usize,
    budget: Budget,
    caches: Listing<'_>,
    late_start: &mut usize,
) -> Option<String> {
    let most = out.len() + budget.found;
    let too_many = || {
        format!(
            "the working directory has more than {} nested protected paths; the others \
             are protected by the approval gateway only",
            budget.found
        )
    };
    let out_of_budget = || {
        format!(
            "listing the working directory's folders and reading their .git files took \
             more than {MAX_LOOKUPS} lookups or {} entries; protected files below the \
             folders listed are protected by the approval gateway only",
            budget.entries
        )
    };
    let mut stack = vec![cwd.to_path_buf()];
    // Cache folders and [`SKIPPED_DIRS`], listed after the rest ([`Listing::CachesLast`]).
    let mut later: Vec<PathBuf> = Vec::new();
    // Folders left unlisted: more than [`MAX_DIRS`] (a path is up to 4 KiB: held for
    // each folder found, 200 000 of them took gigabytes).
    let mut unlisted = false;
    let mut listed = 0;
    // Entries still to read (a folder of a million files took seconds per call).
    let mut entries_left = budget.entries;
    // The repositories the `.git` files named, each walked once.
    let mut repositories: HashSet<PathBuf> = HashSet::new();
    // Listing the cache folders (what is found there is kept from `late_start` on).
    let mut late = false;
    loop {
        let dir = match stack.pop() {
            Some(dir) => dir,
            None if !later.is_empty() => {
                if !late {
                    late = true;
                    *late_start = out.len();
                }
                stack = std::mem::take(&mut later);
                continue;
            }
            None => break,
        };
        let Some(left) = lookups.checked_sub(dir.components().count()) else {
            return Some(out_of_budget());
        };
        *lookups = left;
        listed += 1;
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut listing = listing.flatten();
        let entries: Vec<std::fs::DirEntry> = listing.by_ref().take(entries_left).collect();
        entries_left -= entries.len();
        // Whether an entry was left unread (not when the budget ends with the folder).
        let cut = entries_left == 0 && listing.next().is_some();
        let cache = entries.iter().any(|e| e.file_name() == CACHE_TAG);
        for entry in entries {
            let name = entry.file_name();
            if protected_name(&name) {
                // In the cache folders, repositories only (their other protected names,
                // `.cache/AGENTS.md`, are not what a tag would be planted to hide); in
                // `node_modules`, `.git` files only (a submodule's pointer; a git
                // dependency's repository would hold the folder `npm ci` removes).
                let in_node_modules = || {
                    dir.strip_prefix(cwd)
                        .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == "node_modules"))
                };
                if late
                    && (name != ".git"
                        || (in_node_modules() && !entry.file_type().is_ok_and(|t| t.is_file())))
                {
                    continue;
                }
                let path = entry.path();
                if name == ".git" {
                    let Some(dirs) = git_dirs(cwd, &path, Some(lookups), Some(&mut entries_left))
                    else {
                        return Some(out_of_budget());
                    };
                    for dir in dirs {
                        if out.len() == most {
                            return Some(too_many());
                        }
                        if repositories.insert(dir.clone()) {
                            out.push(dir);
                        }
                    }
                }
                if out.len() == most {
                    return Some(too_many());
                }
                out.push(path);
                continue;
            }
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let skipped = cache || SKIPPED_DIRS.iter().any(|s| name == *s);
            let path = entry.path();
            match caches {
                Listing::SkipCaches if skipped => continue,
                Listing::CachesLast { skip } if skip.contains(&path) => continue,
                // What a build makes and removes as a whole (`cargo clean`): a repository
                // a build script cloned there (with its submodules' `.git` files) would
                // hold it.
                Listing::CachesLast { .. }
                    if cache && dir.file_name().is_some_and(|d| d == "target") =>
                {
                    continue;
                }
                _ => {}
            }
            if listed + stack.len() + later.len() < MAX_DIRS {
                if skipped { &mut later } else { &mut stack }.push(path);
            } else {
                unlisted = true;
            }
        }
        if cut || (entries_left == 0 && !(stack.is_empty() && later.is_empty())) {
            return Some(format!(
                "the working directory has more than {} files and folders; protected \
                 files past them are protected by the approval gateway only",
                budget.entries
            ));
        }
    }
    unlisted.then(|| {
        format!(
            "the working directory has more than {MAX_DIRS} folders; protected files \
             below the first {MAX_DIRS} are protected by the approval gateway only"
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{PLACEHOLDER_MODE, Step, plan, sweep};
    use std::os::unix::fs::DirBuilderExt as _;
    use std::path::{Path, PathBuf};

    /// An empty working directory (removed when the guard drops), its real path, with
    /// `dirs` made in it.
    fn workspace(dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(tmp.path()).unwrap();
        for dir in dirs {
            std::fs::create_dir_all(w.join(dir)).unwrap();
        }
        (tmp, w)
    }

    /// The steps of `w`'s plan as [`described`] writes them.
    fn described_plan(w: &Path, protect: &[PathBuf]) -> Vec<String> {
        plan(w, protect)
            .steps
            .iter()
            .map(|s| described(w, s))
            .collect()
    }

    /// A step as the tests' expectations write it: what it does, then its path in `w`.
    fn described(w: &Path, step: &Step) -> String {
        let rel = step.path().strip_prefix(w).unwrap().display();
        match step {
            Step::Pin(_) => format!("pin {rel}"),
            Step::ReadOnly(_) => format!("ro {rel}"),
            Step::Placeholder(_) => format!("hold {rel}"),
            Step::Link(_) => format!("link {rel}"),
        }
    }

    #[test]
    fn the_plan_pins_the_way_shields_what_exists_and_holds_missing_names() {
        let (_tmp, w) = workspace(&[
            ".git/hooks",
            "sub/deep",
            "target/debug",
            "node_modules/x",
            "hooks",
        ]);
        for file in [
            "AGENTS.md",
            "sub/deep/agents.md",
            "target/CACHEDIR.TAG",
            "target/debug/AGENTS.md",
            "node_modules/x/AGENTS.md",
            "docs.md",
        ] {
            std::fs::write(w.join(file), "x").unwrap();
        }
        std::os::unix::fs::symlink("docs.md", w.join("FOYA.md")).unwrap();
        std::fs::hard_link(w.join("docs.md"), w.join("sub/linked.md")).unwrap();
        let protect = vec![w.join("hooks/stop.sh"), w.join("scripts/check.sh")];
        let steps: Vec<String> = described_plan(&w, &protect);
        assert_eq!(
            steps,
            [
                "hold .foya",
                "ro .git",
                "hold .mcp.json",
                "ro AGENTS.md",
                "link FOYA.md",
                "ro docs.md",
                "pin hooks",
                "hold scripts",
                "pin sub",
                "hold hooks/stop.sh",
                "pin sub/deep",
                "ro sub/linked.md",
                "ro sub/deep/agents.md",
            ]
        );
    }

    /// A protected name that is a link, the links it leads through, and a link on the
    /// way to a hook script are each bound over themselves; what they lead to is shielded
    /// where it really is.
    #[test]
    fn links_on_the_way_to_a_protected_path_are_bound_as_links() {
        let (_tmp, w) = workspace(&[]);
        let outside = tempfile::tempdir().unwrap();
        for dir in ["conf", "scripts", "sub"] {
            std::fs::create_dir_all(w.join(dir)).unwrap();
        }
        std::fs::write(w.join("CLAUDE.md"), "x").unwrap();
        std::fs::write(w.join("scripts/check.sh"), "x").unwrap();
        let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, w.join(name));
        link(Path::new("middle.md"), "AGENTS.md").unwrap();
        link(Path::new("CLAUDE.md"), "middle.md").unwrap();
        link(Path::new("conf"), ".foya").unwrap();
        link(Path::new("scripts"), "tools").unwrap();
        link(&outside.path().join("FOYA.md"), "FOYA.md").unwrap();
        link(Path::new("../CLAUDE.md"), "sub/AGENTS.md").unwrap();
        let protect = vec![w.join("tools/check.sh"), w.join("tools/missing.sh")];
        let steps: Vec<String> = plan(&w, &protect)
            .steps
            .iter()
            .filter(|s| !matches!(s, Step::Placeholder(p) if p.ends_with(".mcp.json")))
            .map(|s| described(&w, s))
            .collect();
        assert_eq!(
            steps,
            [
                "link .foya",
                "hold .git",
                "link AGENTS.md",
                "ro CLAUDE.md",
                "link FOYA.md",
                "ro conf",
                "link middle.md",
                "pin scripts",
                "pin sub",
                "link tools",
                "ro scripts/check.sh",
                "hold scripts/missing.sh",
                "link sub/AGENTS.md",
            ]
        );
    }

    /// Links are followed as the kernel follows them: `..` from where a link led, a
    /// relative target from the folder the link really is in, an absolute one through
    /// another name of the working directory; a loop or an over-long chain ends the walk
    /// with every link met bound (the one past the last followed too).
    #[test]
    fn links_are_walked_as_the_kernel_walks_them() {
        let tmp = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(tmp.path()).unwrap().join("w");
        for dir in ["sub/deep", "lib/s", "p/q"] {
            std::fs::create_dir_all(w.join(dir)).unwrap();
        }
        for file in ["sub/CLAUDE.md", "lib/s/check.sh", "CLAUDE.md"] {
            std::fs::write(w.join(file), "x").unwrap();
        }
        let alias = tmp.path().join("alias");
        std::os::unix::fs::symlink(&w, &alias).unwrap();
        let link = |target: &Path, name: &str| std::os::unix::fs::symlink(target, w.join(name));
        // `..` after a link to a folder: `sub/CLAUDE.md`, not `CLAUDE.md`.
        link(Path::new("d/../CLAUDE.md"), "AGENTS.md").unwrap();
        link(Path::new("sub/deep"), "d").unwrap();
        // A relative link in a folder reached through a link.
        link(Path::new("x/y"), "agents.md").unwrap();
        link(Path::new("p/q"), "x").unwrap();
        link(Path::new("../z"), "p/q/y").unwrap();
        link(Path::new("../CLAUDE.md"), "p/z").unwrap();
        // Through another name of the working directory, then a link inside it.
        link(&alias.join("scripts"), "tools").unwrap();
        link(Path::new("lib/s"), "scripts").unwrap();
        // A dangling link through a dangling folder link.
        link(Path::new("e/x.md"), "FOYA.md").unwrap();
        link(Path::new("gone"), "e").unwrap();
        // A loop, and a chain longer than the kernel follows.
        link(Path::new(".mcp.json"), ".mcp.json").unwrap();
        link(Path::new("l1"), ".foya").unwrap();
        for i in 1..=45 {
            link(Path::new(&format!("l{}", i + 1)), &format!("l{i}")).unwrap();
        }
        let chained = |p: &Path| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.len() > 1 && name.starts_with('l') && name[1..].bytes().all(|b| b.is_ascii_digit())
        };
        let protect = vec![w.join("tools/check.sh")];
        let steps: Vec<String> = plan(&w, &protect)
            .steps
            .iter()
            .filter(|s| !chained(s.path()))
            .map(|s| described(&w, s))
            .collect();
        assert_eq!(
            steps,
            [
                "link .foya",
                "hold .git",
                "link .mcp.json",
                "link AGENTS.md",
                "ro CLAUDE.md",
                "link FOYA.md",
                "link agents.md",
                "link d",
                "link e",
                "hold gone",
                "pin lib",
                "pin p",
                "link scripts",
                "pin sub",
                "link tools",
                "link x",
                "pin lib/s",
                "pin p/q",
                "link p/z",
                "ro sub/CLAUDE.md",
                "ro lib/s/check.sh",
                "link p/q/y",
            ]
        );
        let chain: Vec<String> = plan(&w, &[])
            .steps
            .iter()
            .filter_map(|s| {
                let name = s.path().file_name().unwrap().to_string_lossy().into_owned();
                (matches!(s, Step::Link(_)) && chained(s.path())).then_some(name)
            })
            .collect();
        // `.foya` and `l1` … `l39` are the 40 links followed; `l40`, which replaced by a
        // file would end a chain the kernel follows, is bound; `l41` on are not met.
        let mut expected: Vec<String> = (1..=40).map(|i| format!("l{i}")).collect();
        expected.sort();
        assert_eq!(chain, expected);
    }

    /// A file where a folder of a protected path should be is kept read-only: a folder
    /// holding a script of the command's cannot take its place.
    #[test]
    fn a_file_where_a_folder_should_be_stays() {
        let (_tmp, w) = workspace(&[]);
        for file in ["tools", "notes", ".foya"] {
            std::fs::write(w.join(file), "x").unwrap();
        }
        std::os::unix::fs::symlink("notes/a.md", w.join("AGENTS.md")).unwrap();
        let protect = vec![w.join("tools/check.sh"), w.join(".foya/hooks/x.sh")];
        let steps: Vec<String> = described_plan(&w, &protect)
            .into_iter()
            .filter(|s| !s.starts_with("hold "))
            .collect();
        assert_eq!(
            steps,
            ["ro .foya", "link AGENTS.md", "ro notes", "ro tools"]
        );
    }

    /// Past [`super::MAX_MOUNTS`] protected paths the nested ones are left (the call says
    /// so), the working directory's own names and the hook scripts shielded first.
    #[test]
    fn the_mounts_are_bounded_and_the_top_level_comes_first() {
        let (_tmp, w) = workspace(&[]);
        for i in 0..super::MAX_MOUNTS + 10 {
            let dir = w.join(format!("n{i}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("AGENTS.md"), "x").unwrap();
        }
        std::fs::write(w.join("AGENTS.md"), "x").unwrap();
        let protect = vec![w.join("check.sh")];
        let plan = plan(&w, &protect);
        assert!(plan.note.unwrap().contains("approval gateway"));
        let shielded = plan
            .steps
            .iter()
            .filter(|s| !matches!(s, Step::Pin(_)))
            .count();
        assert!(shielded <= super::MAX_MOUNTS, "{shielded}");
        let nested = plan
            .steps
            .iter()
            .filter(|s| s.path().parent() != Some(w.as_path()))
            .count();
        assert!(nested < super::MAX_MOUNTS + 10, "{nested}");
        for name in ["AGENTS.md", ".git", ".foya", "check.sh"] {
            assert!(
                plan.steps.iter().any(|s| s.path() == w.join(name)),
                "{name}"
            );
        }
    }

    /// Files with other hard links count against the same bound (past it they are left
    /// writable, the call says so), and a nested protected path longer than the kernel
    /// looks up is left instead of failing the call.
    #[test]
    fn hard_links_and_overlong_paths_cannot_stop_the_calls() {
        let (_tmp, w) = workspace(&[]);
        std::fs::write(w.join("f"), "x").unwrap();
        for i in 0..super::MAX_MOUNTS + 10 {
            std::fs::hard_link(w.join("f"), w.join(format!("h{i}"))).unwrap();
        }
        // A folder whose path the kernel still looks up, holding an `AGENTS.md` whose
        // path it does not (made from descriptors: no path is that long).
        use rustix::fs::{Mode, OFlags, mkdirat, openat};
        let dir_flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        let mut dir = openat(rustix::fs::CWD, &w, dir_flags, Mode::empty()).unwrap();
        let mut len = w.as_os_str().len();
        while len < 4_090 {
            let name = "d".repeat((4_090 - len - 1).min(200));
            mkdirat(&dir, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
            dir = openat(&dir, name.as_str(), dir_flags, Mode::empty()).unwrap();
            len += name.len() + 1;
        }
        let file = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
        openat(&dir, "AGENTS.md", file, Mode::from_raw_mode(0o644)).unwrap();
        let plan = plan(&w, &[]);
        assert!(
            plan.steps.len() <= super::MAX_MOUNTS,
            "{}",
            plan.steps.len()
        );
        assert!(plan.note.unwrap().contains("hard links"));
        assert!(plan.steps.iter().any(|s| s.path() == w.join("AGENTS.md")));
        assert!(
            !plan
                .steps
                .iter()
                .any(|s| s.path().ends_with("AGENTS.md") && s.path().parent() != Some(&w)),
            "nothing is planned for the path too long to look up"
        );
    }

    /// The nested paths' walks share a budget of lookups (a path 2 000 folders deep costs
    /// 2 million; a command planted hundreds and every later call took minutes), and
    /// their placeholders are optional: a planted link to a missing name in a folder not
    /// the user's must not stop every later call. The working directory's own names are
    /// walked and held whatever it costs.
    #[test]
    fn nested_paths_cannot_make_every_call_slow_or_fail() {
        use rustix::fs::{Mode, OFlags, mkdirat, openat};
        let (_tmp, w) = workspace(&[]);
        let held = |plan: &super::Plan| -> Vec<PathBuf> {
            plan.steps
                .iter()
                .filter_map(|s| match s {
                    Step::Placeholder(p) => Some(p.clone()),
                    _ => None,
                })
                .collect()
        };
        std::fs::create_dir(w.join("d")).unwrap();
        std::os::unix::fs::symlink("../elsewhere/x", w.join("d/AGENTS.md")).unwrap();
        let plan = plan(&w, &[]);
        assert!(held(&plan).contains(&w.join("elsewhere")));
        assert!(held(&plan).contains(&w.join(".foya")));
        let optional: Vec<&PathBuf> = plan.optional.iter().collect();
        assert_eq!(optional, [&w.join("elsewhere")]);
        let dir_flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        let mut dir = openat(rustix::fs::CWD, &w, dir_flags, Mode::empty()).unwrap();
        let mut len = w.as_os_str().len();
        while len < 4_000 {
            mkdirat(&dir, "a", Mode::from_raw_mode(0o755)).unwrap();
            dir = openat(&dir, "a", dir_flags, Mode::empty()).unwrap();
            len += 2;
        }
        let file = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
        for name in [
            "agents.md",
            "AGENTS.md",
            "Agents.md",
            "aGents.md",
            "agEnts.md",
        ] {
            openat(&dir, name, file, Mode::from_raw_mode(0o644)).unwrap();
        }
        let plan = super::plan(&w, &[]);
        assert!(plan.note.as_deref().unwrap().contains("lookups"));
        assert!(held(&plan).contains(&w.join(".foya")));
    }

    /// Listing a folder looks up every component of its path, so the listing shares the
    /// walks' budget: 2 100 folders at the bottom of a tree 2 000 deep (made by a
    /// command) cost seconds at every later call before, with no note.
    #[test]
    fn a_deep_tree_cannot_make_the_listing_slow() {
        use rustix::fs::{Mode, OFlags, mkdirat, openat};
        let (_tmp, w) = workspace(&[]);
        let dir_flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        let mut dir = openat(rustix::fs::CWD, &w, dir_flags, Mode::empty()).unwrap();
        let mut len = w.as_os_str().len();
        while len < 4_000 {
            mkdirat(&dir, "a", Mode::from_raw_mode(0o755)).unwrap();
            dir = openat(&dir, "a", dir_flags, Mode::empty()).unwrap();
            len += 2;
        }
        for i in 0..2_100 {
            mkdirat(&dir, format!("{i}"), Mode::from_raw_mode(0o755)).unwrap();
        }
        let plan = plan(&w, &[]);
        let note = plan.note.as_deref().unwrap();
        assert!(note.contains("took more than 2000000 lookups"), "{note}");
        assert!(
            plan.steps
                .iter()
                .any(|s| *s == Step::Placeholder(w.join(".foya")))
        );
    }

    /// A `.git` file's repository (`gitdir: `, then its `commondir`, read as git reads
    /// them) is shielded like a `.git` directory, at the top and in a subfolder; a
    /// missing one is held. Reading them counts against the budget of lookups: 20 000
    /// `.git` files naming repositories 1 600 components long made every call take 9 s.
    #[test]
    fn the_repository_a_git_file_points_to_is_shielded() {
        let (_tmp, w) = workspace(&[
            "gd/worktree",
            "main-repo",
            "sub",
            "sub/src",
            "src",
            "other/repo",
        ]);
        std::fs::write(w.join("gitfile"), "gitdir: gd/worktree\r\n\n").unwrap();
        std::os::unix::fs::symlink("gitfile", w.join(".git")).unwrap();
        std::fs::write(w.join("gd/worktree/commondir"), "../../main-repo\n").unwrap();
        std::fs::write(w.join("sub/.git"), "gitdir: ../other/repo").unwrap();
        std::fs::write(w.join("sub/src/.git"), "gitdir:../../src").unwrap();
        std::fs::write(w.join("src/.git"), "gitdir: ../missing").unwrap();
        let steps: Vec<String> = described_plan(&w, &[]);
        assert_eq!(
            steps,
            [
                "hold .foya",
                "link .git",
                "hold .mcp.json",
                "hold AGENTS.md",
                "hold FOYA.md",
                "pin gd",
                "ro gitfile",
                "ro main-repo",
                "hold missing",
                "pin other",
                "pin src",
                "pin sub",
                "ro gd/worktree",
                "ro other/repo",
                "ro src/.git",
                "ro sub/.git",
                "pin sub/src",
                "ro sub/src/.git",
            ]
        );
        let long = "x/../".repeat(800);
        for i in 0..1_000 {
            let dir = w.join(format!("many/{i}"));
            std::fs::create_dir_all(dir.join("x")).unwrap();
            std::fs::write(dir.join(".git"), format!("gitdir: {long}r{i}")).unwrap();
        }
        let plan = plan(&w, &[]);
        let note = plan.note.as_deref().unwrap();
        assert!(note.contains("reading their .git files"), "{note}");
        // The top-level `.git` file's repository is held whatever the rest cost (a
        // command planted a tree that spent the budget to the last lookups).
        let broke = super::Budget {
            lookups: 0,
            ..super::Budget::default()
        };
        for plan in [plan, super::plan_within(&w, &[], broke)] {
            assert!(plan.steps.contains(&Step::ReadOnly(w.join("gd/worktree"))));
            assert!(plan.steps.contains(&Step::ReadOnly(w.join("main-repo"))));
        }
    }

    /// Beyond a `.git`: the symlinks directly in a repository (git-new-workdir's
    /// `config -> …`) and a `.git` directory's `commondir` are shielded; each pointer is
    /// read as git reads it (the trailing newlines dropped before the NUL is looked for)
    /// and only to its size (a `/proc` file says 0 and would be read without end; a
    /// fifo is not waited on).
    #[test]
    fn what_git_reads_beyond_a_git_is_found_as_git_reads_it() {
        use std::os::unix::ffi::OsStrExt as _;
        let (_tmp, w) = workspace(&[".git", "linked", "common", "a", "b/gd", "c"]);
        std::fs::write(w.join("linked/config"), "[core]\n").unwrap();
        std::os::unix::fs::symlink("../linked/config", w.join(".git/config")).unwrap();
        std::fs::write(w.join(".git/commondir"), "../common\n").unwrap();
        let steps: Vec<String> = described_plan(&w, &[]);
        for step in ["ro .git", "ro common", "pin linked", "ro linked/config"] {
            assert!(steps.contains(&step.to_owned()), "{step}: {steps:?}");
        }
        // Wherever the link comes in the repository's listing.
        for i in 0..2_000 {
            std::fs::File::create(w.join(format!(".git/pad{i}"))).unwrap();
        }
        let steps = described_plan(&w, &[]);
        assert!(steps.contains(&"ro linked/config".to_owned()), "{steps:?}");
        std::fs::write(w.join("a/.git"), b"gitdir: r\n\0junk").unwrap();
        let dirs = super::git_dirs(&w, &w.join("a/.git"), None, None).unwrap();
        assert_eq!(
            dirs,
            [w.join("a").join(std::ffi::OsStr::from_bytes(b"r\n"))]
        );
        std::fs::write(w.join("b/.git"), "gitdir: gd\n").unwrap();
        std::os::unix::fs::symlink("/proc/self/cmdline", w.join("b/gd/commondir")).unwrap();
        let dirs = super::git_dirs(&w, &w.join("b/.git"), None, None).unwrap();
        assert_eq!(dirs, [w.join("b/gd"), w.join("b/gd/commondir")]);
        // A path longer than the kernel looks up names nothing; newlines after one are
        // dropped however many there are (only a path's length of the file is read).
        std::fs::create_dir(w.join("d")).unwrap();
        let long = format!("gitdir: {}", "A".repeat(5_000));
        std::fs::write(w.join("d/.git"), long).unwrap();
        assert!(
            super::git_dirs(&w, &w.join("d/.git"), None, None)
                .unwrap()
                .is_empty()
        );
        let padded = format!("gitdir: r{}", "\n".repeat(100_000));
        std::fs::write(w.join("d/.git"), padded).unwrap();
        let dirs = super::git_dirs(&w, &w.join("d/.git"), None, None).unwrap();
        assert_eq!(dirs, [w.join("d/r")]);
        nix::unistd::mkfifo(&w.join("c/.git"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(
            super::git_dirs(&w, &w.join("c/.git"), None, None)
                .unwrap()
                .is_empty()
        );
    }

    /// A folder of more entries than the budget's (200 000; a command made a million
    /// files, and every later call took 3 s) is read only so far, with a note; at the
    /// top, files with other hard links past it are left writable, with a note.
    #[test]
    fn a_huge_folder_is_read_only_so_far() {
        let (_tmp, w) = workspace(&[]);
        let dir = w.join("many");
        std::fs::create_dir(&dir).unwrap();
        for i in 0..1_000 {
            std::fs::File::create(dir.join(format!("{i}"))).unwrap();
        }
        let budget = super::Budget {
            entries: 1_000,
            ..super::Budget::default()
        };
        let plan = super::plan_within(&w, &[], budget);
        let note = plan.note.as_deref().unwrap();
        assert!(note.contains("more than 1000 files and folders"), "{note}");
        // Exactly as many as the budget (the folder itself and 999 in it): nothing left.
        std::fs::remove_file(dir.join("0")).unwrap();
        let exactly = super::plan_within(&w, &[], budget);
        assert_eq!(exactly.note, None);
        std::fs::File::create(dir.join("0")).unwrap();
        assert!(plan.steps.contains(&Step::Placeholder(w.join(".foya"))));
        for i in 0..1_000 {
            std::fs::File::create(w.join(format!("{i}"))).unwrap();
        }
        let plan = super::plan_within(&w, &[], budget);
        let note = plan.note.as_deref().unwrap();
        assert!(
            note.contains("entries where files with other hard links"),
            "{note}"
        );
        // The entries of the repositories read count too.
        let (_tmp, w) = workspace(&[]);
        for i in 0..40 {
            let repository = w.join(format!("r{i}/.git"));
            std::fs::create_dir_all(&repository).unwrap();
            for j in 0..40 {
                std::os::unix::fs::symlink("x", repository.join(format!("{j}"))).unwrap();
            }
        }
        let plan = super::plan_within(&w, &[], budget);
        let note = plan.note.as_deref().unwrap();
        assert!(note.contains("or 1000 entries"), "{note}");
        // So do the nested protected paths kept (each up to 4 KiB long: 200 000 of
        // them took 2 GB and 16 s per call).
        let budget = super::Budget {
            found: 30,
            ..super::Budget::default()
        };
        let plan = super::plan_within(&w, &[], budget);
        let note = plan.note.as_deref().unwrap();
        assert!(
            note.contains("more than 30 nested protected paths"),
            "{note}"
        );
    }

    #[test]
    fn only_unused_empty_placeholders_are_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let w = tmp.path();
        let make = |name: &str, mode: u32| {
            std::fs::DirBuilder::new()
                .mode(mode)
                .create(w.join(name))
                .unwrap();
        };
        make(".foya", PLACEHOLDER_MODE);
        make(".git", 0o755);
        make("AGENTS.md", PLACEHOLDER_MODE);
        std::fs::set_permissions(
            w.join("AGENTS.md"),
            std::os::unix::fs::PermissionsExt::from_mode(0o1700),
        )
        .unwrap();
        std::fs::write(w.join("AGENTS.md/kept"), "x").unwrap();
        std::fs::set_permissions(
            w.join("AGENTS.md"),
            std::os::unix::fs::PermissionsExt::from_mode(PLACEHOLDER_MODE),
        )
        .unwrap();
        std::fs::create_dir(w.join("hooks")).unwrap();
        std::fs::DirBuilder::new()
            .mode(PLACEHOLDER_MODE)
            .create(w.join("hooks/lint"))
            .unwrap();
        sweep(w, &[w.join("hooks/lint/run.sh")]);
        let exists = |name: &str| w.join(name).exists();
        assert!(!exists(".foya"));
        assert!(exists(".git"));
        assert!(exists("AGENTS.md/kept"));
        assert!(!exists("hooks/lint"));
        assert!(exists("hooks"));
    }
    /// In a set-GID directory (a group-shared project) a directory made there gets
    /// `S_ISGID` too: the placeholder was then taken for a real entry (the name not
    /// kept from being made) and never removed.
    #[test]
    fn a_placeholder_in_a_set_gid_directory_is_claimed_and_swept() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().unwrap();
        let w = tmp.path();
        std::fs::set_permissions(w, std::fs::Permissions::from_mode(0o2775)).unwrap();
        let lock = super::claim(&w.join(".foya")).unwrap();
        assert!(lock.is_some(), "the placeholder was taken for a real entry");
        let mode = std::fs::symlink_metadata(w.join(".foya"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, PLACEHOLDER_MODE | 0o2000);
        drop(lock);
        sweep(w, &[]);
        assert!(!w.join(".foya").exists(), "the placeholder was left behind");
    }
}

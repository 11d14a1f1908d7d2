//! The rest of the file system read-only for the command: a mount namespace of the thread
//! that starts it, where every mount but the call's writable roots (the working directory
//! when the policy writes it, the private `$TMPDIR`) is remounted read-only, as
//! bubblewrap's `--ro-bind / /` with writable binds on top does.
//!
//! Why: Landlock rules a file's contents and a directory's entries, not a file's
//! metadata. Without this a sandboxed command could `chmod`, `chown`, `setfacl`,
//! `setfattr` or `touch -d` any file its user owns outside the working directory — run as
//! root, any file (`chmod 666 /etc/shadow`). On a read-only mount they fail with `EROFS`.
//! Reads, runs, and writes to devices (`/dev/null`, a terminal, a socket) are unchanged.
//!
//! Owns: the thread's mount namespace, cloning the writable roots (`open_tree`), the
//! read-only remounts, putting the clones back over their paths (`move_mount`).
//!
//! The helper's main thread keeps its own namespace: it still removes the private temp
//! dir and the shield's placeholders after the command ends. Run as an ordinary user,
//! the helper needs a user namespace of its own first ([`enter_user_namespace`], or the
//! shield's), which only a single-threaded process can enter.
//!
//! Must not: change the helper's (or the runtime's) mounts, leave a writable root
//! read-only, or let the command start once a remount failed.

use nix::sched::{CloneFlags, unshare};
use rustix::fs::CWD;
use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, mount_change, mount_remount,
    move_mount, open_tree,
};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};

/// What [`seal`] achieved.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sealed {
    /// Only the writable roots can change, metadata included, for this thread and what it
    /// starts.
    ReadOnly,
    /// No mount namespace for this thread (the kernel refused it, or the whole file
    /// system is writable): nothing changed; Landlock alone rules writes.
    Unavailable,
}

/// Enters a user namespace that maps the caller's own user and group, so that an
/// ordinary user's helper may [`seal`] (root needs none). Call it while the process has a
/// single thread. `false`: not entered (root, or refused by the kernel).
///
/// # Errors
/// The namespace was entered but the ids could not be mapped (the command must not run).
pub(crate) fn enter_user_namespace() -> Result<bool, String> {
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    if uid.is_root() || unshare(CloneFlags::CLONE_NEWUSER).is_err() {
        return Ok(false);
    }
    super::shield::map_ids(uid.as_raw(), gid.as_raw())?;
    Ok(true)
}

/// Gives the calling thread a mount namespace of its own in which everything but
/// `writable` (absolute paths; missing ones are skipped) is read-only. Call it before
/// Landlock, which refuses mount calls.
///
/// # Errors
/// The namespace was entered but a mount failed: the thread must not start the command.
pub(crate) fn seal(writable: &[&Path]) -> Result<Sealed, String> {
    let roots = roots(writable);
    if roots.iter().any(|root| root.parent().is_none()) {
        return Ok(Sealed::Unavailable);
    }
    if unshare(CloneFlags::CLONE_NEWNS).is_err() {
        return Ok(Sealed::Unavailable);
    }
    // Nothing done here may reach the helper's namespace (or the runtime's).
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| format!("cannot make the command's mounts private: {e}"))?;
    // Copies of the writable roots, with their mounts below as they are, taken before the
    // rest goes read-only: the copies are not in the namespace's tree yet.
    let mut clones = Vec::with_capacity(roots.len());
    for root in &roots {
        let flags = OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE;
        let clone = open_tree(CWD, root.as_path(), flags)
            .map_err(|e| format!("cannot keep {} writable: {e}", root.display()))?;
        clones.push((root, clone));
    }
    let kept = KEPT.lock().ok();
    let read: Vec<(PathBuf, Option<KeptFlags>)>;
    let mounts = match kept.as_deref().and_then(Option::as_ref) {
        Some(kept) => &kept.mounts,
        // This thread's mounts (`/proc/self` would show the main thread's).
        None => {
            read = std::fs::read("/proc/thread-self/mountinfo")
                .map(|table| mounts(&table).collect())
                .map_err(|e| format!("cannot list the command's mounts: {e}"))?;
            &read
        }
    };
    for (point, kept) in mounts {
        if roots.iter().any(|root| point.starts_with(root)) {
            continue;
        }
        seal_mount(point, *kept)?;
    }
    drop(kept);
    hide_terminals()?;
    for (root, clone) in clones {
        move_mount(
            &clone,
            "",
            CWD,
            root.as_path(),
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(|e| format!("cannot keep {} writable: {e}", root.display()))?;
    }
    Ok(Sealed::ReadOnly)
}

/// The mount table the persistent helper keeps for the calls it forks: reading it is
/// most of what sealing costs a call (the kernel formats it afresh each time, cgroup
/// mounts' options most). The server reads it again only when `poll` on its open
/// `mountinfo` says its namespace's mounts changed, before each fork; a forked call's
/// namespace is a copy of the server's (plus the shield's mounts, all inside the
/// working directory). A mount made between that `poll` and the call's `unshare` is
/// missed by that call alone.
static KEPT: std::sync::Mutex<Option<Kept>> = std::sync::Mutex::new(None);

struct Kept {
    file: std::fs::File,
    mounts: Vec<(PathBuf, Option<KeptFlags>)>,
}

impl Kept {
    fn read(&mut self) -> std::io::Result<()> {
        use std::io::{Read as _, Seek as _};
        self.file.rewind()?;
        let mut table = Vec::new();
        self.file.read_to_end(&mut table)?;
        self.mounts = mounts(&table).collect();
        Ok(())
    }
}

/// Starts keeping the mount table (the persistent helper, once).
pub(crate) fn keep_mount_table() {
    let Ok(file) = std::fs::File::open("/proc/self/mountinfo") else {
        return;
    };
    let mut kept = Kept {
        file,
        mounts: Vec::new(),
    };
    if kept.read().is_ok()
        && let Ok(mut slot) = KEPT.lock()
    {
        *slot = Some(kept);
    }
}

/// Reads the kept table again when the mounts changed since (the persistent helper,
/// before each fork). A table that cannot be read again is dropped: each call then reads
/// its own.
pub(crate) fn refresh_mount_table() {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let Ok(mut slot) = KEPT.lock() else { return };
    let Some(kept) = slot.as_mut() else { return };
    let mut fds = [PollFd::new(&kept.file, PollFlags::PRI)];
    let changed = match poll(&mut fds, Some(&Timespec::default())) {
        Ok(0) => false,
        Ok(_) => !fds[0].revents().is_empty(),
        Err(_) => true,
    };
    if changed && kept.read().is_err() {
        *slot = None;
    }
}

/// Takes the terminals out of the command's reach: `/dev/tty` becomes the null device
/// and an empty, read-only `tmpfs` covers `/dev/pts`. The command shares the runtime's
/// controlling terminal, and through either it could read what the user types (an
/// answer to an approval, a pasted key), take the terminal's foreground from the TUI, or
/// change its line discipline. The runtime gives commands pipes and the null device, not
/// terminals; a new pseudo-terminal was already out of reach (Landlock: no write to
/// `/dev/ptmx`). A prompt that reads `/dev/tty` (`ssh`, `sudo`) now gets end of input at
/// once instead of the user's keys.
///
/// # Errors
/// A mount failed.
fn hide_terminals() -> Result<(), String> {
    let failed =
        |what: &str, e: rustix::io::Errno| format!("cannot hide {what} from the command: {e}");
    match rustix::mount::mount_bind("/dev/null", "/dev/tty") {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(failed("/dev/tty", e)),
    }
    let flags = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    match rustix::mount::mount(
        "none",
        "/dev/pts",
        "tmpfs",
        flags,
        Some(c"size=4k,mode=555"),
    ) {
        Ok(()) | Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => Ok(()),
        Err(e) => Err(failed("/dev/pts", e)),
    }
}

/// The writable roots as the mount table names them (symlinks resolved), those inside
/// another left out.
fn roots(writable: &[&Path]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = writable
        .iter()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect();
    roots.sort();
    roots.dedup();
    let all = roots.clone();
    roots.retain(|root| {
        !all.iter()
            .any(|other| other != root && root.starts_with(other))
    });
    roots
}

/// What a mount keeps when it is made read-only: its other flags (the kernel refuses to
/// clear the ones it locked in a user namespace — nosuid, nodev, noexec, the atime ones —
/// and clearing any would loosen the mount). `None`: the mount is read-only already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeptFlags(MountFlags);

impl KeptFlags {
    /// From a mount table's per-mount options.
    fn from_options(options: &str) -> Option<Self> {
        let mut flags = MountFlags::empty();
        let mut atime = MountFlags::STRICTATIME;
        for option in options.split(',') {
            match option {
                "ro" => return None,
                "nosuid" => flags |= MountFlags::NOSUID,
                "nodev" => flags |= MountFlags::NODEV,
                "noexec" => flags |= MountFlags::NOEXEC,
                "nodiratime" => flags |= MountFlags::NODIRATIME,
                "nosymfollow" => flags |= MountFlags::NOSYMFOLLOW,
                "noatime" => atime = MountFlags::NOATIME,
                "relatime" => atime = MountFlags::RELATIME,
                _ => {}
            }
        }
        Some(Self(flags | atime))
    }

    /// Of the mount `path` is on, as `statvfs` reports it (the same flags as its line
    /// in the mount table, without reading the table).
    ///
    /// # Errors
    /// `statvfs` failed.
    pub(crate) fn of(path: &Path) -> rustix::io::Result<Option<Self>> {
        use rustix::fs::StatVfsMountFlags as St;
        /// `ST_NOSYMFOLLOW` (Linux 5.10), which rustix does not name.
        const ST_NOSYMFOLLOW: u64 = 0x2000;
        let st = rustix::fs::statvfs(path)?.f_flag;
        if st.contains(St::RDONLY) {
            return Ok(None);
        }
        let mut flags = [
            (St::NOSUID, MountFlags::NOSUID),
            (St::NODEV, MountFlags::NODEV),
            (St::NOEXEC, MountFlags::NOEXEC),
            (St::NODIRATIME, MountFlags::NODIRATIME),
        ]
        .into_iter()
        .filter(|(bit, _)| st.contains(*bit))
        .fold(MountFlags::empty(), |all, (_, flag)| all | flag);
        if st.bits() & ST_NOSYMFOLLOW != 0 {
            flags |= MountFlags::NOSYMFOLLOW;
        }
        let atime = if st.contains(St::NOATIME) {
            MountFlags::NOATIME
        } else if st.contains(St::RELATIME) {
            MountFlags::RELATIME
        } else {
            MountFlags::STRICTATIME
        };
        Ok(Some(Self(flags | atime)))
    }
}

/// Remounts the mount at `point` read-only, keeping `kept` (the command's seal here, the
/// shield's read-only binds of the protected paths).
///
/// # Errors
/// The remount failed.
pub(crate) fn remount_read_only(point: &Path, kept: KeptFlags) -> rustix::io::Result<()> {
    mount_remount(point, MountFlags::BIND | MountFlags::RDONLY | kept.0, "")
}

/// Makes the mount at `point` read-only for the command, unless it is already.
fn seal_mount(point: &Path, kept: Option<KeptFlags>) -> Result<(), String> {
    let Some(kept) = kept else {
        return Ok(());
    };
    match remount_read_only(point, kept) {
        // A mount this process cannot reach is one the command cannot reach either:
        // below a directory it may not search, gone, or hidden under a later mount at
        // the same place, where its path leads into the upper one (`EINVAL`: not a
        // mount's root).
        Ok(())
        | Err(
            rustix::io::Errno::ACCESS
            | rustix::io::Errno::NOENT
            | rustix::io::Errno::NOTDIR
            | rustix::io::Errno::INVAL,
        ) => Ok(()),
        Err(e) => Err(format!(
            "cannot make {} read-only for the command: {e}",
            point.display()
        )),
    }
}

/// `(mount point, what it keeps read-only)` of each line of a `mountinfo` table (its
/// per-mount options read once, when the table is). Bytes: a mount point need not be
/// UTF-8 (the shield binds whatever a workspace holds).
fn mounts(table: &[u8]) -> impl Iterator<Item = (PathBuf, Option<KeptFlags>)> + '_ {
    table.split(|b| *b == b'\n').filter_map(|line| {
        let mut fields = line.split(|b| *b == b' ').skip(4);
        let point = fields.next()?;
        let options = std::str::from_utf8(fields.next()?).ok()?;
        Some((unescape(point), KeptFlags::from_options(options)))
    })
}

/// A mount table's path: space, tab, newline and backslash are written as `\ooo`.
fn unescape(bytes: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')))
            .and_then(|n| u8::try_from(n).ok());
        match octal {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{KeptFlags, mounts, roots};
    use rustix::mount::MountFlags;
    use std::path::{Path, PathBuf};

    #[test]
    fn the_mount_table_is_read_with_its_escapes() {
        let table = b"36 35 98:0 / / rw,relatime shared:1 - ext4 /dev/root rw\n\
                     37 36 0:5 / /mnt/my\\040disk\\134x ro,nosuid master:2 - tmpfs t rw\n\
                     38 36 98:0 /w/\xff /w/\xff/AGENTS.md ro,relatime - ext4 /dev/root rw\n";
        let seen: Vec<(PathBuf, Option<KeptFlags>)> = mounts(table).collect();
        use std::os::unix::ffi::OsStrExt as _;
        let not_utf8 = std::ffi::OsStr::from_bytes(b"/w/\xff/AGENTS.md");
        assert_eq!(
            seen,
            vec![
                (PathBuf::from("/"), Some(KeptFlags(MountFlags::RELATIME))),
                (PathBuf::from("/mnt/my disk\\x"), None),
                (PathBuf::from(not_utf8), None),
            ]
        );
    }

    /// `statvfs` and the mount table name the same flags to keep (the shield reads the
    /// first, the seal the second): on a file system mounted with each of them, as root.
    #[test]
    fn statvfs_and_the_mount_table_keep_the_same_flags() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        for options in [
            "nosymfollow,noexec,nodev,nosuid,noatime",
            "strictatime,nodiratime",
            "relatime",
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let point = std::fs::canonicalize(tmp.path()).unwrap();
            let status = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", options, "foya-kept"])
                .arg(&point)
                .status()
                .unwrap();
            assert!(status.success(), "{options}");
            let table = std::fs::read("/proc/self/mountinfo").unwrap();
            let listed = mounts(&table)
                .filter(|(p, _)| *p == point)
                .map(|(_, kept)| kept)
                .last();
            let statvfs = KeptFlags::of(&point);
            let _ = std::process::Command::new("umount").arg(&point).status();
            let expected = options
                .split(',')
                .map(|o| match o {
                    "nosymfollow" => MountFlags::NOSYMFOLLOW,
                    "noexec" => MountFlags::NOEXEC,
                    "nodev" => MountFlags::NODEV,
                    "nosuid" => MountFlags::NOSUID,
                    "noatime" => MountFlags::NOATIME,
                    "nodiratime" => MountFlags::NODIRATIME,
                    "relatime" => MountFlags::RELATIME,
                    _ => MountFlags::STRICTATIME,
                })
                .fold(MountFlags::empty(), |all, f| all | f);
            let expected = if expected.intersects(MountFlags::NOATIME | MountFlags::RELATIME) {
                expected
            } else {
                expected | MountFlags::STRICTATIME
            };
            assert_eq!(listed, Some(Some(KeptFlags(expected))), "{options}");
            assert_eq!(statvfs.unwrap(), Some(KeptFlags(expected)), "{options}");
        }
    }

    #[test]
    fn a_root_inside_another_is_left_out_and_a_missing_one_skipped() {
        let tmp = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(top.join("inner")).unwrap();
        let inner = top.join("inner");
        let missing = top.join("missing");
        let writable: Vec<&Path> = vec![&inner, &top, &missing, &top];
        assert_eq!(roots(&writable), vec![top.clone()]);
    }
}

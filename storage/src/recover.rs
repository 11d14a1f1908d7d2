//! Opening a damaged database file without touching it: the file is copied (under a
//! shared lock, so no writer changes it meanwhile) into a private temporary directory,
//! and the copy is opened writable, so redb may repair it. A copy cut short of its own
//! layout (a truncated file: "File truncated below stored layout", "failed to fill whole
//! buffer") is padded with zeros up to the layout's length and opened again; the pages
//! that were cut off read as damaged, the others read.
//!
//! Every redb call runs inside the panic boundary.

use crate::error::OpenError;
use crate::guard::contain;
use crate::open::Source;
use redb::Database;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// redb's page size (the unit its layout is counted in).
const PAGE: u64 = 4096;

/// The note of a copy redb had to repair (not damage in itself: a killed writer leaves
/// a file needing it).
pub const REPAIRED: &str = "redb repaired it (it was not closed cleanly, or its latest \
     commit was damaged): what it holds is as of its last intact commit";

/// A private copy of a database file; removed when dropped.
pub(crate) struct Copy {
    /// Keeps the directory (and the copy) alive.
    _dir: tempfile::TempDir,
    /// The copy.
    pub(crate) path: PathBuf,
}

impl Copy {
    /// A copy at `path` inside `dir`, both removed when dropped.
    pub(crate) fn kept(dir: tempfile::TempDir, path: PathBuf) -> Self {
        Self { _dir: dir, path }
    }
}

/// A fresh temporary directory (in the system's, or in `parent`) readable by the user
/// alone (mode 0700), removed when dropped: it holds a copy of a store, every session's
/// conversation, which must stay as private as the data dir itself.
///
/// # Errors
/// The directory cannot be created.
pub(crate) fn private_tempdir(
    prefix: &str,
    parent: Option<&Path>,
) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut builder = tempfile::Builder::new();
    builder
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700));
    match parent {
        Some(parent) => builder.tempdir_in(parent),
        None => builder.tempdir(),
    }
}

/// Copies the file at `path` into a fresh private temporary directory, holding a shared lock
/// on it meanwhile (a writer holding the file makes this [`OpenError::AlreadyOpen`]).
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::AlreadyOpen`], [`OpenError::Database`] for an
/// I/O failure.
pub(crate) fn copy_locked(path: &Path) -> Result<Copy, OpenError> {
    let io = |e: std::io::Error| OpenError::Database {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let mut source = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => OpenError::NotFound {
            path: path.to_owned(),
        },
        _ => io(e),
    })?;
    if source.try_lock_shared().is_err() {
        return Err(OpenError::AlreadyOpen {
            path: path.to_owned(),
        });
    }
    let dir = private_tempdir("foya-store-copy-", None).map_err(io)?;
    let copy = dir.path().join("copy.redb");
    let mut target = std::fs::File::create(&copy).map_err(io)?;
    std::io::copy(&mut source, &mut target).map_err(io)?;
    drop(source);
    Ok(Copy {
        _dir: dir,
        path: copy,
    })
}

/// Opens the copy at `copy`: read-only first (the latest commit, as it is), then
/// writable (so redb may repair it, rolling back to its last intact commit), padding it
/// once when it is shorter than its layout. Returns the database and notes on what was
/// done to read it (repair, padding). `source` names the original file in errors.
///
/// # Errors
/// [`OpenError::Corrupt`] or [`OpenError::NewerFormat`] when no attempt opens it.
pub(crate) fn open_copy(copy: &Path, source: &Path) -> Result<(Source, Vec<String>), OpenError> {
    let mut notes = Vec::new();
    let mut padded = false;
    loop {
        let read_only = std::fs::File::open(copy)
            .map_err(|e| OpenError::Database {
                path: source.to_owned(),
                message: e.to_string(),
            })
            .and_then(|file| crate::open::open_file(source, file));
        let refusal = match read_only {
            Ok(db) => return Ok((Source::File(db), notes)),
            Err(e @ (OpenError::NewerFormat { .. } | OpenError::Database { .. })) => return Err(e),
            Err(e) => e,
        };
        let writable = open_writable(copy, source);
        let refusal = match writable {
            Ok((db, repaired)) => {
                if repaired {
                    notes.push(REPAIRED.to_owned());
                }
                return Ok((Source::Copy(db), notes));
            }
            Err(OpenError::Corrupt { message, .. }) => match refusal {
                OpenError::Corrupt { message: first, .. } => format!("{first}; {message}"),
                _ => message,
            },
            Err(e) => return Err(e),
        };
        let len = std::fs::metadata(copy).map(|m| m.len()).unwrap_or(0);
        let target = if padded {
            None
        } else {
            padded_len(&refusal, len)
        };
        let Some(target) = target else {
            return Err(OpenError::Corrupt {
                path: source.to_owned(),
                message: refusal,
            });
        };
        pad(copy, target).map_err(|e| OpenError::Database {
            path: source.to_owned(),
            message: e.to_string(),
        })?;
        notes.push(format!(
            "the file is {} bytes shorter than its layout says (truncated); the missing part \
             was read as zeros",
            target - len
        ));
        padded = true;
    }
}

/// Opens the copy writable, inside the panic boundary; `true`: redb repaired it.
pub(crate) fn open_writable(copy: &Path, source: &Path) -> Result<(Database, bool), OpenError> {
    let repaired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&repaired);
    let db = contain("opening the database", || {
        Database::builder()
            .set_repair_callback(move |_| flag.store(true, Ordering::SeqCst))
            .open(copy)
    })
    .map_err(|message| OpenError::Corrupt {
        path: source.to_owned(),
        message,
    })?
    .map_err(|e| OpenError::from_redb(source, e))?;
    Ok((db, repaired.load(Ordering::SeqCst)))
}

/// The length to pad a truncated copy of `len` bytes to, from redb's refusal: the
/// layout length it names, else the next whole page.
fn padded_len(message: &str, len: u64) -> Option<u64> {
    let named = message
        .split("layout_len=")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .filter(|n| *n > len && *n <= len.saturating_add(1 << 30));
    if named.is_some() {
        return named;
    }
    let truncated =
        message.contains("valid region layout") || message.contains("shorter than its own layout");
    let next_page = len.div_ceil(PAGE) * PAGE;
    (truncated && next_page > len).then_some(next_page)
}

/// Extends the file at `path` with zeros to `len` bytes.
fn pad(path: &Path, len: u64) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(len)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_padded_length_comes_from_the_layout_or_the_next_page() {
        use super::padded_len;
        assert_eq!(
            padded_len(
                "File truncated below stored layout: file_len=100, layout_len=8192",
                100
            ),
            Some(8192)
        );
        assert_eq!(
            padded_len(
                "File length does not correspond to a valid region layout: file_len=4095",
                4095
            ),
            Some(4096)
        );
        assert_eq!(padded_len("checksum mismatch", 4095), None);
        assert_eq!(
            padded_len("does not correspond to a valid region layout", 8192),
            None
        );
    }
}

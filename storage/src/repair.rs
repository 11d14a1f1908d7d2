//! [`repair`]: putting what [`crate::salvage`] reads of a damaged database file in its
//! place, keeping the damaged file beside it. The explicit way on from a store that
//! `Store::open` refuses (`foya store repair`); no other command starts a store over.
//!
//! Under an exclusive lock on the file (so no store has it open meanwhile): the file and
//! its acknowledgement journal are copied into a private directory beside it, every
//! readable session is salvaged from that copy into a fresh store there, the damaged
//! file is renamed to `<file>.damaged-<unix ms>` (its journal copied to
//! `<file>.damaged-<unix ms>.acks`) and the fresh store renamed into its place. The
//! journal stays where it is: the store is then opened once, which compares it with what
//! was salvaged, reports each session that lost acknowledged events and records it in
//! `<file>.losses` (so `foya store check` keeps naming it).

use crate::error::{Error, OpenError};
use crate::store::{Store, StoreOptions};
use std::path::{Path, PathBuf};

/// What [`repair`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RepairReport {
    /// The salvage that built the new file (per session: what was copied, where it
    /// stops).
    pub salvage: crate::SalvageReport,
    /// Where the damaged file was kept.
    pub kept: PathBuf,
    /// Acknowledged events the new file does not hold (also recorded in
    /// `<file>.losses`).
    pub losses: Vec<crate::Loss>,
}

/// Replaces the damaged database file at `path` with what salvage reads of it, keeping
/// the damaged file beside it (see the module doc).
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::AlreadyOpen`] when a store holds the file,
/// [`OpenError::Database`] for an I/O failure (nothing was renamed then, or the damaged
/// file was put back), any error of salvaging.
pub async fn repair(path: &Path) -> Result<RepairReport, Error> {
    let io = |e: std::io::Error| OpenError::Database {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let mut file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => OpenError::NotFound {
            path: path.to_owned(),
        },
        _ => io(e),
    })?;
    if file.try_lock().is_err() {
        return Err(OpenError::AlreadyOpen {
            path: path.to_owned(),
        }
        .into());
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let work = crate::recover::private_tempdir(".foya-repair-", Some(parent)).map_err(io)?;
    let damaged = work.path().join("damaged.redb");
    std::io::copy(&mut file, &mut std::fs::File::create(&damaged).map_err(io)?).map_err(io)?;
    let journal = crate::journal::path_for(path);
    if journal.is_file() {
        std::fs::copy(&journal, crate::journal::path_for(&damaged)).map_err(io)?;
    }
    let salvaged = work.path().join("salvaged.redb");
    let mut salvage = crate::salvage(&damaged, &salvaged).await?;
    // What it says of the private copy, it says of the file.
    let (copy_name, name) = (damaged.display().to_string(), path.display().to_string());
    for note in &mut salvage.notes {
        *note = note.replace(&copy_name, &name);
    }
    for session in &mut salvage.sessions {
        if let Some(why) = &mut session.stopped {
            *why = why.replace(&copy_name, &name);
        }
    }

    let mut kept = path.as_os_str().to_owned();
    kept.push(format!(".damaged-{}", crate::store::now_unix_ms()));
    let kept = PathBuf::from(kept);
    std::fs::rename(path, &kept).map_err(io)?;
    if let Err(e) = std::fs::rename(&salvaged, path) {
        let _ = std::fs::rename(&kept, path);
        return Err(io(e).into());
    }
    if journal.is_file() {
        // Evidence only: the journal itself stays, for the open below to compare.
        let _ = std::fs::copy(&journal, crate::journal::path_for(&kept));
    }
    drop(file);
    drop(work);
    let store = Store::open(path, StoreOptions::default())?;
    let losses = store.losses().to_vec();
    store.close().await;
    drop(store);
    Ok(RepairReport {
        salvage,
        kept,
        losses,
    })
}

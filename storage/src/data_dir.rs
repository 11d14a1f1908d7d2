//! The data directory's lock protocol: which files a data directory holds, who holds its
//! store, and how readers take turns at repairing it.
//!
//! The store file ([`STORE_FILE`]) is locked by the process that opened it writable
//! (redb). Whoever opens it records itself in [`OWNER_FILE`] (JSON `{"pid", "command",
//! "url", "listen"}`: `url` a server's base URL, `listen` a node's cluster address;
//! removed at exit by [`release_owner`]), so a second process refused by the lock can say
//! which process holds the data dir ([`holder`]) and how to ask it instead. Readers that
//! find the store needing repair take turns at it under [`RepairLock`]: shared to open it
//! read-only, exclusive to repair it.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};

/// File name of the event store inside the data directory.
pub const STORE_FILE: &str = "foya.redb";
/// File naming the process that holds the store, inside the data directory.
pub const OWNER_FILE: &str = "foya.owner";
/// File locked by the readers of a data directory while they open its store (see
/// [`RepairLock`]). Empty; never removed.
pub const REPAIR_LOCK_FILE: &str = "foya.repair.lock";

/// The owner file this process wrote (removed at exit by [`release_owner`]).
static OWNED: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// The store file of a data directory.
#[must_use]
pub fn store_path(dir: &Path) -> PathBuf {
    dir.join(STORE_FILE)
}

/// Who holds a data dir (what [`record_owner`] wrote).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Its process id.
    pub pid: u32,
    /// The subcommand (`serve`, `node`, `run`, …).
    pub command: String,
    /// Base URL of a `foya serve`.
    #[serde(default)]
    pub url: Option<String>,
    /// Cluster address (`host:port`) a `foya node` listens on.
    #[serde(default)]
    pub listen: Option<String>,
}

impl Owner {
    /// This process, running `command`, serving `url` or listening on `listen`.
    #[must_use]
    pub fn this_process(command: &str, url: Option<&str>, listen: Option<&str>) -> Self {
        Self {
            pid: std::process::id(),
            command: command.to_owned(),
            url: url.map(str::to_owned),
            listen: listen.map(str::to_owned),
        }
    }

    /// Whether its process is still running (not this one).
    fn is_live_other(&self) -> bool {
        self.pid != std::process::id() && Path::new(&format!("/proc/{}", self.pid)).exists()
    }
}

/// Records `owner` as the holder of `dir`'s store (best effort: a directory that cannot
/// hold the file goes without), to be removed by [`release_owner`].
pub fn record_owner(dir: &Path, owner: &Owner) {
    let path = dir.join(OWNER_FILE);
    let Ok(text) = serde_json::to_string(owner) else {
        return;
    };
    if std::fs::write(&path, text).is_ok()
        && let Ok(mut owned) = OWNED.lock()
    {
        *owned = Some(path);
    }
}

/// What `dir`'s owner file says, if it can be read.
fn read_owner(dir: &Path) -> Option<Owner> {
    std::fs::read_to_string(dir.join(OWNER_FILE))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
}

/// The other, live process that holds `dir`'s store, when its owner file names one.
#[must_use]
pub fn holder(dir: &Path) -> Option<Owner> {
    read_owner(dir).filter(Owner::is_live_other)
}

/// The base URL of the `foya serve` holding `dir`'s store, when its owner file names a
/// live server.
#[must_use]
pub fn serving_url(dir: &Path) -> Option<String> {
    holder(dir)
        .filter(|o| o.command == "serve")
        .and_then(|o| o.url)
}

/// Removes the owner file this process wrote, if it still names this process.
pub fn release_owner() {
    let Some(path) = OWNED.lock().ok().and_then(|mut o| o.take()) else {
        return;
    };
    let ours = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<Owner>(&t).ok())
        .is_some_and(|o| o.pid == std::process::id());
    if ours {
        let _ = std::fs::remove_file(&path);
    }
}

/// The readers' lock on a data directory ([`REPAIR_LOCK_FILE`]): held shared while a
/// reader opens the store read-only, exclusive while one repairs it, so one repairs
/// while the others wait and then find it repaired (without it, a reader opening the
/// file while another repairs it would be refused as if a writer held it). A directory
/// that cannot hold the lock file (read-only) goes without. Released on drop.
#[derive(Debug)]
pub struct RepairLock {
    file: Option<File>,
}

impl RepairLock {
    /// Takes the lock of `dir` shared (waits while a reader repairs).
    #[must_use]
    pub fn shared(dir: &Path) -> Self {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(REPAIR_LOCK_FILE))
            .ok();
        if let Some(file) = &file {
            let _ = file.lock_shared();
        }
        Self { file }
    }

    /// Trades the shared lock for the exclusive one (waits for the other readers);
    /// `false` when there is no lock file (nothing to wait for).
    pub fn make_exclusive(&self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        let _ = file.unlock();
        let _ = file.lock();
        true
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_owner_file_names_a_live_holder_until_released() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(holder(dir.path()), None);
        // This process's own record is not "another holder".
        record_owner(dir.path(), &Owner::this_process("run", None, None));
        assert!(dir.path().join(OWNER_FILE).is_file());
        assert_eq!(holder(dir.path()), None);
        // A live other process (the parent of this test, pid 1 at worst) is.
        let other = Owner {
            pid: 1,
            command: "serve".to_owned(),
            url: Some("http://127.0.0.1:7878".to_owned()),
            listen: None,
        };
        std::fs::write(
            dir.path().join(OWNER_FILE),
            serde_json::to_string(&other).unwrap(),
        )
        .unwrap();
        assert_eq!(holder(dir.path()), Some(other.clone()));
        assert_eq!(serving_url(dir.path()), other.url);
        // Release removes only a file that still names this process.
        release_owner();
        assert!(dir.path().join(OWNER_FILE).is_file());
        record_owner(dir.path(), &Owner::this_process("node", None, Some("h:1")));
        release_owner();
        assert!(!dir.path().join(OWNER_FILE).exists());
    }

    #[test]
    fn readers_share_the_repair_lock_and_a_read_only_dir_goes_without() {
        let dir = tempfile::tempdir().unwrap();
        let a = RepairLock::shared(dir.path());
        let b = RepairLock::shared(dir.path());
        assert!(dir.path().join(REPAIR_LOCK_FILE).is_file());
        drop(b);
        assert!(a.make_exclusive());
        let missing = RepairLock::shared(&dir.path().join("absent"));
        assert!(!missing.make_exclusive());
    }
}

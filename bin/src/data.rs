//! Locating and opening the data directory's event store.

use anyhow::Context as _;
use foya_storage::{Durability, Store, StoreOptions};
use std::path::{Path, PathBuf};

/// File name of the event store inside the data directory.
const STORE_FILE: &str = "foya.redb";

/// `--data-dir`, else `$FOYA_DATA_DIR` (clap reads it), else the platform data dir.
pub(crate) fn data_dir(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = arg {
        return Ok(dir.to_path_buf());
    }
    dirs::data_dir()
        .map(|d| d.join("foya"))
        .context("no data directory: pass --data-dir or set FOYA_DATA_DIR")
}

/// Opens (or creates) the store of a data directory.
pub(crate) fn open_store(dir: &Path) -> anyhow::Result<Store> {
    open_store_with(dir, Durability::Immediate)
}

/// Opens (or creates) the store of a data directory with this commit durability.
pub(crate) fn open_store_with(dir: &Path, durability: Durability) -> anyhow::Result<Store> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let path = dir.join(STORE_FILE);
    let options = StoreOptions {
        durability,
        ..StoreOptions::default()
    };
    Store::open(&path, options).with_context(|| {
        format!(
            "cannot open {} (is another foya process using this data dir?)",
            path.display()
        )
    })
}

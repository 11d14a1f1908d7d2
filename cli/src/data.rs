//! Locating and opening the data directory's event store, and what the CLI says when
//! another process holds it.
//!
//! The lock protocol itself (the store file, the owner file naming its holder, the
//! readers' repair lock) is [`foya_storage::data_dir`].

use anyhow::Context as _;
use foya_storage::data_dir::{Owner, holder};
pub use foya_storage::data_dir::{release_owner, serving_url, store_path};
use foya_storage::{Durability, OpenError, ReadOnlyStore, Store, StoreOptions};
use std::path::{Path, PathBuf};

/// Variable naming the data directory when `--data-dir` is not given.
const DATA_DIR_ENV: &str = "FOYA_DATA_DIR";

/// `--data-dir`, else `$FOYA_DATA_DIR` when set and not empty (an empty value counts as
/// unset, as for most path variables: `FOYA_DATA_DIR= foya …` is not an error), else the
/// platform data dir.
pub fn data_dir(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = arg {
        return Ok(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    dirs::data_dir()
        .map(|d| d.join("foya"))
        .context("no data directory: pass --data-dir or set FOYA_DATA_DIR")
}

/// The attachment store (images users upload and images tools return): in the data
/// directory (`<data dir>/attachments`), or, when `store` is a shared store that keeps
/// attachments (PostgreSQL), in it, with the data directory as this process's copy.
pub fn attachments(
    dir: &Path,
    store: &foya_storage::LogStore,
) -> std::sync::Arc<foya_actors::AttachmentStore> {
    use foya_storage::EventLog as _;
    std::sync::Arc::new(foya_actors::AttachmentStore::with_shared(
        dir.join("attachments"),
        store.attachments(),
    ))
}

/// Creates the data directory (and missing parents) readable by the user alone (0700): it
/// holds every session's conversation, tool output and attachments. An existing directory
/// keeps its mode — the user chose it.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))
}

/// Opens (or creates) the store of a data directory.
pub fn open_store(dir: &Path) -> anyhow::Result<Store> {
    open_store_with(dir, Durability::Immediate)
}

/// Opens (or creates) the store of a data directory with this commit durability.
pub fn open_store_with(dir: &Path, durability: Durability) -> anyhow::Result<Store> {
    create_private_dir(dir)?;
    let path = store_path(dir);
    let options = StoreOptions {
        durability,
        ..StoreOptions::default()
    };
    match Store::open(&path, options) {
        Ok(store) => {
            record_owner(dir, None);
            crate::damage::report_losses(&path, store.losses());
            Ok(store)
        }
        Err(foya_storage::OpenError::AlreadyOpen { .. }) => Err(in_use(dir)),
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot open {}", path.display()))),
    }
}

/// Records this process as the holder of `dir`'s store (best effort; `url`: the base
/// URL of a `foya serve`).
pub fn record_owner(dir: &Path, url: Option<&str>) {
    foya_storage::data_dir::record_owner(dir, &Owner::this_process(&command(), url, None));
}

/// Records this process as the holder of `dir`'s store, a `foya node` listening on
/// `listen` (`host:port`, best effort).
pub fn record_node_owner(dir: &Path, listen: &str) {
    foya_storage::data_dir::record_owner(dir, &Owner::this_process(&command(), None, Some(listen)));
}

/// The subcommand this process runs (`serve`, `run`, …).
fn command() -> String {
    std::env::args().nth(1).unwrap_or_default()
}

/// The error for a data dir whose store another process holds: names the dir, the
/// holder (when its owner file names a live process) and how to get the information
/// from it instead.
pub fn in_use(dir: &Path) -> anyhow::Error {
    let owner = holder(dir);
    let holder = match &owner {
        Some(o) => match (&o.url, &o.listen) {
            (Some(url), _) => format!("foya {} (pid {}, {url})", o.command, o.pid),
            (None, Some(listen)) => {
                format!("foya {} (pid {}, listening on {listen})", o.command, o.pid)
            }
            (None, None) => format!("foya {} (pid {})", o.command, o.pid),
        },
        None => "another foya process".to_owned(),
    };
    let listen = owner.as_ref().and_then(|o| o.listen.as_deref());
    // Who can be asked for the sessions meanwhile: a server or a node; a one-shot command
    // (`run`, `chat`, `loadtest`) cannot, it ends on its own.
    let ask = match owner
        .as_ref()
        .map(|o| (o.command.as_str(), o.url.as_deref()))
    {
        Some(("serve", Some(url))) => Some(format!(
            "ask the server instead: GET {url}/sessions (e.g. curl {url}/sessions, with \
             -H 'Authorization: Bearer TOKEN' if it was started with --token-file)"
        )),
        Some(("node", _)) => Some(format!(
            "ask the node instead: foya sessions list --cluster {} --cookie-file FILE",
            listen.unwrap_or("HOST:PORT")
        )),
        Some(_) => None,
        None => Some(
            "ask a running `foya serve` over HTTP (GET /sessions) or a `foya node` with \
             foya sessions list --cluster HOST:PORT --cookie-file FILE"
                .to_owned(),
        ),
    };
    match ask {
        Some(ask) => anyhow::anyhow!(
            "the data dir {} is in use by {holder}: its store is locked while that process runs. \
             Stop it or use another --data-dir (one process uses a data dir at a time); to \
             see its sessions meanwhile, {ask}",
            dir.display()
        ),
        None => anyhow::anyhow!(
            "the data dir {} is in use by {holder}: its store is locked while that process runs. \
             Wait for it to end, stop it, or use another --data-dir (one process uses a data \
             dir at a time)",
            dir.display()
        ),
    }
}

/// Opens the store of a data directory only if it has one, with this commit durability:
/// `Ok(None)`, creating nothing, when the directory or its store file does not exist
/// ([`missing_store`] says which).
///
/// # Errors
/// The store exists but cannot be opened.
pub fn open_existing_store_with(
    dir: &Path,
    durability: Durability,
) -> anyhow::Result<Option<Store>> {
    if !store_path(dir).is_file() {
        return Ok(None);
    }
    open_store_with(dir, durability).map(Some)
}

/// A data directory's store opened for reading ([`open_existing_read_only`]).
#[derive(Debug)]
pub struct ReadView {
    /// What is read: the file itself, a private repaired copy of it (its last writer was
    /// killed), or what salvage reads of it (it is damaged).
    pub store: ReadOnlyStore,
    /// The store is damaged: what is read is what `foya store salvage` copies, and the
    /// command ends [`crate::exit::Ended::Damaged`] (exit status 4).
    pub damaged: bool,
}

/// Opens the store of a data directory for reading only, if it has one: `Ok(None)`,
/// creating nothing, when the directory or its store file does not exist
/// ([`missing_store`] says which). A reading command never writes the store's files:
///
/// - a sound file is read as it is;
/// - a file its last writer did not close (killed) is read through a private copy that
///   redb repairs as the next writable open will (one dimmed note on stderr);
/// - a damaged file (one redb refuses, a part that cannot be read, acknowledged events
///   missing after a repair) is read as `foya store salvage` reads it: every session
///   and event salvage would copy, from the btree or straight from the pages
///   ([`ReadOnlyStore::open_salvaged`]), after one line saying so; each session that
///   stops early or cannot be read is named. [`ReadView::damaged`] is then set.
///
/// An empty file that no acknowledgement journal claims (its creation was interrupted)
/// holds no sessions: `Ok(None)` after a note.
///
/// Whether a file reads is found by surveying it whole ([`Check::Whole`]), keeping only
/// what does not read.
///
/// # Errors
/// The store exists but cannot be opened; while another process writes it, the error
/// names that process ([`in_use`]); a file of a newer format.
pub async fn open_existing_read_only(dir: &Path) -> anyhow::Result<Option<ReadView>> {
    open_existing_read_only_checking(dir, Check::Whole).await
}

/// How much of a file that opens as it is (closed cleanly) a reading command looks at
/// for damage before it reads.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// Every session (a survey; only what does not read is kept).
    Whole,
    /// Only this page of the listing, which is all the command reads: when every
    /// session of it reads, so does the view; when one does not, the file is surveyed
    /// whole and read as [`Check::Whole`] reads it, so damage is named as it always is.
    /// A store of a million sessions lists its first page in milliseconds.
    Page(foya_storage::Page),
}

/// [`open_existing_read_only`], checking a file that opens as it is only as `check`
/// says (a file its last writer did not close, or that redb refuses, is always surveyed
/// whole).
///
/// # Errors
/// As [`open_existing_read_only`].
pub async fn open_existing_read_only_checking(
    dir: &Path,
    check: Check,
) -> anyhow::Result<Option<ReadView>> {
    let path = store_path(dir);
    if !path.is_file() {
        return Ok(None);
    }
    let refused = |e: OpenError| match e {
        OpenError::AlreadyOpen { .. } => in_use(dir),
        e => anyhow::Error::new(e).context(format!("cannot open {}", path.display())),
    };
    let found = match ReadOnlyStore::open(&path) {
        Ok(store) => match sound_as(&store, check) {
            Ok(()) => return Ok(Some(read_view(dir, &path, store, None))),
            Err(found) => damaged(&path, &found),
        },
        Err(OpenError::NotFound { .. }) => return Ok(None),
        Err(OpenError::NeedsRecovery { .. })
            if std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) =>
        {
            eprintln!(
                "foya: {} is empty (its creation was interrupted, and no event was ever \
                 acknowledged in it): no sessions are stored; the next command that writes \
                 creates it anew",
                path.display()
            );
            return Ok(None);
        }
        Err(OpenError::NeedsRecovery { .. }) => match ReadOnlyStore::open_damaged(&path) {
            Ok(store) => {
                let only_repaired = store
                    .damage()
                    .iter()
                    .all(|d| d == foya_storage::REPAIRED_NOTE);
                match sound(&store) {
                    Ok(()) if only_repaired => {
                        let note = format!(
                            "foya: {} was not closed by its last writer (killed): showing it \
                             as redb's repair keeps it, from a private copy (the file is left \
                             as it is; the next command that writes repairs it)",
                            path.display()
                        );
                        eprintln!("{}", crate::render::dim(&note));
                        return Ok(Some(read_view(dir, &path, store, None)));
                    }
                    Ok(()) => damaged(&path, &store.damage().join("; ")),
                    Err(found) => damaged(&path, &found),
                }
            }
            Err(e) if e.is_damage() => format!("{e}"),
            Err(e) => return Err(refused(e)),
        },
        Err(e @ OpenError::NewerFormat { .. }) => return Err(refused(e)),
        Err(e) if e.is_damage() => e.to_string(),
        Err(e) => return Err(refused(e)),
    };
    let (store, report) = match ReadOnlyStore::open_salvaged(&path).await {
        Ok(opened) => opened,
        Err(foya_storage::Error::Open(e)) => return Err(refused(e)),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot read {}", path.display())));
        }
    };
    eprintln!(
        "foya: {found}; showing what `foya store salvage` reads of it (from a private copy; \
         the file is left as it is); {}",
        crate::damage::DAMAGE_HINT
    );
    Ok(Some(read_view(dir, &path, store, Some(&report))))
}

/// What was found, as an open names it: `database F is damaged: …`.
fn damaged(path: &Path, found: &str) -> String {
    format!("database {} is damaged: {found}", path.display())
}

/// Whether a store opened for reading shows everything its file holds: every part of
/// it reads and no acknowledged event is missing; else what was found, in one line.
fn sound(store: &ReadOnlyStore) -> Result<(), String> {
    let unreadable = store.unreadable().map_err(|e| e.to_string())?;
    if let Some(first) = unreadable.first() {
        return Err(match first.session {
            Some(id) => format!("session {id} cannot be read: {}", first.reason),
            None => first.reason.clone(),
        });
    }
    // A repair that rolled back past acknowledged commits: the pages may still hold them.
    if store.is_copy() && !store.unrecorded_losses().is_empty() {
        return Err("redb's repair rolls it back past acknowledged events".to_owned());
    }
    Ok(())
}

/// [`sound`], looking only at what `check` names first (a page that reads whole is
/// enough; anything else is surveyed whole).
fn sound_as(store: &ReadOnlyStore, check: Check) -> Result<(), String> {
    if let Check::Page(page) = check
        && !store.is_copy()
        && store
            .survey_page(page)
            .is_ok_and(|survey| survey.unreadable.is_empty())
    {
        return Ok(());
    }
    sound(store)
}

/// The view of an opened store, after naming on stderr what it lacks: each session
/// `salvage` stops early or cannot copy, and acknowledged events it does not hold.
fn read_view(
    dir: &Path,
    path: &Path,
    store: ReadOnlyStore,
    salvaged: Option<&foya_storage::SalvageReport>,
) -> ReadView {
    // A writer refused meanwhile can name this process (best effort).
    record_owner(dir, None);
    let mut named = std::collections::HashSet::new();
    for session in salvaged.map_or(&[][..], |r| &r.sessions[..]) {
        let Some(why) = &session.stopped else {
            continue;
        };
        named.insert(session.id);
        let acknowledged = session
            .acknowledged
            .map(|a| format!(" (acknowledged up to seq {a})"))
            .unwrap_or_default();
        if session.copied == 0 {
            eprintln!(
                "foya: session {} cannot be read: {why}{acknowledged}",
                session.id
            );
        } else {
            eprintln!(
                "foya: session {} reads up to seq {}, the rest is lost: {why}{acknowledged}",
                session.id, session.copied
            );
        }
    }
    let losses: Vec<_> = store
        .unrecorded_losses()
        .into_iter()
        .filter(|l| !named.contains(&l.session))
        .collect();
    crate::damage::report_unrecorded_losses(path, &losses);
    ReadView {
        damaged: salvaged.is_some(),
        store,
    }
}

/// Opens the store of a data directory for work on the stored session `id`: `Ok(None)`,
/// creating nothing, after saying on stderr why there is no such session (`foya: no
/// session ID: data directory D does not exist`, `…: no sessions are stored in D`, or
/// just `foya: no session ID` when the store holds others).
///
/// # Errors
/// The store exists but cannot be opened or read.
pub fn open_for_session(
    dir: &Path,
    id: foya_protocol::SessionId,
    durability: Durability,
) -> anyhow::Result<Option<Store>> {
    let Some(store) = open_existing_store_with(dir, durability)? else {
        eprintln!("foya: no session {id}: {}", missing_store(dir));
        return Ok(None);
    };
    if store.session(id)?.is_none() {
        eprintln!("foya: no session {id}");
        return Ok(None);
    }
    Ok(Some(store))
}

/// [`open_for_session`] for a session that is to take a new input (`foya run --session`,
/// `foya chat --session`): also `Ok(None)` for a deleted session, after saying on stderr
/// that it was deleted and takes no more inputs.
///
/// # Errors
/// The store exists but cannot be opened or read.
pub fn open_for_input(
    dir: &Path,
    id: foya_protocol::SessionId,
    durability: Durability,
) -> anyhow::Result<Option<Store>> {
    let Some(store) = open_for_session(dir, id, durability)? else {
        return Ok(None);
    };
    if store.session(id)?.is_some_and(|s| s.deleted) {
        eprintln!(
            "foya: session {id} was deleted: it takes no more inputs (its events stay \
             readable with `foya sessions show {id}`)"
        );
        return Ok(None);
    }
    Ok(Some(store))
}

/// Why a data directory has no store: `data directory D does not exist` or `no sessions
/// are stored in D`.
pub fn missing_store(dir: &Path) -> String {
    if dir.is_dir() {
        format!("no sessions are stored in {}", dir.display())
    } else {
        format!("data directory {} does not exist", dir.display())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read_only(dir: &Path) -> Option<ReadView> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(open_existing_read_only(dir))
            .unwrap()
    }

    #[test]
    fn a_missing_data_dir_is_reported_and_not_created() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("absent");
        assert!(read_only(&dir).is_none());
        assert!(
            open_existing_store_with(&dir, Durability::Immediate)
                .unwrap()
                .is_none()
        );
        assert!(!dir.exists());
        assert_eq!(
            missing_store(&dir),
            format!("data directory {} does not exist", dir.display())
        );
        assert!(read_only(root.path()).is_none());
        assert!(
            open_existing_store_with(root.path(), Durability::Immediate)
                .unwrap()
                .is_none()
        );
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
        assert_eq!(
            missing_store(root.path()),
            format!("no sessions are stored in {}", root.path().display())
        );
    }

    #[test]
    fn a_new_data_dir_is_private_and_an_existing_one_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        drop(open_store(&dir).unwrap());
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&root.path().join("a")), 0o700);

        let shared = root.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o750)).unwrap();
        drop(open_store(&shared).unwrap());
        assert_eq!(mode(&shared), 0o750);
    }
}

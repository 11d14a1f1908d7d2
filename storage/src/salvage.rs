//! [`salvage`]: copying every readable session of a (damaged) database file, event by
//! event, into a fresh store, never writing to the old file.
//!
//! Events come from two readers, merged per session (an event is never changed once
//! committed, so both give the same event for a seq): the btree, through a
//! [`ReadOnlyStore::open_damaged`] copy (each session read inside the panic boundary,
//! in chunks, so a damaged page stops only its session), and the raw page scan
//! ([`crate::raw`]), which finds events whose tree is broken. Each session is copied
//! from seq 1 up to its first missing or damaged seq (its log must stay dense), through
//! an ordinary [`Store`], which rebuilds its summary. A session whose first event is
//! missing cannot be copied and is named.

use crate::error::{Error, OpenError};
use crate::open::{Source, open_file};
use crate::read_only::ReadOnlyStore;
use crate::store::{Store, StoreOptions};
use foya_protocol::{Event, EventKind, Seq, SessionId};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, RwLock};

/// Events read from the tree per read transaction.
const CHUNK: usize = 256;

/// What [`salvage`] did.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SalvageReport {
    /// Every session found, in id order.
    pub sessions: Vec<SalvagedSession>,
    /// What was found wrong with the old file while opening it (repair, truncation), or
    /// why its tree could not be read at all.
    pub notes: Vec<String>,
}

/// One session's salvage.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvagedSession {
    /// The session.
    pub id: SessionId,
    /// Events copied into the new store: seqs 1 to `copied` (0: the session could not be
    /// copied).
    pub copied: u64,
    /// The latest seq the old file's index names for it (`None`: unknown).
    pub indexed_last: Option<Seq>,
    /// The latest seq its acknowledgement journal names (`None`: no record).
    pub acknowledged: Option<Seq>,
    /// Why the copy ends where it does, when events are known (indexed, acknowledged or
    /// found) beyond it or it could not be copied at all.
    pub stopped: Option<String>,
}

impl SalvagedSession {
    /// Whether everything known of the session was copied.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.stopped.is_none()
    }
}

/// Copies every readable session of the database file at `from` into a new store at
/// `to`, never writing to `from` (it is read under a shared lock, through a private copy).
///
/// # Errors
/// [`OpenError::AlreadyOpen`] when a writer holds `from`, [`OpenError::NotFound`],
/// [`OpenError::Database`] when `to` exists and is not empty or cannot be created, any
/// error of appending to the new store.
pub async fn salvage(from: &Path, to: &Path) -> Result<SalvageReport, Error> {
    if std::fs::metadata(to).is_ok_and(|m| m.len() > 0) {
        return Err(OpenError::Database {
            path: to.to_owned(),
            message: "the salvage target already exists; give a new file".into(),
        }
        .into());
    }
    let mut report = SalvageReport::default();
    let copy = crate::recover::copy_locked(from)?;
    let raw = std::fs::read(&copy.path)
        .map(|bytes| crate::raw::scan(&bytes))
        .map_err(|e| OpenError::Database {
            path: from.to_owned(),
            message: e.to_string(),
        })?;
    drop(copy);
    let tree = match ReadOnlyStore::open_damaged(from) {
        Ok(store) => {
            report.notes.extend(store.damage().iter().cloned());
            Some(store)
        }
        Err(e) => {
            report.notes.push(format!(
                "its index cannot be opened ({e}); events were read from its pages directly"
            ));
            None
        }
    };
    // Sessions the index or the journal names; the pages may add more.
    let mut ids: BTreeSet<SessionId> = BTreeSet::new();
    if let Some(tree) = &tree {
        match tree.survey() {
            Ok(survey) => {
                ids.extend(survey.sessions.iter().map(|s| s.id));
                ids.extend(survey.unreadable.iter().filter_map(|u| u.session));
                for unreadable in survey.unreadable.iter().filter(|u| u.session.is_none()) {
                    report.notes.push(unreadable.reason.clone());
                }
            }
            Err(e) => report.notes.push(format!("its index cannot be read: {e}")),
        }
    }
    let acks = match crate::journal::load(&crate::journal::path_for(from)) {
        Ok(acks) => acks,
        Err(e) => {
            // Without it, what was acknowledged cannot be compared: say so.
            report.notes.push(format!(
                "the acknowledgement journal cannot be read ({e}): losses of acknowledged \
                 events are not known"
            ));
            Default::default()
        }
    };
    ids.extend(
        acks.seqs
            .keys()
            .map(|k| SessionId::from_bytes(k.to_be_bytes())),
    );
    let known = ids.clone();
    ids.extend(raw.keys().copied());
    let target = Store::open(to, StoreOptions::default())?;
    for id in ids {
        let mut events = raw.get(&id).cloned().unwrap_or_default();
        // Found only in the pages, without a first event, and unknown to the index and
        // the journal: most likely a damaged key, not a session; said, not copied.
        if !known.contains(&id) && !events.contains_key(&Seq::FIRST) {
            let (first, last) = (events.keys().next(), events.keys().next_back());
            if let (Some(first), Some(last)) = (first, last) {
                report.notes.push(format!(
                    "the pages hold events of an unknown session {id} (seqs {first} to \
                     {last}) without its first event, most likely a damaged key; not copied"
                ));
            }
            continue;
        }
        let mut tree_error = None;
        let mut indexed_last = None;
        if let Some(tree) = &tree {
            indexed_last = tree.last_seq(id).ok().flatten();
            tree_error = read_tree(tree, id, &mut events);
        }
        let acknowledged = acks
            .seqs
            .get(&crate::schema::session_key(id))
            .map(|s| Seq(*s));
        let dense = dense_prefix(&events);
        let copied = match dense.first() {
            Some(first) if matches!(first.kind, EventKind::SessionCreated { .. }) => {
                for chunk in dense.chunks(CHUNK) {
                    target.append_all(chunk).await?;
                }
                dense.len() as u64
            }
            _ => 0,
        };
        let mut paged_last = events.keys().next_back().copied();
        // With a sound index and a journal, an event that only the pages hold, past a gap
        // and past everything indexed or acknowledged, was never promised to anyone: most
        // likely a damaged key in a stale page. Said, not counted as missing.
        let promised = indexed_last.max(acknowledged);
        if let (Some(last), Some(promised)) = (paged_last, promised)
            && tree.is_some()
            && tree_error.is_none()
            && acknowledged.is_some()
            && last > promised
            && !events.contains_key(&Seq(copied + 1))
        {
            report.notes.push(format!(
                "the pages hold seq {last} of session {id} past a gap after seq {copied}, \
                 beyond what was indexed or acknowledged (seq {promised}): most likely a \
                 damaged key; not counted as missing"
            ));
            paged_last = None;
        }
        let known = [indexed_last, acknowledged, paged_last]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(Seq(0));
        let stopped = if copied == 0 {
            Some(match &tree_error {
                Some(e) => format!("its first event cannot be read: {e}"),
                None => "its first event (session_created) is missing".to_owned(),
            })
        } else if known.0 > copied {
            Some(match &tree_error {
                Some(e) if !events.contains_key(&Seq(copied + 1)) => {
                    format!("seq {} cannot be read: {e}", copied + 1)
                }
                _ => format!("seq {} is missing", copied + 1),
            })
        } else {
            None
        };
        report.sessions.push(SalvagedSession {
            id,
            copied,
            indexed_last,
            acknowledged,
            stopped,
        });
    }
    target.close().await;
    Ok(report)
}

impl ReadOnlyStore {
    /// Opens what [`crate::salvage`] can read of a damaged file, never writing to it:
    /// every readable session is salvaged into a fresh store in a private temporary
    /// directory (removed when the store is dropped), which is then read. So the
    /// sessions and events read are exactly what `salvage` copies: from the btree and,
    /// where it is broken, straight from the pages. [`ReadOnlyStore::damage`] holds the
    /// salvage's notes; the report names each session that stops early or could not be
    /// read. [`ReadOnlyStore::unrecorded_losses`] compares the file's journal with what
    /// was salvaged.
    ///
    /// # Errors
    /// As [`crate::salvage`]: [`OpenError::AlreadyOpen`] when a writer holds the file,
    /// [`OpenError::NotFound`], an I/O failure.
    pub async fn open_salvaged(
        path: &Path,
    ) -> Result<(ReadOnlyStore, SalvageReport), crate::Error> {
        let io = |e: std::io::Error| OpenError::Database {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let dir = crate::recover::private_tempdir("foya-store-salvaged-", None).map_err(io)?;
        let target = dir.path().join("salvaged.redb");
        let report = salvage(path, &target).await?;
        let file = std::fs::File::open(&target).map_err(io)?;
        let db = open_file(&target, file)?;
        let store = ReadOnlyStore {
            db: RwLock::new(Some(Arc::new(Source::File(db)))),
            location: path.to_owned(),
            copy: Some(crate::recover::Copy::kept(dir, target)),
            damage: report.notes.clone(),
        };
        Ok((store, report))
    }
}

/// Adds the session's events readable through the tree to `events`, in chunks; returns
/// the error that stopped the reading, if any.
fn read_tree(
    tree: &ReadOnlyStore,
    id: SessionId,
    events: &mut BTreeMap<Seq, Event>,
) -> Option<crate::ReadError> {
    let mut from = Seq::FIRST;
    let mut limit = CHUNK;
    loop {
        match tree.read_range(id, from, limit) {
            Ok(chunk) => {
                chunk.last()?;
                // A damaged key (in a leaf, or a branch page's separator) can make the
                // index return seqs out of order, even before `from`: what it returned in
                // order is taken, the rest is damage (asking again from there would
                // return the same chunk forever).
                for event in chunk {
                    if event.seq < from {
                        return Some(crate::ReadError::Corrupt(format!(
                            "the index returns seq {} where seq {from} or later belongs \
                             (a damaged key)",
                            event.seq
                        )));
                    }
                    from = event.seq.next();
                    events.insert(event.seq, event);
                }
            }
            // Find the first bad event one at a time.
            Err(_) if limit > 1 => limit = 1,
            Err(e) => return Some(e),
        }
    }
}

/// The events from seq 1 up to the first missing seq, and nothing after a
/// `session_deleted`.
fn dense_prefix(events: &BTreeMap<Seq, Event>) -> Vec<Event> {
    let mut out = Vec::new();
    let mut expected = Seq::FIRST;
    for (seq, event) in events {
        if *seq != expected {
            break;
        }
        out.push(event.clone());
        if matches!(event.kind, EventKind::SessionDeleted {}) {
            break;
        }
        expected = expected.next();
    }
    out
}

//! [`check`]: verifying a database file without changing it — redb's own integrity
//! check (every page checksum of the committed trees, on a private copy, since it
//! repairs what it finds) and the log's invariants: every session's seqs dense from 1,
//! its first event `session_created` and nothing after `session_deleted`, every event
//! decodes, its summary agrees with its log, and no session holds fewer events than its
//! acknowledgement journal says were acknowledged.

use crate::error::OpenError;
use crate::read_only::ReadOnlyStore;
use crate::writer::{EventMeta, next_summary};
use foya_protocol::{EventKind, Seq, SessionSummary};
use std::path::Path;

/// Events read per read transaction.
const CHUNK: usize = 256;

/// What [`check`] found.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CheckReport {
    /// Sessions whose log was checked.
    pub sessions: usize,
    /// Events read.
    pub events: u64,
    /// Every problem found, one line each (empty: the file is sound).
    pub problems: Vec<String>,
    /// What is worth knowing but is no damage: the file was not closed cleanly (its
    /// writer was killed) and needs redb's repair, which the next writable open runs;
    /// records of the acknowledgement journal that do not check.
    pub notes: Vec<String>,
    /// Losses found and reported earlier (by an open), from `<file>.losses`: they stay
    /// listed here, but are not problems of the file as it is now.
    pub earlier_losses: Vec<crate::Loss>,
}

impl CheckReport {
    /// Whether no problem was found.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the database file at `path` (see the module doc), never writing to it.
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::AlreadyOpen`] when a writer holds the file,
/// [`OpenError::Database`] for an I/O failure. A damaged file is not an error: its
/// damage is the report's problems.
pub fn check(path: &Path) -> Result<CheckReport, OpenError> {
    let mut report = CheckReport {
        earlier_losses: crate::recorded_losses(path),
        ..CheckReport::default()
    };
    redb_check(path, &mut report)?;
    if let Some(problem) = crate::header::layout_problem(path) {
        report.problems.push(problem);
    }
    let store = match ReadOnlyStore::open_damaged(path) {
        Ok(store) => store,
        Err(e @ (OpenError::AlreadyOpen { .. } | OpenError::NotFound { .. })) => return Err(e),
        Err(e) => {
            report.problems.push(format!("no session can be read: {e}"));
            journal_check(path, None, &mut report);
            return Ok(report);
        }
    };
    for found in store.damage() {
        // A repair alone is no damage (a killed writer leaves a file needing one); what
        // it kept is checked below, against the journal too.
        if found != crate::recover::REPAIRED {
            report.problems.push(found.clone());
        }
    }
    match store.survey() {
        Ok(survey) => {
            for unreadable in &survey.unreadable {
                report.problems.push(match unreadable.session {
                    Some(id) => format!("session {id} cannot be read: {}", unreadable.reason),
                    None => unreadable.reason.clone(),
                });
            }
            for summary in &survey.sessions {
                check_session(&store, summary, &mut report);
            }
        }
        Err(e) => report.problems.push(format!("no session can be read: {e}")),
    }
    journal_check(path, Some(&store), &mut report);
    Ok(report)
}

/// redb's integrity check, on a private copy.
fn redb_check(path: &Path, report: &mut CheckReport) -> Result<(), OpenError> {
    let copy = crate::recover::copy_locked(path)?;
    if std::fs::metadata(&copy.path).is_ok_and(|m| m.len() == 0) {
        report.problems.push("the file is empty".to_owned());
        return Ok(());
    }
    match crate::recover::open_writable(&copy.path, path) {
        Ok((mut db, repaired)) => {
            if repaired {
                // A killed writer leaves this; what the repair keeps is checked below (a
                // rollback past acknowledged events shows against the journal).
                report.notes.push(
                    "it was not closed cleanly and needs redb's repair (the next writable \
                     open runs it); checked as repaired"
                        .to_owned(),
                );
            }
            match crate::guard::contain("checking integrity", || db.check_integrity()) {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => report.problems.push(
                    "redb's integrity check found damaged pages (a checksum does not match); \
                     redb can repair it only by rolling back to an earlier intact state"
                        .to_owned(),
                ),
                Ok(Err(e)) => report
                    .problems
                    .push(format!("redb's integrity check failed: {e}")),
                Err(message) => report.problems.push(message),
            }
            crate::guard::drop_contained(db);
        }
        Err(e) => report
            .problems
            .push(format!("redb cannot open it, even to repair it: {e}")),
    }
    Ok(())
}

/// Checks one session's log against its summary.
fn check_session(store: &ReadOnlyStore, summary: &SessionSummary, report: &mut CheckReport) {
    let id = summary.id;
    report.sessions += 1;
    let mut metas = Vec::new();
    let mut from = Seq::FIRST;
    let mut deleted_at = None;
    loop {
        let chunk = match store.read_range(id, from, CHUNK) {
            Ok(chunk) => chunk,
            Err(e) => {
                report.problems.push(format!(
                    "session {id}: events from seq {from} cannot be read: {e}"
                ));
                return;
            }
        };
        let Some(last) = chunk.last().map(|e| e.seq) else {
            break;
        };
        for event in &chunk {
            report.events += 1;
            let expected = Seq(metas.len() as u64 + 1);
            if event.seq != expected {
                report.problems.push(format!(
                    "session {id}: seq {expected} is missing (the next event has seq {})",
                    event.seq
                ));
                return;
            }
            if event.seq == Seq::FIRST && !matches!(event.kind, EventKind::SessionCreated { .. }) {
                report.problems.push(format!(
                    "session {id}: its first event is not session_created"
                ));
            }
            if let Some(at) = deleted_at {
                report.problems.push(format!(
                    "session {id}: seq {} follows session_deleted (seq {at})",
                    event.seq
                ));
                return;
            }
            if matches!(event.kind, EventKind::SessionDeleted {}) {
                deleted_at = Some(event.seq);
            }
            metas.push(EventMeta::of(event));
        }
        from = last.next();
    }
    match next_summary(None, &metas) {
        Ok(expected) => {
            let same = expected.title == summary.title
                && expected.cwd == summary.cwd
                && expected.model == summary.model
                && expected.created_at_ms == summary.created_at_ms
                && expected.deleted == summary.deleted
                && expected.last_seq == summary.last_seq;
            if !same {
                report.problems.push(format!(
                    "session {id}: its summary does not match its log (summary: title {:?}, \
                     deleted {}, last seq {}; log: title {:?}, deleted {}, last seq {})",
                    summary.title,
                    summary.deleted,
                    summary.last_seq,
                    expected.title,
                    expected.deleted,
                    expected.last_seq
                ));
            }
        }
        Err(e) => report
            .problems
            .push(format!("session {id}: its log is not valid: {e}")),
    }
}

/// Compares the acknowledgement journal with what the file holds.
fn journal_check(path: &Path, store: Option<&ReadOnlyStore>, report: &mut CheckReport) {
    let acks = match crate::journal::load(&crate::journal::path_for(path)) {
        Ok(acks) => acks,
        Err(e) => {
            report
                .problems
                .push(format!("the acknowledgement journal cannot be read: {e}"));
            return;
        }
    };
    if acks.damaged_records > 0 {
        report.notes.push(format!(
            "{} record(s) of the acknowledgement journal {} do not check (damaged or torn) \
             and were skipped: a loss in their sessions cannot be told",
            acks.damaged_records,
            crate::journal::path_for(path).display()
        ));
    }
    let mut acked: Vec<_> = acks.seqs.into_iter().collect();
    acked.sort_unstable();
    for (key, acknowledged) in acked {
        let id = foya_protocol::SessionId::from_bytes(key.to_be_bytes());
        let found = store.and_then(|s| s.last_seq(id).ok().flatten());
        if found.map_or(0, |s| s.0) < acknowledged {
            report.problems.push(format!(
                "session {id}: {} acknowledged events are missing (acknowledged up to seq \
                 {acknowledged}, the file holds up to seq {})",
                acknowledged - found.map_or(0, |s| s.0),
                found.map_or(0, |s| s.0)
            ));
        }
    }
}

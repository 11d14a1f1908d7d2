//! Crash safety with a real process kill: this test binary re-runs itself as a child
//! that appends in a loop with `Durability::Immediate` and prints every acknowledged
//! seq; the parent SIGKILLs it mid-stream (twice, the second child continuing the first
//! one's file) and checks that every acknowledged event survived, each log is dense,
//! decodes, and agrees with its session summary. A killed writer's file is refused by
//! [`ReadOnlyStore::open`] (it needs recovery) without being touched, and reads in full
//! read-only once a writable open repaired it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use foya_protocol::{Seq, SessionId};
use foya_storage::{OpenError, ReadOnlyStore, Store, StoreOptions};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Set in the child: the database file it writes to.
const CHILD_ENV: &str = "FOYA_STORAGE_CRASH_CHILD_DB";
/// Sessions the child writes to concurrently.
const SESSIONS: usize = 4;
/// Acknowledgements the parent waits for before each kill.
const ACKS_BEFORE_KILL: usize = 150;
/// One global bound for the whole test.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The child's entry point. In a normal test run (no `CHILD_ENV`) it has nothing to do.
#[test]
fn crash_child_writer() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Store::open(Path::new(&path), StoreOptions::default()).unwrap();
        let mut sessions: Vec<(SessionId, u64)> = store
            .list_sessions()
            .unwrap()
            .into_iter()
            .map(|s| (s.id, s.last_seq.0 + 1))
            .collect();
        while sessions.len() < SESSIONS {
            sessions.push((SessionId::new(), 1));
        }
        for (session, mut next) in sessions {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    let last = next + next % 3; // batches of 1 to 3 events
                    store
                        .append(common::log(session, next, last))
                        .await
                        .unwrap();
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {session} {last}").unwrap();
                    out.flush().unwrap();
                    next = last + 1;
                }
            });
        }
        // Until SIGKILL. (A failing append panics its task: acks stop and the parent fails.)
        std::future::pending::<()>().await;
    });
}

/// Runs one child on `path` until it acknowledged `ACKS_BEFORE_KILL` appends, SIGKILLs
/// it, and returns every acknowledgement it printed (session → highest acked seq).
fn run_and_kill(path: &Path, deadline: Instant, acked: &mut HashMap<SessionId, u64>) {
    // The child test's name in this binary: its module path without the crate's name.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &format!("{module}::crash_child_writer")])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut record = |line: String, count: &mut usize| {
        if let Some(rest) = line.strip_prefix("ACK ") {
            let (session, seq) = rest.split_once(' ').unwrap();
            let (session, seq): (SessionId, u64) = (session.parse().unwrap(), seq.parse().unwrap());
            let entry = acked.entry(session).or_default();
            *entry = (*entry).max(seq);
            *count += 1;
        }
    };
    let mut count = 0;
    while count < ACKS_BEFORE_KILL {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => record(line, &mut count),
            Err(e) => {
                let _ = child.kill();
                panic!("child stopped acknowledging after {count} acks: {e}");
            }
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no close, mid-commit.
    child.wait().unwrap();
    reader.join().unwrap();
    // Lines printed before the kill were acknowledged too.
    for line in lines.try_iter() {
        record(line, &mut count);
    }
}

#[test]
fn acknowledged_events_survive_sigkill() {
    let deadline = Instant::now() + TIMEOUT;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acked = HashMap::new();
    run_and_kill(&path, deadline, &mut acked);
    let after_first: HashMap<SessionId, u64> = acked.clone();
    run_and_kill(&path, deadline, &mut acked); // the second child resumes the first's file
    assert_eq!(
        acked.len(),
        SESSIONS,
        "the second child continued the same sessions"
    );
    assert!(
        acked
            .iter()
            .any(|(s, seq)| after_first.get(s).is_some_and(|first| seq > first))
    );

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let summaries = store.list_sessions().unwrap();
    assert_eq!(summaries.len(), SESSIONS);
    for (session, acked_seq) in acked {
        let events = store.read_from(session, Seq(1)).unwrap();
        let last = events.len() as u64;
        assert!(
            last >= acked_seq,
            "session {session}: acked {acked_seq}, found {last}"
        );
        assert_eq!(
            events,
            common::log(session, 1, last),
            "session {session} is dense and decodes"
        );
        assert_eq!(store.last_seq(session).unwrap(), Some(Seq(last)));
        let summary = store.session(session).unwrap().unwrap();
        assert_eq!(
            (summary.last_seq, summary.updated_at_ms),
            (Seq(last), 1000 + last)
        );
    }
}

#[test]
fn a_killed_writers_file_needs_recovery_read_only_and_reads_fully_once_repaired() {
    let deadline = Instant::now() + TIMEOUT;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut acked = HashMap::new();
    run_and_kill(&path, deadline, &mut acked);
    let killed = std::fs::read(&path).unwrap();

    // redb refuses to read it without its repair, which would write: nothing changed.
    match ReadOnlyStore::open(&path) {
        Err(OpenError::NeedsRecovery { path: named }) => assert_eq!(named, path),
        other => panic!("expected NeedsRecovery, got {other:?}"),
    }
    assert!(std::fs::read(&path).unwrap() == killed, "the file changed");

    // A writable open repairs it; closed, it reads read-only, every acked event there.
    drop(Store::open(&path, StoreOptions::default()).unwrap());
    let repaired = std::fs::read(&path).unwrap();
    let store = ReadOnlyStore::open(&path).unwrap();
    let summaries = store.list_sessions().unwrap();
    assert_eq!(summaries.len(), SESSIONS);
    for summary in summaries {
        let acked_seq = acked[&summary.id];
        let events = store.read_from(summary.id, Seq(1)).unwrap();
        let last = events.len() as u64;
        assert!(last >= acked_seq, "acked {acked_seq}, found {last}");
        assert_eq!(events, common::log(summary.id, 1, last));
        assert_eq!(
            (summary.last_seq, summary.updated_at_ms),
            (Seq(last), 1000 + last)
        );
        assert_eq!(store.session(summary.id).unwrap(), Some(summary.clone()));
        assert_eq!(store.last_seq(summary.id).unwrap(), Some(Seq(last)));
    }
    drop(store);
    assert!(
        std::fs::read(&path).unwrap() == repaired,
        "reading changed the file"
    );
}

//! The conformance suite of the storage seam (feature `conformance`): the same checks
//! run against every [`EventLog`] — the redb [`crate::Store`] in this crate's tests,
//! PostgreSQL in `foya-storage-pg`'s. Each check takes a fresh, empty log and panics (it
//! is test code) when the log breaks a rule of the seam (`log.rs`).
//!
//! A test crate instantiates the whole suite with [`crate::conformance_tests!`], naming
//! an async function that returns a fresh log:
//!
//! ```text
//! async fn fresh() -> foya_storage::Store { /* … */ }
//! foya_storage::conformance_tests!(fresh);
//! ```
//!
//! The fencing checks ([`crate::fencing_conformance_tests!`]) also need the engine's
//! way of granting and taking away a shard ([`ShardControl`]): a function returning a fresh
//! log and its [`ShardControl`]. A single-node store (redb) is always the owner of every
//! shard ([`SingleNode`]): its fences are never stale, and the checks assert that
//! every fence is accepted; a shared engine's (PostgreSQL's) go stale when another node
//! takes the shard, and the checks assert that every write path refuses them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::{AppendError, Cursor, EventLog, Fence, Page};
use foya_protocol::{
    Event, EventKind, Input, InputId, RunId, Seq, SessionConfig, SessionId, TitleSource, TurnStatus,
};
use std::future::Future;

/// Generates one `#[tokio::test]` per check of the suite, each on `$fresh().await`.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:path) => {
        $crate::conformance_tests!(@each $fresh;
            appends_and_reads_back,
            empty_append_is_ok,
            refuses_gaps_and_duplicates,
            first_event_must_be_session_created_at_one,
            refuses_mixed_sessions,
            nothing_after_session_deleted,
            keeps_the_recovery_index,
            keeps_the_summary,
            lists_sessions_in_pages,
            refusal_is_local_to_its_append,
            many_sessions_concurrently,
            close_refuses_later_appends);
    };
    (@each $fresh:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::conformance::$name($fresh().await).await;
            }
        )*
    };
}

/// Generates one `#[tokio::test]` per fencing check, each on `$fresh_owned().await`, an
/// async function returning a fresh log and its [`ShardControl`].
#[macro_export]
macro_rules! fencing_conformance_tests {
    ($fresh_owned:path) => {
        $crate::fencing_conformance_tests!(@each $fresh_owned;
            the_owners_fenced_writes_commit_on_every_path,
            a_stale_fence_is_refused_on_every_write_path,
            a_stale_fence_does_not_fail_the_others_of_its_batch);
    };
    (@each $fresh_owned:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (log, ownership) = $fresh_owned().await;
                $crate::conformance::$name(log, ownership).await;
            }
        )*
    };
}

/// How a test grants this node a session's shard and lets another node take it.
pub trait ShardControl: Send + Sync + 'static {
    /// A fence under which the store accepts `session`'s writes: this node owns the
    /// session's shard (claimed now, or already).
    fn own(&self, session: SessionId) -> impl Future<Output = Fence> + Send;
    /// Another node takes over the shard `fence` names, so that `fence` is stale.
    /// `false` when the store has no other node (a single-node store).
    fn take_over(&self, fence: Fence) -> impl Future<Output = bool> + Send;
}

/// The ownership of a single-node store (redb): one process writes the data directory
/// (its lock is the fence), so this node owns every shard and no fence is ever stale.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleNode;

impl ShardControl for SingleNode {
    async fn own(&self, _session: SessionId) -> Fence {
        Fence::Epoch { shard: 0, epoch: 1 }
    }
    async fn take_over(&self, _fence: Fence) -> bool {
        false
    }
}

fn event(session: SessionId, seq: u64, kind: EventKind) -> Event {
    Event {
        session_id: session,
        seq: Seq(seq),
        run_id: None,
        at_ms: 1_700_000_000_000 + seq,
        kind,
    }
}

fn created(session: SessionId) -> Event {
    let mut config = SessionConfig::new("/work/project");
    config.model = "sim-1".into();
    config.title = Some("first".into());
    event(session, 1, EventKind::SessionCreated { config })
}

fn step(session: SessionId, seq: u64) -> Event {
    Event {
        run_id: Some(RunId::new()),
        ..event(session, seq, EventKind::StepStarted { step: 1 })
    }
}

async fn create<L: EventLog>(log: &L) -> SessionId {
    let session = SessionId::new();
    log.append(&[created(session)], Fence::None).await.unwrap();
    session
}

/// Appended events read back whole and in order; ranges, last seq.
pub async fn appends_and_reads_back<L: EventLog>(log: L) {
    let session = SessionId::new();
    let events: Vec<Event> = std::iter::once(created(session))
        .chain((2..=6).map(|seq| step(session, seq)))
        .collect();
    log.append(&events[..2], Fence::None).await.unwrap();
    log.append(&events[2..], Fence::None).await.unwrap();
    assert_eq!(log.read_from(session, Seq::FIRST).await.unwrap(), events);
    assert_eq!(log.read_from(session, Seq(4)).await.unwrap(), events[3..]);
    assert_eq!(
        log.read_range(session, Seq(2), 2).await.unwrap(),
        events[1..3]
    );
    assert_eq!(log.read_from(session, Seq(7)).await.unwrap(), vec![]);
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(6)));
    let unknown = SessionId::new();
    assert_eq!(log.last_seq(unknown).await.unwrap(), None);
    assert_eq!(log.read_from(unknown, Seq::FIRST).await.unwrap(), vec![]);
    assert_eq!(log.session(unknown).await.unwrap(), None);
    assert_eq!(log.stats().appended_events, 6);
    log.close().await;
}

/// An empty append resolves at once and writes nothing.
pub async fn empty_append_is_ok<L: EventLog>(log: L) {
    log.append(&[], Fence::None).await.unwrap();
    assert_eq!(log.list_sessions(Page::ALL).await.unwrap(), vec![]);
    log.close().await;
}

/// Gaps and duplicates are refused; nothing of a refused append is written.
pub async fn refuses_gaps_and_duplicates<L: EventLog>(log: L) {
    let session = create(&log).await;
    let gap = log.append(&[step(session, 3)], Fence::None).await;
    assert_eq!(
        gap,
        Err(AppendError::SeqMismatch {
            expected: Seq(2),
            got: Seq(3)
        })
    );
    let duplicate = log
        .append(&[step(session, 1), step(session, 2)], Fence::None)
        .await;
    assert_eq!(
        duplicate,
        Err(AppendError::SeqMismatch {
            expected: Seq(2),
            got: Seq(1)
        })
    );
    let not_dense = log
        .append(&[step(session, 2), step(session, 4)], Fence::None)
        .await;
    assert!(
        matches!(not_dense, Err(AppendError::SeqMismatch { .. })),
        "{not_dense:?}"
    );
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(1)));
    log.append(&[step(session, 2)], Fence::None).await.unwrap();
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(2)));
    log.close().await;
}

/// A session starts with `session_created` at seq 1.
pub async fn first_event_must_be_session_created_at_one<L: EventLog>(log: L) {
    let session = SessionId::new();
    assert_eq!(
        log.append(&[step(session, 1)], Fence::None).await,
        Err(AppendError::UnknownSession)
    );
    let mut late = created(session);
    late.seq = Seq(2);
    assert_eq!(
        log.append(&[late], Fence::None).await,
        Err(AppendError::SeqMismatch {
            expected: Seq(1),
            got: Seq(2)
        })
    );
    assert_eq!(log.session(session).await.unwrap(), None);
    assert_eq!(log.list_sessions(Page::ALL).await.unwrap(), vec![]);
    log.close().await;
}

/// One append holds one session's events.
pub async fn refuses_mixed_sessions<L: EventLog>(log: L) {
    let (a, b) = (SessionId::new(), SessionId::new());
    let mixed = log.append(&[created(a), step(b, 2)], Fence::None).await;
    assert!(
        matches!(mixed, Err(AppendError::MixedSessions { .. })),
        "{mixed:?}"
    );
    assert_eq!(log.session(a).await.unwrap(), None);
    log.close().await;
}

/// Nothing is appended after `session_deleted`, in a later append or the same one.
pub async fn nothing_after_session_deleted<L: EventLog>(log: L) {
    let session = create(&log).await;
    log.append(
        &[event(session, 2, EventKind::SessionDeleted {})],
        Fence::None,
    )
    .await
    .unwrap();
    assert_eq!(
        log.append(&[step(session, 3)], Fence::None).await,
        Err(AppendError::SessionDeleted)
    );
    assert!(log.session(session).await.unwrap().unwrap().deleted);

    let other = create(&log).await;
    let same_append = log
        .append(
            &[
                event(other, 2, EventKind::SessionDeleted {}),
                step(other, 3),
            ],
            Fence::None,
        )
        .await;
    assert_eq!(same_append, Err(AppendError::SessionDeleted));
    assert_eq!(log.last_seq(other).await.unwrap(), Some(Seq(1)));
    assert!(!log.session(other).await.unwrap().unwrap().deleted);
    log.close().await;
}

/// The recovery index follows queued inputs and open turns, and forgets deleted
/// sessions.
pub async fn keeps_the_recovery_index<L: EventLog>(log: L) {
    let pending = |log: L| async move {
        let mut ids = log.pending_sessions().await.unwrap();
        ids.sort();
        ids
    };
    let (a, b, c) = (create(&log).await, create(&log).await, create(&log).await);
    assert_eq!(pending(log.clone()).await, vec![]);
    let (first, second) = (InputId::new(), InputId::new());
    let queued = |input_id| EventKind::InputQueued {
        input_id,
        input: Input::text("hi"),
    };
    log.append(
        &[event(a, 2, queued(first)), event(a, 3, queued(second))],
        Fence::None,
    )
    .await
    .unwrap();
    log.append(&[event(b, 2, queued(InputId::new()))], Fence::None)
        .await
        .unwrap();
    log.append(&[event(c, 2, queued(InputId::new()))], Fence::None)
        .await
        .unwrap();
    let mut all = vec![a, b, c];
    all.sort();
    assert_eq!(pending(log.clone()).await, all);

    // a: both inputs run; pending while a turn is open or an input waits.
    let started = |input_id| EventKind::TurnStarted { input_id };
    let complete = EventKind::TurnComplete {
        status: TurnStatus::Completed,
        reason: None,
        error: None,
    };
    log.append(&[event(a, 4, started(first))], Fence::None)
        .await
        .unwrap();
    log.append(
        &[event(a, 5, complete.clone()), event(a, 6, started(second))],
        Fence::None,
    )
    .await
    .unwrap();
    assert!(pending(log.clone()).await.contains(&a));
    log.append(&[event(a, 7, complete)], Fence::None)
        .await
        .unwrap();
    // b: its input is dropped; c: deleted.
    let b_input = match &log.read_from(b, Seq(2)).await.unwrap()[0].kind {
        EventKind::InputQueued { input_id, .. } => *input_id,
        other => panic!("{other:?}"),
    };
    log.append(
        &[event(
            b,
            3,
            EventKind::InputDropped {
                input_id: b_input,
                reason: "queue cleared".into(),
            },
        )],
        Fence::None,
    )
    .await
    .unwrap();
    log.append(&[event(c, 3, EventKind::SessionDeleted {})], Fence::None)
        .await
        .unwrap();
    assert_eq!(pending(log.clone()).await, vec![]);
    log.close().await;
}

/// The summary: cwd, model and title from the config, a later title, the latest event's
/// seq and time, the deleted flag.
pub async fn keeps_the_summary<L: EventLog>(log: L) {
    let session = create(&log).await;
    let summary = log.session(session).await.unwrap().unwrap();
    assert_eq!(summary.id, session);
    assert_eq!(summary.title.as_deref(), Some("first"));
    assert_eq!(summary.cwd, std::path::Path::new("/work/project"));
    assert_eq!(summary.model, "sim-1");
    assert_eq!(summary.created_at_ms, 1_700_000_000_001);
    assert_eq!(summary.updated_at_ms, 1_700_000_000_001);
    assert_eq!(summary.last_seq, Seq(1));
    assert!(!summary.deleted);
    log.append(
        &[
            step(session, 2),
            event(
                session,
                3,
                EventKind::TitleSet {
                    title: "second".into(),
                    source: TitleSource::Generated,
                },
            ),
            step(session, 4),
        ],
        Fence::None,
    )
    .await
    .unwrap();
    let summary = log.session(session).await.unwrap().unwrap();
    assert_eq!(summary.title.as_deref(), Some("second"));
    assert_eq!(summary.last_seq, Seq(4));
    assert_eq!(summary.updated_at_ms, 1_700_000_000_004);
    assert_eq!(summary.created_at_ms, 1_700_000_000_001);
    log.close().await;
}

/// The listing: most recently updated first, ties newer id first, deleted ones
/// included; pages resume after a cursor.
pub async fn lists_sessions_in_pages<L: EventLog>(log: L) {
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(create(&log).await);
    }
    // All created at the same ms: ties newer id first (ids are UUIDv7, increasing).
    ids.sort();
    ids.reverse();
    // The oldest one gets a later event: it comes first.
    let oldest = ids[4];
    log.append(&[step(oldest, 2), step(oldest, 3)], Fence::None)
        .await
        .unwrap();
    log.append(
        &[event(ids[0], 2, EventKind::SessionDeleted {})],
        Fence::None,
    )
    .await
    .unwrap();
    let expected = vec![oldest, ids[0], ids[1], ids[2], ids[3]];
    let all: Vec<SessionId> = log
        .list_sessions(Page::ALL)
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(all, expected);
    let mut paged = Vec::new();
    let mut page = Page::first(2);
    loop {
        let got = log.list_sessions(page).await.unwrap();
        assert!(got.len() <= 2);
        let Some(last) = got.last() else { break };
        page = Page::after(Cursor::after(last), 2);
        paged.extend(got.iter().map(|s| s.id));
    }
    assert_eq!(paged, expected);
    assert!(
        log.list_sessions(Page::ALL).await.unwrap()[1].deleted,
        "deleted sessions are listed, flagged"
    );
    log.close().await;
}

/// Appends committed together (group commit) stay independent: one refused append does
/// not affect the others.
pub async fn refusal_is_local_to_its_append<L: EventLog>(log: L) {
    let sessions: Vec<SessionId> = {
        let mut out = Vec::new();
        for _ in 0..8 {
            out.push(create(&log).await);
        }
        out
    };
    let appends = sessions.iter().enumerate().map(|(i, session)| {
        let log = log.clone();
        let session = *session;
        // Every third append has a gap.
        let seq = if i % 3 == 0 { 5 } else { 2 };
        async move { (i, log.append(&[step(session, seq)], Fence::None).await) }
    });
    let results = join_all(appends).await;
    for (i, result) in results {
        if i % 3 == 0 {
            assert!(
                matches!(result, Err(AppendError::SeqMismatch { .. })),
                "{result:?}"
            );
            assert_eq!(log.last_seq(sessions[i]).await.unwrap(), Some(Seq(1)));
        } else {
            result.unwrap();
            assert_eq!(log.last_seq(sessions[i]).await.unwrap(), Some(Seq(2)));
        }
    }
    log.close().await;
}

/// Many sessions appending at once: every log dense and complete.
pub async fn many_sessions_concurrently<L: EventLog>(log: L) {
    const SESSIONS: usize = 40;
    const APPENDS: u64 = 15;
    let tasks = (0..SESSIONS).map(|_| {
        let log = log.clone();
        tokio::spawn(async move {
            let session = create(&log).await;
            for seq in 2..=APPENDS + 1 {
                log.append(&[step(session, seq)], Fence::None)
                    .await
                    .unwrap();
            }
            session
        })
    });
    let sessions = join_all(tasks).await;
    for session in sessions {
        let session = session.unwrap();
        let seqs: Vec<u64> = log
            .read_from(session, Seq::FIRST)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq.0)
            .collect();
        assert_eq!(seqs, (1..=APPENDS + 1).collect::<Vec<_>>());
    }
    assert_eq!(log.stats().appended_events, SESSIONS as u64 * (APPENDS + 1));
    log.close().await;
}

/// After close, appends fail with [`AppendError::Closed`]; what was committed stays.
pub async fn close_refuses_later_appends<L: EventLog>(log: L) {
    let session = create(&log).await;
    log.close().await;
    log.close().await;
    assert_eq!(
        log.append(&[step(session, 2)], Fence::None).await,
        Err(AppendError::Closed)
    );
}

/// Awaits every future concurrently (on this task), in order.
async fn join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in pinned.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *slot = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// Every write path of a session under its owner's fence commits: creation, queued
/// inputs and turns (the recovery index), titles (the summary), deletion.
pub async fn the_owners_fenced_writes_commit_on_every_path<L: EventLog, O: ShardControl>(
    log: L,
    ownership: O,
) {
    let session = SessionId::new();
    let fence = ownership.own(session).await;
    log.append(&[created(session)], fence).await.unwrap();
    let input_id = InputId::new();
    log.append(
        &[
            event(
                session,
                2,
                EventKind::InputQueued {
                    input_id,
                    input: Input::text("hi"),
                },
            ),
            event(session, 3, EventKind::TurnStarted { input_id }),
        ],
        fence,
    )
    .await
    .unwrap();
    assert_eq!(log.pending_sessions().await.unwrap(), vec![session]);
    log.append(
        &[
            event(
                session,
                4,
                EventKind::TitleSet {
                    title: "fenced".into(),
                    source: TitleSource::User,
                },
            ),
            event(
                session,
                5,
                EventKind::TurnComplete {
                    status: TurnStatus::Completed,
                    reason: None,
                    error: None,
                },
            ),
        ],
        fence,
    )
    .await
    .unwrap();
    let summary = log.session(session).await.unwrap().unwrap();
    assert_eq!(summary.title.as_deref(), Some("fenced"));
    assert_eq!(log.pending_sessions().await.unwrap(), vec![]);
    log.append(&[event(session, 6, EventKind::SessionDeleted {})], fence)
        .await
        .unwrap();
    assert!(log.session(session).await.unwrap().unwrap().deleted);
    log.close().await;
}

/// A writer whose shard another node took is refused on every write path, with
/// [`AppendError::Fenced`] naming the shard, never retryable, and nothing written. A
/// single-node store has no other node: its owner's fence stays good.
pub async fn a_stale_fence_is_refused_on_every_write_path<L: EventLog, O: ShardControl>(
    log: L,
    ownership: O,
) {
    let session = SessionId::new();
    let fence = ownership.own(session).await;
    let input_id = InputId::new();
    log.append(
        &[
            created(session),
            event(
                session,
                2,
                EventKind::InputQueued {
                    input_id,
                    input: Input::text("hi"),
                },
            ),
        ],
        fence,
    )
    .await
    .unwrap();
    if !ownership.take_over(fence).await {
        // A single-node store: the owner keeps writing.
        log.append(&[step(session, 3)], fence).await.unwrap();
        log.close().await;
        return;
    }
    let Fence::Epoch { shard, .. } = fence else {
        panic!("an owner's fence names its shard: {fence:?}");
    };
    let before = log.session(session).await.unwrap().unwrap();
    let paths = [
        step(session, 3),
        event(session, 3, EventKind::TurnStarted { input_id }),
        event(
            session,
            3,
            EventKind::InputQueued {
                input_id: InputId::new(),
                input: Input::text("more"),
            },
        ),
        event(
            session,
            3,
            EventKind::TitleSet {
                title: "stale".into(),
                source: TitleSource::User,
            },
        ),
        event(session, 3, EventKind::SessionDeleted {}),
    ];
    for path in paths {
        let refused = log.append(std::slice::from_ref(&path), fence).await;
        assert!(
            matches!(&refused, Err(AppendError::Fenced { shard: s, .. }) if *s == shard),
            "{:?}: {refused:?}",
            path.kind
        );
        assert!(!refused.unwrap_err().is_retryable());
    }
    assert_eq!(log.last_seq(session).await.unwrap(), Some(Seq(2)));
    assert_eq!(log.session(session).await.unwrap().unwrap(), before);
    assert_eq!(log.pending_sessions().await.unwrap(), vec![session]);
    log.close().await;
}

/// Appends committed together stay independent under fencing too: a stale append
/// fails alone, the owners' appends of the same moment commit.
pub async fn a_stale_fence_does_not_fail_the_others_of_its_batch<L: EventLog, O: ShardControl>(
    log: L,
    ownership: O,
) {
    let mut sessions = Vec::new();
    for _ in 0..8 {
        let session = SessionId::new();
        let fence = ownership.own(session).await;
        log.append(&[created(session)], fence).await.unwrap();
        sessions.push((session, fence));
    }
    let lost = sessions[0].1;
    let multi_node = ownership.take_over(lost).await;
    let appends = sessions.iter().map(|(session, fence)| {
        let (log, session, fence) = (log.clone(), *session, *fence);
        async move { log.append(&[step(session, 2)], fence).await }
    });
    let results = join_all(appends).await;
    for ((session, fence), result) in sessions.iter().zip(results) {
        if multi_node && *fence == lost {
            assert!(
                matches!(result, Err(AppendError::Fenced { .. })),
                "{result:?}"
            );
            assert_eq!(log.last_seq(*session).await.unwrap(), Some(Seq(1)));
        } else {
            result.unwrap();
            assert_eq!(log.last_seq(*session).await.unwrap(), Some(Seq(2)));
        }
    }
    log.close().await;
}

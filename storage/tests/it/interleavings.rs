//! Property: for any interleaving of appends across sessions (valid ones, gaps and
//! duplicates, several sessions' appends in flight at once), each session's log is
//! exactly its accepted events: `read_from(seq)` returns the exact suffix, with no gap
//! and no duplicate, and refused appends leave no trace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use foya_protocol::{Event, Seq, SessionId};
use foya_storage::{AppendError, Store, StoreOptions};
use proptest::prelude::*;

const SESSIONS: usize = 4;

/// One append: (session index, number of events, fault selector).
type Op = (usize, u64, u8);

/// What the store must answer for `op`, given the session's accepted log, and the events
/// to send.
fn plan(
    model: &[Event],
    session: SessionId,
    (_, len, fault): Op,
) -> (Vec<Event>, Result<(), AppendError>) {
    let next = model.len() as u64 + 1;
    let start = match fault {
        0 => next + 1,             // gap
        1 if next > 1 => next - 1, // duplicate
        _ => next,
    };
    let mut events = common::log(session, start, start + len - 1);
    if start == 1 {
        events[0] = common::created(session);
    } else if next == 1 {
        // A new session whose first event is not at seq 1.
        events[0] = Event {
            seq: Seq(start),
            ..common::created(session)
        };
    }
    let expected = if start == next {
        Ok(())
    } else {
        Err(AppendError::SeqMismatch {
            expected: Seq(next),
            got: Seq(start),
        })
    };
    (events, expected)
}

fn rounds() -> impl Strategy<Value = Vec<Vec<Op>>> {
    let op = (0..SESSIONS, 1..=3u64, 0..6u8);
    prop::collection::vec(prop::collection::vec(op, 1..=SESSIONS), 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn read_from_returns_exactly_the_accepted_suffix(rounds in rounds()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let store = Store::open_in_memory(StoreOptions::default()).unwrap();
            let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
            let mut model: Vec<Vec<Event>> = vec![Vec::new(); SESSIONS];
            for round in rounds {
                // One append per session per round, all in flight at once.
                let mut seen = [false; SESSIONS];
                let mut tasks = Vec::new();
                for op in round {
                    if std::mem::replace(&mut seen[op.0], true) {
                        continue;
                    }
                    let (events, expected) = plan(&model[op.0], sessions[op.0], op);
                    let store = store.clone();
                    let sent = events.clone();
                    let task = tokio::spawn(async move { store.append(sent).await });
                    tasks.push((op.0, events, expected, task));
                }
                for (i, events, expected, task) in tasks {
                    let result = task.await.unwrap();
                    prop_assert_eq!(&result, &expected);
                    if result.is_ok() {
                        model[i].extend(events);
                    }
                }
            }
            for (i, session) in sessions.iter().enumerate() {
                let log = &model[i];
                let len = log.len() as u64;
                let last = (len > 0).then_some(Seq(len));
                prop_assert_eq!(store.last_seq(*session).unwrap(), last);
                let summary = store.session(*session).unwrap();
                prop_assert_eq!(summary.map(|s| (s.last_seq, s.updated_at_ms)), last.map(|l| (l, 1000 + l.0)));
                for from in 0..=len + 1 {
                    let skip = usize::try_from(from.saturating_sub(1)).unwrap().min(log.len());
                    prop_assert_eq!(&store.read_from(*session, Seq(from)).unwrap(), &log[skip..].to_vec());
                    for limit in 0..3 {
                        let end = (skip + limit).min(log.len());
                        prop_assert_eq!(
                            &store.read_range(*session, Seq(from), limit).unwrap(),
                            &log[skip..end].to_vec()
                        );
                    }
                }
            }
            store.close().await;
            Ok(())
        })?;
    }
}

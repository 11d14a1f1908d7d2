//! Property test of `subscribe(session, from_seq)` under concurrent writes: several
//! sessions run scripted two-step turns while subscribers join at random seqs at random
//! moments; each subscriber's events are exactly the committed log from its `from_seq`
//! (no gap, no duplicate, nothing reordered).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::runtime::{Runtime, SessionHandle};
use crate::subscription::{SubscribeOptions, Subscription};
use crate::testkit::{config_for, script, session_config, within};
use foya_protocol::{ApprovalMode, Event, EventKind, Input, Seq, SessionUpdate};
use foya_storage::{Store, StoreOptions};
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;

/// A subscriber: joins once its session's observer has seen `after` events, from `from`.
#[derive(Debug, Clone)]
struct Joiner {
    session: usize,
    after: usize,
    from: u64,
}

fn joiners(sessions: usize) -> impl Strategy<Value = Vec<Joiner>> {
    prop::collection::vec(
        (0..sessions, 0usize..30, 1u64..=14).prop_map(|(session, after, from)| Joiner {
            session,
            after,
            from,
        }),
        1..8,
    )
}

/// Two steps per turn: an `echo` call, then an answer.
fn two_step_script(turns: usize) -> serde_json::Value {
    let responses: Vec<_> = (0..turns)
        .flat_map(|t| {
            [
                json!({"tool_calls":[{"id": format!("c{t}"), "name":"echo","arguments":{"t": t}}]}),
                json!({"text": format!("answer number {t}"), "chunk_chars": 3}),
            ]
        })
        .collect();
    json!({ "responses": responses })
}

/// Submits `turns` inputs, follows the session from seq 1 and subscribes each joiner
/// when the follower has seen its `after` events (while the session keeps writing).
async fn drive(
    session: SessionHandle,
    turns: usize,
    joiners: Vec<Joiner>,
) -> Vec<(u64, Subscription)> {
    let mut follower = session
        .subscribe(Seq(1), SubscribeOptions::default())
        .await
        .unwrap();
    for t in 0..turns {
        session
            .submit(Input::text(format!("input {t}")))
            .await
            .unwrap();
    }
    let mut joined = Vec::new();
    let (mut seen, mut completed) = (0usize, 0usize);
    let mut waiting = joiners;
    loop {
        let (now, later): (Vec<_>, Vec<_>) = waiting.into_iter().partition(|j| j.after <= seen);
        waiting = later;
        for joiner in now {
            let sub = session
                .subscribe(Seq(joiner.from), SubscribeOptions::default())
                .await
                .unwrap();
            joined.push((joiner.from, sub));
        }
        if completed == turns {
            break;
        }
        match follower.recv().await {
            Some(SessionUpdate::Event(event)) => {
                seen += 1;
                completed += usize::from(matches!(event.kind, EventKind::TurnComplete { .. }));
                if completed == turns {
                    // Everyone still waiting joins now, after the last event.
                    waiting.iter_mut().for_each(|j| j.after = 0);
                }
            }
            Some(_) => {}
            None => panic!("follower ended"),
        }
    }
    joined
}

/// Everything a subscription delivers up to `last`.
async fn drain(sub: &mut Subscription, last: Seq) -> Vec<Event> {
    let mut events = Vec::new();
    while sub.last_seq() < last {
        match sub.recv().await {
            Some(SessionUpdate::Event(event)) => events.push(event),
            Some(SessionUpdate::Notice(notice)) => panic!("unexpected notice {notice:?}"),
            Some(SessionUpdate::Delta(_)) => {}
            None => panic!("subscription ended at {:?}", sub.last_seq()),
        }
    }
    events
}

async fn check(sessions: usize, turns: usize, joiners: Vec<Joiner>) {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let rt = Arc::new(
        Runtime::start(config_for(store.clone(), script(two_step_script(turns))))
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let session = rt
            .create_session(session_config(ApprovalMode::Bypass))
            .await
            .unwrap();
        let mine = joiners.iter().filter(|j| j.session == s).cloned().collect();
        let id = session.id();
        tasks.push((id, tokio::spawn(drive(session, turns, mine))));
    }
    for (id, task) in tasks {
        let mut joined = within(task).await.unwrap().unwrap();
        let last = store.last_seq(id).unwrap().unwrap();
        for (from, sub) in &mut joined {
            let got = within(drain(sub, last)).await.unwrap();
            let expected = store.read_from(id, Seq(*from)).unwrap();
            assert_eq!(got, expected, "session {id} from seq {from}");
        }
    }
    Arc::try_unwrap(rt).unwrap().shutdown().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn subscribers_joining_mid_write_see_the_log_from_their_seq_exactly(
        sessions in 1usize..4,
        turns in 1usize..3,
        joiners in joiners(3),
    ) {
        let joiners: Vec<Joiner> = joiners
            .into_iter()
            .map(|j| Joiner { session: j.session % sessions, ..j })
            .collect();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(check(sessions, turns, joiners));
    }
}

//! The embedder's view of a cluster: one generic function drives a local and a remote
//! session through [`SessionApi`]; a remote subscriber that reads too slowly is cut off
//! with `Lagged` and its queue stays within its bound; a node that never answers fails
//! a call with [`ClusterError::Timeout`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::tests_nodes::{SERIAL, free_port, node, runtime};
use super::wire::GatewayMsg;
use super::{ClusterClient, ClusterError, ClusterNode, Gateways};
use crate::testkit::{config_for, script, session_config, wait_until, within};
use crate::{Runtime, RuntimeError, SessionApi, SubscribeOptions};
use foya_protocol::event::Notice;
use foya_protocol::{ApprovalMode, Event, EventKind, Input, Seq, SessionUpdate, TurnStatus};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

/// Two nodes: `a` (its runtime's subscriber buffer `a_buffer`) dials `b`; both see
/// each other.
async fn pair(a_buffer: usize) -> (ClusterNode, ClusterNode) {
    let (a_port, b_port) = (free_port(), free_port());
    let b = node("b", b_port, vec![], runtime().await).await;
    let store = foya_storage::Store::open_in_memory(foya_storage::StoreOptions::default()).unwrap();
    let mut config = config_for(store, script(json!({"responses": [{"text": "one"}]})));
    config.subscriber_buffer = a_buffer;
    let a_runtime = Runtime::start(config).await.unwrap();
    let a = node("a", a_port, vec![format!("127.0.0.1:{b_port}")], a_runtime).await;
    for (client, peer) in [(a.client(), "b"), (a.client(), "a"), (b.client(), "a")] {
        client.wait_for_node(peer, WAIT).await.unwrap();
    }
    (a, b)
}

/// What an embedder writes once: subscribe, run a turn, check the subscriber saw it,
/// delete, and match the error of a submit to the deleted session.
async fn ask_then_delete<S: SessionApi>(session: &S) -> String {
    let mut updates = session
        .subscribe(Seq::FIRST, SubscribeOptions::default())
        .await
        .unwrap();
    let outcome = session.run(Input::text("hi")).await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    loop {
        match updates.next().await {
            Some(SessionUpdate::Event(e)) if *outcome.seqs.end() == e.seq => {
                assert!(matches!(e.kind, EventKind::TurnComplete { .. }));
                break;
            }
            Some(_) => {}
            None => panic!("the subscription ended before the turn did"),
        }
    }
    session.delete().await.unwrap();
    let refused = session.submit(Input::text("again")).await.unwrap_err();
    assert_eq!(refused, RuntimeError::SessionDeleted(session.id()));
    outcome.text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_generic_function_drives_a_local_and_a_remote_session() {
    let _serial = SERIAL.lock().await;
    within(async {
        let (a, b) = pair(1024).await;
        let local = a
            .runtime()
            .create_session(session_config(ApprovalMode::Auto))
            .await
            .unwrap();
        assert_eq!(ask_then_delete(&local).await, "one");

        let client = a.client();
        let id = client
            .create_session(Some("b"), session_config(ApprovalMode::Auto))
            .await
            .unwrap();
        let remote = client.session(id);
        assert_eq!(ask_then_delete(&remote).await, "one");
        a.shutdown().await;
        b.shutdown().await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_remote_subscriber_is_cut_off_with_lagged_and_its_queue_stays_bounded() {
    let _serial = SERIAL.lock().await;
    within(async {
        let (a, b) = pair(3).await;
        let client = a.client();
        let id = client
            .create_session(Some("b"), session_config(ApprovalMode::Auto))
            .await
            .unwrap();
        let on_b = b.runtime().session(id).await.unwrap();
        let outcome = on_b.run(Input::text("hi")).await.unwrap();
        let last = *outcome.seqs.end();
        assert!(last.0 > 3, "the log ({last:?}) must outgrow the buffer");

        // Nobody reads: the replay fills the queue, then the subscriber is cut off.
        let mut sub = client.subscribe(id, Seq::FIRST).await.unwrap();
        assert_eq!(sub.capacity(), 3);
        wait_until("the subscriber is cut off", || sub.is_cut_off()).await;
        assert_eq!(sub.queued(), 3);
        let mut seen: Vec<Event> = Vec::new();
        let lagged = loop {
            assert!(sub.queued() <= sub.capacity());
            match sub.recv().await {
                Some(SessionUpdate::Event(e)) => seen.push(e),
                Some(SessionUpdate::Notice(notice)) => break notice,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(seen.len(), 3);
        assert_eq!(
            lagged,
            Notice::Lagged {
                session_id: id,
                last_seq: seen[2].seq
            }
        );
        assert_eq!(sub.recv().await, None);

        // Resubscribing from `last_seq + 1` (after each `Lagged`) gets the rest, no gap.
        while seen.last().map(|e| e.seq) != Some(last) {
            let from = Seq(seen.last().map_or(0, |e| e.seq.0) + 1);
            let mut sub = client.subscribe(id, from).await.unwrap();
            while let Some(SessionUpdate::Event(e)) = sub.recv().await {
                let done = e.seq == last;
                seen.push(e);
                if done {
                    break;
                }
            }
        }
        let seqs: Vec<u64> = seen.iter().map(|e| e.seq.0).collect();
        assert_eq!(seqs, (1..=last.0).collect::<Vec<_>>());

        // `run` through a remote handle with this small buffer: its stream is cut off
        // during the replay and resubscribes on each `Lagged` until the turn's end.
        let again = client.session(id).run(Input::text("again")).await.unwrap();
        assert_eq!(
            (again.status, again.text.as_str()),
            (TurnStatus::Completed, "two")
        );
        assert!(again.seqs.start().0 > last.0);
        a.shutdown().await;
        b.shutdown().await;
    })
    .await
    .unwrap();
}

/// A gateway that keeps every request and never answers.
struct Silent;

impl Actor for Silent {
    type Msg = GatewayMsg;
    type State = Vec<GatewayMsg>;
    type Arguments = ();

    async fn pre_start(
        &self,
        _: ActorRef<GatewayMsg>,
        (): (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Vec::new())
    }

    async fn handle(
        &self,
        _: ActorRef<GatewayMsg>,
        msg: GatewayMsg,
        kept: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        kept.push(msg);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_to_a_node_that_never_answers_fails_with_timeout_after_the_call_timeout() {
    let (silent, _) = Actor::spawn(None, Silent, ()).await.unwrap();
    let live = BTreeMap::from([("mute".to_owned(), silent.clone())]);
    let (_tx, gateways) = tokio::sync::watch::channel(Gateways(Arc::new(live), Arc::default()));
    let client = ClusterClient::new("me".into(), gateways, Duration::from_secs(30))
        .with_timeout(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let created = client
        .create_session(Some("mute"), session_config(ApprovalMode::Auto))
        .await;
    assert_eq!(created, Err(ClusterError::Timeout(Duration::from_secs(5))));
    assert_eq!(started.elapsed().as_secs(), 5);
    // Through the one handle API, the same failure is a `RuntimeError::Cluster`.
    assert_eq!(
        RuntimeError::from(created.unwrap_err()),
        RuntimeError::Cluster(Box::new(ClusterError::Timeout(Duration::from_secs(5))))
    );
    silent.stop(None);
}

//! Three cluster nodes in one process: `a` dials `b`, `c` stands alone. Each sees only
//! itself and the nodes it is connected to; `a` drives a session on `b`, lists the
//! cluster through `b`, and follows the session across a restart of `b`'s node (a new
//! node server and gateway on the same port, serving the same runtime).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{ClusterNode, ClusterSubscription, NodeConfig};
use crate::Runtime;
use crate::testkit::{config_for, script, session_config, types, within};
use foya_protocol::{
    ApprovalMode, Event, EventKind, Input, InputId, Seq, SessionUpdate, TurnStatus,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::time::Duration;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn runtime() -> Runtime {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let responses = json!({"responses": [{"text": "one"}, {"text": "two"}]});
    Runtime::start(config_for(store, script(responses)))
        .await
        .unwrap()
}

async fn node(name: &str, port: u16, connect: Vec<String>, runtime: Runtime) -> ClusterNode {
    let listen = format!("127.0.0.1:{port}").parse().unwrap();
    let mut config = NodeConfig::new(listen, "cookie", connect, name);
    config.heartbeat = Duration::from_millis(50);
    config.heartbeat_timeout = Duration::from_millis(500);
    ClusterNode::start(runtime, config).await.unwrap()
}

async fn until_complete(sub: &mut ClusterSubscription, seen: &mut Vec<Event>) {
    loop {
        match sub.recv().await {
            Some(SessionUpdate::Event(e)) => {
                let done = matches!(e.kind, EventKind::TurnComplete { .. });
                seen.push(e);
                if done {
                    return;
                }
            }
            Some(SessionUpdate::Delta(_)) => {}
            other => panic!("unexpected {other:?} after {seen:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_in_one_process_see_only_their_peers_and_survive_a_restart() {
    within(scenario()).await.unwrap();
}

async fn scenario() {
    let (a_port, b_port, c_port) = (free_port(), free_port(), free_port());
    let b = node("b", b_port, vec![], runtime().await).await;
    let a = node(
        "a",
        a_port,
        vec![format!("127.0.0.1:{b_port}")],
        runtime().await,
    )
    .await;
    let c = node("c", c_port, vec![], runtime().await).await;

    // Each view is published whole per heartbeat: once a node sees itself, it sees
    // every gateway it will count in that tick.
    let client = a.client();
    client.wait_for_node("b").await;
    client.wait_for_node("a").await;
    assert_eq!(client.nodes(), ["a", "b"]);
    b.client().wait_for_node("a").await;
    assert_eq!(b.client().nodes(), ["a", "b"]);
    c.client().wait_for_node("c").await;
    assert_eq!(c.client().nodes(), ["c"]);

    // A drives a session on B.
    let session = client
        .create_session(Some("b"), session_config(ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = client.subscribe(session, Seq::FIRST).await.unwrap();
    client
        .submit_with_id(session, InputId::new(), Input::text("hi"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    until_complete(&mut sub, &mut seen).await;
    assert_eq!(
        types(&seen),
        [
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );

    // The list through B shows where each session lives; C's cluster is only itself.
    let local = a
        .runtime()
        .create_session(session_config(ApprovalMode::Auto))
        .await
        .unwrap()
        .id();
    let listed = client.list_sessions_through("b").await.unwrap();
    let mut placed: Vec<_> = listed
        .iter()
        .map(|s| (s.id, s.node.clone().unwrap()))
        .collect();
    placed.sort();
    let mut expected = vec![(session, "b".to_owned()), (local, "a".to_owned())];
    expected.sort();
    assert_eq!(placed, expected);
    assert_eq!(c.client().list_sessions().await.unwrap(), []);

    // Restart B in this process; A redials and the subscription resumes.
    let b_runtime = b.stop().await.expect("nothing else holds b's runtime");
    let b = node("b", b_port, vec![], b_runtime).await;
    let mut changes = client.clone();
    wait_for_new_gateway(&mut changes, &b).await;
    client
        .submit_with_id(session, InputId::new(), Input::text("again"))
        .await
        .unwrap();
    until_complete(&mut sub, &mut seen).await;
    let seqs: Vec<u64> = seen.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=seen.len() as u64).collect::<Vec<_>>());
    let EventKind::TurnComplete { status, .. } = &seen.last().unwrap().kind else {
        panic!("not a turn_complete");
    };
    assert_eq!(*status, TurnStatus::Completed);
    assert_eq!(c.client().nodes(), ["c"]);

    drop(sub);
    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
}

/// Waits until A's view of `b` is the restarted node's gateway.
async fn wait_for_new_gateway(client: &mut super::ClusterClient, b: &ClusterNode) {
    let mut rx = client.watch();
    let own = b.gateway_id();
    let _ = rx
        .wait_for(|g| g.0.get("b").is_some_and(|gw| gw.get_id() == own))
        .await;
}

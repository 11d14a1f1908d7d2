//! Three cluster nodes in one process: `a` dials `b`, `c` stands alone. Each sees only
//! itself and the nodes it is connected to; `a` drives a session on `b`, lists the
//! cluster through `b`, and follows the session across a restart of `b`'s node (a new
//! node server and gateway on the same port, serving the same runtime). Then the
//! failure paths: a second node under a taken name is refused, a cluster list names the
//! nodes that did not answer, and a client-only member says why it could not join (a
//! peer that accepts and stays silent is given up after the connect timeout).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{
    ClientNode, ClusterError, ClusterListing, ClusterNode, ClusterSubscription, NodeConfig,
};
use crate::Runtime;
use crate::testkit::{config_for, script, session_config, types, within};
use foya_protocol::{
    ApprovalMode, Event, EventKind, Input, InputId, Seq, SessionUpdate, TurnStatus,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::time::Duration;

/// The tests of this file run one at a time: ractor's process groups are process-wide,
/// and the proxies of in-process node servers can share actor ids (see
/// `ClusterNode::start`), so one test's heartbeats could drop another's sessions.
pub(super) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(super) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A loopback port on which nothing listens, kept so while the socket lives: bound but
/// never listening, so a connect is refused and no other test can take the port.
fn closed_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

pub(super) async fn runtime() -> Runtime {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let responses = json!({"responses": [{"text": "one"}, {"text": "two"}]});
    Runtime::start(config_for(store, script(responses)))
        .await
        .unwrap()
}

pub(super) async fn node(
    name: &str,
    port: u16,
    connect: Vec<String>,
    runtime: Runtime,
) -> ClusterNode {
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
    let _serial = SERIAL.lock().await;
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
    client
        .wait_for_node("b", std::time::Duration::from_secs(20))
        .await
        .unwrap();
    client
        .wait_for_node("a", std::time::Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(client.nodes(), ["a", "b"]);
    b.client()
        .wait_for_node("a", std::time::Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(b.client().nodes(), ["a", "b"]);
    c.client()
        .wait_for_node("c", std::time::Duration::from_secs(20))
        .await
        .unwrap();
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
    assert_eq!(listed.unreachable, Vec::<String>::new());
    let listed = listed.sessions;
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

/// A's view of `node` is `gateway` (or `node` is gone from it, with `None`).
async fn wait_view(client: &super::ClusterClient, node: &str, gateway: Option<ractor::ActorId>) {
    let mut rx = client.watch();
    let _ = rx
        .wait_for(|g| g.0.get(node).map(|gw| gw.get_id()) == gateway)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_under_a_taken_name_is_refused() {
    let _serial = SERIAL.lock().await;
    within(refusal()).await.unwrap();
}

async fn refusal() {
    let (a_port, b_port) = (free_port(), free_port());
    let b = node("b", b_port, vec![], runtime().await).await;
    let a_addr = format!("127.0.0.1:{a_port}");
    let a = node(
        "a",
        a_port,
        vec![format!("127.0.0.1:{b_port}")],
        runtime().await,
    )
    .await;
    let client = a.client();
    wait_view(&client, "b", Some(b.gateway_id())).await;

    // Another "b" joins through A: A keeps the node that started first and tells the
    // newcomer, which leaves.
    let second_b = node("b", free_port(), vec![a_addr.clone()], runtime().await).await;
    assert_eq!(
        second_b.refused().await,
        ClusterError::NameTaken {
            name: "b".into(),
            holder: format!("127.0.0.1:{b_port}"),
        }
    );
    let mut left = second_b.client().watch();
    let _ = left.wait_for(|g| g.0.is_empty()).await;

    // A node dialling A under A's own name is refused as well.
    let second_a = node("a", free_port(), vec![a_addr.clone()], runtime().await).await;
    assert_eq!(
        second_a.refused().await,
        ClusterError::NameTaken {
            name: "a".into(),
            holder: a_addr,
        }
    );

    // The cluster kept its nodes: A still routes "b" to the first B, lists both. The
    // view is republished every heartbeat from the gateways' answers (a ping missed
    // under load drops a node for one tick), so wait for it to hold both again.
    let mut watch = client.watch();
    let view = watch
        .wait_for(|g| g.0.contains_key("a") && g.0.contains_key("b"))
        .await
        .unwrap()
        .clone();
    assert_eq!(view.0.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(view.0["b"].get_id(), b.gateway_id());
    assert_eq!(view.0["a"].get_id(), a.gateway_id());
    assert_eq!(client.list_cluster().await, ClusterListing::default());

    second_a.shutdown().await;
    second_b.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_list_names_the_nodes_that_did_not_answer() {
    let _serial = SERIAL.lock().await;
    within(partial_list()).await.unwrap();
}

async fn partial_list() {
    let (a_port, b_port) = (free_port(), free_port());
    // A port bound for the whole test but never listening: a dial is refused, and no
    // other socket (another test's server, an outgoing connection) can take the port.
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let silent_port = closed.local_addr().unwrap().port();
    let b = node("b", b_port, vec![], runtime().await).await;
    let silent = format!("127.0.0.1:{silent_port}");
    let peers = vec![format!("127.0.0.1:{b_port}"), silent.clone()];
    let a = node("a", a_port, peers, runtime().await).await;
    let client = a.client();
    wait_view(&client, "b", Some(b.gateway_id())).await;
    wait_view(&client, "a", Some(a.gateway_id())).await;
    let on_a = a
        .runtime()
        .create_session(session_config(ApprovalMode::Auto))
        .await
        .unwrap()
        .id();

    // Nothing listens on the second address: it is named, with B's sessions listed.
    let listing = client.list_sessions_through("a").await.unwrap();
    let ids: Vec<_> = listing.sessions.iter().map(|s| s.id).collect();
    assert_eq!(
        (ids, listing.unreachable),
        (vec![on_a], vec![silent.clone()])
    );

    // B leaves: the list through A names it instead of dropping it.
    let b_runtime = b.stop().await.expect("nothing else holds b's runtime");
    wait_view(&client, "b", None).await;
    let listing = client.list_sessions_through("a").await.unwrap();
    let ids: Vec<_> = listing.sessions.iter().map(|s| s.id).collect();
    assert_eq!(
        (ids, listing.unreachable.clone()),
        (vec![on_a], vec![silent.clone(), "b".to_owned()])
    );
    assert_eq!(client.list_cluster().await, listing);
    assert_eq!(
        client.list_sessions().await,
        Err(ClusterError::Partial(vec![silent, "b".to_owned()]))
    );

    a.shutdown().await;
    b_runtime.shutdown().await;
}

fn client_config(addr: &str, cookie: &str) -> NodeConfig {
    let listen = "127.0.0.1:0".parse().unwrap();
    let mut config = NodeConfig::new(listen, cookie, vec![addr.to_owned()], "cli");
    config.heartbeat = Duration::from_millis(50);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_says_why_it_could_not_join() {
    let _serial = SERIAL.lock().await;
    within(join_failures()).await.unwrap();
}

async fn join_failures() {
    // The wait is far longer than the test's timeout: the errors must come early.
    let patience = Duration::from_secs(600);

    // Nothing listens: the connect error, naming the address, at once.
    let (_reserved, closed_port) = closed_port();
    let closed = format!("127.0.0.1:{closed_port}");
    let member = ClientNode::connect(client_config(&closed, "cookie"))
        .await
        .unwrap();
    let refused = member.wait_connected(patience).await;
    member.shutdown().await;
    let Err(ClusterError::ConnectFailed { addr, reason }) = refused else {
        panic!("not a connect error: {refused:?}");
    };
    assert_eq!(
        (addr, reason.starts_with("Connection refused")),
        (closed, true),
        "{reason}"
    );

    // A node with another cookie: authentication failed.
    let b_port = free_port();
    let b = node("b", b_port, vec![], runtime().await).await;
    let b_addr = format!("127.0.0.1:{b_port}");
    let member = ClientNode::connect(client_config(&b_addr, "other"))
        .await
        .unwrap();
    let refused = member.wait_connected(patience).await;
    member.shutdown().await;
    assert_eq!(
        refused,
        Err(ClusterError::AuthFailed {
            addr: b_addr.clone()
        })
    );

    // The right cookie joins.
    let member = ClientNode::connect(client_config(&b_addr, "cookie"))
        .await
        .unwrap();
    assert_eq!(
        member.wait_connected(patience).await,
        Ok(vec!["b".to_owned()])
    );
    member.shutdown().await;
    b.shutdown().await;
}

/// An address whose accept queue is full: the kernel drops further SYNs, so a connect
/// there neither succeeds nor fails. Returns the listener and the connections filling
/// its queue (keep them alive).
async fn silent_address() -> (tokio::net::TcpListener, Vec<tokio::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    // Linux queues backlog + 1 connections: with backlog 0, one fills the queue.
    let filler = tokio::net::TcpStream::connect(addr).await.unwrap();
    (listener, vec![filler])
}

#[tokio::test(start_paused = true)]
async fn a_connect_to_a_silent_address_gives_up_after_the_connect_timeout() {
    let _serial = SERIAL.lock().await;
    let (listener, _fillers) = silent_address().await;
    let addr = listener.local_addr().unwrap().to_string();
    let member = ClientNode::connect(client_config(&addr, "cookie"))
        .await
        .unwrap();
    // Paused time: the 3 s connect timeout passes as soon as the runtime is idle.
    let refused = member.wait_connected(Duration::from_secs(600)).await;
    member.shutdown().await;
    assert_eq!(
        refused,
        Err(ClusterError::ConnectFailed {
            addr,
            reason: "no answer within 3s".into()
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_completes_the_handshake_is_given_up_after_the_connect_timeout() {
    let _serial = SERIAL.lock().await;
    within(silent_handshake()).await.unwrap();
}

async fn silent_handshake() {
    use tokio::io::AsyncReadExt as _;
    // Accepts the connection and never says a word.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut config = client_config(&addr, "cookie");
    config.connect_timeout = Duration::from_millis(500);
    let member = ClientNode::connect(config).await.unwrap();
    let (mut held, _) = listener.accept().await.unwrap();
    let refused = member.wait_connected(Duration::from_secs(600)).await;
    let timeout = Duration::from_millis(500);
    assert_eq!(
        refused,
        Err(ClusterError::HandshakeTimeout { addr, timeout })
    );
    // The session given up is closed (not left waiting): the socket ends.
    let mut sent = Vec::new();
    let ended = held.read_to_end(&mut sent).await;
    member.shutdown().await;
    assert!(ended.is_ok(), "{ended:?}");
}

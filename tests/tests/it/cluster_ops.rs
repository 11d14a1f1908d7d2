//! Turn control across two cluster nodes on loopback: node A (this test process, an
//! embedded `ClusterNode` on a known port) drives a session living on node B (a `foya
//! node` child process with the scripted provider and a redb file): an approval answered
//! from A (the file is written on B), a cancel from A while a `sleep` runs on B (the turn
//! ends cancelled, the child process is gone), the cluster-wide list through `foya
//! sessions list --cluster` (sessions of both nodes with their node), and a delete from A
//! (the session is marked deleted in B's list and its log ends with `session_deleted`).
//! The CLI's failure paths: a list with B down names it (exit 3), a wrong cookie and an
//! address where nothing listens fail at once with what went wrong, a peer that accepts
//! the connection and stays silent is given up after the 3 s connect timeout, and a
//! second `foya node` under B's name is refused. A `foya node` whose `--connect` peer is
//! down warns once naming it and keeps running; its data dir's lock names its address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::SubscribeOptions;
use foya_actors::cluster::{ClusterClient, ClusterNode, ClusterSubscription, NodeConfig};
use foya_actors::provider::scripted::{Script, ScriptedClient};
use foya_actors::testkit::procs::wait_gone;
use foya_actors::testkit::{turn_status, types};
use foya_actors::{Runtime, RuntimeConfig};
use foya_protocol::event::Notice;
use foya_protocol::{
    ApprovalDecision, ApprovalMode, Delta, Event, EventKind, Input, InputId, Seq, SessionConfig,
    SessionId, SessionSummary, SessionUpdate, TurnStatus,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const COOKIE: &str = "ops-cookie";

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Starts `foya node` as node `b` and waits for its "listening" line.
async fn spawn_b(bin: &Path, dir: &Path, port: u16) -> Child {
    let mut child = Command::new(bin)
        .args(["node", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--name", "b", "--cookie-file"])
        .arg(dir.join("cookie"))
        .args(["--provider", "scripted", "--script"])
        .arg(dir.join("script.json"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().expect("node b exited");
    assert_eq!(line, format!("foya node b listening on 127.0.0.1:{port}"));
    child
}

async fn node_a(port: u16, b_port: u16) -> ClusterNode {
    let store = Store::open_in_memory(StoreOptions::default()).unwrap();
    let model = Arc::new(ScriptedClient::from_script(Script::default()));
    let runtime = Runtime::start(RuntimeConfig::new(store, model))
        .await
        .unwrap();
    let listen = format!("127.0.0.1:{port}").parse().unwrap();
    let peers = vec![format!("127.0.0.1:{b_port}")];
    let mut config = NodeConfig::new(listen, COOKIE, peers, "a");
    config.heartbeat = Duration::from_millis(100);
    config.heartbeat_timeout = Duration::from_millis(500);
    ClusterNode::start(runtime, config).await.unwrap()
}

/// What a turn driven from A saw: its events, and the pid printed by a running shell.
#[derive(Default)]
struct Seen {
    events: Vec<Event>,
    pid: Option<i32>,
}

/// Receives until a `turn_complete`, answering every approval request with `decision`
/// from A and cancelling from A once a shell printed its pid.
async fn drive_turn(
    client: &ClusterClient,
    session: SessionId,
    sub: &mut ClusterSubscription,
    decision: ApprovalDecision,
) -> Seen {
    let mut seen = Seen::default();
    loop {
        match sub.recv().await.expect("subscription ended") {
            SessionUpdate::Event(e) => {
                if let EventKind::ApprovalRequested { request_id, .. } = &e.kind {
                    client
                        .decide_approval(session, *request_id, decision, None)
                        .await
                        .unwrap();
                }
                let done = matches!(e.kind, EventKind::TurnComplete { .. });
                seen.events.push(e);
                if done {
                    return seen;
                }
            }
            SessionUpdate::Delta(d) => {
                if let Delta::ToolOutput { chunk, .. } = d.delta
                    && seen.pid.is_none()
                {
                    seen.pid = Some(chunk.trim().parse().expect("a pid"));
                    client.cancel(session).await.unwrap();
                }
            }
            SessionUpdate::Notice(n) => panic!("unexpected notice {n:?}"),
        }
    }
}

/// Runs `foya sessions list --cluster 127.0.0.1:<port>` (`--json` or a table) with a
/// cookie file.
async fn cli_run(bin: &Path, dir: &Path, port: u16, cookie: &str, json: bool) -> Output {
    let mut command = Command::new(bin);
    command
        .args([
            "sessions",
            "list",
            "--cluster",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--cookie-file")
        .arg(dir.join(cookie))
        .arg("--data-dir")
        .arg(dir.join("cli-data"));
    if json {
        command.arg("--json");
    }
    command.output().await.unwrap()
}

/// A complete list: exit 0, nothing on stderr (no ractor noise), stdout returned.
async fn cli_list(bin: &Path, dir: &Path, port: u16, json: bool) -> String {
    let out = cli_run(bin, dir, port, "cookie", json).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr, "");
    String::from_utf8(out.stdout).unwrap()
}

/// (exit code, stdout, stderr) of a CLI run.
fn parts(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The CLI fails at once, saying why: nothing listening, a wrong cookie.
async fn cli_join_failures(bin: &Path, dir: &Path, b_port: u16) {
    std::fs::write(dir.join("wrong-cookie"), "wrong\n").unwrap();
    let closed = free_port();
    let out = cli_run(bin, dir, closed, "cookie", false).await;
    assert_eq!(
        parts(&out),
        (
            Some(1),
            String::new(),
            format!(
                "foya: cannot connect to 127.0.0.1:{closed}: Connection refused (os error 111)\n"
            )
        )
    );
    let out = cli_run(bin, dir, b_port, "wrong-cookie", false).await;
    assert_eq!(
        parts(&out),
        (
            Some(1),
            String::new(),
            format!("foya: authentication with 127.0.0.1:{b_port} failed (the cookies differ)\n")
        )
    );
}

/// A second `foya node` named `b`, dialling A, is refused and exits 1, naming B.
async fn second_b_is_refused(bin: &Path, dir: &Path, a_port: u16, b_port: u16) {
    let out = Command::new(bin)
        .args(["node", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--name", "b", "--connect", &format!("127.0.0.1:{a_port}")])
        .arg("--cookie-file")
        .arg(dir.join("cookie"))
        .args(["--provider", "scripted", "--script"])
        .arg(dir.join("script.json"))
        .arg("--data-dir")
        .arg(dir.join("data-second-b"))
        .current_dir(dir)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let (code, _, stderr) = parts(&out);
    let last = stderr.lines().last().unwrap_or_default().to_owned();
    assert_eq!(
        (code, last),
        (
            Some(1),
            format!(
                "foya: node name \"b\" is already taken in the cluster by the node at \
                 127.0.0.1:{b_port}; choose another --name"
            )
        ),
        "{stderr}"
    );
}

async fn scenario(bin: PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cookie"), format!("{COOKIE}\n")).unwrap();
    let script = json!({"responses": [
        {"tool_calls": [{"id": "w1", "name": "write_file",
            "arguments": {"path": "approved.txt", "content": "from a"}}]},
        {"text": "written"},
        {"tool_calls": [{"id": "s1", "name": "shell",
            "arguments": {"command": "echo $$; exec sleep 60"}}]},
        {"text": "never reached"}
    ]});
    std::fs::write(dir.path().join("script.json"), script.to_string()).unwrap();
    let (a_port, b_port) = (free_port(), free_port());
    let mut b = spawn_b(&bin, dir.path(), b_port).await;
    cli_join_failures(&bin, dir.path(), b_port).await;
    let a = node_a(a_port, b_port).await;
    let client = a.client();
    client
        .wait_for_node("b", std::time::Duration::from_secs(20))
        .await
        .unwrap();
    client
        .wait_for_node("a", std::time::Duration::from_secs(20))
        .await
        .unwrap();
    second_b_is_refused(&bin, dir.path(), a_port, b_port).await;

    // A session on B that asks before writes and commands, with A as its approver: the
    // first update proves the approver is attached on B.
    let mut config = SessionConfig::new(dir.path());
    config.approval_mode = ApprovalMode::Ask;
    let session = client.create_session(Some("b"), config).await.unwrap();
    let approver = SubscribeOptions { approver: true };
    let mut sub = client
        .subscribe_with(session, Seq::FIRST, approver)
        .await
        .unwrap();
    let Some(SessionUpdate::Event(created)) = sub.recv().await else {
        panic!("no first event");
    };
    assert_eq!(created.kind.type_name(), "session_created");

    // Approval answered from A: the write runs on B.
    let input = Input::text("write it");
    client
        .submit_with_id(session, InputId::new(), input)
        .await
        .unwrap();
    let turn = drive_turn(&client, session, &mut sub, ApprovalDecision::AllowOnce).await;
    assert_eq!(
        types(&turn.events),
        [
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "approval_requested",
            "approval_decided",
            "tool_started",
            "tool_finished",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    assert_eq!(turn_status(&turn.events), Some(TurnStatus::Completed));
    let written = std::fs::read_to_string(dir.path().join("approved.txt")).unwrap();
    assert_eq!(written, "from a");

    // Cancel from A while `sleep` runs on B: the turn ends cancelled, the process is gone.
    client
        .submit_with_id(session, InputId::new(), Input::text("sleep"))
        .await
        .unwrap();
    let turn = drive_turn(&client, session, &mut sub, ApprovalDecision::AllowOnce).await;
    assert_eq!(turn_status(&turn.events), Some(TurnStatus::Cancelled));
    assert_eq!(
        types(&turn.events),
        [
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "approval_requested",
            "approval_decided",
            "tool_started",
            "tool_message",
            "turn_cancelled",
            "turn_complete"
        ]
    );
    wait_gone(turn.pid.expect("the shell printed its pid")).await;

    // The CLI lists every node's sessions through A, each with its node.
    let on_a = client
        .create_session(None, SessionConfig::new(dir.path()))
        .await
        .unwrap();
    let listed: Vec<SessionSummary> = cli_list(&bin, dir.path(), a_port, true)
        .await
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut placed: Vec<(SessionId, Option<String>)> =
        listed.iter().map(|s| (s.id, s.node.clone())).collect();
    placed.sort();
    let mut expected = vec![
        (session, Some("b".to_owned())),
        (on_a, Some("a".to_owned())),
    ];
    expected.sort();
    assert_eq!(placed, expected);
    let table = cli_list(&bin, dir.path(), a_port, false).await;
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(rows[0].starts_with("NODE  SESSION"), "{table}");
    for (id, node) in [(session, "b"), (on_a, "a")] {
        let row = format!("{node:<4}  {id}");
        assert!(rows.iter().any(|r| r.starts_with(&row)), "{table}");
    }

    // Delete from A: the subscription closes, B lists it deleted, further input fails.
    client.delete(session).await.unwrap();
    let mut tail = Vec::new();
    let reason = loop {
        match sub.recv().await.expect("subscription ended") {
            SessionUpdate::Event(e) => tail.push(e),
            SessionUpdate::Notice(Notice::Closed { reason, .. }) => break reason,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(types(&tail), ["session_deleted"]);
    eprintln!("closed: {reason}");
    let listed = client.list_sessions().await.unwrap();
    let ours: Vec<_> = listed.iter().filter(|s| s.id == session).collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(
        (ours[0].deleted, ours[0].last_seq, ours[0].node.as_deref()),
        (true, tail[0].seq, Some("b"))
    );
    let refused = client
        .submit_with_id(session, InputId::new(), Input::text("more"))
        .await;
    assert!(refused.is_err(), "{refused:?}");

    // B down: the list through A shows A's sessions, names B, exits 3.
    drop(sub);
    b.kill().await.unwrap();
    b.wait().await.unwrap();
    let out = cli_run(&bin, dir.path(), a_port, "cookie", true).await;
    let (code, stdout, stderr) = parts(&out);
    let mut lines: Vec<&str> = stdout.lines().collect();
    let unreachable: serde_json::Value = serde_json::from_str(lines.pop().unwrap()).unwrap();
    let listed: Vec<(SessionId, Option<String>)> = lines
        .iter()
        .map(|l| serde_json::from_str::<SessionSummary>(l).unwrap())
        .map(|s| (s.id, s.node))
        .collect();
    assert_eq!(
        (code, listed, unreachable, stderr),
        (
            Some(3),
            vec![(on_a, Some("a".to_owned()))],
            json!({"unreachable": ["b"]}),
            "foya: warning: incomplete list, no answer from node(s): b\n".to_owned()
        )
    );
    a.shutdown().await;
    // B's log ends with the delete.
    let store = Store::open(&dir.path().join("data/foya.redb"), StoreOptions::default()).unwrap();
    let log = store.read_from(session, Seq::FIRST).unwrap();
    assert_eq!(log.last().unwrap().kind.type_name(), "session_deleted");
    assert_eq!(log.last().unwrap().seq, tail[0].seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_cancel_delete_and_the_cluster_list_work_across_nodes() {
    let _serial = foya_tests::IN_PROCESS_CLUSTER.lock().await;
    let bin = tokio::task::spawn_blocking(foya_tests::foya_bin)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(90), scenario(bin))
        .await
        .expect("the scenario timed out");
}

mod unreachable;

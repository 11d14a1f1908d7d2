//! Any node serves any session: `foya node --store URL --http ADDR` serves `foya serve`'s
//! HTTP API for every session of the shared store, forwarding a request for a session
//! another node owns to the HTTP address that node registered with its lease.
//!
//! Two real `foya node` processes on one PostgreSQL store. When the nodes place shards
//! themselves (each registers a lease and owns the sessions it creates), the session
//! created on A is driven entirely through B. When they do not, the owner rows are made
//! here through `NodeLease` (a lease per node name, registered with the node's HTTP
//! address, claiming the session's shard) so forwarding is tested on its own: while a
//! test lease owns a shard the store refuses the node's own (unfenced) writes, so the
//! turn runs on A first and what then goes through B to A reads, or is refused before
//! it writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use eventsource_stream::Eventsource as _;
use foya_storage_pg::{LeaseOptions, NodeLease, Placement};
use foya_tests::foya_bin::foya_bin;
use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);
const TOKEN: &str = "node-http-token";

struct Node {
    child: tokio::process::Child,
    base: String,
    name: &'static str,
}

/// `foya node --name NAME --http 127.0.0.1:0 --store STORE` in `dir`, scripted with
/// `responses`.
async fn node(name: &'static str, store: &str, dir: &Path, responses: &[Value]) -> Node {
    node_at(name, store, dir, responses, "127.0.0.1:0", &[]).await
}

/// The files of node `name` in `dir` (token, script of `responses`); returns its folder.
fn node_files(name: &str, dir: &Path, responses: &[Value]) -> std::path::PathBuf {
    let own = foya_tests::node::node_dir(dir, name);
    std::fs::write(own.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::write(
        own.join("script.json"),
        json!({"responses": responses}).to_string(),
    )
    .unwrap();
    own
}

/// `foya node NAME` with its files (`node_files`), with `--http http` and `extra`
/// arguments.
fn node_command(
    name: &str,
    store: &str,
    dir: &Path,
    responses: &[Value],
    http: &str,
    extra: &[&str],
) -> tokio::process::Command {
    let own = node_files(name, dir, responses);
    let mut command = foya_tests::node::command(name, store, dir, http);
    command
        .args(extra)
        .arg("--token-file")
        .arg(own.join("token"))
        .args(["--provider", "scripted", "--script"])
        .arg(own.join("script.json"))
        .args(["--max-steps", "7"]);
    command
}

/// [`node`] with `--http http` and `extra` arguments.
async fn node_at(
    name: &'static str,
    store: &str,
    dir: &Path,
    responses: &[Value],
    http: &str,
    extra: &[&str],
) -> Node {
    let foya_tests::node::Node { child, base } =
        foya_tests::node::Node::spawn(node_command(name, store, dir, responses, http, extra)).await;
    Node { child, base, name }
}

impl Node {
    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    /// `POST /sessions` (a node serves once it holds its shards: never `no_shard`).
    async fn create(&self) -> String {
        let resp = self
            .req(reqwest::Method::POST, "/sessions")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED, "{resp:?}");
        served_by(&resp, self.name);
        let body: Value = resp.json().await.unwrap();
        body["id"].as_str().unwrap().to_owned()
    }

    async fn submit(&self, id: &str, text: &str) -> reqwest::Response {
        self.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
            .json(&json!({"text": text}))
            .send()
            .await
            .unwrap()
    }

    async fn events(&self, id: &str, last_event_id: Option<u64>, query: &str) -> Sse {
        let mut req = self.req(
            reqwest::Method::GET,
            &format!("/sessions/{id}/events{query}"),
        );
        if let Some(last) = last_event_id {
            req = req.header("Last-Event-ID", last.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let node = resp.headers()["foya-node"].to_str().unwrap().to_owned();
        Sse {
            node,
            inner: resp.bytes_stream().eventsource().boxed(),
        }
    }
}

fn served_by(resp: &reqwest::Response, node: &str) {
    assert_eq!(
        resp.headers().get("foya-node").map(|v| v.to_str().unwrap()),
        Some(node),
        "{resp:?}"
    );
}

struct Sse {
    /// The node that served the stream's start.
    node: String,
    inner: futures::stream::BoxStream<
        'static,
        Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
    >,
}

impl Sse {
    /// The persisted events up to the first notice, and the notice.
    async fn until_notice(&mut self) -> (Vec<Value>, Value) {
        let mut events = Vec::new();
        loop {
            let sse = self.inner.next().await.unwrap().unwrap();
            let data: Value = serde_json::from_str(&sse.data).unwrap();
            match sse.event.as_str() {
                "event" => events.push(data),
                "notice" => return (events, data),
                _ => {}
            }
        }
    }

    /// The persisted events until one satisfies `stop` (ids checked against seqs).
    async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let sse = self.inner.next().await.unwrap().unwrap();
            let data: Value = serde_json::from_str(&sse.data).unwrap();
            match sse.event.as_str() {
                "event" => {
                    assert_eq!(sse.id, data["seq"].to_string());
                    events.push(data.clone());
                    if stop(&data) {
                        return events;
                    }
                }
                "delta" => {}
                other => panic!("unexpected SSE event {other}: {data}"),
            }
        }
    }
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// A lease for node `node` registered with its HTTP address, holding `shard`.
async fn own(store: &str, node: &Node, shard: u32) -> NodeLease {
    let lease = NodeLease::register_at(
        store,
        node.name,
        Some(&node.base),
        LeaseOptions::new(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    lease.claim(shard).await.unwrap();
    lease
}

async fn shard_of(store: &str, id: &str) -> u32 {
    match foya_storage_pg::Directory::new(store)
        .unwrap()
        .session(id.parse().unwrap())
        .await
        .unwrap()
    {
        Placement::Unowned { shard, .. } | Placement::Owned { shard, .. } => shard,
        Placement::Unknown => panic!("no session {id}"),
    }
}

/// A node announces itself (its HTTP API line, then its listening line) only once it
/// holds the shards placement gives it: a session created through it at once is created
/// there, never refused 503 `no_shard` — the first node of an empty cluster (it claims
/// every shard) and a node joining it (its share handed over by the first first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_node_creates_sessions_at_once() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        let directory = foya_storage_pg::Directory::new(&store).unwrap();
        let owner = async |id: &str| match directory.session(id.parse().unwrap()).await.unwrap() {
            Placement::Owned { owner, .. } => owner.node,
            other => panic!("{id}: {other:?}"),
        };
        let a = node("a", &store, &dir, &[]).await;
        let on_a = a.create().await;
        assert_eq!(owner(&on_a).await, "a");
        let b = node("b", &store, &dir, &[]).await;
        let on_b = b.create().await;
        assert_eq!(owner(&on_b).await, "b");
        drop((a, b));
    })
    .await;
}

/// A handoff drain longer than any clock holds (`--handoff-drain 1e19`, seconds) is
/// no bound: the node starts, settles and serves (it panicked adding the drain to the
/// start-up deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_an_unbounded_handoff_drain_serves() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        let a = node_at(
            "a",
            &store,
            &dir,
            &[],
            "127.0.0.1:0",
            &["--handoff-drain", "1e19"],
        )
        .await;
        assert!(!a.create().await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_owned_by_one_node_is_served_through_another() {
    within(scenario()).await;
}

/// A fresh store on the test PostgreSQL and a temporary directory (kept alive by the
/// caller) with its canonical path.
async fn fresh() -> (String, tempfile::TempDir, std::path::PathBuf) {
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    (store, tmp, dir)
}

/// Runs a scenario under the global timeout, the binary built (or found up to date)
/// before its clock starts.
async fn within(scenario: impl std::future::Future<Output = ()>) {
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(TIMEOUT, scenario)
        .await
        .expect("the scenario finished in time");
}

/// Submits `text` through `node`, again with the same input id while the answer is 503
/// (no live owner yet: a failover), as a client told `Retry-After` does.
async fn submit_retrying(node: &Node, id: &str, text: &str) -> reqwest::Response {
    let input_id = "0192f7d2-8a4e-7c1a-9d3b-000000000001";
    loop {
        let resp = node
            .req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
            .json(&json!({"text": text, "input_id": input_id}))
            .send()
            .await
            .unwrap();
        if resp.status() != StatusCode::SERVICE_UNAVAILABLE {
            return resp;
        }
        assert!(resp.headers().contains_key("retry-after"), "{resp:?}");
    }
}

async fn scenario() {
    let (store, _tmp, dir) = fresh().await;
    let write = json!({"tool_calls": [{"id": "call_1", "name": "write_file",
        "arguments": {"path": "out.txt", "content": "hello"}}]});
    // One script for both (a scripted model answers with response N+1 after N
    // assistant messages of the session, wherever it runs).
    let script = [
        write,
        json!({"text": "wrote it"}),
        json!({"text": "after the move"}),
    ];
    let mut a = node("a", &store, &dir, &script).await;
    let b = node("b", &store, &dir, &script).await;

    // Created on A, with `foya serve`'s defaults (cwd, approval mode, --max-steps).
    let id = a.create().await;
    let directory = foya_storage_pg::Directory::new(&store).unwrap();
    // Whether the nodes place shards themselves (each registers a lease and owns the
    // shards of the sessions it creates); else the test makes the owner rows.
    let (shard, nodes_own) = match directory.session(id.parse().unwrap()).await.unwrap() {
        Placement::Owned { shard, owner } => {
            assert_eq!(owner.node, "a");
            (shard, true)
        }
        Placement::Unowned { shard, leased } => {
            assert!(!leased);
            (shard, false)
        }
        Placement::Unknown => panic!("no session {id}"),
    };
    // The turn: an approved tool call. Through B when A owns the session (every
    // request forwarded to A); else on A itself (the store refuses a node's unfenced
    // writes to a shard a test lease owns, so the test takes ownership only after).
    let driver = if nodes_own { &b } else { &a };
    let mut stream = driver.events(&id, Some(0), "?approver=true").await;
    assert_eq!(stream.node, "a");
    let resp = driver.submit(&id, "write hello").await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    served_by(&resp, "a");
    let mut first = stream.until(of_type("approval_requested")).await;
    let request_id = first.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = driver
        .req(
            reqwest::Method::POST,
            &format!("/sessions/{id}/approvals/{request_id}"),
        )
        .json(&json!({"decision": "allow_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    served_by(&resp, "a");
    first.extend(stream.until(of_type("turn_complete")).await);
    drop(stream);
    assert_eq!(seqs(&first), (1..=first.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "hello"
    );
    let created = &first[0];
    assert_eq!(created["type"], "session_created");
    assert_eq!(created["config"]["approval_mode"], "ask", "{created}");
    assert_eq!(created["config"]["max_steps"], 7, "{created}");
    assert_eq!(created["config"]["cwd"], json!(dir), "{created}");

    // Without node leases: A owns the session's shard, B is a node of the cluster too.
    let test_leases = if nodes_own {
        None
    } else {
        let lease_a = own(&store, &a, shard).await;
        let lease_b = NodeLease::register_at(
            &store,
            b.name,
            Some(&b.base),
            LeaseOptions::new(Duration::from_secs(60)),
        )
        .await
        .unwrap();
        Some((lease_a, lease_b))
    };

    // B's guard and token come first: nothing reaches A without them.
    let events_path = format!("/sessions/{id}/events");
    let anonymous = reqwest::Client::new()
        .get(format!("{}{events_path}", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    served_by(&anonymous, b.name);
    let foreign_host = b
        .req(reqwest::Method::GET, &events_path)
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign_host.status(), StatusCode::FORBIDDEN);
    served_by(&foreign_host, b.name);
    let foreign_origin = b
        .req(reqwest::Method::POST, &format!("/sessions/{id}/cancel"))
        .header("Origin", "http://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign_origin.status(), StatusCode::FORBIDDEN);
    // A page of B itself may call (its Origin is B's, not A's).
    let own_origin = b
        .req(reqwest::Method::GET, &events_path)
        .header("Origin", &b.base)
        .header("Last-Event-ID", first.len().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(own_origin.status(), StatusCode::OK);
    served_by(&own_origin, "a");
    drop(own_origin);

    // Bodies are forwarded to A and answered by it.
    let bad = b
        .req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
        .json(&json!({"text": "x", "imagez": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    served_by(&bad, "a");
    let empty = b.submit(&id, "").await;
    assert_eq!(empty.status(), StatusCode::BAD_REQUEST);
    served_by(&empty, "a");
    let body: Value = empty.json().await.unwrap();
    assert_eq!(body["error"]["code"], "empty_input");
    let unknown = b
        .req(
            reqwest::Method::POST,
            &format!("/sessions/{id}/approvals/{}", uuid_like()),
        )
        .json(&json!({"decision": "allow_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    served_by(&unknown, "a");

    // Lists read the shared store on B, naming each session's node.
    let list: Value = b
        .req(reqwest::Method::GET, "/sessions")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == json!(id))
        .unwrap();
    assert_eq!(listed["node"], "a", "{list}");
    let summary = b
        .req(reqwest::Method::GET, &format!("/sessions/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(summary.status(), StatusCode::OK);
    served_by(&summary, "b");
    // The web view and `/metrics` are B's own.
    let page = b.req(reqwest::Method::GET, "/").send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let metrics = b
        .req(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("foya_turns_started_total"),
        "the node's metrics"
    );

    // The event stream through B, resumed with Last-Event-ID: from A, no duplicate.
    let resume_at = 2;
    let mut through_b = b.events(&id, Some(resume_at), "").await;
    assert_eq!(through_b.node, "a");
    let mut seen = through_b.until(of_type("turn_complete")).await;
    assert_eq!(
        seqs(&seen),
        ((resume_at + 1)..=first.len() as u64).collect::<Vec<_>>()
    );

    // A dies (kill -9) and its shard goes to B: B's open stream follows the session to
    // B, which runs the next input; the client sees no gap and no duplicate.
    if let Some((lease_a, lease_b)) = test_leases {
        // Released, and no node leases any more: B serves it (unfenced, as allowed).
        lease_a.release(shard).await.unwrap();
        lease_a.shutdown().await.unwrap();
        lease_b.shutdown().await.unwrap();
    }
    a.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let resp = submit_retrying(&b, &id, "again").await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    served_by(&resp, "b");
    seen.extend(through_b.until(of_type("turn_complete")).await);
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(seqs(&seen), ((resume_at + 1)..=last).collect::<Vec<_>>());
    let answers: Vec<&Value> = seen
        .iter()
        .filter(|e| e["type"] == "assistant_message")
        .collect();
    assert_eq!(answers.len(), 3, "{seen:#?}");
    drop(b);
}

fn of_type(t: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["type"] == t
}

/// A well-formed approval request id no session has.
fn uuid_like() -> String {
    "0192f7d2-8a4e-7c1a-9d3b-2f4e6a8b0c1d".to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_a_live_owner_is_answered_503_with_retry_after() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        let b = node("b", &store, &dir, &[json!({"text": "unused"})]).await;
        // B, alone, places every shard on itself and creates its sessions there.
        let mut ids = Vec::new();
        for _ in 0..12 {
            ids.push(b.create().await);
        }
        // A second live node that never claims (it died before it could: a failover in
        // progress). Placement gives it about half the shards; B hands them off and nobody
        // takes them.
        let ghost = NodeLease::register_at(
            &store,
            "ghost",
            Some("http://127.0.0.1:9"),
            LeaseOptions::new(Duration::from_secs(60)),
        )
        .await
        .unwrap();
        let mut moved = None;
        for id in &ids {
            let shard = shard_of(&store, id).await;
            if foya_storage_pg::shard::owner(shard, &["b", "ghost"]) == Some("ghost") {
                moved = Some((id.clone(), shard));
                break;
            }
        }
        let (id, shard) = moved.expect("one of 12 sessions is in a shard placed on the ghost");
        let directory = foya_storage_pg::Directory::new(&store).unwrap();
        while directory.shard_owner(shard).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let started = std::time::Instant::now();
        let resp = b.submit(&id, "hello").await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()["retry-after"], "1");
        assert!(started.elapsed() >= Duration::from_secs(5), "it waited");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "no_owner", "{body}");
        // Owned by a node that cannot be reached: 502 with Retry-After.
        ghost.claim(shard).await.unwrap();
        let resp = b.submit(&id, "hello").await;
        assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(resp.headers()["retry-after"], "1");
        served_by(&resp, b.name);
        ghost.shutdown().await.unwrap();
        drop(b);
    })
    .await;
}

/// The live node owning `id`'s shard, once one does.
async fn owner_of(store: &str, id: &str) -> String {
    let directory = foya_storage_pg::Directory::new(store).unwrap();
    loop {
        if let Placement::Owned { owner, .. } =
            directory.session(id.parse().unwrap()).await.unwrap()
        {
            return owner.node;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn signal(node: &Node, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(node.child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, signal).unwrap();
}

/// An owner paused (SIGSTOP) keeps its connections open but sends nothing: a request
/// and an event stream proxied to it through another node are not held once the
/// owner's lease expired and another node took its shard (the stream follows the
/// session: no gap, no duplicate), and the paused owner, resumed, writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_follows_the_session_away_from_a_paused_owner() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        let script = [
            json!({"text": "first"}),
            json!({"text": "second"}),
            json!({"text": "third"}),
        ];
        let a = node("a", &store, &dir, &script).await;
        let b = node("b", &store, &dir, &script).await;
        let id = a.create().await;
        let (owner, entry) = if owner_of(&store, &id).await == "a" {
            (a, b)
        } else {
            (b, a)
        };
        let mut stream = entry.events(&id, Some(0), "").await;
        assert_eq!(stream.node, owner.name);
        let resp = entry.submit(&id, "one").await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        served_by(&resp, owner.name);
        let mut seen = stream.until(of_type("turn_complete")).await;

        signal(&owner, nix::sys::signal::Signal::SIGSTOP);
        // Sent to the paused owner (its lease still live), the input is answered once
        // the shard moved (502 or 503, with Retry-After), not held until the owner
        // resumes; sent again with the same input id, the new owner runs it.
        let resp = loop {
            let resp = entry
                .req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
                .json(&json!({"text": "two", "input_id": "0192f7d2-8a4e-7c1a-9d3b-000000000002"}))
                .send()
                .await
                .unwrap();
            if !resp.status().is_server_error() {
                break resp;
            }
            assert!(resp.headers().contains_key("retry-after"), "{resp:?}");
        };
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        served_by(&resp, entry.name);
        seen.extend(stream.until(of_type("turn_complete")).await);
        let last = seen.last().unwrap()["seq"].as_u64().unwrap();
        assert_eq!(seqs(&seen), (1..=last).collect::<Vec<_>>());
        let answers = seen
            .iter()
            .filter(|e| e["type"] == "assistant_message")
            .count();
        assert_eq!(answers, 2, "{seen:#?}");

        // Resumed after its lease expired, the old owner writes nothing more: it finds
        // its lease lost and exits 1 (docs/cluster.md, self-fence).
        signal(&owner, nix::sys::signal::Signal::SIGCONT);
        let mut owner = owner;
        let status = owner.child.wait().await.unwrap();
        assert_eq!(status.code(), Some(1), "{status:?}");
        let log = foya_storage_pg::PgLog::open(&store, foya_storage_pg::PgOptions::default())
            .await
            .unwrap();
        assert!(log.epoch_regressions(10).await.unwrap().is_empty());
        let resp = entry.submit(&id, "three").await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED);
        served_by(&resp, entry.name);
        seen.extend(stream.until(of_type("turn_complete")).await);
        let last = seen.last().unwrap()["seq"].as_u64().unwrap();
        assert_eq!(seqs(&seen), (1..=last).collect::<Vec<_>>());
        drop(owner);
        drop(entry);
    })
    .await;
}

/// Two nodes (`--handoff-drain 0.2`) on a fresh store, and a session whose first turn
/// is running (each answer streams three fragments, 1.5 s apart: a handoff finds it
/// running and its drain cancels it), streamed from its owner and through the other
/// node (the entry) from seq 1.
struct Handoff {
    _tmp: tempfile::TempDir,
    store: String,
    owner: Node,
    entry: Node,
    id: String,
    direct: Sse,
    forwarded: Sse,
    /// The forwarded stream's events up to the running turn's `step_started`.
    seen: Vec<Value>,
}

async fn a_turn_streamed_two_ways() -> Handoff {
    let (store, tmp, dir) = fresh().await;
    let slow = json!({"text": "a slow answer, in parts.", "delay_ms": 1500});
    let script = [slow.clone(), slow.clone(), slow];
    let drain = ["--handoff-drain", "0.2"];
    let a = node_at("a", &store, &dir, &script, "127.0.0.1:0", &drain).await;
    let b = node_at("b", &store, &dir, &script, "127.0.0.1:0", &drain).await;
    let id = a.create().await;
    let (owner, entry) = if owner_of(&store, &id).await == "a" {
        (a, b)
    } else {
        (b, a)
    };
    let direct = owner.events(&id, Some(0), "").await;
    let mut forwarded = entry.events(&id, Some(0), "").await;
    assert_eq!(
        (direct.node.as_str(), forwarded.node.as_str()),
        (owner.name, owner.name)
    );
    let resp = entry.submit(&id, "one").await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let seen = forwarded.until(of_type("step_started")).await;
    Handoff {
        _tmp: tmp,
        store,
        owner,
        entry,
        id,
        direct,
        forwarded,
        seen,
    }
}

/// After the move: input `two` through `entry` (retried while no node owns the shard) is
/// run there, the forwarded stream delivers its turn with no notice, and every event it
/// delivered since seq 1 (`seen` and this turn's) is there once, in order.
async fn the_next_turn_runs_on(entry: &Node, id: &str, forwarded: &mut Sse, mut seen: Vec<Value>) {
    let resp = submit_retrying(entry, id, "two").await;
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    served_by(&resp, entry.name);
    let next = forwarded.until(of_type("turn_complete")).await;
    assert_eq!(next.last().unwrap()["status"], "completed", "{next:#?}");
    seen.extend(next);
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    assert_eq!(seqs(&seen), (1..=last).collect::<Vec<_>>());
}

/// A node stopped with SIGTERM hands its shards off: its own event stream of a session
/// ends with a `moved` notice naming the handoff (not a `lagged` one: nobody fell
/// behind), and a stream of that session through another node follows it there, with no
/// notice, no gap and no duplicate, on to the next turn the new owner runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_follow_a_session_handed_off_by_a_node_stopped_with_sigterm() {
    within(async {
        let Handoff {
            _tmp,
            owner,
            entry,
            id,
            mut direct,
            mut forwarded,
            mut seen,
            ..
        } = a_turn_streamed_two_ways().await;
        signal(&owner, nix::sys::signal::Signal::SIGTERM);
        let (events, notice) = direct.until_notice().await;
        let end = events.last().unwrap();
        assert_eq!(
            (end["type"].as_str(), end["status"].as_str()),
            (Some("turn_complete"), Some("cancelled")),
            "{events:#?}"
        );
        assert_eq!(notice["type"], "moved", "{notice}");
        assert_eq!(
            notice["reason"],
            "node stopping: shard handed off to another node"
        );
        assert_eq!(notice["last_seq"], end["seq"], "{notice}");
        assert!(
            direct.inner.next().await.is_none(),
            "the owner's stream ends after `moved`"
        );
        let mut owner = owner;
        let status = owner.child.wait().await.unwrap();
        assert!(status.success(), "{status:?}");

        // Through the other node: the cancelled turn, then (no notice) the next turn,
        // run by the new owner.
        seen.extend(forwarded.until(of_type("turn_complete")).await);
        let cancelled = seen.iter().find(|e| e["type"] == "turn_cancelled").unwrap();
        assert_eq!(
            cancelled["reason"],
            "node stopping: shard handed off to another node"
        );
        the_next_turn_runs_on(&entry, &id, &mut forwarded, seen).await;
    })
    .await;
}

/// A handoff whose writes stall (another client holds the session's shard row, so the
/// cancelled turn's end cannot commit within the grace) drops the session instead of
/// releasing it: the owner's own stream is cut off without `moved`. A stream of the
/// session through another node still follows it to the new owner, with no notice, gap
/// or duplicate, once the store answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_stream_follows_a_session_whose_handoff_stalled_on_the_store() {
    within(async {
        let Handoff {
            _tmp,
            store,
            owner,
            entry,
            id,
            mut direct,
            mut forwarded,
            mut seen,
        } = a_turn_streamed_two_ways().await;

        // The shard's row locked by another client until the owner dropped the session
        // (the transaction kept busy: the server ends one idle for 2 s).
        let shard = shard_of(&store, &id).await;
        let (client, connection) = tokio_postgres::connect(&store, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let cancel = client.cancel_token();
        let holder = tokio::spawn(async move {
            let hold = format!(
                "BEGIN; SELECT shard FROM foya_shards WHERE shard = {shard} FOR UPDATE; \
                 SELECT pg_sleep(60); COMMIT;"
            );
            // Ended by the cancel below (the transaction rolls back).
            let _ = client.batch_execute(&hold).await;
        });
        let (watcher, connection) = tokio_postgres::connect(&store, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        loop {
            let sleeping = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'",
                    &[],
                )
                .await
                .unwrap();
            if sleeping.get::<_, i64>(0) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        signal(&owner, nix::sys::signal::Signal::SIGTERM);
        let (_, notice) = direct.until_notice().await;
        assert_eq!(notice["type"], "lagged", "{notice}");
        cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
        holder.await.unwrap();

        seen.extend(forwarded.until(of_type("turn_complete")).await);
        the_next_turn_runs_on(&entry, &id, &mut forwarded, seen).await;
        let mut owner = owner;
        assert!(owner.child.wait().await.unwrap().success());
    })
    .await;
}

/// A node stopped (SIGTERM) while it joins — its lease registered, its share still held
/// by a node whose turn in one of those shards runs within a long drain — hands off what
/// it holds and ends its lease: it exits 0 (it was killed by the signal, its lease left
/// live until its TTL ran out), and starts again under its name at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_while_it_joins_ends_its_lease_and_exits_cleanly() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        let slow = json!({"text": "a slow answer, in parts.", "delay_ms": 3000});
        let a = node_at(
            "a",
            &store,
            &dir,
            &[slow, json!({"text": "then"})],
            "127.0.0.1:0",
            &["--handoff-drain", "60"],
        )
        .await;
        // A session in a shard placement gives B once it joins.
        let id = loop {
            let id = a.create().await;
            let shard = shard_of(&store, &id).await;
            if foya_storage_pg::shard::owner(shard, &["a", "b"]) == Some("b") {
                break id;
            }
        };
        let mut stream = a.events(&id, Some(0), "").await;
        assert_eq!(a.submit(&id, "one").await.status(), StatusCode::ACCEPTED);
        stream.until(of_type("step_started")).await;

        let mut joining = node_command("b", &store, &dir, &[], "127.0.0.1:0", &[])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let directory = foya_storage_pg::Directory::new(&store).unwrap();
        while !matches!(directory.live_node("b").await, Ok(Some(_))) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(joining.id().unwrap()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = joining.wait().await.unwrap();
        assert_eq!(status.code(), Some(0), "{status:?}");
        assert!(
            matches!(directory.live_node("b").await, Ok(None)),
            "the stopped node's lease is still live"
        );
        // The turn on A ends as it would have; B starts again under its name at once.
        let events = stream.until(of_type("turn_complete")).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:#?}");
        let b = node("b", &store, &dir, &[]).await;
        let resp = submit_retrying(&b, &id, "two").await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED, "{resp:?}");
        drop((a, b));
    })
    .await;
}

/// `request` (its head and body, `\n` line ends) sent as written to the node at `base`:
/// the head of the answer.
async fn raw(base: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let authority = base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let request = request
        .replace("{authority}", authority)
        .replace("{token}", TOKEN)
        .replace('\n', "\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        answer.push(byte[0]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// `GET {path}` to the node at `base` sent as written (dot segments and all, which an
/// HTTP client would resolve before sending): the status line and the `foya-node`
/// header of the answer's head.
async fn raw_get(base: &str, path: &str) -> (String, Option<String>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let authority = base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // The head only (an event stream's body does not end).
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        answer.push(byte[0]);
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let node = answer
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix("foya-node: "))
        .map(str::to_owned);
    (status, node)
}

/// A request naming a session another node owns is forwarded to the route it names, not
/// to another one: dot segments (`..`, `%2e%2e`, `..\`), which the forwarding client
/// would resolve, match no route here and are not forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_with_dot_segments_is_not_forwarded_to_another_route_of_the_owner() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        let a = node("a", &store, &dir, &[json!({"text": "unused"})]).await;
        let b = node("b", &store, &dir, &[json!({"text": "unused"})]).await;
        let id = a.create().await;
        let (owner, entry) = if owner_of(&store, &id).await == "a" {
            (a, b)
        } else {
            (b, a)
        };
        // The route itself is forwarded.
        let (status, node) = raw_get(&entry.base, &format!("/sessions/{id}/events?after=99")).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert_eq!(node.as_deref(), Some(owner.name));
        for tail in [
            "/../../metrics",
            "/%2e%2e/%2E%2e/metrics",
            "/..\\..\\metrics",
            "/x/../../../sessions",
        ] {
            let (status, node) = raw_get(&entry.base, &format!("/sessions/{id}{tail}")).await;
            assert!(status.starts_with("HTTP/1.1 404"), "{tail}: {status}");
            assert_eq!(node.as_deref(), Some(entry.name), "{tail}");
        }
        // A chunked body that also names a Content-Length (request smuggling's shape)
        // reaches the owner as the chunked body it is (RFC 9112 §6.3).
        let head = raw(
            &entry.base,
            &format!(
                "POST /sessions/{id}/inputs HTTP/1.1\nHost: {{authority}}\n\
                 Authorization: Bearer {{token}}\nContent-Type: application/json\n\
                 Content-Length: 4\nTransfer-Encoding: chunked\nConnection: close\n\n\
                 10\n{{\"text\":\"hello\"}}\n0\n\n"
            ),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 202"), "{head}");
        assert!(
            head.contains(&format!("foya-node: {}", owner.name)),
            "{head}"
        );
        drop(owner);
        drop(entry);
    })
    .await;
}

/// A node on PostgreSQL registers its HTTP address for the others to forward to, so one
/// bound to an unspecified address (`0.0.0.0`, `[::]`) must say where it is reached
/// (`--advertise-http URL`): without it the node refuses to start, before it binds or
/// creates anything, and says why. With it, the URL is what the node registers and what
/// the others forward to (here `localhost`, which the node also answers to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unspecified_http_address_needs_an_advertised_one() {
    within(async {
        let (store, _tmp, dir) = fresh().await;
        // Refused before anything is bound (the check reads the argument), so the test
        // binds nothing but loopback.
        for http in ["0.0.0.0:0", "[::]:7878"] {
            let out = node_command("z", &store, &dir, &[], http, &[])
                .output()
                .await
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains(&format!(
                    "--http {http} binds an unspecified address, which the other nodes \
                     cannot forward requests to: give the URL they reach this node at with \
                     --advertise-http"
                )),
                "{stderr}"
            );
            assert!(out.stdout.is_empty());
            assert!(
                !dir.join("z").join("data").exists(),
                "the data dir was created"
            );
        }
        // Nor was the store touched: no lease (not even the schema: a refusal before the
        // store is opened).
        let registered = foya_storage_pg::Directory::new(&store)
            .unwrap()
            .live_node("z")
            .await;
        assert!(
            !matches!(registered, Ok(Some(_))),
            "the refused node registered a lease"
        );
        // An advertised URL that is itself unspecified is a usage error.
        let out = node_command("z", &store, &dir, &[], "127.0.0.1:0", &[])
            .args(["--advertise-http", "http://0.0.0.0:7878"])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("unspecified address"), "{stderr}");

        // A advertises `localhost` on its port: registered, and B forwards to it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let http = format!("127.0.0.1:{port}");
        let advertised = format!("http://localhost:{port}");
        let a = node_at(
            "a",
            &store,
            &dir,
            &[json!({"text": "answered by a"})],
            &http,
            &["--advertise-http", &format!("{advertised}/")],
        )
        .await;
        let b = node("b", &store, &dir, &[]).await;
        let live = foya_storage_pg::Directory::new(&store)
            .unwrap()
            .live_node("a")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            live.address.as_deref(),
            Some(format!("cluster={} http={advertised}", listen_of(&live)).as_str())
        );
        // Created on A once both are placed: A's, reached through B.
        let id = a.create().await;
        let mut stream = b.events(&id, Some(0), "").await;
        assert_eq!(stream.node, "a");
        let resp = b.submit(&id, "hello").await;
        assert_eq!(resp.status(), StatusCode::ACCEPTED, "{resp:?}");
        served_by(&resp, "a");
        stream.until(of_type("turn_complete")).await;
        drop((a, b));
    })
    .await;
}

/// The `cluster=` part of a live node's registered address.
fn listen_of(live: &foya_storage_pg::LiveNode) -> String {
    live.address
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|p| p.strip_prefix("cluster="))
        .unwrap_or_default()
        .to_owned()
}

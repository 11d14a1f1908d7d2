//! `foya loadtest --through`: the load driver runs its turns through real `foya node`
//! processes over HTTP. Three nodes (the simulated model in each, `--http`) on one real
//! PostgreSQL store place their shards; the driver creates sessions round-robin, runs
//! their turns through the owner (`--route owner`) and then through another node that
//! forwards to it (`--route forwarded`). The report's counts are checked against the
//! store (rows of `foya_events`) and against each other; its timings are not checked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::{foya_bin, test_home};
use foya_tests::node::Node;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(240);

/// `foya node --name NAME --http 127.0.0.1:0 --store STORE --provider sim` in `dir`.
async fn node(name: &str, store: &str, dir: &Path) -> Node {
    Node::start(name, store, dir, |command| {
        command.args(["--provider", "sim"]);
    })
    .await
}

async fn query(store: &str, sql: &str) -> Vec<tokio_postgres::Row> {
    let (client, connection) = tokio_postgres::connect(store, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let rows = client.query(sql, &[]).await.unwrap();
    drop(client);
    let _ = driver.await;
    rows
}

/// Waits until every shard is held by the node rendezvous placement gives it among
/// `names` (the nodes have taken their shares; no handoff is left to cancel a turn).
async fn wait_placed(store: &str, names: &[&str]) {
    loop {
        let rows = query(
            store,
            "SELECT sh.shard, n.node FROM foya_shards sh \
             LEFT JOIN foya_nodes n ON n.lease = sh.owner_lease \
             AND n.expires_at > clock_timestamp() ORDER BY sh.shard",
        )
        .await;
        let held: Vec<(u32, Option<String>)> = rows
            .iter()
            .map(|r| (u32::try_from(r.get::<_, i32>(0)).unwrap(), r.get(1)))
            .collect();
        let shards = foya_storage_pg::Shards::new(u32::try_from(held.len()).unwrap()).unwrap();
        let wanted = foya_storage_pg::shard::placement(shards, names);
        if !held.is_empty()
            && held
                .iter()
                .all(|(shard, node)| node.as_deref() == wanted[*shard as usize])
        {
            return;
        }
        // Polling the store: the shard table is where ownership is recorded.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn events_in_store(store: &str) -> u64 {
    let rows = query(store, "SELECT count(*) FROM foya_events").await;
    u64::try_from(rows[0].get::<_, i64>(0)).unwrap()
}

/// `foya loadtest --through NODES ARGS --json FILE`: its exit status, report and stdout.
async fn through(nodes: &[&Node], args: &[&str]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let urls: Vec<&str> = nodes.iter().map(|n| n.base.as_str()).collect();
    let output = tokio::process::Command::new(foya_bin())
        .args(["loadtest", "--through", &urls.join(",")])
        .args(args)
        .arg("--json")
        .arg(&json)
        .current_dir(dir.path())
        .env("HOME", test_home())
        .env_remove("FOYA_STORE_URL")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no report ({e}); stdout: {stdout}; stderr: {stderr}"));
    (
        output.status.code().unwrap(),
        serde_json::from_str(&text).unwrap(),
        stdout,
    )
}

fn n(report: &Value, key: &str) -> u64 {
    report[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_runs_turns_through_three_nodes_and_counts_what_the_store_holds() {
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(TIMEOUT, scenario())
        .await
        .expect("the scenario finished in time");
}

async fn scenario() {
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let names = ["n1", "n2", "n3"];
    let mut nodes = Vec::new();
    for name in names {
        nodes.push(node(name, &store, &dir).await);
    }
    wait_placed(&store, &names).await;
    let nodes: Vec<&Node> = nodes.iter().collect();

    // Through the owners: 6 sessions x 2 turns, 2 created on each node.
    let (code, report, text) = through(
        &nodes,
        &["--sessions", "6", "--turns", "2", "--concurrency", "3"],
    )
    .await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.starts_with("load test through 3 nodes (route owner)"),
        "{text}"
    );
    assert_eq!(report["mode"], "through");
    assert_eq!(report["errors"], serde_json::json!({}), "{text}");
    assert_eq!(n(&report, "turns_completed"), 12, "{text}");
    assert_eq!(n(&report, "turns_failed"), 0);
    // The nodes' default simulated turn: 3 steps, a `read_file` in each of the first two.
    assert_eq!(n(&report, "steps"), 36);
    assert_eq!(n(&report, "tool_calls_run"), 24);
    assert_eq!(n(&report, "inputs_forwarded"), 0);
    let reported = report["nodes"].as_array().unwrap();
    assert_eq!(reported.len(), 3);
    for (node, name) in reported.iter().zip(names) {
        assert_eq!(node["name"], name, "{node}");
        assert_eq!(n(node, "sessions_created"), 2, "{node}");
        assert!(n(node, "events_committed") > 0, "{node}");
        assert_eq!(
            n(&node["append_latency_ms"], "samples"),
            n(node, "appends"),
            "{node}"
        );
    }
    // Every event the store holds was delivered on the driver's streams, and committed
    // by the nodes during the run (their /metrics).
    let rows = events_in_store(&store).await;
    assert_eq!(n(&report, "events_received"), rows, "{text}");
    assert_eq!(n(&report, "events_committed"), rows, "{text}");
    assert!(n(&report, "appends") > 0 && n(&report, "commits") > 0);
    assert_eq!(
        n(&report["append_latency_ms"], "samples"),
        n(&report, "appends")
    );
    assert!(report["append_latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    let bucket = &report["append_p99_bucket_ms"];
    assert!(bucket["lower_ms"].as_f64().unwrap() < bucket["upper_ms"].as_f64().unwrap());
    assert!(report["events_per_s"].as_f64().unwrap() > 0.0);

    // Through another node, which forwards every input and stream to the owner.
    let (code, report, text) = through(
        &nodes,
        &["--sessions", "3", "--turns", "1", "--route", "forwarded"],
    )
    .await;
    assert_eq!(code, 0, "{text}");
    assert_eq!(report["route"], "forwarded");
    assert_eq!(report["errors"], serde_json::json!({}), "{text}");
    assert_eq!(n(&report, "turns_completed"), 3);
    assert_eq!(n(&report, "inputs_forwarded"), 3, "{text}");
    let added = events_in_store(&store).await - rows;
    assert_eq!(n(&report, "events_received"), added, "{text}");
    assert_eq!(n(&report, "events_committed"), added, "{text}");
}

#[test]
fn flags_the_nodes_decide_are_refused_with_through() {
    let output = std::process::Command::new(foya_bin())
        .args([
            "loadtest",
            "--through",
            "http://127.0.0.1:9",
            "--durability",
            "immediate",
        ])
        .env("HOME", test_home())
        .env_remove("FOYA_STORE_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--through drives `foya node`s") && stderr.contains("--durability"),
        "{stderr}"
    );
}

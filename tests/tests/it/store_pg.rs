//! `--store postgresql://…`: several processes share one event log. Two `foya serve`
//! processes (two ports, two data dirs) on one PostgreSQL store both list every session
//! either created (the second does not run the first's sessions: placement is issue 42's),
//! and an image uploaded through one reaches the model through the other (attachments
//! live in the store); `foya run --store` then `foya sessions list/show --store` read the
//! same log, and so do `foya chat --store`, `foya node --store` (its cluster listing) and
//! `foya loadtest --store` (whose report gives the append latency); a server's `/metrics`
//! shows the PostgreSQL writer's batches (commit time and size); a redb-only tool
//! refuses a shared store. The kill -9 tests on PostgreSQL are in `crash_restart.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::{foya, foya_bin};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

const TIMEOUT: Duration = Duration::from_secs(120);

struct Serve {
    child: tokio::process::Child,
    base: String,
}

async fn serve(store: &str, data: &std::path::Path, cwd: &std::path::Path) -> Serve {
    serve_with(&["--provider", "sim"], store, data, cwd).await
}

/// `foya serve` with these provider arguments on `store`, data dir `data`.
async fn serve_with(
    provider: &[&str],
    store: &str,
    data: &std::path::Path,
    cwd: &std::path::Path,
) -> Serve {
    let mut child = tokio::process::Command::new(foya_bin())
        .env("HOME", foya_tests::foya_bin::test_home())
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("FOYA_DATA_DIR")
        .arg("serve")
        .args(provider)
        .args(["--listen", "127.0.0.1:0", "--approval", "bypass"])
        .args(["--store", store])
        .arg("--data-dir")
        .arg(data)
        .current_dir(cwd)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let base = tokio::time::timeout(TIMEOUT, lines.next_line())
        .await
        .expect("the server printed its address")
        .unwrap()
        .expect("a first line");
    Serve { child, base }
}

async fn listed(http: &reqwest::Client, server: &Serve) -> BTreeSet<String> {
    let body: Value = http
        .get(format!("{}/sessions", server.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn create(http: &reqwest::Client, server: &Serve) -> String {
    let response = http
        .post(format!("{}/sessions", server.base))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_store_list_every_session_either_created() {
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let (a_dir, b_dir, cwd) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("work"),
    );
    std::fs::create_dir_all(&cwd).unwrap();
    let mut a = serve(&store, &a_dir, &cwd).await;
    let mut b = serve(&store, &b_dir, &cwd).await;
    assert_ne!(a.base, b.base);
    let http = reqwest::Client::new();
    let mut created = BTreeSet::new();
    for _ in 0..2 {
        created.insert(create(&http, &a).await);
        created.insert(create(&http, &b).await);
    }
    assert_eq!(created.len(), 4);
    assert_eq!(listed(&http, &a).await, created);
    assert_eq!(listed(&http, &b).await, created);
    // Each session's summary reads on the other server too.
    for id in &created {
        for server in [&a, &b] {
            let summary = http
                .get(format!("{}/sessions/{id}", server.base))
                .send()
                .await
                .unwrap();
            assert_eq!(summary.status(), reqwest::StatusCode::OK);
        }
    }
    // Neither wrote a redb store into its data dir.
    assert!(!foya_storage::data_dir::store_path(&a_dir).exists());
    assert!(!foya_storage::data_dir::store_path(&b_dir).exists());
    a.child.start_kill().unwrap();
    b.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let _ = b.child.wait().await;
}

fn output(command: &mut std::process::Command) -> (bool, String, String) {
    let out = command.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_then_list_and_show_read_one_postgres_store() {
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.json");
    std::fs::write(
        &script,
        json!({"responses":[{"text":"stored in postgres"},{"text":"again"}]}).to_string(),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let run = |session: Option<&str>| {
        let mut command = foya();
        command
            .args([
                "run",
                "--provider",
                "scripted",
                "--approval",
                "bypass",
                "--json",
            ])
            .arg("--script")
            .arg(&script)
            .arg("--data-dir")
            .arg(&data)
            .arg("--cwd")
            .arg(tmp.path())
            .env("FOYA_STORE_URL", &store);
        if let Some(id) = session {
            command.args(["--session", id]);
        }
        command.arg("hello");
        command
    };
    let (ok, stdout, stderr) = output(&mut run(None));
    assert!(ok, "{stderr}");
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let id = first["session_id"].as_str().unwrap().to_owned();
    // Resumed from its last seq by a second process.
    let (ok, _, stderr) = output(&mut run(Some(&id)));
    assert!(ok, "{stderr}");

    let (ok, stdout, stderr) =
        output(foya().args(["sessions", "list", "--json", "--store", &store]));
    assert!(ok, "{stderr}");
    let sessions: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["id"], json!(id));
    let (ok, stdout, stderr) =
        output(foya().args(["sessions", "show", &id, "--json", "--store", &store]));
    assert!(ok, "{stderr}");
    let log: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
    let completed = log
        .iter()
        .filter(|e| e["type"] == "turn_complete" && e["status"] == "completed")
        .count();
    assert_eq!(completed, 2);
    assert_eq!(sessions[0]["last_seq"], json!(log.len()));
    // Nothing was written to the data dir's redb store.
    assert!(!foya_storage::data_dir::store_path(&data).exists());
}

#[test]
fn an_unreachable_store_is_named_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgresql://foya:hunter2@127.0.0.1:{port}/foya");
    let (ok, _, stderr) = output(foya().args(["sessions", "list", "--store", &url]));
    assert!(!ok);
    assert!(stderr.contains("cannot connect to PostgreSQL"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn the_redb_only_tools_refuse_a_shared_store() {
    let tmp = tempfile::tempdir().unwrap();
    for tool in ["check", "salvage", "backup"] {
        let mut command = foya();
        command
            .args(["store", tool, "--data-dir"])
            .arg(tmp.path())
            .env(
                "FOYA_STORE_URL",
                "postgresql://postgres@127.0.0.1:1/postgres",
            );
        if tool != "check" {
            command.arg("--to").arg(tmp.path().join("to"));
        }
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "`foya store {tool}` works on a data directory's redb store"
            )),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_copy_moves_sessions_into_postgres_and_back() {
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.json");
    std::fs::write(
        &script,
        json!({"responses":[{"text":"kept in redb"}]}).to_string(),
    )
    .unwrap();
    let (redb, back) = (tmp.path().join("redb"), tmp.path().join("back"));
    let (ok, stdout, stderr) = output(
        foya()
            .args([
                "run",
                "--provider",
                "scripted",
                "--approval",
                "bypass",
                "--json",
            ])
            .arg("--script")
            .arg(&script)
            .arg("--data-dir")
            .arg(&redb)
            .arg("--cwd")
            .arg(tmp.path())
            .arg("hello"),
    );
    assert!(ok, "{stderr}");
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let id = first["session_id"].as_str().unwrap().to_owned();
    let show = |args: &[&str]| {
        let (ok, stdout, stderr) =
            output(foya().args(["sessions", "show", &id, "--json"]).args(args));
        assert!(ok, "{stderr}");
        stdout
    };
    let original = show(&["--data-dir", redb.to_str().unwrap()]);
    // Into PostgreSQL; a second copy adds nothing.
    for _ in 0..2 {
        let (ok, _, stderr) = output(
            foya()
                .args(["store", "copy", "--to-store", &store, "--data-dir"])
                .arg(&redb),
        );
        assert!(ok, "{stderr}");
    }
    assert_eq!(show(&["--store", &store]), original);
    // And back into a fresh data directory.
    let (ok, _, stderr) = output(
        foya()
            .args(["store", "copy", "--from-store", &store, "--data-dir"])
            .arg(&back),
    );
    assert!(ok, "{stderr}");
    assert_eq!(show(&["--data-dir", back.to_str().unwrap()]), original);
}

/// A 1×1 grey PNG (every chunk's CRC valid) and its base64.
const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x04\0\0\0\xb5\x1c\x0c\x02\0\0\0\x0bIDATx\xdacd`\0\0\0\x06\0\x020\x81\xd0/\0\0\0\0IEND\xaeB`\x82";
const PNG_1X1_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_uploaded_through_one_server_reaches_the_model_through_the_other() {
    use eventsource_stream::Eventsource as _;
    use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
    use futures::StreamExt as _;
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let provider = MockProvider::start().await;
    provider.push(MockResponse::sse(openai_chat::text("a grey pixel")));
    let base_url = format!("{}/v1", provider.base_url());
    let mock = [
        "--provider",
        "openai-chat",
        "--model",
        "mock-1",
        "--base-url",
        &base_url,
    ];
    let mut a = serve(&store, &tmp.path().join("a"), &cwd).await;
    let mut b = serve_with(&mock, &store, &tmp.path().join("b"), &cwd).await;
    let http = reqwest::Client::new();
    let uploaded: Value = http
        .post(format!("{}/attachments", a.base))
        .header("content-type", "image/png")
        .body(PNG_1X1.to_vec())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let image = uploaded["id"].as_str().unwrap().to_owned();
    // Nothing of it is in B's data directory: B reads it from the store.
    assert!(!tmp.path().join("b/attachments").join(&image).exists());
    let id = create(&http, &b).await;
    let events = http
        .get(format!("{}/sessions/{id}/events", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), reqwest::StatusCode::OK);
    let mut events = events.bytes_stream().eventsource().boxed();
    let accepted = http
        .post(format!("{}/sessions/{id}/inputs", b.base))
        .json(&json!({"text": "what is this?", "images": [{"id": image}]}))
        .send()
        .await
        .unwrap();
    let status = accepted.status();
    assert_eq!(
        status,
        reqwest::StatusCode::ACCEPTED,
        "{}",
        accepted.text().await.unwrap()
    );
    let mut user_message = None;
    tokio::time::timeout(TIMEOUT, async {
        loop {
            let sse = events.next().await.unwrap().unwrap();
            if sse.event != "event" {
                continue;
            }
            let data: Value = serde_json::from_str(&sse.data).unwrap();
            if data["type"] == "user_message" {
                user_message = Some(data.clone());
            }
            if data["type"] == "turn_complete" {
                assert_eq!(data["status"], "completed", "{data}");
                break;
            }
        }
    })
    .await
    .expect("the turn on B completed");
    let user_message = user_message.expect("a user_message");
    assert_eq!(
        user_message["input"]["images"][0]["media_type"], "image/png",
        "{user_message}"
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let user = requests[0].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        user["content"],
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_1X1_BASE64}")}},
        ])
    );
    a.child.start_kill().unwrap();
    b.child.start_kill().unwrap();
    let _ = a.child.wait().await;
    let _ = b.child.wait().await;
}

/// The sessions `foya sessions list --json --store URL` lists.
fn listed_in(store: &str) -> Vec<Value> {
    let (ok, stdout, stderr) =
        output(foya().args(["sessions", "list", "--json", "--store", store]));
    assert!(ok, "{stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `type`s of session `id`'s log in `store`.
fn log_types(store: &str, id: &str) -> Vec<String> {
    let (ok, stdout, stderr) =
        output(foya().args(["sessions", "show", id, "--json", "--store", store]));
    assert!(ok, "{stderr}");
    stdout
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn chat_writes_to_and_resumes_from_a_postgres_store() {
    use std::io::Write as _;
    let store = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(foya_storage_pg::testkit::fresh_url());
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.json");
    std::fs::write(
        &script,
        json!({"responses":[{"text":"first"},{"text":"second"}]}).to_string(),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let chat = |session: Option<&str>, line: &str| {
        let mut command =
            foya_tests::foya_bin::scripted("chat", "bypass", &script, &data, tmp.path());
        command.args(["--store", &store]);
        if let Some(id) = session {
            command.args(["--session", id]);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    chat(None, "hello");
    let sessions = listed_in(&store);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    // A second chat process resumes it from the store.
    chat(Some(&id), "again");
    let types = log_types(&store, &id);
    assert_eq!(
        types.iter().filter(|t| *t == "turn_complete").count(),
        2,
        "{types:?}"
    );
    assert!(!foya_storage::data_dir::store_path(&data).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_a_postgres_store_serves_the_sessions_in_it() {
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.json");
    std::fs::write(&script, json!({"responses":[{"text":"hi"}]}).to_string()).unwrap();
    let data = tmp.path().join("data");
    let (ok, stdout, stderr) = output(
        foya_tests::foya_bin::scripted("run", "bypass", &script, &data, tmp.path())
            .args(["--json", "--store", &store, "hello"]),
    );
    assert!(ok, "{stderr}");
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let id = first["session_id"].as_str().unwrap().to_owned();

    let cookie = tmp.path().join("cookie");
    std::fs::write(&cookie, "test-cookie\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut node = tokio::process::Command::new(foya_bin())
        .env("HOME", foya_tests::foya_bin::test_home())
        .env_remove("FOYA_DATA_DIR")
        .args([
            "node",
            "--listen",
            &listen,
            "--name",
            "pg",
            "--provider",
            "sim",
        ])
        .arg("--cookie-file")
        .arg(&cookie)
        .arg("--data-dir")
        .arg(tmp.path().join("node-data"))
        .args(["--store", &store])
        .current_dir(tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(node.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(TIMEOUT, lines.next_line())
        .await
        .expect("the node started")
        .unwrap()
        .expect("node exited");
    assert_eq!(line, format!("foya node pg listening on {listen}"));
    let listed = tokio::task::spawn_blocking({
        let (listen, cookie) = (listen.clone(), cookie.clone());
        move || {
            output(
                foya()
                    .args(["sessions", "list", "--json", "--cluster", &listen])
                    .arg("--cookie-file")
                    .arg(&cookie),
            )
        }
    })
    .await
    .unwrap();
    let (ok, stdout, stderr) = listed;
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&id), "{stdout}");
    assert!(!foya_storage::data_dir::store_path(&tmp.path().join("node-data")).exists());
    node.start_kill().unwrap();
    let _ = node.wait().await;
}

#[test]
fn loadtest_on_a_postgres_store_completes_and_reports_the_append_latency() {
    let store = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(foya_storage_pg::testkit::fresh_url());
    let tmp = tempfile::tempdir().unwrap();
    for shared in [true, false] {
        let json_path = tmp.path().join(format!("report-{shared}.json"));
        let mut command = foya();
        command
            .args(["loadtest", "--sessions", "20", "--turns", "2", "--json"])
            .arg(&json_path)
            .current_dir(tmp.path());
        if shared {
            command.args(["--store", &store]);
        }
        let (ok, stdout, stderr) = output(&mut command);
        assert!(ok, "{stdout}\n{stderr}");
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        assert_eq!(report["turns_completed"], json!(40), "{report}");
        assert_eq!(report["errors"], json!({}), "{report}");
        let latency = &report["append_latency_ms"];
        assert!(latency["samples"].as_u64().unwrap() > 0, "{report}");
        let (p50, p99) = (
            latency["p50"].as_f64().unwrap(),
            latency["p99"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99, "{latency}");
        assert!(stdout.contains("append     p50 "), "{stdout}");
        if shared {
            let named = report["store"].as_str().unwrap_or_default();
            assert!(named.starts_with("postgresql://"), "{report}");
        } else {
            assert_eq!(report["store"], Value::Null);
        }
    }
    // The 20 sessions are in the store.
    assert_eq!(listed_in(&store).len(), 20);
}

/// The value of the unlabelled sample `name` in the metrics' text.
fn unlabelled(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_postgres_store_reports_its_group_commits_in_metrics() {
    use eventsource_stream::Eventsource as _;
    use futures::StreamExt as _;
    let store = foya_storage_pg::testkit::fresh_url().await;
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let mut server = serve(&store, &tmp.path().join("data"), &cwd).await;
    let http = reqwest::Client::new();
    let id = create(&http, &server).await;
    let events = http
        .get(format!("{}/sessions/{id}/events", server.base))
        .send()
        .await
        .unwrap();
    let mut events = events.bytes_stream().eventsource().boxed();
    let accepted = http
        .post(format!("{}/sessions/{id}/inputs", server.base))
        .json(&json!({"text": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), reqwest::StatusCode::ACCEPTED);
    tokio::time::timeout(TIMEOUT, async {
        loop {
            let sse = events.next().await.unwrap().unwrap();
            if sse.event == "event" && sse.data.contains("\"type\":\"turn_complete\"") {
                break;
            }
        }
    })
    .await
    .expect("the turn completed");
    let text = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The PostgreSQL writer's batches (its `foya_append` statements), timed and sized:
    // only the store's commit observer fills these (the appends are timed apart).
    let commits = unlabelled(&text, "foya_store_commit_seconds_count");
    assert!(commits >= 1.0, "{text}");
    assert!(
        unlabelled(&text, "foya_store_commit_seconds_sum") > 0.0,
        "{text}"
    );
    assert!(
        unlabelled(&text, "foya_store_commit_events_count") >= 1.0,
        "{text}"
    );
    // The session's creation and its turn's events (`session_created`, `user_message`,
    // `turn_started`, the assistant's message; the report of the last batch, with
    // `turn_complete`, may follow its acknowledgement).
    assert!(
        unlabelled(&text, "foya_store_commit_events_sum") >= 4.0,
        "{text}"
    );
    assert!(
        unlabelled(&text, "foya_store_commit_appends_count") >= 1.0,
        "{text}"
    );
    server.child.start_kill().unwrap();
    let _ = server.child.wait().await;
}

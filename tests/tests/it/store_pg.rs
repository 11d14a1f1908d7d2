//! `--store postgresql://…`: several processes share one event log. Two `foya serve`
//! processes (two ports, two data dirs) on one PostgreSQL store both list every session
//! either created (the second does not run the first's sessions: placement is issue 42's);
//! `foya run --store` then `foya sessions list/show --store` read the same log; a redb-only
//! tool refuses a shared store. The kill -9 tests on PostgreSQL are in `crash_restart.rs`.
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
    let mut child = tokio::process::Command::new(foya_bin())
        .env("HOME", foya_tests::foya_bin::test_home())
        .env_remove("FOYA_DATA_DIR")
        .args(["serve", "--provider", "sim", "--listen", "127.0.0.1:0"])
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

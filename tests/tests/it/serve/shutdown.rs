//! `foya serve`'s graceful shutdown with HTTP connections still open: two SSE
//! subscribers and a client whose request never completes. SIGTERM cancels the running
//! turn (its end reaches both streams), the streams end, the hung connection is closed
//! after the connection grace (one warning), and the runtime is still stopped and the
//! store flushed and closed: no "requests still running" warning, exit 0, the log ends
//! with the cancelled turn. (The old server skipped the runtime's shutdown whenever a
//! connection's task still held it.)

use super::{Server, Stream, TOKEN, within};
use foya_tests::foya_bin::foya_bin;
use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

/// `foya serve --provider scripted --script SCRIPT` in `dir` (token file, `--approval
/// bypass`), stdout read for the URL, stderr piped; returns the server and its stderr.
pub(super) async fn start_scripted(
    script: &std::path::Path,
    dir: &std::path::Path,
) -> (Server, tokio::process::ChildStderr) {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut child = tokio::process::Command::new(foya_bin())
        .args(["serve", "--provider", "scripted", "--script"])
        .arg(script)
        .args(["--listen", "127.0.0.1:0", "--approval", "bypass"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--token-file")
        .arg(&token_file)
        .current_dir(dir)
        .env("HOME", foya_tests::foya_bin::test_home())
        .env_remove("FOYA_DATA_DIR")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let base = lines.next_line().await.unwrap().unwrap();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let http = reqwest::Client::new();
    let doc: Value = http
        .get(format!("{base}/openapi.json"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let server = Server {
        child,
        base,
        http,
        doc,
    };
    (server, stderr)
}

/// Creates a session in `dir`; returns its id.
pub(super) async fn create_session(s: &Server, dir: &std::path::Path) -> String {
    let created = s
        .call(
            s.req(reqwest::Method::POST, "/sessions")
                .json(&json!({"cwd": dir})),
            StatusCode::CREATED,
            Some("SessionCreated"),
        )
        .await;
    created["id"].as_str().unwrap().to_owned()
}

/// Submits `text` to session `id` (accepted).
pub(super) async fn submit(s: &Server, id: &str, text: &str) {
    s.call(
        s.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
            .json(&json!({ "text": text })),
        StatusCode::ACCEPTED,
        Some("InputAccepted"),
    )
    .await;
}

/// The type of each persisted event (`event: event`) left on the stream, until it ends.
async fn rest_of(stream: &mut Stream) -> Vec<String> {
    let mut types = Vec::new();
    while let Some(sse) = stream.inner.next().await {
        let sse = sse.unwrap();
        if sse.event == "event" {
            let data: Value = serde_json::from_str(&sse.data).unwrap();
            types.push(data["type"].as_str().unwrap().to_owned());
        }
    }
    types
}

/// The log lines of `stderr` without their timestamps (`WARN target: message`).
fn without_timestamps(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .map(|line| {
            line.split_once(' ')
                .map_or(line, |(_, rest)| rest)
                .trim()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_open_connections_still_stops_the_runtime_and_flushes_the_store() {
    within(open_connections()).await;
}

async fn open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("foya-serve-open-conns-{}", std::process::id());
    let command = format!("echo ready; exec -a {mark} sleep 100");
    let script = dir.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": command}}]},
        {"text": "never reached"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let (mut server, mut stderr) = start_scripted(&script, dir.path()).await;
    let s = &server;
    let id = create_session(s, dir.path()).await;
    let mut first = Stream::open(s, &id, "?from_seq=1", None).await;
    let mut second = Stream::open(s, &id, "?from_seq=1", None).await;
    // A client that sent half a request head and waits: its connection stays open.
    let addr = s.base.trim_start_matches("http://");
    let mut hung = tokio::net::TcpStream::connect(addr).await.unwrap();
    hung.write_all(b"GET /sessions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    submit(s, &id, "sleep").await;
    // Running: the tool printed `ready` (a live delta).
    loop {
        let sse = first.inner.next().await.unwrap().unwrap();
        let data: Value = serde_json::from_str(&sse.data).unwrap();
        if data["type"] == "tool_output" && data["chunk"].as_str().unwrap().contains("ready") {
            break;
        }
    }

    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // Both streams get the cancelled turn's end, then end.
    let tail = ["tool_message", "turn_cancelled", "turn_complete"];
    let first_rest = rest_of(&mut first).await;
    assert!(
        first_rest.ends_with(&tail.map(String::from)),
        "{first_rest:?}"
    );
    let second_rest = rest_of(&mut second).await;
    assert!(
        second_rest.ends_with(&tail.map(String::from)),
        "{second_rest:?}"
    );
    let status = server.child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    let mut hung_read = Vec::new();
    hung.read_to_end(&mut hung_read).await.unwrap();
    assert_eq!(hung_read, b"", "the hung connection is closed unanswered");
    let mut text = String::new();
    stderr.read_to_string(&mut text).await.unwrap();
    assert_eq!(
        without_timestamps(&text),
        ["WARN foya::serve: connections still open after shutdown were closed"],
        "{text}"
    );

    // The log (read by a new process: the lock is free) ends with the cancelled turn.
    let out = tokio::process::Command::new(foya_bin())
        .args(["sessions", "show", &id, "--json", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let log: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = log.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"], last["seq"].as_u64()),
        (
            &json!("turn_complete"),
            &json!("cancelled"),
            Some(log.len() as u64)
        )
    );
}

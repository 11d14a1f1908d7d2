//! The real `foya serve` driven over HTTP: started on a free loopback port with a bearer
//! token, a session created, its events followed (as the approver or not), an input
//! sent, and each approval question answered until the turn completes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use crate::foya_bin::foya_bin;
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

/// The server's SSE events (`GET /sessions/{id}/events`).
pub type Events = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// A running `foya serve` (killed when dropped).
#[derive(Debug)]
pub struct Serve {
    child: tokio::process::Child,
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Serve {
    /// Starts `foya serve` with `args` (the provider, a script…), listening on
    /// `127.0.0.1:0`, its data in `dir/data` and `token` as its bearer token (written to
    /// `dir/token`); `configure` sets the rest (`HOME`, the environment, the working
    /// directory). Returns once the server printed its address.
    pub async fn start(
        dir: &Path,
        token: &str,
        args: &[&str],
        configure: impl FnOnce(&mut tokio::process::Command),
    ) -> Self {
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let mut command = tokio::process::Command::new(foya_bin());
        command
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"))
            .arg("--token-file")
            .arg(&token_file)
            .env_remove("FOYA_DATA_DIR");
        configure(&mut command);
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let base = tokio::io::BufReader::new(stdout)
            .lines()
            .next_line()
            .await
            .unwrap()
            .expect("foya serve prints its address");
        Self {
            child,
            base,
            token: token.to_owned(),
            http: reqwest::Client::new(),
        }
    }

    /// The server's base URL (`http://127.0.0.1:PORT`).
    #[must_use]
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A request to `path` with the bearer token.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// `POST path` with the JSON `body`.
    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap()
    }

    /// Creates a session (`body` as `POST /sessions` takes it); its id.
    pub async fn create_session(&self, body: &Value) -> String {
        let created: Value = self.post("/sessions", body).await.json().await.unwrap();
        created["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no session created: {created}"))
            .to_owned()
    }

    /// Follows session `id`'s events from its first (as its approver when `approver`).
    pub async fn events(&self, id: &str, approver: bool) -> reqwest::Response {
        let events = self
            .get(&format!(
                "/sessions/{id}/events?from_seq=1{}",
                if approver { "&approver=true" } else { "" }
            ))
            .await;
        assert_eq!(events.status(), reqwest::StatusCode::OK);
        events
    }

    /// Sends the input `text` to session `id`.
    pub async fn submit(&self, id: &str, text: &str) {
        let sent = self
            .post(&format!("/sessions/{id}/inputs"), &json!({ "text": text }))
            .await;
        assert_eq!(sent.status(), reqwest::StatusCode::ACCEPTED);
    }

    /// Answers approval question `request` of session `id` with `decision`.
    pub async fn decide(&self, id: &str, request: &str, decision: &str) {
        let decided = self
            .post(
                &format!("/sessions/{id}/approvals/{request}"),
                &json!({ "decision": decision }),
            )
            .await;
        assert!(decided.status().is_success(), "{decided:?}");
    }

    /// Follows session `id` as its approver, sends `text`, and answers each
    /// `approval_requested` with `decide(event)` until `turn_complete` (within
    /// `timeout`): the persisted events read (that one last) and every raw SSE payload.
    pub async fn turn_with_approver(
        &self,
        id: &str,
        text: &str,
        timeout: Duration,
        mut decide: impl FnMut(&Value) -> &'static str,
    ) -> (Vec<Value>, String) {
        let mut events: Events = self
            .events(id, true)
            .await
            .bytes_stream()
            .eventsource()
            .boxed();
        self.submit(id, text).await;
        let mut seen: Vec<Value> = Vec::new();
        let mut raw = String::new();
        tokio::time::timeout(timeout, async {
            loop {
                let sse = events.next().await.expect("the stream ended").unwrap();
                raw.push_str(&sse.data);
                if sse.event != "event" {
                    continue;
                }
                let data: Value = serde_json::from_str(&sse.data).unwrap();
                if data["type"] == "approval_requested" {
                    let request = data["request_id"].as_str().unwrap();
                    self.decide(id, request, decide(&data)).await;
                }
                let end = data["type"] == "turn_complete";
                seen.push(data);
                if end {
                    break;
                }
            }
        })
        .await
        .expect("the turn completes");
        (seen, raw)
    }

    /// The server's pid (`None` once it was reaped).
    #[must_use]
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits for the server to exit (after a signal); its status.
    pub async fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().await.unwrap()
    }

    /// Kills the server now.
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
    }
}

//! End-to-end test of `foya serve`: the real binary (OpenAI Chat provider pointed at the
//! mock provider, a token file, `--listen 127.0.0.1:0`) driven over HTTP with reqwest.
//! A tool-calling turn under `--approval ask` is approved over HTTP by an approver SSE
//! subscription; the SSE connection is dropped mid-turn and resumed with
//! `Last-Event-ID` (persisted seqs 1..N dense, none missing or duplicated); an image
//! attachment reaches the model as a data URL; 401/404/409/400 errors; every response
//! body is validated against the served OpenAPI document, and every documented
//! operation is routed; SIGTERM shuts the server down gracefully (exit 0). Bad input is
//! refused early with a JSON error: uploads that are not images of their declared type
//! (also a valid signature followed by garbage), a body over the limit (413), a wrong
//! method (405), images for a profile without vision (the session stays usable).
//! SIGTERM while a shell tool runs cancels the turn (its process killed, the cancelled
//! result and `turn_complete{cancelled}` sent to the open event stream and persisted)
//! before the server exits 0; `foya sessions list` on the served data dir fails (exit 1)
//! naming the data dir, the server's pid and URL and `GET /sessions`.
//! `--listen` on a taken port fails (exit 1, the address named as in use) before the data
//! dir or its store is created. Empty bodies and blank titles: `bodies.rs`. A damaged store: `damaged_store.rs`. Shutdown
//! with connections still open: `shutdown.rs`. A scripted session past the end of its
//! script: `script_end.rs`. A backup of the store while the server serves:
//! `store_backup.rs`. A 413 with automatic compaction on and off: `pressure.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use eventsource_stream::Eventsource as _;
use foya_tests::child::{data_dir_in_use, sessions_list};
use foya_tests::foya_bin::foya_bin;
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use foya_tests::procs::{processes_with, wait_running};
use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

const TOKEN: &str = "s3cret-token";

/// A 1×1 grey PNG (68 bytes, every chunk's CRC valid); base64 [`PNG_1X1_BASE64`].
const PNG_1X1: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x04\0\0\0\xb5\x1c\x0c\x02\0\0\0\x0bIDATx\xdacd`\0\0\0\x06\0\x020\x81\xd0/\0\0\0\0IEND\xaeB`\x82";
const PNG_1X1_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// The running server and what the test needs to talk to it.
struct Server {
    child: tokio::process::Child,
    base: String,
    http: reqwest::Client,
    doc: Value,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(TOKEN)
    }

    /// `GET path`: 200, its body validated against `schema` and returned.
    async fn get(&self, path: &str, schema: &str) -> Value {
        self.call(
            self.req(reqwest::Method::GET, path),
            StatusCode::OK,
            Some(schema),
        )
        .await
    }

    /// Answers approval request `request` of session `id` with `allow_once` (204).
    async fn allow_once(&self, id: &str, request: &str) {
        self.call(
            self.req(
                reqwest::Method::POST,
                &format!("/sessions/{id}/approvals/{request}"),
            )
            .json(&json!({"decision": "allow_once"})),
            StatusCode::NO_CONTENT,
            None,
        )
        .await;
    }

    /// Sends, checks the status, validates the JSON body against `schema`.
    async fn call(
        &self,
        builder: reqwest::RequestBuilder,
        status: StatusCode,
        schema: Option<&str>,
    ) -> Value {
        let resp = builder.send().await.unwrap();
        assert_eq!(resp.status(), status);
        let text = resp.text().await.unwrap();
        let Some(schema) = schema else {
            assert_eq!(text, "");
            return Value::Null;
        };
        let body: Value = serde_json::from_str(&text).unwrap();
        validate(&self.doc, schema, &body);
        body
    }
}

/// Validates `value` against `#/components/schemas/{name}` of the OpenAPI document.
fn validate(doc: &Value, name: &str, value: &Value) {
    let schema = json!({
        "$ref": format!("#/components/schemas/{name}"),
        "components": doc["components"],
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:?} in {value}");
}

async fn start(provider: &MockProvider, dir: &std::path::Path) -> Server {
    let base_url = format!("{}/v1", provider.base_url());
    let args = [
        "--provider",
        "openai-chat",
        "--model",
        "mock-1",
        "--base-url",
        &base_url,
    ];
    start_with(&args, dir).await
}

/// Starts `foya serve` in `dir` with these provider arguments.
async fn start_with(provider_args: &[&str], dir: &std::path::Path) -> Server {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut child = tokio::process::Command::new(foya_bin())
        .arg("serve")
        .args(provider_args)
        .args(["--listen", "127.0.0.1:0", "--approval", "ask"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--token-file")
        .arg(&token_file)
        .current_dir(dir)
        .env("OPENAI_API_KEY", "sk-test")
        .env("HOME", foya_tests::foya_bin::test_home())
        .env_remove("FOYA_DATA_DIR")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
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
    Server {
        child,
        base,
        http,
        doc,
    }
}

/// An SSE subscription: persisted seqs seen, the last event id, the events by type.
struct Stream {
    inner: futures::stream::BoxStream<
        'static,
        Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
    >,
}

impl Stream {
    async fn open(server: &Server, id: &str, query: &str, last_event_id: Option<u64>) -> Stream {
        let mut req = server.req(
            reqwest::Method::GET,
            &format!("/sessions/{id}/events{query}"),
        );
        if let Some(last) = last_event_id {
            req = req.header("Last-Event-ID", last.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Stream {
            inner: resp.bytes_stream().eventsource().boxed(),
        }
    }

    /// Reads until a persisted event satisfies `stop`; returns the persisted events
    /// read (validated against the document), checking ids against seqs.
    async fn until(&mut self, doc: &Value, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let sse = self.inner.next().await.unwrap().unwrap();
            let data: Value = serde_json::from_str(&sse.data).unwrap();
            validate(doc, "SessionUpdate", &data);
            match sse.event.as_str() {
                "event" => {
                    assert_eq!(sse.id, data["seq"].to_string());
                    events.push(data.clone());
                    if stop(&data) {
                        return events;
                    }
                }
                "delta" => validate(doc, "LiveDelta", &data),
                other => panic!("unexpected SSE event {other}: {data}"),
            }
        }
    }
}

fn of_type(t: &'static str) -> impl Fn(&Value) -> bool {
    move |e| e["type"] == t
}

/// Runs a scenario under the global timeout (120 s), the binary built (or found up to
/// date) before its clock starts.
async fn within(scenario: impl std::future::Future<Output = ()>) {
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), scenario)
        .await
        .expect("the scenario finished in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_an_approved_tool_turn_resumes_sse_and_matches_its_openapi() {
    within(scenario()).await;
}

async fn scenario() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let work = std::fs::canonicalize(&work).unwrap();
    let provider = MockProvider::start().await;
    provider.push(MockResponse::sse(openai_chat::tool_call(
        "call_1",
        "write_file",
        r#"{"path":"out.txt","content":"hello"}"#,
    )));
    // The answer after the tool streams slowly, so the turn is still running when the
    // SSE connection is dropped and resumed.
    provider.push(
        MockResponse::sse(openai_chat::text(
            "I wrote the file out.txt for you just now.",
        ))
        .chunk_delay_ms(150),
    );
    provider.push(MockResponse::sse(openai_chat::text("A tiny image.")));
    let mut server = start(&provider, dir.path()).await;
    let s = &server;

    // 401 without (or with a wrong) token.
    let resp = s.http.get(s.url("/sessions")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    validate(&s.doc, "Error", &resp.json().await.unwrap());
    let resp = s
        .http
        .get(s.url("/sessions"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    // Create a session; read it back.
    let created = s
        .call(
            s.req(reqwest::Method::POST, "/sessions")
                .json(&json!({"cwd": work, "approval_mode": "ask", "title": "e2e"})),
            StatusCode::CREATED,
            Some("SessionCreated"),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let summary = s.get(&format!("/sessions/{id}"), "SessionSummary").await;
    assert_eq!(
        (
            &summary["title"],
            &summary["cwd"],
            &summary["model"],
            &summary["deleted"]
        ),
        (&json!("e2e"), &json!(work), &json!("mock-1"), &json!(false))
    );
    let list = s
        .call(
            s.req(reqwest::Method::GET, "/sessions"),
            StatusCode::OK,
            Some("SessionList"),
        )
        .await;
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);

    // An approver subscription, then the input.
    let mut sse = Stream::open(s, &id, "?from_seq=1&approver=true", None).await;
    let accepted = s
        .call(
            s.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
                .json(&json!({"text": "write hello to out.txt"})),
            StatusCode::ACCEPTED,
            Some("InputAccepted"),
        )
        .await;
    assert_eq!(accepted["queued"], json!(false));
    let mut seen = sse.until(&s.doc, of_type("approval_requested")).await;
    let request = seen.last().unwrap().clone();
    assert_eq!(request["tool_name"], "write_file");
    assert_eq!(
        request["grant"], "write_file:*",
        "what allow_for_session covers"
    );
    assert!(!work.join("out.txt").exists());
    // The overview (the web view's list) shows the session waiting for the decision.
    let overview = s.get("/overview", "Overview").await;
    assert_eq!(overview["sessions"][0]["id"], json!(id));
    assert_eq!(overview["sessions"][0]["state"], "waiting_for_approval");

    // Answer over HTTP; read on until the tool's result, then drop the connection.
    let request_id = request["request_id"].as_str().unwrap();
    s.allow_once(&id, request_id).await;
    seen.extend(sse.until(&s.doc, of_type("tool_message")).await);
    assert_eq!(seen.last().unwrap()["is_error"], json!(false));
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt")).unwrap(),
        "hello"
    );
    drop(sse);

    // Resume where we were.
    let last = seen.last().unwrap()["seq"].as_u64().unwrap();
    let mut sse = Stream::open(s, &id, "", Some(last)).await;
    seen.extend(sse.until(&s.doc, of_type("turn_complete")).await);
    let done = seen.last().unwrap();
    assert_eq!(done["status"], "completed");
    let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let n = seqs.len() as u64;
    assert_eq!(
        seqs,
        (1..=n).collect::<Vec<_>>(),
        "dense, no gap, no duplicate"
    );
    let types: BTreeSet<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for t in [
        "approval_decided",
        "tool_started",
        "assistant_message",
        "usage",
    ] {
        assert!(types.contains(t), "{t} missing from {types:?}");
    }
    let summary = s
        .call(
            s.req(reqwest::Method::GET, &format!("/sessions/{id}")),
            StatusCode::OK,
            Some("SessionSummary"),
        )
        .await;
    assert_eq!(summary["last_seq"], json!(n));

    // An image attachment reaches the model as a data URL.
    let png = PNG_1X1;
    let attachment = s
        .call(
            s.req(reqwest::Method::POST, "/attachments")
                .header("content-type", "image/png")
                .body(png.to_vec()),
            StatusCode::CREATED,
            Some("Attachment"),
        )
        .await;
    assert_eq!(attachment["media_type"], "image/png");
    let input_id = "01930000-0000-7000-8000-000000000001";
    let accepted = s
        .call(
            s.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
                .json(&json!({
                    "input_id": input_id,
                    "text": "what is this?",
                    "images": [{"id": attachment["id"]}],
                })),
            StatusCode::ACCEPTED,
            Some("InputAccepted"),
        )
        .await;
    assert_eq!(accepted["input_id"], input_id);
    sse.until(&s.doc, of_type("turn_complete")).await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    let messages = requests[2].body["messages"].as_array().unwrap();
    let user = messages.last().unwrap();
    assert_eq!(
        user["content"],
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_1X1_BASE64}")}},
        ])
    );

    // Errors: bad input, unknown attachment, unknown approval, unknown session, deleted.
    let errors = [
        (
            reqwest::Method::POST,
            format!("/sessions/{id}/inputs"),
            json!({"text": 5}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{id}/inputs"),
            json!({"images": [{"id": "nope"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::POST,
            "/sessions".to_owned(),
            json!({"max_steps": 0}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::POST,
            "/sessions".to_owned(),
            json!({"cwd": dir.path().join("token")}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{id}/approvals/{request_id}"),
            json!({"decision": "deny"}),
            StatusCode::NOT_FOUND,
        ),
        (
            reqwest::Method::POST,
            format!(
                "/sessions/{}/inputs",
                "01930000-0000-7000-8000-0000000000ff"
            ),
            json!({"text": "x"}),
            StatusCode::NOT_FOUND,
        ),
    ];
    for (method, path, body, status) in errors {
        s.call(s.req(method, &path).json(&body), status, Some("Error"))
            .await;
    }
    s.call(
        s.req(reqwest::Method::PUT, &format!("/sessions/{id}/title"))
            .json(&json!({"title": "renamed"})),
        StatusCode::NO_CONTENT,
        None,
    )
    .await;
    s.call(
        s.req(reqwest::Method::POST, &format!("/sessions/{id}/cancel")),
        StatusCode::NO_CONTENT,
        None,
    )
    .await;
    s.call(
        s.req(reqwest::Method::DELETE, &format!("/sessions/{id}")),
        StatusCode::NO_CONTENT,
        None,
    )
    .await;
    let err = s
        .call(
            s.req(reqwest::Method::DELETE, &format!("/sessions/{id}")),
            StatusCode::CONFLICT,
            Some("Error"),
        )
        .await;
    assert_eq!(err["error"]["code"], "session_deleted");

    every_documented_operation_is_routed(s).await;

    // Graceful shutdown on SIGTERM.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(server.child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = server.child.wait().await.unwrap();
    assert!(status.success(), "{status}");
}

/// An input sent while a turn waits for an approval is queued; sent again under its id
/// (a client that lost the first answer), it is answered as queued again and taken once.
/// Before, the second answer said `queued: false` (nothing new was written for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_input_sent_again_under_its_id_is_answered_as_queued() {
    within(async {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let provider = MockProvider::start().await;
        provider.push(MockResponse::sse(openai_chat::tool_call(
            "call_1",
            "write_file",
            r#"{"path":"out.txt","content":"hello"}"#,
        )));
        provider.push(MockResponse::sse(openai_chat::text("written")));
        provider.push(MockResponse::sse(openai_chat::text("and the second")));
        let server = start(&provider, dir.path()).await;
        let s = &server;
        let created = s
            .call(
                s.req(reqwest::Method::POST, "/sessions")
                    .json(&json!({"cwd": work, "approval_mode": "ask"})),
                StatusCode::CREATED,
                Some("SessionCreated"),
            )
            .await;
        let id = created["id"].as_str().unwrap().to_owned();
        let mut sse = Stream::open(s, &id, "?from_seq=1&approver=true", None).await;
        let post = |body: Value| {
            s.call(
                s.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
                    .json(&body),
                StatusCode::ACCEPTED,
                Some("InputAccepted"),
            )
        };
        let first = post(json!({"text": "write hello to out.txt"})).await;
        assert_eq!(first["queued"], json!(false));
        let waiting = sse.until(&s.doc, of_type("approval_requested")).await;
        let request_id = waiting.last().unwrap()["request_id"]
            .as_str()
            .unwrap()
            .to_owned();

        let again = "01930000-0000-7000-8000-0000000000a2";
        for attempt in ["first", "again"] {
            let accepted = post(json!({"input_id": again, "text": "and then?"})).await;
            assert_eq!(accepted["input_id"], again);
            assert_eq!(accepted["queued"], json!(true), "{attempt} answer");
        }

        s.allow_once(&id, &request_id).await;
        let mut seen = sse.until(&s.doc, of_type("turn_complete")).await;
        seen.extend(sse.until(&s.doc, of_type("turn_complete")).await);
        let taken = seen
            .iter()
            .filter(|e| e["type"] == "user_message" && e["input_id"] == again)
            .count();
        assert_eq!(taken, 1, "{seen:#?}");
        assert_eq!(seen.last().unwrap()["status"], "completed");
    })
    .await;
}

/// Every path and method of the document reaches a handler (not the router's
/// `no_route` fallback, not 405); the reverse direction is the unit test beside the
/// route table in `serve/src/openapi.rs`.
async fn every_documented_operation_is_routed(s: &Server) {
    let unknown = "01930000-0000-7000-8000-0000000000aa";
    let mut checked = 0;
    for (path, item) in s.doc["paths"].as_object().unwrap() {
        let concrete = path
            .replace("{id}", unknown)
            .replace("{request_id}", unknown);
        for method in item.as_object().unwrap().keys() {
            if method == "parameters" {
                continue;
            }
            let m: reqwest::Method = method.to_uppercase().parse().unwrap();
            let resp = s.req(m.clone(), &concrete).send().await.unwrap();
            let status = resp.status();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            let documented = item[method]["responses"].as_object().unwrap();
            assert!(
                documented.contains_key(status.as_str()),
                "{method} {path}: {status} is not documented"
            );
            // An empty `POST /sessions` creates a session (201).
            if !status.is_success() {
                let body: Value = resp.json().await.unwrap();
                validate(&s.doc, "Error", &body);
                assert_ne!(body["error"]["code"], "no_route", "{method} {path}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 19);
    let resp = s.req(reqwest::Method::GET, "/nope").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_route");
}

#[test]
fn a_taken_port_fails_before_the_data_dir_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let script = tmp.path().join("script.json");
    std::fs::write(&script, json!({"responses": [{"text": "hi"}]}).to_string()).unwrap();
    let data = tmp.path().join("data");
    let out = foya_tests::foya_bin::foya()
        .args([
            "serve",
            "--provider",
            "scripted",
            "--listen",
            &addr,
            "--script",
        ])
        .arg(&script)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(!data.exists(), "the data dir was created: {out:?}");
    assert_eq!(
        foya_tests::child::outcome(&out),
        (
            Some(1),
            String::new(),
            format!(
                "foya: cannot listen on {addr}: the address is already in use (another \
                 process listens on it; choose another --listen, or port 0 for a free one)\n"
            )
        )
    );
    drop(taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_bad_input_early_and_the_session_stays_usable() {
    within(refusals()).await;
}

async fn refusals() {
    let dir = tempfile::tempdir().unwrap();
    let provider = MockProvider::start().await;
    provider.push(MockResponse::sse(openai_chat::text("Fine.")));
    // A profile whose model takes no images.
    std::fs::create_dir_all(dir.path().join(".foya")).unwrap();
    std::fs::write(
        dir.path().join(".foya/config.toml"),
        format!(
            "[profiles.blind]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"blind-1\"\nvision = false\n",
            provider.base_url()
        ),
    )
    .unwrap();
    foya_tests::foya_bin::trust_project(dir.path());
    let server = start_with(&["--provider", "blind"], dir.path()).await;
    let s = &server;
    let error = async |builder: reqwest::RequestBuilder, status: StatusCode| {
        let body = s.call(builder, status, Some("Error")).await;
        (
            body["error"]["code"].as_str().unwrap().to_owned(),
            body["error"]["message"].as_str().unwrap().to_owned(),
        )
    };
    let upload = |media_type: &str, bytes: &[u8]| {
        s.req(reqwest::Method::POST, "/attachments")
            .header("content-type", media_type)
            .body(bytes.to_vec())
    };

    // Uploads: checked by declared type and magic bytes.
    assert_eq!(
        error(upload("application/pdf", b"hello"), StatusCode::UNSUPPORTED_MEDIA_TYPE).await,
        (
            "unsupported_media_type".to_owned(),
            "unsupported media type \"application/pdf\" (send image/png, image/jpeg, image/gif or image/webp)".to_owned()
        )
    );
    // A type an HTML form can send is refused before the route (`security_web.rs`).
    assert_eq!(
        error(
            upload("text/plain", b"hello"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        )
        .await
        .0,
        "form_content_type"
    );
    assert_eq!(
        error(upload("image/png", b"hello"), StatusCode::BAD_REQUEST).await,
        (
            "invalid_image".to_owned(),
            "the content is not an image (declared image/png)".to_owned()
        )
    );
    // A PNG signature followed by anything but a PNG header is not an image.
    for tail in [&b"fake"[..], &[b'A'; 64]] {
        let bytes = [&PNG_1X1[..8], tail].concat();
        let (code, message) = error(upload("image/png", &bytes), StatusCode::BAD_REQUEST).await;
        assert_eq!(code, "invalid_image");
        assert!(
            message.starts_with(
                "the content is not a valid image/png image: its header does not parse ("
            ),
            "{message}"
        );
    }
    // A body over the 32 MiB limit: 413 with the same JSON error body.
    let mut big = PNG_1X1.to_vec();
    big.resize(32 * 1024 * 1024 + 1, 0);
    assert_eq!(
        error(upload("image/png", &big), StatusCode::PAYLOAD_TOO_LARGE).await,
        (
            "payload_too_large".to_owned(),
            "the request body is larger than the limit of 33554432 bytes (32 MiB)".to_owned()
        )
    );
    let attachment = s
        .call(
            upload("image/png", PNG_1X1),
            StatusCode::CREATED,
            Some("Attachment"),
        )
        .await;
    // A wrong method answers the same JSON error shape.
    assert_eq!(
        error(
            s.req(reqwest::Method::GET, "/attachments"),
            StatusCode::METHOD_NOT_ALLOWED
        )
        .await
        .0,
        "method_not_allowed"
    );

    // Images for a model without vision: 400 at submit, nothing recorded.
    let created = s
        .call(
            s.req(reqwest::Method::POST, "/sessions").json(&json!({})),
            StatusCode::CREATED,
            Some("SessionCreated"),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let inputs = format!("/sessions/{id}/inputs");
    assert_eq!(
        error(
            s.req(reqwest::Method::POST, &inputs).json(&json!({
                "text": "what is this?",
                "images": [{"id": attachment["id"]}],
            })),
            StatusCode::BAD_REQUEST
        )
        .await,
        (
            "images_not_supported".to_owned(),
            "model \"blind-1\" does not accept images (its provider profile has no vision); send the input without images".to_owned()
        )
    );

    // The session is still usable: the next input runs to completion.
    let mut sse = Stream::open(s, &id, "?from_seq=1", None).await;
    s.call(
        s.req(reqwest::Method::POST, &inputs)
            .json(&json!({"text": "hello"})),
        StatusCode::ACCEPTED,
        Some("InputAccepted"),
    )
    .await;
    let events = sse.until(&s.doc, of_type("turn_complete")).await;
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types[..3],
        ["session_created", "user_message", "turn_started"]
    );
    assert_eq!(events[1]["input"], json!({"text": "hello"}));
    assert_eq!(events.last().unwrap()["status"], "completed");
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_cancels_running_turns_and_the_locked_data_dir_names_its_server() {
    within(shutdown_scenario()).await;
}

async fn shutdown_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("foya-serve-sigterm-{}", std::process::id());
    let provider = MockProvider::start().await;
    let command = format!("echo ready; exec -a {mark} sleep 100");
    let arguments = json!({ "command": command }).to_string();
    provider.push(MockResponse::sse(openai_chat::tool_call(
        "call_sleep",
        "shell",
        &arguments,
    )));
    let mut server = start(&provider, dir.path()).await;
    let s = &server;
    let created = s
        .call(
            s.req(reqwest::Method::POST, "/sessions")
                .json(&json!({"cwd": dir.path(), "approval_mode": "bypass"})),
            StatusCode::CREATED,
            Some("SessionCreated"),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let mut sse = Stream::open(s, &id, "?from_seq=1", None).await;
    s.call(
        s.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
            .json(&json!({"text": "sleep"})),
        StatusCode::ACCEPTED,
        Some("InputAccepted"),
    )
    .await;
    // Running: the tool printed `ready` (a live delta).
    loop {
        let sse = sse.inner.next().await.unwrap().unwrap();
        let data: Value = serde_json::from_str(&sse.data).unwrap();
        if data["type"] == "tool_output" && data["chunk"].as_str().unwrap().contains("ready") {
            break;
        }
    }
    let running = mark.clone();
    // Bounded by the scenario's global timeout (`within`).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let _ = tokio::task::spawn_blocking(move || wait_running(&running, deadline))
        .await
        .unwrap();

    // The data dir is locked by the server: `sessions list` says by whom and what to do.
    let data = dir.path().join("data");
    let pid = server.child.id().unwrap();
    let expected = data_dir_in_use(
        &data,
        &format!("foya serve (pid {pid}, {base})", base = s.base),
        "server",
        &format!(
            "GET {base}/sessions (e.g. curl {base}/sessions, with -H \
             'Authorization: Bearer TOKEN' if it was started with --token-file)",
            base = s.base
        ),
    );
    assert_eq!(
        sessions_list(&data).await,
        (Some(1), String::new(), expected)
    );

    // SIGTERM: the running turn is cancelled and its end reaches the open stream.
    let nix_pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(nix_pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let ended = sse.until(&s.doc, of_type("turn_complete")).await;
    let tail: Vec<(&str, Value)> = ended
        .iter()
        .map(|e| {
            let t = e["type"].as_str().unwrap();
            let detail = match t {
                "tool_message" => json!([e["tool_call_id"], e["is_error"]]),
                "turn_cancelled" => e["reason"].clone(),
                "turn_complete" => e["status"].clone(),
                _ => Value::Null,
            };
            (t, detail)
        })
        .filter(|(t, _)| ["tool_message", "turn_cancelled", "turn_complete"].contains(t))
        .collect();
    assert_eq!(
        tail,
        [
            ("tool_message", json!(["call_sleep", true])),
            ("turn_cancelled", json!("runtime shutdown")),
            ("turn_complete", json!("cancelled")),
        ]
    );
    let status = server.child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(
        processes_with(&mark),
        Vec::<u32>::new(),
        "the tool was killed"
    );

    // The log (read by a new process once the lock is free) ends with the cancelled end.
    let out = tokio::process::Command::new(foya_bin())
        .args(["sessions", "show", &id, "--json", "--data-dir"])
        .arg(&data)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let log: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>());
    let last = log.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"]),
        (&json!("turn_complete"), &json!("cancelled"))
    );
    assert_eq!(last, ended.last().unwrap());
    assert_eq!(
        log.iter().filter(|e| e["type"] == "turn_complete").count(),
        1
    );
    assert!(
        !data.join("foya.owner").exists(),
        "the owner file is removed at exit"
    );
}

mod bodies;
mod damaged_store;
mod hooks;
mod paging;
mod pressure;
mod script_end;
mod shutdown;
mod store_backup;

//! Telemetry end to end (docs/observability.md): the real `foya` binary exports its
//! traces over OTLP/HTTP (protobuf) to a real receiver in the test (decoded with the
//! OpenTelemetry proto definitions, `foya_tests::otlp`), and `foya serve` answers
//! `GET /metrics`, checked with the official Prometheus Python parser (OpenMetrics;
//! installed by `.ci/setup-telemetry`).
//!
//! - `foya run`, a turn of two steps and a tool call: the span tree (turn → chat × 2,
//!   execute_tool), the GenAI attributes, exported before the process exits.
//! - `foya run`, a provider error: the turn's and the step's error status and class.
//! - `foya serve`: an input with a W3C `traceparent` continues the caller's trace; a
//!   cancelled turn's status; `/metrics` after that work (turns by status, tool calls, a
//!   histogram's count), behind the bearer token.
//! - `foya node --http`: `/metrics` behind its token; a non-loopback address without one
//!   is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::{foya, foya_bin, test_home};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use foya_tests::otlp::{OtlpReceiver, ReceivedSpan};
use futures::StreamExt as _;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

const TIMEOUT: Duration = Duration::from_secs(60);
const TOKEN: &str = "metrics-token-1";

/// `foya run` against the mock provider (OpenAI Chat, model `mock-1`) in `work`, its
/// traces sent to `receiver` (on a blocking thread: the servers keep the runtime).
async fn run(
    mock: &MockProvider,
    receiver: &OtlpReceiver,
    work: &std::path::Path,
    prompt: &str,
) -> std::process::Output {
    let mut command = foya();
    command
        .args([
            "run",
            "--provider",
            "openai-chat",
            "--model",
            "mock-1",
            "--base-url",
        ])
        .arg(format!("{}/v1", mock.base_url()))
        .arg("--cwd")
        .arg(work)
        .arg("--data-dir")
        .arg(work.join("data"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_SERVICE_NAME", "foya-under-test")
        .arg(prompt);
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_of_two_steps_and_a_tool_call_is_one_span_tree_with_the_genai_attributes() {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::sse(openai_chat::tool_call(
        "call_1",
        "read_file",
        r#"{"path": "notes.txt"}"#,
    )));
    mock.push(MockResponse::sse(openai_chat::text("The notes say hi.")));
    let receiver = OtlpReceiver::start().await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "hi\n").unwrap();
    let out = run(&mock, &receiver, tmp.path(), "what do the notes say?").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exported before the process exited: no wait.
    let spans = receiver.spans();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let turn = one(&spans, "turn");
    let tool = one(&spans, "execute_tool read_file");
    let mut chats: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "chat mock-1").collect();
    chats.sort_by_key(|s| s.int("foya.step"));
    assert_eq!(chats.len(), 2, "{spans:#?}");

    // The tree: the turn is the root; both steps and the tool call are its children.
    assert_eq!(turn.parent_span_id, "");
    for child in [chats[0], chats[1], tool] {
        assert_eq!(child.trace_id, turn.trace_id);
        assert_eq!(child.parent_span_id, turn.span_id, "{}", child.name);
        assert!(
            child.start_ns >= turn.start_ns && child.end_ns <= turn.end_ns,
            "{child:#?} in {turn:#?}"
        );
    }
    assert!(
        chats[0].end_ns <= tool.start_ns + 1_000_000
            && tool.end_ns <= chats[1].start_ns + 1_000_000
    );
    assert!(spans.iter().all(|s| s.service_name == "foya-under-test"));

    // The turn.
    assert_eq!(turn.status_code, 1, "completed: OK");
    assert_eq!(turn.str("foya.turn.status"), Some("completed"));
    assert_eq!(turn.str("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(turn.int("foya.turn.steps"), Some(2));
    assert_eq!(turn.int("gen_ai.usage.input_tokens"), Some(84));
    assert_eq!(turn.int("gen_ai.usage.output_tokens"), Some(14));
    let session = turn.str("foya.session.id").unwrap();
    assert_eq!(turn.str("gen_ai.conversation.id"), Some(session));
    assert!(
        turn.str("foya.run.id").is_some_and(|r| r.len() == 36),
        "{turn:#?}"
    );

    // The model requests.
    for (chat, step, finish) in [(chats[0], 1, "tool_calls"), (chats[1], 2, "stop")] {
        assert_eq!(chat.int("foya.step"), Some(step));
        assert_eq!(chat.str("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.str("gen_ai.request.model"), Some("mock-1"));
        assert_eq!(chat.str("gen_ai.provider.name"), Some("openai-chat"));
        assert_eq!(chat.int("gen_ai.usage.input_tokens"), Some(42));
        assert_eq!(chat.int("gen_ai.usage.output_tokens"), Some(7));
        assert_eq!(
            chat.attributes["gen_ai.response.finish_reasons"],
            json!([finish])
        );
        assert_eq!(chat.int("foya.retries"), Some(0));
        assert_eq!(chat.status_code, 0);
        // Measured by the model-client wrapper, within the span (which starts at
        // step_started, before the request, with millisecond times).
        let ttft = chat
            .attributes
            .get("foya.time_to_first_token_ms")
            .and_then(Value::as_f64);
        #[allow(clippy::cast_precision_loss)]
        let span_ms = (chat.end_ns - chat.start_ns) as f64 / 1e6;
        assert!(
            ttft.is_some_and(|ms| ms > 0.0 && ms <= span_ms + 1.0),
            "time to first token {ttft:?}, span {span_ms} ms: {chat:#?}"
        );
    }

    // The tool call.
    assert_eq!(tool.str("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(tool.str("gen_ai.tool.name"), Some("read_file"));
    assert_eq!(tool.str("gen_ai.tool.call.id"), Some("call_1"));
    assert_eq!(tool.str("foya.tool.outcome"), Some("ok"));
    assert_eq!(tool.int("foya.step"), Some(1));

    // Content is off by default: neither the prompt, the answer nor the arguments.
    let raw = String::from_utf8_lossy(&receiver.raw()).into_owned();
    for content in ["what do the notes say", "The notes say hi", "notes.txt"] {
        assert!(!raw.contains(content), "exported {content:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_turn_has_an_error_status_with_its_class() {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::json(
        400,
        &json!({"error": {"message": "bad request", "type": "invalid_request_error"}}),
    ));
    let receiver = OtlpReceiver::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let out = run(&mock, &receiver, tmp.path(), "hello").await;
    assert!(!out.status.success());
    let spans = receiver.spans();
    let turn = one(&spans, "turn");
    let chat = one(&spans, "chat mock-1");
    assert_eq!(turn.status_code, 2, "{turn:#?}");
    assert_eq!(turn.str("foya.turn.status"), Some("failed"));
    let class = turn.str("error.type").unwrap();
    assert!(!class.is_empty());
    assert_eq!(turn.status_message, class);
    assert_eq!(chat.parent_span_id, turn.span_id);
    assert_eq!(chat.status_code, 2, "{chat:#?}");
    assert_eq!(chat.str("error.type"), Some(class));
    // The provider's message is not exported, only its class.
    assert!(!String::from_utf8_lossy(&receiver.raw()).contains("bad request"));
}

/// A running `foya serve` with traces sent to a receiver.
struct Serve {
    _child: tokio::process::Child,
    base: String,
    http: reqwest::Client,
}

impl Serve {
    async fn start(mock: &MockProvider, receiver: &OtlpReceiver, dir: &std::path::Path) -> Self {
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        // One MCP server, used by no session: it stays not started (reading its state
        // for the metrics must not start it).
        let home = dir.join("home");
        foya_tests::mcp::write_user_config(
            &home,
            "[mcp_servers.idle]\ncommand = \"foya-test-no-such-mcp-server\"\nenabled = false\n",
        );
        let mut child = tokio::process::Command::new(foya_bin())
            .args([
                "serve",
                "--provider",
                "openai-chat",
                "--model",
                "mock-1",
                "--base-url",
            ])
            .arg(format!("{}/v1", mock.base_url()))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--approval",
                "auto-edit",
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .arg("--token-file")
            .arg(&token_file)
            .current_dir(dir)
            .env("HOME", &home)
            .env(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                format!("{}/v1/traces", receiver.endpoint()),
            )
            // Batches leave every 50 ms (the SDK's variable), so the test waits little.
            .env("OTEL_BSP_SCHEDULE_DELAY", "50")
            .env_remove("FOYA_DATA_DIR")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
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
            .unwrap();
        Self {
            _child: child,
            base,
            http: reqwest::Client::new(),
        }
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
    }
}

/// Reads the SSE stream until it has shown `n` `turn_complete` events.
async fn until_turns_complete(
    body: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    seen: &mut String,
    n: usize,
) {
    let done = tokio::time::timeout(TIMEOUT, async {
        while seen.matches("\"type\":\"turn_complete\"").count() < n {
            let chunk = body.next().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(done.is_ok(), "{n} turns did not complete: {seen}");
}

/// The samples of an OpenMetrics text, parsed by the official Python client's parser
/// (which refuses an invalid exposition): `(name, labels, value)`.
fn parse_openmetrics(text: &str) -> Vec<(String, std::collections::BTreeMap<String, String>, f64)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".telemetry-deps/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run .ci/setup-telemetry (or .ci/test-deps)",
        python.display()
    );
    let script = "import sys, json\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        out = []\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.append([s.name, s.labels, s.value])\n\
        print(json.dumps(out))\n";
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sample(
    samples: &[(String, std::collections::BTreeMap<String, String>, f64)],
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map_or_else(
            || panic!("no sample {name} {labels:?} in {samples:?}"),
            |s| s.2,
        )
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_continues_a_callers_trace_ends_a_cancelled_turn_and_serves_metrics() {
    let mock = MockProvider::start().await;
    let receiver = OtlpReceiver::start().await;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notes.txt"), "hi\n").unwrap();
    let serve = Serve::start(&mock, &receiver, tmp.path()).await;
    let created: Value = serve
        .post("/sessions")
        .json(&json!({"cwd": tmp.path()}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let events = serve
        .get(&format!("/sessions/{id}/events?from_seq=1"))
        .send()
        .await
        .unwrap();
    let mut body = events.bytes_stream();
    let mut seen = String::new();

    // A turn of two steps and a tool call, under the caller's trace.
    mock.push(MockResponse::sse(openai_chat::tool_call(
        "call_1",
        "read_file",
        r#"{"path": "notes.txt"}"#,
    )));
    mock.push(MockResponse::sse(openai_chat::text("The notes say hi.")));
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let sent = serve
        .post(&format!("/sessions/{id}/inputs"))
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .json(&json!({"text": "what do the notes say?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), reqwest::StatusCode::ACCEPTED);
    until_turns_complete(&mut body, &mut seen, 1).await;

    // A turn cancelled while the model streams slowly.
    mock.push(
        MockResponse::sse(openai_chat::text("a long answer that never ends"))
            .chunk_delay_ms(60_000),
    );
    let sent = serve
        .post(&format!("/sessions/{id}/inputs"))
        .json(&json!({"text": "and now?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), reqwest::StatusCode::ACCEPTED);
    tokio::time::timeout(TIMEOUT, async {
        while !seen.contains("\"type\":\"step_started\"")
            || seen.matches("\"type\":\"step_started\"").count() < 3
        {
            let chunk = body.next().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("the second turn's step starts");
    // Its request reached the model (so the slow answer is taken, not left for the next).
    mock.wait_for_requests(3).await;
    let cancelled = serve
        .post(&format!("/sessions/{id}/cancel"))
        .send()
        .await
        .unwrap();
    assert!(cancelled.status().is_success());
    until_turns_complete(&mut body, &mut seen, 2).await;

    let spans = receiver
        .wait_for("both turns' spans", TIMEOUT, |spans| {
            spans.iter().filter(|s| s.name == "turn").count() == 2
                && spans.iter().filter(|s| s.name == "chat mock-1").count() == 3
        })
        .await;
    let turns: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "turn").collect();
    let continued = turns
        .iter()
        .find(|t| t.str("foya.turn.status") == Some("completed"))
        .unwrap();
    // The caller's trace goes on: its span is the turn's parent, and the turn's children
    // are in the caller's trace too.
    assert_eq!(continued.trace_id, caller_trace);
    assert_eq!(continued.parent_span_id, caller_span);
    let children: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id == continued.span_id)
        .collect();
    assert_eq!(children.len(), 3, "{children:#?}");
    assert!(children.iter().all(|s| s.trace_id == caller_trace));
    let cancelled = turns
        .iter()
        .find(|t| t.str("foya.turn.status") == Some("cancelled"))
        .unwrap();
    assert_ne!(
        cancelled.trace_id, caller_trace,
        "a turn without traceparent has its own trace"
    );
    assert_eq!(cancelled.parent_span_id, "");
    assert_eq!(
        cancelled.status_code, 0,
        "cancelled: no error, {cancelled:#?}"
    );
    assert_eq!(cancelled.str("foya.turn.reason"), Some("user"));

    // A turn the provider refuses.
    mock.push(MockResponse::json(
        400,
        &json!({"error": {"message": "bad request", "type": "invalid_request_error"}}),
    ));
    let sent = serve
        .post(&format!("/sessions/{id}/inputs"))
        .json(&json!({"text": "once more"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), reqwest::StatusCode::ACCEPTED);
    until_turns_complete(&mut body, &mut seen, 3).await;

    // The metrics after that work.
    let unauthorized = serve
        .http
        .get(format!("{}/metrics", serve.base))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), reqwest::StatusCode::UNAUTHORIZED);
    // The runtime's gauges follow the session actor, which counts its turn as ended
    // once it has handled the turn's end: a moment after `turn_complete` reached the
    // stream. Scrape until they have settled (the counters below are final already).
    let (text, samples) = tokio::time::timeout(TIMEOUT, async {
        loop {
            let resp = serve.get("/metrics").send().await.unwrap();
            assert_eq!(resp.status(), reqwest::StatusCode::OK);
            let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
            assert!(
                content_type.starts_with("application/openmetrics-text"),
                "{content_type}"
            );
            let text = resp.text().await.unwrap();
            let samples = parse_openmetrics(&text);
            if sample(&samples, "foya_turns_active", &[]) == 0.0 {
                break (text, samples);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the turns-active gauge never came back to 0");
    assert_eq!(sample(&samples, "foya_turns_started_total", &[]), 3.0);
    assert_eq!(
        sample(
            &samples,
            "foya_turns_finished_total",
            &[("status", "failed")]
        ),
        1.0
    );
    let errors: f64 = samples
        .iter()
        .filter(|(name, _, _)| name == "foya_provider_errors_total")
        .map(|(_, _, value)| value)
        .sum();
    assert_eq!(errors, 1.0, "one refused request: {samples:?}");
    assert_eq!(
        sample(
            &samples,
            "foya_turns_finished_total",
            &[("status", "completed")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "foya_turns_finished_total",
            &[("status", "cancelled")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "foya_tool_calls_total",
            &[("tool", "read_file"), ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "foya_turn_duration_seconds_count",
            &[("status", "completed")]
        ),
        1.0
    );
    assert_eq!(
        sample(&samples, "foya_step_duration_seconds_count", &[]),
        2.0
    );
    assert_eq!(
        sample(
            &samples,
            "foya_tool_call_duration_seconds_count",
            &[("tool", "read_file")]
        ),
        1.0
    );
    assert_eq!(
        sample(&samples, "foya_time_to_first_token_seconds_count", &[]),
        2.0,
        "the cancelled request streamed nothing"
    );
    assert_eq!(
        sample(&samples, "foya_tokens_total", &[("direction", "input")]),
        84.0
    );
    assert_eq!(sample(&samples, "foya_turns_active", &[]), 0.0);
    assert_eq!(sample(&samples, "foya_inputs_queued", &[]), 0.0);
    assert_eq!(sample(&samples, "foya_sessions_created_total", &[]), 1.0);
    // The runtime's own counts: the one session is loaded (it hibernates after a
    // minute), no approval waits; the MCP server was never started.
    assert_eq!(sample(&samples, "foya_sessions_live", &[]), 1.0);
    assert_eq!(sample(&samples, "foya_sessions_hibernated", &[]), 0.0);
    assert_eq!(sample(&samples, "foya_approvals_pending", &[]), 0.0);
    assert_eq!(
        sample(&samples, "foya_mcp_servers", &[("state", "not_started")]),
        1.0
    );
    for state in ["running", "failed", "stopped"] {
        assert_eq!(
            sample(&samples, "foya_mcp_servers", &[("state", state)]),
            0.0
        );
    }
    assert!(sample(&samples, "foya_store_commits_total", &[]) >= 1.0);
    // Every group commit of the writer, timed and sized: all of this run's events.
    let commits = sample(&samples, "foya_store_commit_seconds_count", &[]);
    assert!(commits >= 1.0, "{text}");
    assert_eq!(
        sample(&samples, "foya_store_commit_events_count", &[]),
        commits
    );
    assert_eq!(
        sample(&samples, "foya_store_commit_events_sum", &[]),
        sample(&samples, "foya_store_events_total", &[]),
        "{text}"
    );
    // Bounded labels: no session id anywhere.
    assert!(!text.contains(&id), "{text}");
    drop(serve);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_serves_metrics_on_http_behind_its_token() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("cookie"), "cookie-1\n").unwrap();
    std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::write(
        dir.join("script.json"),
        r#"{"responses": [{"text": "hi"}]}"#,
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let node = |http: &str| {
        let mut command = tokio::process::Command::new(foya_bin());
        command
            .args([
                "node",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--http",
                http,
            ])
            .arg("--cookie-file")
            .arg(dir.join("cookie"))
            .args(["--provider", "scripted", "--script"])
            .arg(dir.join("script.json"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .current_dir(dir)
            .env("HOME", test_home())
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command
    };
    // Without a token, only a loopback address: refused before it is bound.
    let refused = node("0.0.0.0:0").output().await.unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--http 0.0.0.0:0 is reachable from other machines: give --token-file"),
        "{stderr}"
    );

    let mut child = node("127.0.0.1:0")
        .arg("--token-file")
        .arg(dir.join("token"))
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(TIMEOUT, async {
        loop {
            let line = stderr.next_line().await.unwrap().expect("the node exited");
            if let Some(url) = line.strip_prefix("foya node: metrics at ") {
                return url.to_owned();
            }
        }
    })
    .await
    .expect("the metrics address is printed");
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = tokio::time::timeout(TIMEOUT, stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(listening.contains("listening on"), "{listening}");
    let http = reqwest::Client::new();
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);
    let text = http
        .get(&url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let samples = parse_openmetrics(&text);
    assert_eq!(sample(&samples, "foya_turns_started_total", &[]), 0.0);
    assert_eq!(sample(&samples, "foya_turns_active", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loadtest_exports_the_traces_of_its_turns_and_serves_its_metrics() {
    let receiver = OtlpReceiver::start().await;
    let mut command = foya();
    command
        .args([
            "loadtest",
            "--sessions",
            "3",
            "--ttft-ms",
            "0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("foya loadtest: metrics at http://127.0.0.1:"),
        "{stderr}"
    );
    // Every turn's spans left before the process exited.
    let spans = receiver.spans();
    let turns: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "turn").collect();
    assert_eq!(turns.len(), 3, "{spans:#?}");
    assert!(
        turns
            .iter()
            .all(|t| t.str("foya.turn.status") == Some("completed"))
    );
    assert!(
        spans.iter().any(|s| s.name.starts_with("chat ")),
        "{spans:#?}"
    );
}

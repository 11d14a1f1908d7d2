//! The user's API key never appears in what foya writes, whatever a server echoes back:
//! a recognisable fake key goes through the real `foya run` and `foya serve` to the mock
//! provider, which echoes it in an error body and, split across stream chunks, in the
//! model's text. stdout, stderr (debug logs on), `sessions list/show --json`, the SSE
//! stream, every byte of the exported traces (a real OTLP receiver) and `GET /metrics`
//! are all searched for it; the traces and metrics for the prompt's text too, unless
//! `[telemetry] capture_content` opts in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya, test_home};
use foya_tests::mock_provider::{MockProvider, MockResponse};
use foya_tests::otlp::OtlpReceiver;
use foya_tests::serve::Serve;
use futures::StreamExt as _;
use serde_json::json;
use std::time::Duration;

const KEY: &str = "sk-FOYA-CANARY-7f3a9c5e1d";
const TOKEN: &str = "serve-token-1";

/// An OpenAI Chat stream whose text carries the key split across two chunks.
fn echoing_stream() -> MockResponse {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let body = json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {body}\n\n")
    };
    let (head, tail) = KEY.split_at(9);
    let text = [
        chunk(json!({"role": "assistant", "content": ""}), json!(null)),
        chunk(
            json!({"content": format!("your key is {head}")}),
            json!(null),
        ),
        chunk(
            json!({"content": format!("{tail}, and again {KEY}.")}),
            json!(null),
        ),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    MockResponse::sse(text)
}

/// A 401 whose body echoes the key, as some gateways do.
fn echoing_error() -> MockResponse {
    MockResponse::json(
        401,
        &json!({"error": {"message": format!("Incorrect API key provided: {KEY}. Authorization: Bearer {KEY}"), "type": "invalid_request_error"}}),
    )
}

fn assert_no_key(what: &str, text: &str) {
    assert!(!text.contains(KEY), "{what} shows the key:\n{text}");
    assert!(
        !text.contains(&KEY[..12]),
        "{what} shows part of the key:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_output_logs_and_the_store_never_show_the_key() {
    let mock = MockProvider::start().await;
    mock.push(echoing_error());
    mock.push(echoing_stream());
    let tmp = tempfile::tempdir().unwrap();
    let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let base = format!("{}/v1", mock.base_url());
    let outputs = tokio::task::spawn_blocking({
        let (data, work) = (data.clone(), work.clone());
        move || {
            let run = |json: bool| {
                let mut command = foya();
                command
                    .args(["run", "--provider", "openai", "--base-url", &base, "--cwd"])
                    .arg(&work)
                    .arg("--data-dir")
                    .arg(&data)
                    .env("OPENAI_API_KEY", KEY)
                    .env("RUST_LOG", "debug");
                if json {
                    command.arg("--json");
                }
                command.arg("hello").output().unwrap()
            };
            let failed = run(true);
            let echoed = run(false);
            let list = foya()
                .args(["sessions", "list", "--json", "--data-dir"])
                .arg(&data)
                .output()
                .unwrap();
            let ids: Vec<String> = String::from_utf8_lossy(&list.stdout)
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            let shows: Vec<std::process::Output> = ids
                .iter()
                .map(|id| {
                    foya()
                        .args(["sessions", "show", id, "--json", "--data-dir"])
                        .arg(&data)
                        .output()
                        .unwrap()
                })
                .collect();
            (failed, echoed, list, shows)
        }
    })
    .await
    .unwrap();
    let (failed, echoed, list, shows) = outputs;
    // The key did reach the provider (that is where it belongs)...
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.headers["authorization"] == format!("Bearer {KEY}"))
    );
    // ...and nowhere else.
    assert_ne!(failed.status.code(), Some(0));
    let echoed_out = String::from_utf8_lossy(&echoed.stdout);
    assert!(
        echoed_out.contains("your key is [redacted], and again [redacted]."),
        "{echoed_out}"
    );
    for (what, out) in [
        ("failed run", &failed),
        ("echoed run", &echoed),
        ("sessions list", &list),
    ] {
        assert_no_key(
            &format!("{what} stdout"),
            &String::from_utf8_lossy(&out.stdout),
        );
        assert_no_key(
            &format!("{what} stderr"),
            &String::from_utf8_lossy(&out.stderr),
        );
    }
    assert_eq!(shows.len(), 2);
    for show in &shows {
        let text = String::from_utf8_lossy(&show.stdout);
        assert!(text.contains("[redacted]"), "{text}");
        assert_no_key("sessions show --json", &text);
    }
    // The raw store file too.
    let store = std::fs::read(data.join("foya.redb")).unwrap();
    assert!(
        !store.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
        "the store file holds the key"
    );
}

const PROMPT: &str = "PROMPT-CANARY-5d2e what is my key?";

/// Every exported byte: no key, no part of it, no `Authorization` value.
fn assert_no_credential(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert_no_key(what, &text);
    assert!(
        !text.contains("Bearer"),
        "{what} shows an Authorization value:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exported_traces_never_show_the_key_an_authorization_or_the_prompt() {
    let mock = MockProvider::start().await;
    mock.push(echoing_error());
    mock.push(echoing_stream());
    mock.push(echoing_stream());
    let receiver = OtlpReceiver::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let (data, work, opted_in) = (
        tmp.path().join("data"),
        tmp.path().join("work"),
        tmp.path().join("home"),
    );
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(opted_in.join(".config/foya")).unwrap();
    std::fs::write(
        opted_in.join(".config/foya/config.toml"),
        "[telemetry]\ncapture_content = true\n",
    )
    .unwrap();
    let base = format!("{}/v1", mock.base_url());
    let endpoint = receiver.endpoint();
    let run = move |home: Option<std::path::PathBuf>| {
        let mut command = foya();
        command
            .args(["run", "--provider", "openai", "--base-url", &base, "--cwd"])
            .arg(&work)
            .arg("--data-dir")
            .arg(&data)
            .env("OPENAI_API_KEY", KEY)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("RUST_LOG", "debug");
        if let Some(home) = home {
            command.env("HOME", home);
        }
        command.arg(PROMPT).output().unwrap()
    };
    let (failed, echoed, captured) =
        tokio::task::spawn_blocking(move || (run(None), run(None), run(Some(opted_in))))
            .await
            .unwrap();
    assert!(!failed.status.success());
    assert!(echoed.status.success() && captured.status.success());
    // Both runs exported their turns (before exiting), the failed one with its class…
    let spans = receiver.spans();
    let turns: Vec<_> = spans.iter().filter(|s| s.name == "turn").collect();
    assert_eq!(turns.len(), 3, "{spans:#?}");
    assert_eq!(turns[0].str("foya.turn.status"), Some("failed"));
    // …and no byte of them shows the key, an Authorization value or the prompt.
    let raw = receiver.raw();
    assert_no_credential("the exported traces", &raw);
    let bodies = String::from_utf8_lossy(&raw).into_owned();
    // With `capture_content` the prompt and answer are exported (so the search below
    // would find them), the key still not; without it, nothing of them.
    let opted: Vec<_> = turns
        .iter()
        .filter(|t| t.str("gen_ai.input.messages") == Some(PROMPT))
        .collect();
    assert_eq!(
        opted.len(),
        1,
        "only the opted-in run exports its prompt: {turns:#?}"
    );
    for span in spans.iter().filter(|s| s.trace_id != opted[0].trace_id) {
        for key in ["gen_ai.input.messages", "gen_ai.output.messages"] {
            assert!(
                !span.attributes.contains_key(key),
                "{key} without the opt-in: {span:#?}"
            );
        }
    }
    assert_eq!(
        bodies.matches("PROMPT-CANARY").count(),
        1,
        "the prompt, once (opted in)"
    );
    assert!(
        bodies.contains("your key is [redacted]"),
        "the opted-in answer is exported"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sse_stream_of_serve_never_shows_the_key() {
    let mock = MockProvider::start().await;
    mock.push(echoing_stream());
    let receiver = OtlpReceiver::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", mock.base_url());
    let serve = Serve::start(
        tmp.path(),
        TOKEN,
        &["--provider", "openai", "--base-url", &base_url],
        |c| {
            c.current_dir(tmp.path())
                .env("OPENAI_API_KEY", KEY)
                .env("HOME", test_home())
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
                .env("OTEL_BSP_SCHEDULE_DELAY", "50");
        },
    )
    .await;
    let id = serve
        .create_session(&json!({"cwd": tmp.path(), "approval_mode": "ask"}))
        .await;
    let events = serve.events(&id, false).await;
    serve.submit(&id, PROMPT).await;
    let mut body = events.bytes_stream();
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(60), async {
        while !seen.contains("turn_complete") {
            let chunk = body.next().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("the turn completes");
    assert!(seen.contains("[redacted]"), "{seen}");
    assert_no_key("the SSE stream", &seen);
    // The metrics and the exported traces neither (nor the prompt).
    let metrics = serve.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("foya_turns_finished_total{status=\"completed\"} 1"),
        "{metrics}"
    );
    assert_no_credential("GET /metrics", metrics.as_bytes());
    assert!(!metrics.contains("PROMPT-CANARY"));
    receiver
        .wait_for("the turn's span", Duration::from_secs(60), |spans| {
            spans.iter().any(|s| s.name == "turn")
        })
        .await;
    assert_no_credential("the exported traces", &receiver.raw());
    assert!(!String::from_utf8_lossy(&receiver.raw()).contains("PROMPT-CANARY"));
}

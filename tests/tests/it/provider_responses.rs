//! What a provider failure shows, end to end (the real `foya` binary against the mock
//! provider over real HTTP): a 200 that is not an event stream (an HTML page from a
//! wrong base URL) fails at once with `invalid_response` naming the content type and an
//! excerpt of the body, never retried; credentials never reach stderr, the persisted
//! `provider_retry` / `turn_complete` errors or `foya loadtest`'s report — the base
//! URL's userinfo and the API key a server echoes are shown as `[redacted]`; a 404 names
//! the URL and a base URL that doubles the path's `/v1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use foya_tests::foya_bin::{foya, only_session_log, output_in};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};

const KEY: &str = "sk-test-SECRET1234567890";

fn response(status: u16, content_type: Option<&str>, body: &str) -> MockResponse {
    MockResponse {
        status,
        headers: content_type
            .map(|c| vec![("content-type".to_owned(), c.to_owned())])
            .unwrap_or_default(),
        body_chunks: vec![Bytes::from(body.to_owned())],
        chunk_delay_ms: 0,
        cut_after: None,
    }
}

/// One `foya run` against `base_url`; its stderr and the session's events.
async fn run(base_url: String) -> (String, Vec<Value>) {
    run_as("openai-chat", base_url).await
}

/// [`run`] with the provider kind `kind`.
async fn run_as(kind: &'static str, base_url: String) -> (String, Vec<Value>) {
    let data = tempfile::tempdir().unwrap();
    let out = tokio::task::spawn_blocking({
        let data = data.path().to_owned();
        move || {
            let args = ["run", "--provider", kind, "--base-url", &base_url];
            let mut command = foya();
            command
                .env("OPENAI_API_KEY", KEY)
                .env("ANTHROPIC_API_KEY", KEY);
            output_in(
                command,
                &[&args[..], &["--model", "m", "say hello"]].concat(),
                &data,
            )
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "stderr: {stderr}");
    let events = only_session_log(data.path());
    (stderr, events)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_200_html_page_is_invalid_response_at_once_naming_the_content_type() {
    let mock = MockProvider::start().await;
    let page =
        "<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n<body>It works!</body></html>";
    mock.push(response(200, Some("text/html; charset=utf-8"), page));
    mock.push(MockResponse::sse(openai_chat::text("never asked for")));
    let base = format!("{}/v1", mock.base_url());
    let (_, events) = run(base.clone()).await;
    assert_eq!(mock.requests().len(), 1, "not retried");
    assert_eq!(of_type(&events, "provider_retry"), Vec::<&Value>::new());
    let complete = of_type(&events, "turn_complete");
    assert_eq!(
        (&complete[0]["status"], &complete[0]["error"]),
        (
            &json!("failed"),
            &json!({"class": "invalid_response", "message": format!(
                "expected an event stream from POST {base}/chat/completions, got HTTP 200 with \
                 content type `text/html; charset=utf-8` and `<!DOCTYPE html> <html><head>\
                 <title>Welcome</title></head> <body>It works!</body…`")})
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_the_base_url_and_echoed_keys_are_redacted_everywhere() {
    let mock = MockProvider::start().await;
    // Stream data echoing the key (not JSON), an empty 500, then a 401 quoting the key.
    mock.push(MockResponse::sse(format!(
        "data: {{\"note\": \"your key {KEY} is\n\n"
    )));
    mock.push(response(500, None, ""));
    mock.push(MockResponse::json(
        401,
        &json!({"error": {"message": format!("Incorrect API key provided: {KEY}."),
            "type": "invalid_request_error", "code": "invalid_api_key"}}),
    ));
    let addr = mock.base_url().trim_start_matches("http://").to_owned();
    let (stderr, events) = run(format!("http://user:PW-secret@{addr}/v1")).await;
    assert_eq!(mock.requests().len(), 3);
    let retries: Vec<&Value> = of_type(&events, "provider_retry")
        .into_iter()
        .map(|e| &e["error"])
        .collect();
    assert_eq!(
        retries,
        vec![
            &json!({"class": "invalid_response", "message": "malformed OpenAI Chat stream \
                event: its data is not JSON (EOF while parsing a string at line 1 column 46): \
                `{\"note\": \"your key [redacted] is`"}),
            &json!({"class": "server", "status": 500, "message": format!(
                "HTTP 500 from POST http://[redacted]@{addr}/v1/chat/completions")}),
        ]
    );
    let complete = of_type(&events, "turn_complete");
    assert_eq!(
        complete[0]["error"],
        json!({"class": "auth", "message": "Incorrect API key provided: [redacted]."})
    );
    let everything = format!("{stderr}{}", serde_json::to_string(&events).unwrap());
    for secret in ["PW-secret", KEY, "SECRET"] {
        assert!(!everything.contains(secret), "{secret} shown: {everything}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn loadtest_shows_its_endpoint_without_credentials() {
    let mock = MockProvider::start().await;
    mock.push(MockResponse::sse(openai_chat::text("Done.")));
    let addr = mock.base_url().trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = tokio::task::spawn_blocking({
        let (dir, json) = (dir.path().to_owned(), json.clone());
        let base = format!("http://user:PW-secret@{addr}/v1");
        move || {
            foya()
                .args(["loadtest", "--sessions", "1", "--turns", "1"])
                .args([
                    "--provider",
                    "openai-chat",
                    "--model",
                    "m",
                    "--base-url",
                    &base,
                ])
                .arg("--json")
                .arg(&json)
                .env("OPENAI_API_KEY", KEY)
                .current_dir(dir)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let shown = format!("http://[redacted]@{addr}/v1");
    assert_eq!(report["endpoint"], json!(shown), "stderr: {stderr}");
    assert_eq!(
        (
            stdout
                .lines()
                .next()
                .unwrap()
                .contains(&format!(" at {shown},")),
            stderr.contains(&format!("sending requests to {shown} ")),
            format!("{stdout}{stderr}").contains("PW-secret"),
        ),
        (true, true, false),
        "stdout: {stdout}\nstderr: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_404_from_a_doubled_v1_says_to_drop_it_from_the_base_url() {
    let mock = MockProvider::start().await;
    // The mock serves `/v1/messages`; the base URL below makes it `/v1/v1/messages`.
    let base = format!("{}/v1", mock.base_url());
    let (stderr, events) = run_as("anthropic", base.clone()).await;
    assert!(
        mock.requests().is_empty(),
        "the mock's routes were never reached"
    );
    let complete = of_type(&events, "turn_complete");
    assert_eq!(
        complete[0]["error"],
        json!({"class": "invalid_request", "message": format!(
            "HTTP 404 from POST {base}/v1/messages (the base URL `{base}` already ends in \
             `/v1`, and anthropic appends `/v1/messages` itself: drop `/v1` from the base URL)")})
    );
    assert!(
        of_type(&events, "provider_retry").is_empty(),
        "a 404 is not retried"
    );
    assert!(stderr.contains("drop `/v1` from the base URL"), "{stderr}");
}

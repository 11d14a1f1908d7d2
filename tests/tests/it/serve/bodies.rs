//! Request bodies of `foya serve` that carry nothing, or nothing usable: `POST /sessions`
//! with an empty body (no content type, zero bytes) creates a session with the defaults,
//! as `{}` does, while a body that is present but not JSON is still refused (400); a
//! title that is empty or only whitespace is refused (400 `empty_title`) by `PUT
//! /sessions/{id}/title` and `POST /sessions` (no session created), and by `foya sessions
//! title` (exit 2); an input with an unknown field is refused (400), not submitted.

use super::{Server, start, within};
use foya_tests::child::outcome;
use foya_tests::foya_bin::foya_bin;
use foya_tests::mock_provider::MockProvider;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_body_creates_a_session_and_empty_titles_are_refused() {
    within(bodies()).await;
}

/// `(code, message)` of a JSON error answered with `status`.
async fn error(
    s: &Server,
    builder: reqwest::RequestBuilder,
    status: StatusCode,
) -> (String, String) {
    let body = s.call(builder, status, Some("Error")).await;
    (
        body["error"]["code"].as_str().unwrap().to_owned(),
        body["error"]["message"].as_str().unwrap().to_owned(),
    )
}

/// The ids and titles of the listed sessions.
async fn listed(s: &Server) -> Vec<(String, Value)> {
    let list = s.get("/sessions", "SessionList").await;
    let sessions = list["sessions"].as_array().unwrap();
    sessions
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_owned(), s["title"].clone()))
        .collect()
}

async fn bodies() {
    let dir = tempfile::tempdir().unwrap();
    let provider = MockProvider::start().await;
    let server = start(&provider, dir.path()).await;
    let s = &server;

    // No body at all: the defaults, as with `{}` (the server's cwd, its model).
    let created = s
        .call(
            s.req(Method::POST, "/sessions"),
            StatusCode::CREATED,
            Some("SessionCreated"),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let summary = s.get(&format!("/sessions/{id}"), "SessionSummary").await;
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        (&summary["cwd"], &summary["model"], &summary["title"]),
        (&json!(cwd), &json!("mock-1"), &Value::Null)
    );

    // A body that is there but is no JSON object of the right shape: refused as before.
    let not_json = s.req(Method::POST, "/sessions").body("cwd=/tmp");
    assert_eq!(
        error(s, not_json, StatusCode::BAD_REQUEST).await,
        (
            "bad_request".to_owned(),
            "Expected request with `Content-Type: application/json`".to_owned()
        )
    );
    let bad_json = s
        .req(Method::POST, "/sessions")
        .header("content-type", "application/json")
        .body("{\"cwd\": ");
    assert_eq!(
        error(s, bad_json, StatusCode::BAD_REQUEST).await,
        (
            "bad_request".to_owned(),
            "Failed to parse the request body as JSON: cwd: EOF while parsing a value at line \
             1 column 8"
                .to_owned()
        )
    );

    // A blank model: refused (leaving it out means the server's model), nothing created.
    for model in ["", "  "] {
        let create = s
            .req(Method::POST, "/sessions")
            .json(&json!({"model": model}));
        assert_eq!(
            error(s, create, StatusCode::BAD_REQUEST).await,
            (
                "bad_request".to_owned(),
                "model is empty (leave it out for the server's model)".to_owned()
            )
        );
    }

    // Empty and blank titles: refused, nothing created or changed.
    let empty_title = (
        "empty_title".to_owned(),
        "the title is empty (or only whitespace)".to_owned(),
    );
    for title in ["", "  \t\n"] {
        let create = s
            .req(Method::POST, "/sessions")
            .json(&json!({"title": title}));
        assert_eq!(error(s, create, StatusCode::BAD_REQUEST).await, empty_title);
        let set = s
            .req(Method::PUT, &format!("/sessions/{id}/title"))
            .json(&json!({"title": title}));
        assert_eq!(error(s, set, StatusCode::BAD_REQUEST).await, empty_title);
    }
    assert_eq!(listed(s).await, vec![(id.clone(), Value::Null)]);
    // A title is stored as one trimmed line.
    s.call(
        s.req(Method::PUT, &format!("/sessions/{id}/title"))
            .json(&json!({"title": "  named\n on  two lines "})),
        StatusCode::NO_CONTENT,
        None,
    )
    .await;
    assert_eq!(
        listed(s).await,
        vec![(id.clone(), json!("named on two lines"))]
    );

    // An input with a field the API does not know (a misspelt `images`) is refused, not
    // submitted without it.
    let misspelt = s
        .req(Method::POST, &format!("/sessions/{id}/inputs"))
        .json(&json!({"text": "x", "image": [{"id": "zzz"}]}));
    assert_eq!(
        error(s, misspelt, StatusCode::BAD_REQUEST).await,
        (
            "bad_request".to_owned(),
            "Failed to deserialize the JSON body into the target type: image: unknown field \
             `image`, expected one of `input_id`, `text`, `command`, `images`, \
             `selected_elements` at line 1 column 8"
                .to_owned()
        )
    );
    let events = s.get(&format!("/sessions/{id}"), "SessionSummary").await;
    assert_eq!(events["last_seq"], json!(2), "{events}");

    // The CLI refuses a blank title too, before it looks at the (locked) data dir.
    let out = tokio::process::Command::new(foya_bin())
        .args(["sessions", "title", &id, "   ", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .await
        .unwrap();
    assert_eq!(
        outcome(&out),
        (
            Some(2),
            String::new(),
            "foya: the title is empty\n".to_owned()
        )
    );
}

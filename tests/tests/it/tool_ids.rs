//! Tool-call ids Anthropic would refuse in a replayed history — characters outside
//! `[a-zA-Z0-9_-]`, an id reused by a later step — are sent under valid, unique ids
//! (each result under its call's), so a session whose calls had such ids continues: the
//! mock provider refuses bad or duplicate ids with Anthropic's real 400, and every request
//! of the turn here is accepted. The log keeps the ids the model sent. The real `foya
//! run` binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya, only_session_log, output_in};
use foya_tests::mock_provider::{MockProvider, MockResponse, anthropic};
use serde_json::{Value, json};
use std::collections::HashSet;

/// `(tool_use ids, tool_result ids)` of an Anthropic request body, in order.
fn wire_ids(body: &Value) -> (Vec<String>, Vec<String>) {
    let (mut uses, mut results) = (Vec::new(), Vec::new());
    for msg in body["messages"].as_array().unwrap() {
        for block in msg["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => uses.push(block["id"].as_str().unwrap().to_owned()),
                Some("tool_result") => {
                    results.push(block["tool_use_id"].as_str().unwrap().to_owned());
                }
                _ => {}
            }
        }
    }
    (uses, results)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_whose_calls_had_bad_and_repeated_ids_continues_on_a_strict_provider() {
    // The model's ids: invalid characters, the same again next step, then a valid id
    // used twice in two steps. Each call reads another file (no repeated call).
    let calls = [
        ("call.1 x", "a.txt"),
        ("call.1 x", "b.txt"),
        ("toolu_1", "c.txt"),
        ("toolu_1", "d.txt"),
    ];
    let mock = MockProvider::start().await;
    for (id, file) in calls {
        let args = json!({"path": file}).to_string();
        mock.push(MockResponse::sse(anthropic::tool_call(
            id,
            "read_file",
            &args,
        )));
    }
    mock.push(MockResponse::sse(anthropic::text("Read them all.")));
    let data = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    for (_, file) in calls {
        std::fs::write(cwd.path().join(file), file).unwrap();
    }
    let args: Vec<String> = [
        "run",
        "--provider",
        "anthropic",
        "--base-url",
        &mock.base_url(),
        "--model",
        "m",
        "--approval",
        "bypass",
        "--cwd",
        cwd.path().to_str().unwrap(),
        "read the files",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = tokio::task::spawn_blocking({
        let data = data.path().to_owned();
        move || {
            output_in(
                foya(),
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
                &data,
            )
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Read them all."),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Five requests, none refused (a refusal would not consume a queued response and
    // the turn would fail); the last replays all four calls.
    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    let (uses, results) = wire_ids(&requests[4].body);
    assert_eq!(results, uses, "each result under its call's id");
    let unique: HashSet<&String> = uses.iter().collect();
    assert_eq!(unique.len(), 4, "{uses:?}");
    let valid = |id: &String| {
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    assert_eq!(
        (uses.iter().all(valid), &uses[2]),
        (true, &"toolu_1".to_owned()),
        "{uses:?}"
    );
    // Earlier requests sent the same ids for the same calls (a stable prefix).
    for (n, request) in requests.iter().enumerate().take(4) {
        let (earlier, _) = wire_ids(&request.body);
        assert_eq!(earlier[..], uses[..n], "request {n}");
    }

    // The log keeps what the model sent, each call answered by a successful read.
    let events = only_session_log(data.path());
    let logged: Vec<(Value, Value)> = events
        .iter()
        .filter(|e| e["type"] == "assistant_message")
        .flat_map(|e| e["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| (c["id"].clone(), c["arguments"]["path"].clone()))
        .collect();
    let sent: Vec<(Value, Value)> = calls.iter().map(|(i, f)| (json!(i), json!(f))).collect();
    assert_eq!(logged, sent);
    let answered: Vec<(Value, Value)> = events
        .iter()
        .filter(|e| e["type"] == "tool_message")
        .map(|e| (e["tool_call_id"].clone(), e["is_error"].clone()))
        .collect();
    let expected: Vec<(Value, Value)> = calls
        .iter()
        .map(|(i, _)| (json!(i), json!(false)))
        .collect();
    assert_eq!(answered, expected);
}

//! Overflow handling over `foya serve`: a 413 from the provider (an HTML page from a proxy)
//! compacts once and the turn completes; a session created with `"auto_compact": false`
//! never compacts, so the same 413 fails its turn as `context_overflow` with a clear
//! reason and one request sent.

use super::shutdown::submit;
use super::{Stream, of_type, start, within};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn too_large() -> MockResponse {
    let html = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body><center><h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></body></html>\r\n";
    MockResponse {
        status: 413,
        headers: vec![("content-type".into(), "text/html".into())],
        body_chunks: vec![html.as_bytes().to_vec().into()],
        chunk_delay_ms: 0,
        cut_after: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_413_compacts_unless_the_session_turned_auto_compaction_off() {
    within(scenario()).await;
}

async fn scenario() {
    let provider = MockProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(&provider, dir.path()).await;
    let s = &server;
    let create = |body: Value| async move {
        let created = s
            .call(
                s.req(reqwest::Method::POST, "/sessions").json(&body),
                StatusCode::CREATED,
                Some("SessionCreated"),
            )
            .await;
        created["id"].as_str().unwrap().to_owned()
    };
    let prompt = vec!["lorem"; 2_000].join(" ");

    // Off for this session: the 413 fails the turn, nothing is compacted.
    let off =
        create(json!({"cwd": dir.path(), "approval_mode": "bypass", "auto_compact": false})).await;
    provider.push(too_large());
    let mut sse = Stream::open(s, &off, "?from_seq=1", None).await;
    submit(s, &off, &prompt).await;
    let events = sse.until(&s.doc, of_type("turn_complete")).await;
    let end = events.last().unwrap();
    assert_eq!(
        (&end["status"], &end["reason"], &end["error"]["class"]),
        (
            &json!("failed"),
            &json!("context_overflow"),
            &json!("context_overflow")
        ),
        "{end}"
    );
    assert!(
        end["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("(automatic compaction is off; send /compact or start a new session)"),
        "{end}"
    );
    assert!(!events.iter().any(|e| e["type"] == "compaction_started"));
    assert_eq!(provider.requests().len(), 1);

    // On (the default): compact once (trigger overflow), re-run the step, complete.
    let on = create(json!({"cwd": dir.path(), "approval_mode": "bypass"})).await;
    provider.push(too_large());
    provider.push(MockResponse::sse(openai_chat::text("the summary")));
    provider.push(MockResponse::sse(openai_chat::text("done")));
    let mut sse = Stream::open(s, &on, "?from_seq=1", None).await;
    submit(s, &on, &prompt).await;
    let events = sse.until(&s.doc, of_type("turn_complete")).await;
    let end = events.last().unwrap();
    assert_eq!(end["status"], "completed", "{end}");
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "compaction_started")
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["trigger"], "overflow");
    assert!(events.iter().any(|e| e["type"] == "compaction_checkpoint"));
    assert_eq!(provider.requests().len(), 4);
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
}

/// A 413 caused by an image: the overflow's checkpoint keeps the turn's user message
/// (its image replaced by a line naming it), so the re-sent request still asks what the
/// user asked, not only the summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_413_caused_by_an_image_the_turns_user_message_is_re_sent() {
    within(image_scenario()).await;
}

async fn image_scenario() {
    let provider = MockProvider::start().await;
    let dir = tempfile::tempdir().unwrap();
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
    let attachment = s
        .call(
            s.req(reqwest::Method::POST, "/attachments")
                .header("content-type", "image/png")
                .body(super::PNG_1X1.to_vec()),
            StatusCode::CREATED,
            Some("Attachment"),
        )
        .await;
    provider.push(too_large());
    provider.push(MockResponse::sse(openai_chat::text("the summary")));
    provider.push(MockResponse::sse(openai_chat::text("a grey pixel")));
    let mut sse = Stream::open(s, &id, "?from_seq=1", None).await;
    s.call(
        s.req(reqwest::Method::POST, &format!("/sessions/{id}/inputs"))
            .json(&json!({
                "text": "what is in this picture?",
                "images": [{"id": attachment["id"]}],
            })),
        StatusCode::ACCEPTED,
        Some("InputAccepted"),
    )
    .await;
    let events = sse.until(&s.doc, of_type("turn_complete")).await;
    let end = events.last().unwrap();
    assert_eq!(end["status"], "completed", "{end}");
    let checkpoint = events
        .iter()
        .find(|e| e["type"] == "compaction_checkpoint")
        .unwrap();
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    // The re-sent step: the summary, then the user's question (no image bytes).
    let messages = requests[2].body["messages"].as_array().unwrap();
    let texts: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("what is in this picture?")
            && t.contains("image left out to fit the context: attachment")),
        "the turn's user message was dropped: {texts:?}\ncheckpoint: {checkpoint}"
    );
    assert!(
        !requests[2]
            .body
            .to_string()
            .contains("data:image/png;base64"),
        "image bytes re-sent"
    );
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
}

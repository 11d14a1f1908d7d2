//! A scripted session past the end of its script, over `foya serve`: the turn fails
//! with `invalid_request` and one line naming the script, how many responses it has and
//! which one the session asked for, and what to do.

use super::shutdown::{create_session, start_scripted, submit};
use super::{Stream, of_type, within};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_the_end_of_its_script_fails_naming_the_script() {
    within(past_the_script()).await;
}

async fn past_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, json!({"responses": [{"text": "hi"}]}).to_string()).unwrap();
    let (mut server, _stderr) = start_scripted(&script, dir.path()).await;
    let s = &server;
    let id = create_session(s, dir.path()).await;
    let mut sse = Stream::open(s, &id, "?from_seq=1", None).await;
    submit(s, &id, "first").await;
    let first = sse.until(&s.doc, of_type("turn_complete")).await;
    assert_eq!(first.last().unwrap()["status"], "completed");
    submit(s, &id, "second").await;
    let second = sse.until(&s.doc, of_type("turn_complete")).await;
    let end = second.last().unwrap();
    let expected_message = format!(
        "the script {} has 1 response and this session asked for response 2 (a scripted \
         model answers with response N+1 after N assistant messages); continue the session \
         with a script that has more responses",
        script.display()
    );
    assert_eq!(
        (&end["status"], &end["reason"], &end["error"]),
        (
            &json!("failed"),
            &json!("invalid_request"),
            &json!({"class": "invalid_request", "message": expected_message})
        ),
        "{end}"
    );
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
}

//! A compaction mid-turn keeps the work in progress: after a provider overflow, the
//! checkpoint holds the turn's user message and its latest tool calls with their results
//! verbatim (the last shell run's output, the last read), not only the model's summary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::turn_support;

use foya_protocol::{ApprovalMode, EventKind, Input, Message, TurnStatus};
use serde_json::json;
use turn_support::{
    TIMEOUT, builtin, events_until, is_turn_complete, memory_store, session_config, start,
    subscribe, within, workdir,
};

#[tokio::test]
async fn an_overflow_mid_turn_keeps_the_latest_tool_results_verbatim() {
    let (_dir, cwd) = workdir();
    let line = ["lorem"; 10].join(" ");
    let text = format!("{}THE END\n", format!("{line}\n").repeat(300));
    std::fs::write(cwd.join("notes.txt"), text).unwrap();
    let script = json!({"responses": [
        {"tool_calls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"tool_calls": [{"id": "s1", "name": "shell", "arguments": {"command": "echo 'test result: ok. 3 passed'"}}]},
        {"text": "all green", "error": {"class": "context_overflow", "message": "prompt is too long"}, "fail_times": 1}
    ]});
    let (rt, requests) = start(memory_store(), script, builtin()).await;
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Bypass))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("run the tests")).await.unwrap();
    let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
    assert!(
        matches!(
            events.last().unwrap().kind,
            EventKind::TurnComplete {
                status: TurnStatus::Completed,
                ..
            }
        ),
        "{:?}",
        events.last()
    );
    let kept = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::CompactionCheckpoint { kept, .. } => Some(kept.clone()),
            _ => None,
        })
        .expect("a compaction checkpoint");
    // The turn's request, verbatim.
    assert!(
        kept.contains(&Message::User(Input::text("run the tests"))),
        "{kept:?}"
    );
    // The last shell call and its output, verbatim.
    let shell_at = kept
        .iter()
        .position(|m| matches!(m, Message::Assistant(a) if a.tool_calls.iter().any(|c| c.name == "shell")))
        .expect("the shell call is kept");
    let Message::Tool(output) = &kept[shell_at + 1] else {
        panic!("{kept:?}")
    };
    assert_eq!(output.tool_call_id.as_str(), "s1");
    assert!(
        output.content.contains("test result: ok. 3 passed"),
        "{output:?}"
    );
    // The last read: its call and (at least the end of) its result.
    let read_at = kept
        .iter()
        .position(|m| matches!(m, Message::Assistant(a) if a.tool_calls.iter().any(|c| c.name == "read_file")))
        .expect("the read is kept");
    let Message::Tool(read) = &kept[read_at + 1] else {
        panic!("{kept:?}")
    };
    assert!(read.content.contains("THE END"), "{read:?}");
    // The re-run step continues from the checkpoint: its request ends with the shell result.
    let requests = requests.lock().unwrap().clone();
    let last = requests.last().unwrap();
    assert_eq!(last.messages.last(), Some(&Message::Tool(output.clone())));
    rt.shutdown().await;
}

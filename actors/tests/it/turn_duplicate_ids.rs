//! Two tool calls with the same id in one model response, through the real turn loop
//! (Runtime + scripted model + the real `shell` tool): the first runs, the repeat is
//! renamed (`<id>_dup2`) in the persisted `assistant_message` and answered `is_error`
//! without running, and the history sent back on the next request pairs every call with
//! exactly one result under unique ids in all three wire formats.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::turn_support;

use foya_actors::provider::wire::ProviderKind;
use foya_protocol::{ApprovalMode, EventKind, Input, Message, ToolCall, ToolCallId, TurnStatus};
use serde_json::{Value, json};
use turn_support::{
    TIMEOUT, builtin, events_until, is_turn_complete, memory_store, session_config, start,
    subscribe, tool_message, tool_messages, within, workdir,
};

/// Every string under a key naming a tool-call id, in document order.
fn call_ids(value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let is_id = key == "tool_call_id" || key == "tool_use_id" || key == "call_id";
                let is_call_id = key == "id" && v.as_str().is_some_and(|s| s.starts_with("call_"));
                if (is_id || is_call_id)
                    && let Some(s) = v.as_str()
                {
                    out.push((key.clone(), s.to_owned()));
                }
                call_ids(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| call_ids(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_call_id_is_renamed_and_not_run_and_the_history_stays_valid() {
    let calls = json!([
        {"id": "call_a", "name": "shell", "arguments": {"command": "echo one >> runs.log"}},
        {"id": "call_a", "name": "shell", "arguments": {"command": "echo two >> runs.log"}}
    ]);
    let script = json!({"responses": [{"tool_calls": calls}, {"text": "done"}]});
    let (rt, requests) = start(memory_store(), script, builtin()).await;
    let (_dir, cwd) = workdir();
    // The sandbox keeps the top level closed to new entries: the log exists already.
    std::fs::write(cwd.join("runs.log"), "").unwrap();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;

    // Only the first call ran.
    assert_eq!(
        std::fs::read_to_string(cwd.join("runs.log")).unwrap(),
        "one\n"
    );
    let shell = |id: &str, command: &str| ToolCall {
        id: ToolCallId::new(id),
        name: "shell".into(),
        arguments: json!({ "command": command }),
        extra: None,
    };
    let expected_calls = vec![
        shell("call_a", "echo one >> runs.log"),
        shell("call_a_dup2", "echo two >> runs.log"),
    ];
    let persisted_calls = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) if !m.tool_calls.is_empty() => {
                Some(m.tool_calls.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(persisted_calls, expected_calls);
    let expected_results = vec![
        tool_message("call_a", "(no output)\n[exit code: 0]", false),
        tool_message(
            "call_a_dup2",
            "not run: this response already has a tool call with id \"call_a\"; call the \
             tool again if this call is needed",
            true,
        ),
    ];
    assert_eq!(tool_messages(&events), expected_results);
    let EventKind::TurnComplete { status, .. } = &events.last().unwrap().kind else {
        panic!()
    };
    assert_eq!(*status, TurnStatus::Completed);

    // The second request carries the renamed calls and one result for each.
    let second = requests.lock().unwrap()[1].clone();
    let history: Vec<&Message> = second.messages.iter().skip(1).collect();
    let Message::Assistant(assistant) = history[0] else {
        panic!("{history:?}")
    };
    assert_eq!(assistant.tool_calls, expected_calls);
    assert_eq!(
        history[1..],
        expected_results
            .iter()
            .map(|r| Message::Tool(r.clone()))
            .collect::<Vec<_>>()
            .iter()
            .collect::<Vec<_>>()[..]
    );
    // Each wire format names each id once as a call and once as a result.
    for kind in ProviderKind::ALL {
        let mut ids = Vec::new();
        call_ids(&kind.encode(&second).body, &mut ids);
        let mut values: Vec<&str> = ids.iter().map(|(_, v)| v.as_str()).collect();
        values.sort_unstable();
        assert_eq!(
            values,
            vec!["call_a", "call_a", "call_a_dup2", "call_a_dup2"],
            "{kind}: {ids:?}"
        );
    }
    drop((sub, session));
    rt.shutdown().await;
}

//! Tool calls through the real turn loop (Runtime + scripted model + the real built-in
//! tools and child processes): scheduling (at most five at once, results in call order,
//! a write alone between reads), a panicking tool, argument validation, and cancelling a
//! running `shell` (its process group is killed, the output it printed is kept). The Approval Gateway and the sandbox
//! are in `turn_tools_gateway.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::turn_support;

use foya_actors::tools::schedule::MAX_PARALLEL;
use foya_protocol::event::{Delta, LiveDelta};
use foya_protocol::{ApprovalMode, Event, EventKind, Input, Message, SessionUpdate, TurnStatus};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;
use turn_support::{
    Boom, Probe, TIMEOUT, builtin, events_until, group_members, is_turn_complete, memory_store,
    session_config, start, subscribe, tool_message, tool_messages, types, within, workdir,
};

fn completed() -> EventKind {
    EventKind::TurnComplete {
        status: TurnStatus::Completed,
        reason: None,
        error: None,
    }
}

/// Position in `events` of the `tool_started` (`started`) or `tool_finished` event of `id`.
fn position(events: &[Event], id: &str, started: bool) -> usize {
    events
        .iter()
        .position(|e| match &e.kind {
            EventKind::ToolStarted { tool_call_id, .. } => started && tool_call_id.as_str() == id,
            EventKind::ToolFinished { tool_call_id, .. } => !started && tool_call_id.as_str() == id,
            _ => false,
        })
        .unwrap_or_else(|| panic!("no tool event for {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_parallel_calls_run_at_most_five_at_once_and_commit_in_call_order() {
    let (probe, mut starts) = Probe::new();
    let mut tools = builtin();
    tools.register(probe.clone()).unwrap();
    let calls: Vec<_> = (0..8)
        .map(|i| json!({"id": format!("c{i}"), "name": "probe", "arguments": {"i": i}}))
        .collect();
    let script = json!({"responses": [{"tool_calls": calls}, {"text": "done"}]});
    let (rt, _) = start(memory_store(), script, tools).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let (released, events) = within(TIMEOUT, async {
        let mut events = Vec::new();
        let mut waiting = BTreeMap::new();
        let mut released = Vec::new();
        while released.len() < 8 {
            // Wait until every call that may run now has started, then release the
            // highest-numbered one and wait for its `tool_finished`.
            while waiting.len() < (8 - released.len()).min(MAX_PARALLEL) {
                let (i, release) = starts.recv().await.unwrap();
                waiting.insert(i, release);
            }
            let (i, release) = waiting.pop_last().unwrap();
            release.send(()).unwrap();
            released.push(i);
            let id = format!("c{i}");
            events.extend(
                events_until(&mut sub, |e| {
                    matches!(&e.kind, EventKind::ToolFinished { tool_call_id, .. }
                        if tool_call_id.as_str() == id)
                })
                .await,
            );
        }
        events.extend(events_until(&mut sub, is_turn_complete).await);
        (released, events)
    })
    .await;
    // Five start; each release frees a slot for the next call, so finishing runs
    // 4, 5, 6, 7 and then the rest in reverse.
    assert_eq!(released, vec![4, 5, 6, 7, 3, 2, 1, 0]);
    assert_eq!(probe.high_water.load(SeqCst), MAX_PARALLEL);
    let finished: Vec<usize> = released
        .iter()
        .map(|i| position(&events, &format!("c{i}"), false))
        .collect();
    assert!(finished.is_sorted(), "tool_finished order {finished:?}");
    // Results are held until c0 (finished last) is done, then committed in call order.
    let first_result = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::ToolMessage(_)))
        .unwrap();
    assert!(first_result > position(&events, "c0", false));
    let expected: Vec<_> = (0..8)
        .map(|i| tool_message(&format!("c{i}"), &format!("probe {i}"), false))
        .collect();
    assert_eq!(tool_messages(&events), expected);
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_between_reads_runs_alone_and_in_order() {
    let (_dir, cwd) = workdir();
    std::fs::write(cwd.join("a.txt"), "old\n").unwrap();
    let read = |id: &str| json!({"id": id, "name": "read_file", "arguments": {"path": "a.txt"}});
    let write = json!({"id": "w", "name": "write_file",
        "arguments": {"path": "a.txt", "content": "new\n"}});
    let script = json!({"responses": [
        {"tool_calls": [read("r1"), read("r2"), write, read("r3"), read("r4")]},
        {"text": "done"}
    ]});
    let (rt, _) = start(memory_store(), script, builtin()).await;
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
    let (start_w, finish_w) = (position(&events, "w", true), position(&events, "w", false));
    for id in ["r1", "r2"] {
        assert!(
            position(&events, id, false) < start_w,
            "{id} before the write"
        );
    }
    for id in ["r3", "r4"] {
        assert!(
            position(&events, id, true) > finish_w,
            "{id} after the write"
        );
    }
    assert_eq!(
        tool_messages(&events),
        vec![
            tool_message("r1", "     1\told\n", false),
            tool_message("r2", "     1\told\n", false),
            tool_message("w", "overwrote \"a.txt\" (4 bytes)", false),
            tool_message("r3", "     1\tnew\n", false),
            tool_message("r4", "     1\tnew\n", false),
        ]
    );
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_is_an_error_result_and_the_turn_completes() {
    let mut tools = builtin();
    tools.register(Boom::new()).unwrap();
    let script = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "boom", "arguments": {}}]},
        {"text": "recovered"}
    ]});
    let (rt, requests) = start(memory_store(), script, tools).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
    assert_eq!(
        types(&events)[4..],
        [
            "context_diagnostics",
            "assistant_message",
            "tool_started",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let crashed = tool_message("c1", "tool crashed", true);
    assert_eq!(tool_messages(&events), vec![crashed.clone()]);
    assert_eq!(events.last().unwrap().kind, completed());
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages.last(), Some(&Message::Tool(crashed)));
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_reach_the_model_with_the_validators_message() {
    let script = json!({"responses": [
        {"tool_calls": [
            {"id": "c1", "name": "shell", "arguments": {"command": 5}},
            {"id": "c2", "name": "read_file", "arguments": "{\"path\": "},
            {"id": "c3", "name": "nope", "arguments": {}}
        ]},
        {"text": "fixed"}
    ]});
    let (rt, requests) = start(memory_store(), script, builtin()).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
    let shell_schema = builtin().get("shell").unwrap().spec().parameters.clone();
    let expected = vec![
        tool_message(
            "c1",
            &format!(
                "invalid arguments for `shell`:\n- at /command: 5 is not of type \"string\"\n\
                 expected parameters: {shell_schema}"
            ),
            true,
        ),
        tool_message(
            "c2",
            "arguments are not valid JSON: EOF while parsing a value at line 1 column 9; call \
             `read_file` again with a JSON object as arguments. Received: {\"path\": ",
            true,
        ),
        tool_message(
            "c3",
            "unknown tool \"nope\"; available tools: read_file, list_dir, glob, grep, \
             write_file, edit_file, shell",
            true,
        ),
    ];
    assert_eq!(tool_messages(&events), expected);
    assert!(!types(&events).contains(&"tool_started"), "nothing ran");
    assert_eq!(events.last().unwrap().kind, completed());
    let requests = requests.lock().unwrap().clone();
    let seen: Vec<_> = requests[1]
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(seen, expected);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_during_shell_kills_its_process_group_promptly() {
    let script = json!({"responses": [{"tool_calls": [
        // Prints its process group (led by the sandbox helper, not by bash).
        {"id": "c1", "name": "shell", "arguments": {"command": "read -r _ _ _ _ pgid _ < /proc/$$/stat; echo $pgid; sleep 30"}}
    ]}]});
    let (rt, _) = start(memory_store(), script, builtin()).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    // One global timeout, far below the command's 30 s.
    let (pid, events) = within(Duration::from_secs(5), async {
        let mut events = Vec::new();
        let pid = loop {
            match sub.recv().await.unwrap() {
                SessionUpdate::Event(e) => events.push(e),
                SessionUpdate::Delta(LiveDelta {
                    delta: Delta::ToolOutput { chunk, .. },
                    ..
                }) => break chunk.trim().parse::<i32>().unwrap(),
                SessionUpdate::Delta(_) | SessionUpdate::Notice(_) => {}
            }
        };
        assert!(!group_members(pid).is_empty(), "the command runs");
        session.cancel().await.unwrap();
        events.extend(events_until(&mut sub, is_turn_complete).await);
        (pid, events)
    })
    .await;
    // SIGKILL to the group is sent by then (no member can fork any more); the kernel
    // ends the members asynchronously: wait on their pidfds.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    assert!(foya_actors::testkit::procs::wait_exited(
        &group_members(pid),
        deadline
    ));
    assert_eq!(group_members(pid), Vec::<i32>::new());
    assert_eq!(
        types(&events),
        [
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "tool_started",
            "tool_message",
            "turn_cancelled",
            "turn_complete"
        ]
    );
    // The line the command printed before the cancel is kept in its result.
    assert_eq!(
        tool_messages(&events),
        vec![tool_message(
            "c1",
            &format!(
                "{pid}\n[cancelled; the output above is what the call printed before it was stopped]"
            ),
            true
        )]
    );
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None
        }
    );
    rt.shutdown().await;
}

//! The Approval Gateway through the real turn loop (Runtime + scripted model + the real
//! `shell` tool, Landlock sandbox and child processes): a denial reaches the model as an
//! `is_error` result, "allow for this session" is not asked again even after a restart
//! on a real redb file, and under `auto` mode `shell` may write inside the working
//! directory but neither outside it nor open a TCP connection; read-only file tools get
//! the verdict's sandbox too (confined to the working directory unless `bypass`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::turn_support;

use foya_protocol::{
    ApprovalDecision, ApprovalMode, EventKind, Input, Message, Seq, SessionUpdate, TurnStatus,
};
use serde_json::json;
use turn_support::{
    TIMEOUT, builtin, events_until, is_turn_complete, memory_store, session_config, start,
    subscribe, tool_message, tool_messages, types, within, workdir,
};

fn completed() -> EventKind {
    EventKind::TurnComplete {
        status: TurnStatus::Completed,
        reason: None,
        error: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_approval_is_an_error_result_the_model_sees() {
    let script = json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}}]},
        {"text": "understood"}
    ]});
    let (rt, requests) = start(memory_store(), script, builtin()).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Ask))
        .await
        .unwrap();
    let mut sub = subscribe(&session, true).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, async {
        let mut seen = Vec::new();
        loop {
            let Some(SessionUpdate::Event(e)) = sub.recv().await else {
                continue;
            };
            if let EventKind::ApprovalRequested { request_id, .. } = &e.kind {
                let message = Some("not now".to_owned());
                session
                    .decide_approval(*request_id, ApprovalDecision::Deny, message)
                    .await
                    .unwrap();
            }
            let end = is_turn_complete(&e);
            seen.push(e);
            if end {
                return seen;
            }
        }
    })
    .await;
    assert_eq!(
        types(&events)[4..],
        [
            "context_diagnostics",
            "assistant_message",
            "approval_requested",
            "approval_decided",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let EventKind::ApprovalRequested {
        tool_name,
        action,
        reason,
        ..
    } = &events[6].kind
    else {
        panic!("{:?}", events[6].kind)
    };
    assert_eq!(
        (tool_name.as_str(), action.as_str(), reason.as_str()),
        (
            "shell",
            "echo hi",
            "`shell` wants to run a command (sandboxed: writes only in the working directory, \
             no network); \"allow for this session\" allows exactly `echo hi` again"
        )
    );
    let denied = tool_message("c1", "not now", true);
    assert_eq!(tool_messages(&events), vec![denied.clone()]);
    assert_eq!(events.last().unwrap().kind, completed());
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages.last(), Some(&Message::Tool(denied)));
    rt.shutdown().await;
}

#[tokio::test]
async fn allow_for_session_is_not_asked_again_even_after_a_restart() {
    let (_dir, cwd) = workdir();
    let db = tempfile::tempdir().unwrap();
    let path = db.path().join("log.redb");
    let open = || foya_storage::Store::open(&path, foya_storage::StoreOptions::default()).unwrap();
    let shell = |id: &str, command: &str| json!({"id": id, "name": "shell", "arguments": {"command": command}});
    let script = json!({"responses": [
        {"tool_calls": [shell("c1", "echo one")]},
        {"tool_calls": [shell("c2", "echo  one")]},
        {"text": "done"},
        {"tool_calls": [shell("c3", "'echo' one")]},
        {"text": "done again"}
    ]});
    let (rt, _) = start(open(), script.clone(), builtin()).await;
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Ask))
        .await
        .unwrap();
    let id = session.id();
    let mut sub = subscribe(&session, true).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, async {
        let mut seen = Vec::new();
        loop {
            let Some(SessionUpdate::Event(e)) = sub.recv().await else {
                continue;
            };
            if let EventKind::ApprovalRequested { request_id, .. } = &e.kind {
                session
                    .decide_approval(*request_id, ApprovalDecision::AllowForSession, None)
                    .await
                    .unwrap();
            }
            let end = is_turn_complete(&e);
            seen.push(e);
            if end {
                return seen;
            }
        }
    })
    .await;
    let names = types(&events);
    assert_eq!(
        names.iter().filter(|t| **t == "approval_requested").count(),
        1
    );
    let grants: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ApprovalDecided {
                decision, grant, ..
            } => Some((*decision, grant.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        grants,
        // The grant is the exact command, normalised: `echo  one` and `'echo' one` are
        // the same words.
        vec![(
            ApprovalDecision::AllowForSession,
            Some("shell:=echo one".into())
        )]
    );
    assert_eq!(
        tool_messages(&events),
        vec![
            tool_message("c1", "one\n[exit code: 0]", false),
            tool_message("c2", "one\n[exit code: 0]", false),
        ]
    );
    let last = events.last().unwrap().seq;
    drop((sub, session));
    rt.shutdown().await;

    // A new runtime on the same file: the grant is restored from the log. No approver is
    // attached, so a request would be denied at once (and visible).
    let (rt, _) = start(open(), script, builtin()).await;
    let session = rt.session(id).await.unwrap();
    let mut sub = session
        .subscribe(Seq(last.0 + 1), foya_actors::SubscribeOptions::default())
        .await
        .unwrap();
    session.submit(Input::text("more")).await.unwrap();
    let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
    assert_eq!(
        types(&events),
        vec![
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "tool_started",
            "tool_finished",
            "tool_message",
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    assert_eq!(
        tool_messages(&events),
        vec![tool_message("c3", "one\n[exit code: 0]", false)]
    );
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_shell_writes_inside_but_not_outside_and_cannot_connect() {
    let (_dir, cwd) = workdir();
    let (_other, other) = workdir();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = other.join("outside.txt");
    std::fs::create_dir(cwd.join("sub")).unwrap();
    let shell = |id: &str, command: String| json!({"id": id, "name": "shell", "arguments": {"command": command}});
    let script = json!({"responses": [
        {"tool_calls": [
            // The top level of the workspace is closed to new entries (it holds the
            // protected names): a subdirectory is not.
            shell("c1", "echo in > sub/inside.txt && cat sub/inside.txt".into()),
            shell("c2", format!("echo out > {}", outside.display())),
            shell("c3", format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")),
        ]},
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
    assert!(!types(&events).contains(&"approval_requested"));
    assert_eq!(
        tool_messages(&events),
        vec![
            tool_message("c1", "in\n[exit code: 0]", false),
            tool_message(
                "c2",
                &format!(
                    "bash: line 1: {}: Read-only file system\n[exit code: 1]",
                    outside.display()
                ),
                true
            ),
            tool_message(
                "c3",
                &format!(
                    "bash: socket: Operation not permitted\nbash: line 1: \
                     /dev/tcp/127.0.0.1/{port}: Operation not permitted\n[exit code: 1]"
                ),
                true
            ),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join("sub/inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!outside.exists());
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "nothing connected"
    );
    assert_eq!(events.last().unwrap().kind, completed());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tools_get_the_verdicts_sandbox_and_stay_confined_unless_bypass() {
    let (_other, other) = workdir();
    let secret = other.join("secret.txt");
    std::fs::write(&secret, "s\n").unwrap();
    let read = json!({"id": "c1", "name": "read_file",
        "arguments": {"path": secret.display().to_string()}});
    let script = json!({"responses": [{"tool_calls": [read]}, {"text": "done"}]});
    for (mode, expected) in [
        (
            ApprovalMode::Auto,
            tool_message(
                "c1",
                &format!(
                    "path {:?} resolves to {} which is outside the working directory {}; file \
                     tools only access paths inside the working directory",
                    secret.display().to_string(),
                    secret.display(),
                    "CWD"
                ),
                true,
            ),
        ),
        (
            ApprovalMode::Bypass,
            tool_message("c1", "     1\ts\n", false),
        ),
    ] {
        let (_dir, cwd) = workdir();
        let mut expected = expected;
        expected.content = expected.content.replace("CWD", &cwd.display().to_string());
        let (rt, _) = start(memory_store(), script.clone(), builtin()).await;
        let session = rt.create_session(session_config(&cwd, mode)).await.unwrap();
        let mut sub = subscribe(&session, false).await;
        session.submit(Input::text("go")).await.unwrap();
        let events = within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await;
        assert_eq!(tool_messages(&events), vec![expected], "{mode:?}");
        assert_eq!(events.last().unwrap().kind, completed());
        rt.shutdown().await;
    }
}

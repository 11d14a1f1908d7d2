//! "Allow for this session" is exact, end to end through the real `foya serve`: allowing
//! `git status` for the session grants `shell:git status` (the person is told so in the
//! question), covers `git status --short` later, and covers neither `git -c alias.x='!…'
//! x` nor `git -c core.pager=… -p log`, which are asked again (no grant offered) and,
//! denied, run nothing. The question's `<U+202E>` shows in the SSE payload instead of the
//! raw override.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya_bin, test_home};
use futures::StreamExt as _;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

const TOKEN: &str = "serve-token-2";

fn shell(id: &str, command: &str) -> Value {
    json!({"tool_calls": [{"id": id, "name": "shell", "arguments": {"command": command}}]})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_grant_covers_the_argv_prefix_and_never_code_running_options() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        shell("c1", "git status"),
        shell("c2", "git status --short"),
        shell("c3", "git -c alias.x='!touch pwned-alias' x"),
        shell("c4", "git -c core.pager='touch pwned-pager' -p log"),
        shell("c5", "echo \u{202E}txt.exe"),
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut child = tokio::process::Command::new(foya_bin())
        .args(["serve", "--provider", "scripted", "--script"])
        .arg(&script)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path().join("data"))
        .arg("--token-file")
        .arg(&token_file)
        .env("HOME", test_home())
        .env_remove("FOYA_DATA_DIR")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let base = tokio::io::BufReader::new(stdout)
        .lines()
        .next_line()
        .await
        .unwrap()
        .unwrap();
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{base}/sessions"))
        .bearer_auth(TOKEN)
        .json(&json!({"cwd": work, "approval_mode": "ask"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let events = http
        .get(format!(
            "{base}/sessions/{id}/events?from_seq=1&approver=true"
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let sent = http
        .post(format!("{base}/sessions/{id}/inputs"))
        .bearer_auth(TOKEN)
        .json(&json!({"text": "go"}))
        .send()
        .await
        .unwrap();
    assert!(sent.status().is_success());
    let mut stream = eventsource_stream::Eventsource::eventsource(events.bytes_stream());
    let mut seen: Vec<Value> = Vec::new();
    let mut raw = String::new();
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let sse = stream.next().await.unwrap().unwrap();
            raw.push_str(&sse.data);
            let data: Value = serde_json::from_str(&sse.data).unwrap();
            if sse.event != "event" {
                continue;
            }
            if data["type"] == "approval_requested" {
                // Allow the first for the session; deny the rest.
                let decision = if data["tool_call_id"] == "c1" {
                    "allow_for_session"
                } else {
                    "deny"
                };
                let request = data["request_id"].as_str().unwrap();
                let decided = http
                    .post(format!("{base}/sessions/{id}/approvals/{request}"))
                    .bearer_auth(TOKEN)
                    .json(&json!({"decision": decision}))
                    .send()
                    .await
                    .unwrap();
                assert!(decided.status().is_success());
            }
            let end = data["type"] == "turn_complete";
            seen.push(data);
            if end {
                break;
            }
        }
    })
    .await
    .expect("the turn completes");
    let asked: Vec<(&str, &str)> = seen
        .iter()
        .filter(|e| e["type"] == "approval_requested")
        .map(|e| {
            (
                e["tool_call_id"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
            )
        })
        .collect();
    let ids: Vec<&str> = asked.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, ["c1", "c3", "c4", "c5"], "{asked:?}");
    assert!(
        asked[0]
            .1
            .contains("allows `git status` with any further arguments"),
        "{}",
        asked[0].1
    );
    // `git x` (an alias) may also write `.git`: asked as a protected path.
    for (_, reason) in &asked[1..3] {
        assert!(reason.contains("is not offered"), "{reason}");
    }
    let grants: Vec<&Value> = seen
        .iter()
        .filter(|e| e["type"] == "approval_decided")
        .map(|e| &e["grant"])
        .collect();
    assert_eq!(
        grants,
        [
            &json!("shell:git status"),
            &Value::Null,
            &Value::Null,
            &Value::Null
        ]
    );
    assert!(!work.join("pwned-alias").exists());
    assert!(!work.join("pwned-pager").exists());
    // The override is shown, not obeyed, in what a web page reads.
    assert!(raw.contains("echo <U+202E>txt.exe"), "{raw}");
    assert!(!raw.contains('\u{202E}'));
}

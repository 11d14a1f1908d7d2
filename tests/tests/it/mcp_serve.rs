//! MCP tools through `foya serve` (the real binary, a scripted model) and the reference
//! server `@modelcontextprotocol/server-everything` over stdio: a session created with
//! `mcp_servers` sees its tools; a call asks the approver (the SSE subscription with
//! `approver=true`), runs once allowed "for this session", and a second call of the same
//! tool of the same server runs without asking (grant key per server and tool); an
//! unknown server name is refused with 400.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use eventsource_stream::Eventsource as _;
use foya_tests::foya_bin::foya_bin;
use foya_tests::mcp::{everything_js, toml_path, write_user_config};
use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::AsyncBufReadExt as _;

const TOKEN: &str = "serve-token";

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "name": name, "arguments": arguments})
}

type Events = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// Persisted events read until one satisfies `stop` (that one last).
async fn until(events: &mut Events, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let sse = events.next().await.expect("the stream ended").unwrap();
        if sse.event != "event" {
            continue;
        }
        let data: Value = serde_json::from_str(&sse.data).unwrap();
        let done = stop(&data);
        seen.push(data);
        if done {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_created_with_mcp_servers_asks_once_per_server_and_tool() {
    tokio::task::spawn_blocking(foya_bin).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (home, work) = (tmp.path().join("home"), tmp.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    write_user_config(
        &home,
        &format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\nenabled = false\n",
            toml_path(&everything_js())
        ),
    );
    let script = tmp.path().join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [call("c1", "mcp__everything__get-sum", json!({"a": 2, "b": 3}))]},
        {"tool_calls": [call("c2", "mcp__everything__get-sum", json!({"a": 4, "b": 5}))]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    std::fs::write(tmp.path().join("token"), TOKEN).unwrap();
    let scenario = async {
        let mut child = tokio::process::Command::new(foya_bin())
            .args(["serve", "--provider", "scripted", "--listen", "127.0.0.1:0"])
            .arg("--script")
            .arg(&script)
            .arg("--data-dir")
            .arg(tmp.path().join("data"))
            .arg("--token-file")
            .arg(tmp.path().join("token"))
            .env("HOME", &home)
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
        let post = |path: &str, body: Value| {
            http.post(format!("{base}{path}"))
                .bearer_auth(TOKEN)
                .json(&body)
                .send()
        };

        let refused = post("/sessions", json!({"cwd": work, "mcp_servers": ["nope"]}))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let text = refused.text().await.unwrap();
        assert!(
            text.contains(
                "mcp_servers: no MCP server `nope` is configured (configured: everything)"
            ),
            "{text}"
        );

        // `enabled = false`: only a session that names the server uses it.
        let created: Value = post(
            "/sessions",
            json!({"cwd": work, "approval_mode": "ask", "mcp_servers": ["everything"]}),
        )
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
        assert_eq!(events.status(), StatusCode::OK);
        let mut events: Events = events.bytes_stream().eventsource().boxed();
        let accepted = post(&format!("/sessions/{id}/inputs"), json!({"text": "add"}))
            .await
            .unwrap();
        assert_eq!(accepted.status(), StatusCode::ACCEPTED);

        let seen = until(&mut events, |e| e["type"] == "approval_requested").await;
        let asked = seen.last().unwrap();
        assert_eq!(asked["tool_name"], "mcp__everything__get-sum");
        let request_id = asked["request_id"].as_str().unwrap();
        let answered = post(
            &format!("/sessions/{id}/approvals/{request_id}"),
            json!({"decision": "allow_for_session"}),
        )
        .await
        .unwrap();
        assert_eq!(answered.status(), StatusCode::NO_CONTENT);

        let rest = until(&mut events, |e| e["type"] == "turn_complete").await;
        assert_eq!(rest.last().unwrap()["status"], "completed");
        let results: Vec<(&str, bool)> = rest
            .iter()
            .filter(|e| e["type"] == "tool_message")
            .map(|e| {
                (
                    e["content"].as_str().unwrap(),
                    e["is_error"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            results,
            [
                ("The sum of 2 and 3 is 5.", false),
                ("The sum of 4 and 5 is 9.", false)
            ]
        );
        assert!(
            !rest.iter().any(|e| e["type"] == "approval_requested"),
            "the grant covers the second call: {rest:#?}"
        );
        let _ = child.start_kill();
    };
    tokio::time::timeout(Duration::from_secs(120), scenario)
        .await
        .expect("the scenario finished in time");
}

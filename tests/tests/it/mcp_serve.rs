//! MCP tools through `foya serve` (the real binary, a scripted model) and the reference
//! server `@modelcontextprotocol/server-everything` over stdio: a session created with
//! `mcp_servers` sees its tools; a call asks the approver (the SSE subscription with
//! `approver=true`), runs once allowed "for this session", and a second call of the same
//! tool of the same server runs without asking (grant key per server and tool); an
//! unknown server name is refused with 400.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::foya_bin;
use foya_tests::mcp::{everything_js, toml_path, write_user_config};
use foya_tests::serve::Serve;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

const TOKEN: &str = "serve-token";

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "name": name, "arguments": arguments})
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
    let scenario = async {
        let mut serve = Serve::start(tmp.path(), TOKEN, &["--provider", "scripted"], |c| {
            c.arg("--script").arg(&script).env("HOME", &home);
        })
        .await;

        let refused = serve
            .post("/sessions", &json!({"cwd": work, "mcp_servers": ["nope"]}))
            .await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let text = refused.text().await.unwrap();
        assert!(
            text.contains(
                "mcp_servers: no MCP server `nope` is configured (configured: everything)"
            ),
            "{text}"
        );

        // `enabled = false`: only a session that names the server uses it.
        let id = serve
            .create_session(
                &json!({"cwd": work, "approval_mode": "ask", "mcp_servers": ["everything"]}),
            )
            .await;
        let mut asked = Vec::new();
        let (rest, _) = serve
            .turn_with_approver(&id, "add", Duration::from_secs(120), |e| {
                asked.push(e["tool_name"].clone());
                "allow_for_session"
            })
            .await;
        assert_eq!(
            asked,
            [json!("mcp__everything__get-sum")],
            "asked once: the grant covers the second call"
        );
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
        serve.kill();
    };
    tokio::time::timeout(Duration::from_secs(120), scenario)
        .await
        .expect("the scenario finished in time");
}

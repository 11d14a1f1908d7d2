//! MCP tool servers through the real `foya` binary against the reference server
//! `@modelcontextprotocol/server-everything` (installed by `.ci/setup-mcp`), over stdio
//! and over streamable HTTP: a scripted model calls `mcp__everything__*` tools; the log
//! shows `tool_started`/`tool_finished`/`tool_message` with the server's results, the
//! Approval Gateway asks for tools the user did not mark read-only, progress arrives as
//! `tool_update`; an image result reaches a model with vision (the mock provider, over
//! real HTTP) as an image block of its `tool_result`; `foya mcp list` and the
//! `--mcp`/`--no-mcp` flags.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{read_until, spawn_json_lines, spawn_stderr_lines, wait_exit};
use foya_tests::foya_bin::{foya, scripted};
use foya_tests::mcp::{attachment, everything_js, run_against, toml_path, write_user_config};
use foya_tests::mock_provider::{MockProvider, MockResponse, anthropic};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Global wait for one run.
const TIMEOUT: Duration = Duration::from_secs(90);

/// A temp dir with `home/`, `data/`, `work/` and the script of `responses`.
struct Setup {
    tmp: tempfile::TempDir,
}

impl Setup {
    fn new(config: &str, responses: &Value) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["home", "data", "work"] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        write_user_config(&tmp.path().join("home"), config);
        let script = json!({ "responses": responses });
        std::fs::write(tmp.path().join("script.json"), script.to_string()).unwrap();
        Self { tmp }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.tmp.path().join(name)
    }

    /// `foya mcp list --json ARGS` in the work directory: its exit code and its lines.
    fn mcp_list(&self, args: &[&str]) -> (Option<i32>, Vec<Value>) {
        let out = foya()
            .env("HOME", self.path("home"))
            .args(["mcp", "list", "--json"])
            .args(args)
            .arg("--cwd")
            .arg(self.path("work"))
            .output()
            .unwrap();
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (out.status.code(), lines)
    }

    /// `foya run --json` with this setup's script and `HOME`.
    fn run(&self, approval: &str, args: &[&str]) -> std::process::Command {
        let mut command = scripted(
            "run",
            approval,
            &self.path("script.json"),
            &self.path("data"),
            &self.path("work"),
        );
        command
            .env("HOME", self.path("home"))
            .arg("--json")
            .args(args);
        command
    }
}

fn stdio_config(extra: &str) -> String {
    format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n{extra}",
        toml_path(&everything_js())
    )
}

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "name": name, "arguments": arguments})
}

/// Every line up to and including `turn_complete`, and the exit status.
fn run_to_end(command: &mut std::process::Command) -> (Vec<Value>, Option<i32>) {
    foya_tests::foya_bin();
    let piped = spawn_json_lines(command);
    let deadline = Instant::now() + TIMEOUT;
    let lines = read_until(&piped.lines, deadline, |l| l["type"] == "turn_complete");
    let code = wait_exit(piped.child, deadline).code();
    (lines, code)
}

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

fn message_of<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["type"] == "tool_message" && l["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no tool_message for {id}: {lines:#?}"))
}

#[test]
fn everything_over_stdio_runs_read_only_tools_and_asks_for_the_others() {
    let setup = Setup::new(
        &stdio_config("read_only_tools = [\"echo\"]\n"),
        &json!([
            {"tool_calls": [
                call("c1", "mcp__everything__echo", json!({"message": "hello mcp"})),
                call("c2", "mcp__everything__get-sum", json!({"a": 2, "b": 3})),
                call("c3", "mcp__everything__echo", json!({"message": 7})),
            ]},
            {"text": "done"}
        ]),
    );
    // `ask` without a terminal: a question nobody can answer is denied.
    let (lines, code) = run_to_end(&mut setup.run("ask", &["go"]));
    assert_eq!(code, Some(0), "{lines:#?}");
    let echo = message_of(&lines, "c1");
    assert_eq!(
        (echo["content"].as_str(), echo["is_error"].as_bool()),
        (Some("Echo: hello mcp"), Some(false))
    );
    let started: Vec<_> = of_type(&lines, "tool_started")
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        started.contains(&"mcp__everything__echo".to_owned()),
        "{started:?}"
    );
    let finished = of_type(&lines, "tool_finished");
    let timing = finished.iter().find(|l| l["tool_call_id"] == "c1").unwrap();
    assert!(timing["duration_ms"].is_u64(), "{timing}");

    // get-sum is not marked read-only: the gateway asked, with a per-tool grant.
    let asked = of_type(&lines, "approval_requested");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["tool_name"], "mcp__everything__get-sum");
    assert_eq!(
        asked[0]["action"],
        "mcp__everything__get-sum {\"a\":2,\"b\":3}"
    );
    let sum = message_of(&lines, "c2");
    assert_eq!(sum["is_error"], true);
    assert!(
        !sum["content"].as_str().unwrap().contains("The sum"),
        "a denied call does not run: {sum}"
    );

    // Arguments are validated against the server's schema before anything is sent.
    let invalid = message_of(&lines, "c3");
    assert_eq!(invalid["is_error"], true);
    assert!(
        invalid["content"]
            .as_str()
            .unwrap()
            .starts_with("invalid arguments for `mcp__everything__echo`"),
        "{invalid}"
    );
}

/// Picks a free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn everything_over_streamable_http_with_a_bearer_token_and_progress_updates() {
    let port = free_port();
    let mut server = std::process::Command::new("node");
    server
        .arg(everything_js())
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    let (child, stderr) = spawn_stderr_lines(&mut server);
    let _server = KillOnDrop(child);
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let line = stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("server-everything did not start listening");
        if line.contains("listening on port") {
            break;
        }
    }
    let config = format!(
        "[mcp_servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
         bearer_token_env_var = \"EVERYTHING_TOKEN\"\n"
    );
    let setup = Setup::new(
        &config,
        &json!([
            {"tool_calls": [
                call("c1", "mcp__everything__get-sum", json!({"a": 2, "b": 3})),
                call("c2", "mcp__everything__trigger-long-running-operation",
                     json!({"duration": 0.4, "steps": 2})),
            ]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(
        setup
            .run("bypass", &["go"])
            .env("EVERYTHING_TOKEN", "not-a-real-token"),
    );
    assert_eq!(code, Some(0), "{lines:#?}");
    assert_eq!(
        message_of(&lines, "c1")["content"],
        "The sum of 2 and 3 is 5."
    );
    assert_eq!(
        message_of(&lines, "c2")["content"],
        "Long running operation completed. Duration: 0.4 seconds, Steps: 2."
    );
    let updates: Vec<_> = of_type(&lines, "tool_update")
        .iter()
        .filter(|l| l["tool_call_id"] == "c2")
        .map(|l| l["message"].as_str().unwrap().to_owned())
        .collect();
    // Progress the server sends before its result is shown while the call runs; one
    // that arrives after the result (the transport delivers them apart) is not.
    assert!(
        (1..=2).contains(&updates.len())
            && ["progress 1/2", "progress 2/2"]
                .iter()
                .zip(&updates)
                .all(|(want, got)| want == got),
        "{updates:?}"
    );

    // Without the token's variable the server is not contacted: the model is told nothing
    // about its tools, a call of one fails naming the server and why, and the turn goes on.
    let (lines, code) = run_to_end(&mut setup.run("bypass", &["again"]));
    assert_eq!(code, Some(0), "{lines:#?}");
    let down = message_of(&lines, "c1")["content"].as_str().unwrap();
    assert!(
        down.starts_with(
            "`mcp__everything__get-sum` is a tool of MCP server `everything`, which is not \
             available now"
        ) && down.contains("(bearer_token_env_var) is not set"),
        "{down}"
    );
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_project_server_of_the_old_sse_transport_is_reported_failed_and_the_others_start() {
    let setup = Setup::new(&stdio_config(""), &json!([]));
    std::fs::write(
        setup.path("work").join(".mcp.json"),
        r#"{"mcpServers": {"old": {"type": "sse", "url": "http://127.0.0.1:9/sse"}}}"#,
    )
    .unwrap();
    let (code, lines) = setup.mcp_list(&["--trust-project-mcp"]);
    assert_eq!(code, Some(1), "a server failed");
    let state = |name: &str| {
        lines
            .iter()
            .find(|l| l["name"] == name)
            .map(|l| l["state"].as_str().unwrap().to_owned())
    };
    let old = state("old").unwrap();
    assert!(
        old.starts_with("failed: MCP server `old` uses the SSE transport (")
            && old.contains(".mcp.json), which Foya does not speak"),
        "{old}"
    );
    assert_eq!(state("everything").as_deref(), Some("running"), "{lines:?}");
}

#[test]
fn mcp_list_shows_each_servers_state_and_tools() {
    let config = format!(
        "{}\n[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n",
        stdio_config("")
    );
    let setup = Setup::new(&config, &json!([]));
    let (code, lines) = setup.mcp_list(&[]);
    assert_eq!(code, Some(1), "a server failed");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["name"], "broken");
    let state = lines[0]["state"].as_str().unwrap();
    assert!(
        state.starts_with(
            "failed: MCP server `broken` (/nonexistent/mcp-server) failed to initialize: "
        ) && state.contains("its stderr: foya-sandbox: ")
            && state.contains("No such file or directory"),
        "{state}"
    );
    assert_eq!(lines[1]["name"], "everything");
    assert_eq!(lines[1]["state"], "running");
    let tools: Vec<&str> = lines[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for expected in ["mcp__everything__echo", "mcp__everything__get-sum"] {
        assert!(tools.contains(&expected), "{tools:?}");
    }
}

#[test]
fn the_mcp_flags_choose_the_sessions_servers() {
    let setup = Setup::new(
        &stdio_config(""),
        &json!([
            {"tool_calls": [call("c1", "mcp__everything__echo", json!({"message": "x"}))]},
            {"text": "done"}
        ]),
    );
    let out = setup
        .run("bypass", &["--mcp", "nope", "go"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--mcp nope: no MCP server `nope` is configured (configured: everything)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (lines, code) = run_to_end(&mut setup.run("bypass", &["--no-mcp", "go"]));
    assert_eq!(code, Some(0));
    assert!(
        message_of(&lines, "c1")["content"]
            .as_str()
            .unwrap()
            .starts_with("unknown tool \"mcp__everything__echo\"")
    );
    let (lines, code) = run_to_end(&mut setup.run("bypass", &["--mcp", "everything", "go"]));
    assert_eq!(code, Some(0));
    assert_eq!(message_of(&lines, "c1")["content"], "Echo: x");
}

#[test]
fn the_load_test_drives_an_mcp_tool_shared_by_its_sessions_and_reports_its_cost_per_call() {
    let setup = Setup::new(&stdio_config("read_only_tools = [\"echo\"]\n"), &json!([]));
    let report = setup.path("report.json");
    let out = foya()
        .env("HOME", setup.path("home"))
        .current_dir(setup.path("work"))
        .args(["loadtest", "--sessions", "4", "--turns", "2"])
        .args(["--tool-name", "mcp__everything__echo"])
        .args(["--tool-args", r#"{"message": "step {step} call {call}"}"#])
        .arg("--json")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    // 4 sessions × 2 turns × 2 tool steps × 1 call, every one run by the one server.
    assert_eq!(report["tool_calls_run"], 16, "{report:#}");
    assert_eq!(report["turns_completed"], 8);
    assert!(
        report["tool_ms_per_call"].as_f64().unwrap() >= 0.0,
        "{report:#}"
    );
    assert!(stdout.contains("tool calls 16 (16 ran, "), "{stdout}");
}

#[test]
fn the_bearer_token_and_headers_are_sent_and_the_token_is_never_shown() {
    use std::io::{BufRead as _, BufReader, Write as _};
    // A loopback endpoint that records the first request's headers and refuses it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut headers = Vec::new();
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
            headers.push(line.trim_end().to_lowercase());
            line.clear();
        }
        let mut stream = stream;
        let _ = stream
            .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        tx.send(headers).unwrap();
    });
    let config = format!(
        "[mcp_servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
         bearer_token_env_var = \"REMOTE_TOKEN\"\nhttp_headers = {{ X-Team = \"blue\" }}\n"
    );
    let setup = Setup::new(&config, &json!([]));
    let out = foya()
        .env("HOME", setup.path("home"))
        .env("REMOTE_TOKEN", "tok-SECRET-123")
        .env("RUST_LOG", "info")
        .args(["mcp", "list", "--json", "--cwd"])
        .arg(setup.path("work"))
        .output()
        .unwrap();
    let headers = rx.recv_timeout(TIMEOUT).unwrap();
    assert!(
        headers.contains(&"authorization: bearer tok-secret-123".to_owned()),
        "{headers:?}"
    );
    assert!(headers.contains(&"x-team: blue".to_owned()), "{headers:?}");
    assert_eq!(out.status.code(), Some(1), "refused: the server failed");
    for text in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(text).contains("tok-SECRET-123"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_image_result_reaches_the_model_as_an_image_block_of_its_tool_result() {
    use base64::Engine as _;
    let mock = MockProvider::start().await;
    let tool = "mcp__everything__get-tiny-image";
    mock.push(MockResponse::sse(anthropic::tool_call(
        "toolu_1", tool, "{}",
    )));
    mock.push(MockResponse::sse(anthropic::text("It is the MCP logo.")));
    let setup = Setup::new(&stdio_config(""), &json!([]));
    let mut command = run_against(
        "anthropic",
        &mock.base_url(),
        &setup.path("home"),
        &setup.path("data"),
        &setup.path("work"),
        "show me the image",
    );
    let (lines, code) = tokio::task::spawn_blocking(move || run_to_end(&mut command))
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{lines:#?}");

    // The log keeps the text (naming the image) and a reference to the attachment.
    let result = message_of(&lines, "toolu_1");
    let content = result["content"].as_str().unwrap();
    assert!(
        content.starts_with("Here's the image you requested:\n[image: image/png, ")
            && content.ends_with(" bytes]\nThe image above is the MCP logo."),
        "{content}"
    );
    let images = result["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{result}");
    assert_eq!(images[0]["media_type"], "image/png");
    let stored = attachment(&setup.path("data"), images[0]["id"].as_str().unwrap());
    assert_eq!(foya_actors::sniff_image(&stored), Some("image/png"));

    // The next request carried the image itself inside the tool_result.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap();
    let sent = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|block| block["type"] == "tool_result")
        .unwrap();
    assert_eq!(
        sent,
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": content},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                "data": base64::engine::general_purpose::STANDARD.encode(&stored)}}]})
    );
}

#[test]
fn a_failing_servers_stderr_is_shown_with_its_terminal_controls_as_text() {
    // A server that dies at once after writing escape sequences (retitle the window,
    // clear the screen) to its stderr: `mcp list` and the log name what it said, as text.
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    write_user_config(
        &home,
        "[mcp_servers.dies]\ncommand = \"sh\"\n\
         args = [\"-c\", \"printf 'boom \\\\033]0;owned\\\\007 \\\\033[2J dying\\\\n' >&2; exit 3\"]\n",
    );
    let out = foya()
        .env("HOME", &home)
        .env("RUST_LOG", "warn")
        .args(["mcp", "list", "--cwd"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("its stderr: boom ^[]0;owned^G ^[[2J dying"),
        "{stdout}"
    );
    for printed in [&stdout, &stderr] {
        assert!(!printed.contains(['\u{1b}', '\u{7}']), "{printed:?}");
    }
}

//! MCP servers that fail, through the real `foya` binary: a Python server built on the
//! official `mcp` package (`tests/mcp/failing_server.py`, run from the venv
//! `.ci/setup-mcp` makes) crashes mid-call, hangs past its timeout, changes its tool
//! list, answers an error, a huge result and an image (sent to a model with vision as an
//! image, named only to one without). Each failure is that call's
//! `is_error` result with a clear message; the turn goes on; a crashed server is
//! restarted on its next use; cancelling a turn mid-call sends `notifications/cancelled`
//! and ends the turn within a second; a SIGKILLed `foya` leaves no server behind; a
//! server that cannot restart fails the call with its stderr; garbage on stdout and a
//! stderr flood are survived; a `sandbox` confines a stdio server's writes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{read_until, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::scripted;
use foya_tests::mcp::{
    attachment, failing_server, python, run_against, toml_path, write_user_config,
};
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Global wait for one run.
const TIMEOUT: Duration = Duration::from_secs(90);

struct Setup {
    tmp: tempfile::TempDir,
}

impl Setup {
    /// The failing server as `failing`, with `extra` config lines, and the script.
    fn new(extra: &str, responses: &Value) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["home", "data", "work"] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        let config = format!(
            "[mcp_servers.failing]\ncommand = {}\nargs = [{}]\nenv = {{ MCP_RECORD = {} }}\n{extra}",
            toml_path(&python()),
            toml_path(&failing_server()),
            toml_path(&tmp.path().join("record.txt")),
        );
        write_user_config(&tmp.path().join("home"), &config);
        let script = json!({ "responses": responses });
        std::fs::write(tmp.path().join("script.json"), script.to_string()).unwrap();
        Self { tmp }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn run(&self) -> std::process::Command {
        let mut command = scripted(
            "run",
            "bypass",
            &self.path("script.json"),
            &self.path("data"),
            &self.path("work"),
        );
        command
            .env("HOME", self.path("home"))
            .args(["--json", "go"]);
        command
    }

    /// The server's record (one line per start, call and cancellation).
    fn record(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("record.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Waits (under `deadline`) until the record has a line `line`.
    fn await_record(&self, line: &str, deadline: Instant) -> Vec<String> {
        loop {
            let record = self.record();
            if record.iter().any(|l| l == line) {
                return record;
            }
            assert!(Instant::now() < deadline, "no `{line}` in {record:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "name": name, "arguments": arguments})
}

fn run_to_end(command: &mut std::process::Command) -> (Vec<Value>, Option<i32>) {
    foya_tests::foya_bin();
    let piped = spawn_json_lines(command);
    let deadline = Instant::now() + TIMEOUT;
    let lines = read_until(&piped.lines, deadline, |l| l["type"] == "turn_complete");
    let code = wait_exit(piped.child, deadline).code();
    (lines, code)
}

fn result_of(lines: &[Value], id: &str) -> (String, bool) {
    let message = lines
        .iter()
        .find(|l| l["type"] == "tool_message" && l["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no tool_message for {id}: {lines:#?}"));
    (
        message["content"].as_str().unwrap().to_owned(),
        message["is_error"].as_bool().unwrap(),
    )
}

#[test]
fn a_crash_mid_call_is_a_tool_error_and_the_server_restarts_on_its_next_use() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__crash", json!({}))]},
            {"tool_calls": [call("c2", "mcp__failing__ok", json!({"text": "again"}))]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "the turn goes on: {lines:#?}");
    let (crash, is_error) = result_of(&lines, "c1");
    assert!(is_error);
    assert!(
        crash.starts_with("MCP server `failing` stopped answering during the call"),
        "{crash}"
    );
    assert_eq!(result_of(&lines, "c2"), ("ok: again".to_owned(), false));
    let starts = setup
        .record()
        .iter()
        .filter(|l| l.starts_with("started"))
        .count();
    assert_eq!(starts, 2, "restarted once: {:?}", setup.record());
}

#[test]
fn a_hang_past_the_timeout_is_cancelled_at_the_server_and_the_turn_goes_on() {
    let setup = Setup::new(
        "tool_timeout_ms = 1500\n",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__hang", json!({}))]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "{lines:#?}");
    assert_eq!(
        result_of(&lines, "c1"),
        (
            "MCP server `failing` did not answer within 1500 ms (tool_timeout_ms); the call was \
             cancelled"
                .to_owned(),
            true
        )
    );
    let update = lines
        .iter()
        .find(|l| l["type"] == "tool_update")
        .expect("the server's progress");
    assert_eq!(update["message"], "waiting (1/10)");
    let record = setup.await_record("notified cancelled timeout", Instant::now() + TIMEOUT);
    assert!(record.contains(&"cancelled hang".to_owned()), "{record:?}");
}

#[test]
fn after_tools_list_changed_the_next_step_offers_the_new_tool() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__add_tool", json!({}))]},
            {"tool_calls": [call("c2", "mcp__failing__added", json!({"text": "new"}))]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "{lines:#?}");
    assert_eq!(result_of(&lines, "c2"), ("added: new".to_owned(), false));
}

#[test]
fn error_huge_and_image_results_read_as_capped_text() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [
                call("c1", "mcp__failing__fail", json!({})),
                call("c2", "mcp__failing__huge", json!({})),
                call("c3", "mcp__failing__image", json!({})),
            ]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "{lines:#?}");
    let (fail, is_error) = result_of(&lines, "c1");
    assert!(is_error);
    assert!(fail.contains("the tool failed on purpose"), "{fail}");
    let (huge, is_error) = result_of(&lines, "c2");
    assert!(!is_error);
    assert!(huge.starts_with("start-xxx"), "{}", &huge[..40]);
    assert!(huge.ends_with("xxx-end"));
    let cut = 200_010 - 2 * 16 * 1024;
    assert!(huge.contains(&format!("\n[... {cut} bytes of output cut ...]\n")));
    let (image, is_error) = result_of(&lines, "c3");
    assert_eq!(
        (image.as_str(), is_error),
        ("[image: image/png, 70 bytes]", false)
    );
    // The image itself is kept as an attachment the result references (the scripted
    // model takes no images: it reads the line above).
    let message = lines
        .iter()
        .find(|l| l["type"] == "tool_message" && l["tool_call_id"] == "c3")
        .unwrap();
    let id = message["images"][0]["id"].as_str().unwrap();
    assert_eq!(attachment(&setup.path("data"), id), pixel());
}

/// The PNG the server's `image` tool answers with.
fn pixel() -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(PIXEL_BASE64)
        .unwrap()
}

/// `PIXEL` of `failing_server.py`, in base64.
const PIXEL_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[tokio::test(flavor = "multi_thread")]
async fn an_image_result_reaches_a_model_with_vision_and_only_its_name_one_without() {
    let mock = MockProvider::start().await;
    for _ in 0..2 {
        let call = openai_chat::tool_call("call_1", "mcp__failing__image", "{}");
        mock.push(MockResponse::sse(call));
        mock.push(MockResponse::sse(openai_chat::text("A pixel.")));
    }
    let base = format!("{}/v1", mock.base_url());
    let blind = format!(
        "[profiles.blind]\nkind = \"openai-chat\"\nbase_url = \"{base}\"\nmodel = \"m\"\nvision = false\n"
    );
    let setup = Setup::new(&blind, &json!([]));
    let run = |kind: &str| {
        let mut command = run_against(
            kind,
            &base,
            &setup.path("home"),
            &setup.path("data"),
            &setup.path("work"),
            "show me",
        );
        async move {
            tokio::task::spawn_blocking(move || run_to_end(&mut command))
                .await
                .unwrap()
        }
    };
    let tool_message = json!({"role": "tool", "tool_call_id": "call_1",
        "content": "[image: image/png, 70 bytes]"});

    // A model with vision: the tool message, then a user message with the image.
    let (lines, code) = run("openai-chat").await;
    assert_eq!(code, Some(0), "{lines:#?}");
    let sent = mock.requests()[1].body["messages"].clone();
    let messages = sent.as_array().unwrap();
    let at = messages.iter().position(|m| m["role"] == "tool").unwrap();
    assert_eq!(messages[at], tool_message);
    assert_eq!(
        messages[at + 1],
        json!({"role": "user", "content": [
            {"type": "text", "text": "[images of tool call call_1]"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PIXEL_BASE64}")}}]})
    );

    // A model without vision (`vision = false`): only the line naming the image.
    let (lines, code) = run("blind").await;
    assert_eq!(code, Some(0), "{lines:#?}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 4);
    let sent = &requests[3].body["messages"];
    assert!(sent.as_array().unwrap().contains(&tool_message), "{sent:#}");
    assert!(!sent.to_string().contains("image_url"), "{sent:#}");
}

/// An answer over rmcp's 16 MiB line limit fails its call at once, saying so, instead of
/// waiting out the tool timeout (10 minutes here, past this test's global timeout); the
/// server stays usable.
#[test]
fn an_oversized_answer_fails_its_call_at_once_with_the_cause() {
    let setup = Setup::new(
        "tool_timeout_ms = 600000\n",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__oversized", json!({}))]},
            {"tool_calls": [call("c2", "mcp__failing__ok", json!({"text": "still"}))]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "{lines:#?}");
    let (text, is_error) = result_of(&lines, "c1");
    assert!(is_error, "{text}");
    assert!(
        text.contains("the MCP server's answer was ")
            && text.contains(" bytes, over the 16776192-byte limit of one message"),
        "{text}"
    );
    assert!(!result_of(&lines, "c2").1);
}

/// A profile's image budget (`max_images = 1`): after a second image result, the
/// request carries only the newest image; the older one is named as left out.
#[tokio::test(flavor = "multi_thread")]
async fn older_images_are_left_out_of_the_request_past_the_profiles_image_budget() {
    let mock = MockProvider::start().await;
    for id in ["call_1", "call_2"] {
        let call = openai_chat::tool_call(id, "mcp__failing__image", "{}");
        mock.push(MockResponse::sse(call));
    }
    mock.push(MockResponse::sse(openai_chat::text("Two pixels.")));
    let base = format!("{}/v1", mock.base_url());
    let capped = format!(
        "[profiles.capped]\nkind = \"openai-chat\"\nbase_url = \"{base}\"\nmodel = \"m\"\nmax_images = 1\n"
    );
    let setup = Setup::new(&capped, &json!([]));
    let mut command = run_against(
        "capped",
        &base,
        &setup.path("home"),
        &setup.path("data"),
        &setup.path("work"),
        "show me twice",
    );
    let (lines, code) = tokio::task::spawn_blocking(move || run_to_end(&mut command))
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{lines:#?}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let image_urls = |i: usize| {
        requests[i]
            .body
            .to_string()
            .matches("data:image/png;base64,")
            .count()
    };
    assert_eq!((image_urls(1), image_urls(2)), (1, 1));
    let sent = requests[2].body["messages"].as_array().unwrap().clone();
    let first = sent.iter().find(|m| m["tool_call_id"] == "call_1").unwrap();
    let text = first["content"].as_str().unwrap();
    assert!(
        text.starts_with(
            "[image: image/png, 70 bytes]\n[image left out to fit the context: attachment "
        ),
        "{text}"
    );
    let second = sent
        .iter()
        .position(|m| m["tool_call_id"] == "call_2")
        .unwrap();
    assert_eq!(
        sent[second + 1]["content"][0],
        json!({"type": "text", "text": "[images of tool call call_2]"})
    );
}

#[test]
fn cancelling_mid_call_sends_notifications_cancelled_and_ends_the_turn_within_a_second() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__hang", json!({}))]},
            {"text": "never"}
        ]),
    );
    foya_tests::foya_bin();
    let piped = spawn_json_lines(&mut setup.run());
    let deadline = Instant::now() + TIMEOUT;
    read_until(&piped.lines, deadline, |l| l["type"] == "tool_update");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(piped.child.id()).unwrap());
    let sent = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let end = read_until(&piped.lines, deadline, |l| l["type"] == "turn_complete");
    let took = sent.elapsed();
    assert_eq!(end.last().unwrap()["status"], "cancelled");
    assert!(
        took < Duration::from_secs(1),
        "the turn ended after {took:?}"
    );
    assert_eq!(wait_exit(piped.child, deadline).code(), Some(130));
    let record = setup.await_record("notified cancelled the turn was cancelled", deadline);
    assert!(record.contains(&"cancelled hang".to_owned()), "{record:?}");
}

#[test]
fn a_sigkilled_foya_leaves_no_server_process() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__hang", json!({}))]},
            {"text": "never"}
        ]),
    );
    foya_tests::foya_bin();
    let mut piped = spawn_json_lines(&mut setup.run());
    let deadline = Instant::now() + TIMEOUT;
    read_until(&piped.lines, deadline, |l| l["type"] == "tool_update");
    let server: i32 = setup
        .record()
        .iter()
        .find_map(|l| l.strip_prefix("started ").map(|p| p.parse().unwrap()))
        .unwrap();
    piped.child.kill().unwrap();
    let _ = piped.child.wait();
    assert!(
        foya_tests::procs::wait_exited(&[server], deadline),
        "the MCP server {server} outlived a SIGKILLed foya"
    );
}

#[test]
fn a_server_that_fails_to_restart_fails_the_call_with_why_and_the_turn_goes_on() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__crash", json!({}))]},
            {"tool_calls": [call("c2", "mcp__failing__ok", json!({"text": "again"}))]},
            {"text": "done"}
        ]),
    );
    // The server starts once; every later start fails with a line on stderr.
    let wrapper = setup.path("once.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ -e {marker} ]; then echo 'refusing to start again' >&2; exit 1; fi\n\
             touch {marker}\nexec {python} {server}\n",
            marker = setup.path("started-once").display(),
            python = python().display(),
            server = failing_server().display(),
        ),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&wrapper, permissions).unwrap();
    // A generous start-up timeout: on a loaded machine the first start (a Python server)
    // must not time out, or its tools are never known and both calls are unknown tools.
    // The refused restarts exit at once, so it costs nothing.
    let config = format!(
        "[mcp_servers.failing]\ncommand = {}\nenv = {{ MCP_RECORD = {} }}\n\
         startup_timeout_ms = 600000\n",
        toml_path(&wrapper),
        toml_path(&setup.path("record.txt")),
    );
    write_user_config(&setup.path("home"), &config);

    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "the turn goes on: {lines:#?}");
    let (crashed, is_error) = result_of(&lines, "c1");
    assert!(
        is_error && !crashed.starts_with("unknown tool"),
        "{crashed}"
    );
    let (again, is_error) = result_of(&lines, "c2");
    assert!(is_error);
    assert!(
        again.starts_with("MCP server `failing` is unavailable (restarted in ")
            && again.contains("failed to initialize")
            && again.contains("its stderr: refusing to start again"),
        "{again}"
    );
}

#[test]
fn a_stdio_server_configured_with_a_sandbox_writes_only_its_working_directory() {
    let setup = Setup::new("", &json!([]));
    let (work, outside) = (setup.path("work"), setup.path("outside.txt"));
    let responses = json!({"responses": [
        {"tool_calls": [
            call("c1", "mcp__failing__write", json!({"path": work.join("inside.txt")})),
            call("c2", "mcp__failing__write", json!({"path": outside})),
        ]},
        {"text": "done"}
    ]});
    std::fs::write(setup.path("script.json"), responses.to_string()).unwrap();
    let config = format!(
        "[mcp_servers.failing]\ncommand = {}\nargs = [{}]\ncwd = {}\nsandbox = \"workspace-write\"\n\
         env = {{ MCP_RECORD = {} }}\n",
        toml_path(&python()),
        toml_path(&failing_server()),
        toml_path(&work),
        toml_path(&work.join("record.txt")),
    );
    write_user_config(&setup.path("home"), &config);
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "{lines:#?}");
    assert_eq!(
        result_of(&lines, "c1"),
        (
            format!("wrote {}", work.join("inside.txt").display()),
            false
        )
    );
    let (refused, is_error) = result_of(&lines, "c2");
    assert!(
        is_error && refused.contains("Read-only file system"),
        "{refused}"
    );
    assert!(!outside.exists());
    assert_eq!(
        std::fs::read_to_string(work.join("inside.txt")).unwrap(),
        "written"
    );
}

#[test]
fn garbage_on_stdout_and_a_stderr_flood_do_not_break_the_call_or_the_turn() {
    let setup = Setup::new(
        "",
        &json!([
            {"tool_calls": [call("c1", "mcp__failing__garbage", json!({}))]},
            {"tool_calls": [call("c2", "mcp__failing__ok", json!({"text": "after"}))]},
            {"text": "done"}
        ]),
    );
    let (lines, code) = run_to_end(&mut setup.run());
    assert_eq!(code, Some(0), "{lines:#?}");
    assert_eq!(result_of(&lines, "c1"), ("survived".to_owned(), false));
    assert_eq!(result_of(&lines, "c2"), ("ok: after".to_owned(), false));
}

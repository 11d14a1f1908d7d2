//! MCP tool names keep their server and tool, end to end through the real `foya` binary
//! and two real MCP servers (`tests/mcp/named_server.py`, the official Python `mcp`
//! package): with servers `a` (tool `b__c`) and `a__b` (tool `c`), the names come from the
//! configured server names alone, so `mcp__a__b__c` is server `a__b`'s tool `c` whether or
//! not `a` is up, and `a`'s tool has one name, the one `foya mcp list` shows. With `a`
//! failing its first start, a call of `a`'s tool fails naming the server and why (not as
//! an unknown tool), and the same call reaches it once it started.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::child::{read_until, spawn_json_lines, wait_exit};
use foya_tests::foya_bin::{foya, scripted};
use foya_tests::mcp::{named_server, python, toml_path, write_user_config};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Global wait for one run.
const TIMEOUT: Duration = Duration::from_secs(120);

fn call(id: &str, name: &str) -> Value {
    json!({"id": id, "name": name, "arguments": {}})
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
fn a_tool_name_means_one_server_s_one_tool_whichever_servers_are_up() {
    let tmp = tempfile::tempdir().unwrap();
    let path = |name: &str| tmp.path().join(name);
    for dir in ["home", "data", "work"] {
        std::fs::create_dir_all(path(dir)).unwrap();
    }
    // `a` refuses to start while `fail-next` exists (and removes it).
    let wrapper = path("a.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ -e {marker} ]; then rm {marker}; echo 'a refuses its first start' >&2; \
             exit 1; fi\nexec {python} {server}\n",
            marker = path("fail-next").display(),
            python = python().display(),
            server = named_server().display(),
        ),
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&wrapper, permissions).unwrap();
    // Generous start-up timeouts: a Python server must not time out on a loaded machine.
    let config = format!(
        "[mcp_servers.a]\ncommand = {wrapper}\nenv = {{ MCP_TOOLS = \"b__c\", MCP_LABEL = \"a\" }}\n\
         startup_timeout_ms = 600000\n\n\
         [mcp_servers.a__b]\ncommand = {python}\nargs = [{server}]\n\
         env = {{ MCP_TOOLS = \"c\", MCP_LABEL = \"a__b\" }}\nstartup_timeout_ms = 600000\n",
        wrapper = toml_path(&wrapper),
        python = toml_path(&python()),
        server = toml_path(&named_server()),
    );
    write_user_config(&path("home"), &config);

    // Both up: the names `foya mcp list` shows.
    let out = foya()
        .env("HOME", path("home"))
        .args(["mcp", "list", "--json", "--cwd"])
        .arg(path("work"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let listed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let name_of = |server: &str| {
        let line = listed
            .iter()
            .find(|l| l["name"] == server)
            .unwrap_or_else(|| panic!("no {server} in {listed:?}"));
        assert_eq!(line["state"], "running", "{line}");
        line["tools"][0]["name"].as_str().unwrap().to_owned()
    };
    let (a_tool, ab_tool) = (name_of("a"), name_of("a__b"));
    assert_eq!(ab_tool, "mcp__a__b__c", "{listed:?}");
    assert!(
        a_tool.starts_with("mcp__a_") && a_tool.ends_with("__b__c") && a_tool != ab_tool,
        "{a_tool}"
    );

    // `a` fails its first start in this run: step 1 without it, step 2 with it.
    std::fs::write(path("fail-next"), "").unwrap();
    let script = json!({"responses": [
        {"tool_calls": [call("c1", &ab_tool), call("c2", &a_tool)]},
        {"tool_calls": [call("c3", &ab_tool), call("c4", &a_tool)]},
        {"text": "done"}
    ]});
    std::fs::write(path("script.json"), script.to_string()).unwrap();
    let mut command = scripted(
        "run",
        "bypass",
        &path("script.json"),
        &path("data"),
        &path("work"),
    );
    command.env("HOME", path("home")).args(["--json", "go"]);
    let piped = spawn_json_lines(&mut command);
    let deadline = Instant::now() + TIMEOUT;
    let lines = read_until(&piped.lines, deadline, |l| l["type"] == "turn_complete");
    assert_eq!(
        wait_exit(piped.child, deadline).code(),
        Some(0),
        "{lines:#?}"
    );
    assert!(!path("fail-next").exists(), "a was not started");

    assert_eq!(result_of(&lines, "c1"), ("a__b/c".to_owned(), false));
    let (down, is_error) = result_of(&lines, "c2");
    assert!(is_error, "{down}");
    assert!(
        down.starts_with(&format!(
            "`{a_tool}` is a tool of MCP server `a`, which is not available now"
        )) && down.contains("a refuses its first start"),
        "{down}"
    );
    // The same names, the same tools, once `a` is up.
    assert_eq!(result_of(&lines, "c3"), ("a__b/c".to_owned(), false));
    assert_eq!(result_of(&lines, "c4"), ("a/b__c".to_owned(), false));
}

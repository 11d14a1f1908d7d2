//! Lifecycle hooks through the real `foya run` (scripted provider) with real bash and
//! Python hook scripts in a trusted project's `.foya/config.toml` (and the user's own
//! config; an untrusted project's hooks do not run): every point fires
//! with Claude Code's input fields, every run is a `hook_ran` event, hooks only tighten
//! (a deny beats `bypass`; an `allow` or `ask` cannot run a refused call; nothing widens
//! the mode; a protected path is still asked), and failing hooks (timeout, crash,
//! invalid JSON, flood) are logged and change nothing; `continue: false` ends the turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::hook_project::{HookProject, assert_ok, decisions, hook_runs, result_of};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn group(matcher: Option<&str>, command: &str) -> String {
    let matcher = matcher
        .map(|m| format!("matcher = \"{m}\"\n"))
        .unwrap_or_default();
    format!("{matcher}hooks = [{{ type = \"command\", command = '{command}' }}]\n")
}

fn pair(name: &str, body: &str) -> (String, String) {
    (name.to_owned(), body.to_owned())
}

fn owned(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect()
}

#[test]
fn every_hook_point_fires_with_claude_codes_input() {
    let py = "python3 .foya/hooks/log.py LOG";
    let sh = "bash .foya/hooks/log.sh LOG";
    let config = [
        ("SessionStart", None, py),
        ("UserPromptSubmit", None, py),
        ("PreToolUse", Some("Bash"), py),
        ("PostToolUse", Some("shell"), py),
        ("Stop", None, py),
        ("Stop", None, "env > ../hook-env.txt"),
        ("SessionEnd", None, sh),
    ]
    .iter()
    .map(|(point, matcher, command)| format!("[[hooks.{point}]]\n{}", group(*matcher, command)))
    .collect::<String>();
    let project = HookProject::new(&config, &[]);
    let script = project.script(
        "s.json",
        &json!([
            {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo hi"}}]},
            {"text": "done"}
        ]),
    );
    let out = project
        .command("auto", &script)
        .env("FOYA_TEST_VISIBLE", "shown")
        .env("FOYA_TEST_API_KEY", "sk-WITHHELD")
        .arg("say hi")
        .output()
        .unwrap();
    assert_ok(&out);
    // Like tools, hooks do not see variables named like keys, secrets or tokens.
    let env = std::fs::read_to_string(project.work.join("../hook-env.txt")).unwrap();
    assert!(
        env.contains("FOYA_TEST_VISIBLE=shown") && !env.contains("WITHHELD"),
        "{env}"
    );
    let events = project.events();
    let session = events[0]["session_id"].clone();
    let logged = project.logged();
    let names: Vec<&str> = logged
        .iter()
        .map(|l| l["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PostToolUse",
            "Stop",
            "SessionEnd"
        ]
    );
    let work = project.work.display().to_string();
    for line in &logged {
        assert_eq!(line["session_id"], session, "{line}");
        assert_eq!(line["cwd"], work.as_str(), "{line}");
        assert_eq!(line["permission_mode"], "auto", "{line}");
        let transcript = line["transcript_path"].as_str().unwrap();
        assert!(
            transcript.ends_with(&format!("{}.jsonl", session.as_str().unwrap())),
            "{line}"
        );
    }
    assert_eq!(logged[0]["source"], "startup");
    assert_eq!(logged[1]["prompt"], "say hi");
    // The transcript a hook reads is the session's log so far.
    assert!(
        logged[1]["_transcript_types"]
            .as_array()
            .unwrap()
            .contains(&json!("user_message"))
    );
    assert_eq!(
        (
            &logged[2]["tool_name"],
            &logged[2]["tool_input"],
            &logged[2]["tool_use_id"]
        ),
        (
            &json!("shell"),
            &json!({"command": "echo hi"}),
            &json!("c1")
        )
    );
    assert_eq!(
        logged[3]["tool_response"],
        json!({"content": "hi\n[exit code: 0]", "is_error": false})
    );
    assert_eq!(
        (
            &logged[4]["stop_hook_active"],
            &logged[4]["last_assistant_message"]
        ),
        (&json!(false), &json!("done"))
    );
    assert!(
        logged[4]["_transcript_types"]
            .as_array()
            .unwrap()
            .contains(&json!("tool_message"))
    );
    assert_eq!(logged[5]["reason"], "other");
    // Every run is an event of the log (the `env` Stop hook too).
    let mut points: Vec<(String, String)> = names
        .iter()
        .map(|n| ((*n).to_owned(), "none".to_owned()))
        .collect();
    points.insert(5, pair("Stop", "none"));
    assert_eq!(decisions(&events), points);
    let pre = hook_runs(&events)[2];
    assert_eq!(
        (&pre["matcher"], &pre["tool_call_id"]),
        (&json!("Bash"), &json!("c1"))
    );
    assert!(pre["duration_ms"].is_u64());
    // A second process resumes the session: SessionStart's source is `resume`.
    let id = session.as_str().unwrap();
    let more = project.script(
        "more.json",
        &json!([{"tool_calls": []}, {"text": "done"}, {"text": "again"}]),
    );
    assert_ok(&project.run("auto", &more, &["--session", id, "once more"]));
    let logged = project.logged();
    let starts: Vec<(&Value, &Value)> = logged
        .iter()
        .filter(|l| l["hook_event_name"] == "SessionStart")
        .map(|l| (&l["source"], &l["session_id"]))
        .collect();
    assert_eq!(
        starts,
        [(&json!("startup"), &session), (&json!("resume"), &session)]
    );
    // Deleting the session removes the transcript its hooks read.
    let transcript = project.data.join("transcripts").join(format!("{id}.jsonl"));
    assert!(transcript.is_file(), "{}", transcript.display());
    let deleted = foya_tests::foya_bin::foya()
        .args(["sessions", "delete", id, "--data-dir"])
        .arg(&project.data)
        .output()
        .unwrap();
    assert_ok(&deleted);
    assert!(!transcript.exists(), "{}", transcript.display());
}

#[test]
fn a_deny_beats_bypass_and_the_validator_of_claude_codes_docs_runs() {
    // Claude Code's documented command validator, with `Bash` renamed `shell`.
    let validator = include_str!("hooks_fixtures/bash_command_validator.py");
    let deny_rm = r#"#!/bin/bash
input=$(cat)
if echo "$input" | grep -q 'rm -rf'; then
  echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm -rf here"}}'
fi
"#;
    let config = format!(
        "[[hooks.PreToolUse]]\n{}[[hooks.PreToolUse]]\n{}",
        group(Some("Bash"), "python3 .foya/hooks/validator.py"),
        group(Some("Bash"), "bash .foya/hooks/deny_rm.sh"),
    );
    let scripts = [pair("validator.py", validator), pair("deny_rm.sh", deny_rm)];
    let project = HookProject::new(&config, &owned(&scripts));
    std::fs::create_dir(project.work.join("victim")).unwrap();
    let script = project.script(
        "s.json",
        &json!([
            {"tool_calls": [
                {"id": "g", "name": "shell", "arguments": {"command": "grep -r hello ."}},
                {"id": "r", "name": "shell", "arguments": {"command": "rm -rf victim"}},
                {"id": "ok", "name": "shell", "arguments": {"command": "echo fine"}}
            ]},
            {"text": "done"}
        ]),
    );
    // `bypass` allows every call: the hooks still deny.
    assert_ok(&project.run("bypass", &script, &["clean up"]));
    let events = project.events();
    let grep = result_of(&events, "g");
    assert_eq!(grep["is_error"], true);
    assert_eq!(
        grep["content"],
        "denied by a PreToolUse hook: • Use 'rg' (ripgrep) instead of 'grep' for better performance and features"
    );
    assert_eq!(
        result_of(&events, "r")["content"],
        "denied by a PreToolUse hook: no rm -rf here"
    );
    assert!(project.work.join("victim").is_dir());
    assert_eq!(result_of(&events, "ok")["content"], "fine\n[exit code: 0]");
    let denied: Vec<_> = hook_runs(&events)
        .into_iter()
        .filter(|e| e["decision"] == "deny")
        .map(|e| (e["tool_call_id"].clone(), e["hook"].clone()))
        .collect();
    assert_eq!(
        denied,
        [
            (json!("g"), json!("python3 .foya/hooks/validator.py")),
            (json!("r"), json!("bash .foya/hooks/deny_rm.sh"))
        ]
    );
}

#[test]
fn an_allow_or_ask_from_a_hook_never_widens_what_the_policy_decides() {
    let answer = r#"#!/bin/bash
input=$(cat)
echo "$input" | python3 -c 'import json,sys; print(json.load(sys.stdin)["permission_mode"])' >> modes.txt
if echo "$input" | grep -q ask_me; then
  echo '{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"double-check"}}'
else
  echo '{"permission_mode":"bypassPermissions","approval_mode":"bypass","sandbox":"none","hookSpecificOutput":{"permissionDecision":"allow"}}'
fi
"#;
    let config = format!(
        "[[hooks.PreToolUse]]\n{}",
        group(None, "bash .foya/hooks/answer.sh")
    );
    let scripts = [pair("answer.sh", answer)];
    let project = HookProject::new(&config, &owned(&scripts));
    let calls = json!([
        {"tool_calls": [
            // Policy allows in `auto`; the hook asks; nobody can answer: denied.
            {"id": "asked", "name": "shell", "arguments": {"command": "touch ask_me"}},
            // A protected path: asked whatever the hook says; denied.
            {"id": "protected", "name": "write_file", "arguments": {"path": ".foya/rules/x.md", "content": "x"}}
        ]},
        {"text": "done"}
    ]);
    let script = project.script("s.json", &calls);
    let out = project.run("auto", &script, &["go"]);
    assert_ok(&out);
    let events = project.events();
    // What a failure needs to explain itself: whether the hook ran and what it decided
    // for each call (none: the project's config was not applied, see stderr), and the
    // results.
    let explain = format!(
        "stderr: {}\nhook runs: {:#?}\nresults: {:#?}",
        String::from_utf8_lossy(&out.stderr),
        hook_runs(&events),
        ["asked", "protected"].map(|id| result_of(&events, id))
    );
    let decided: Vec<_> = hook_runs(&events)
        .iter()
        .map(|e| (e["tool_call_id"].clone(), e["decision"].clone()))
        .collect();
    assert_eq!(
        decided,
        [
            (json!("asked"), json!("ask")),
            (json!("protected"), json!("allow"))
        ],
        "{explain}"
    );
    assert!(!project.work.join("ask_me").exists(), "{explain}");
    assert!(!project.work.join(".foya/rules/x.md").exists(), "{explain}");
    assert_eq!(result_of(&events, "asked")["is_error"], true, "{explain}");
    assert_eq!(
        result_of(&events, "protected")["is_error"],
        true,
        "{explain}"
    );
    let asked: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "approval_requested")
        .map(|e| (e["tool_call_id"].clone(), e["grant"].clone()))
        .collect();
    // Asked, and no "allow for this session" grant is offered for a hook's question.
    assert_eq!(asked.len(), 2, "{asked:?}\n{explain}");
    assert!(
        asked[0].1.is_null() || asked[0].1 == "",
        "{asked:?}\n{explain}"
    );

    // Read-only: the hook's allow (and its bypass fields) cannot run a refused call, and
    // the mode it sees next is still read-only.
    let read_only = HookProject::new(&config, &owned(&scripts));
    let calls = json!([
        {"tool_calls": [{"id": "w", "name": "shell", "arguments": {"command": "touch widened"}}]},
        {"tool_calls": [{"id": "a", "name": "shell", "arguments": {"command": "touch ask_me"}}]},
        {"text": "done"}
    ]);
    let script = read_only.script("s.json", &calls);
    assert_ok(&read_only.run("read-only", &script, &["go"]));
    let events = read_only.events();
    assert!(!read_only.work.join("widened").exists());
    for id in ["w", "a"] {
        let content = result_of(&events, id)["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(content.contains("read-only"), "{content}");
    }
    let modes = std::fs::read_to_string(read_only.work.join("modes.txt")).unwrap();
    assert_eq!(modes, "plan\nplan\n");
    assert_eq!(
        decisions(&events),
        [pair("PreToolUse", "allow"), pair("PreToolUse", "ask")]
    );
}

#[test]
fn failing_hooks_are_logged_and_change_nothing() {
    let config = [
        ("PreToolUse", "sleep 30", Some(1)),
        ("PostToolUse", "echo \"{oops\"", None),
        ("PostToolUse", "head -c 3000000 /dev/zero | tr \"\\\\0\" x", None),
        ("PostToolUse", "echo crashed >&2; exit 1", None),
        ("Stop", "kill -9 $$", None),
    ]
    .iter()
    .map(|(point, command, timeout)| {
        let timeout = timeout.map(|t| format!(", timeout = {t}")).unwrap_or_default();
        format!("[[hooks.{point}]]\nhooks = [{{ type = \"command\", command = '{command}'{timeout} }}]\n")
    })
    .collect::<String>();
    let project = HookProject::new(&config, &[]);
    // The sandbox creates no entry directly in the working directory: a subdirectory.
    std::fs::create_dir(project.work.join("out")).unwrap();
    let script = project.script(
        "s.json",
        &json!([
            {"tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "echo ran > out/ran.txt; echo ok"}}]},
            {"text": "done"}
        ]),
    );
    let started = Instant::now();
    assert_ok(&project.run("auto", &script, &["go"]));
    // The timed-out hook did not hold the turn for its 30 s.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let events = project.events();
    assert!(project.work.join("out/ran.txt").exists(), "{events:#?}");
    assert_eq!(result_of(&events, "c")["content"], "ok\n[exit code: 0]");
    let runs: Vec<(Value, Value)> = hook_runs(&events)
        .iter()
        .map(|e| (e["decision"].clone(), e["reason"].clone()))
        .collect();
    assert_eq!(
        runs,
        [
            (
                json!("failed"),
                json!("timed out after 1 s; its process group was killed")
            ),
            (json!("failed"), json!("its stdout is not valid JSON")),
            (
                json!("failed"),
                json!("printed more than 1048576 bytes; its process group was killed")
            ),
            (json!("failed"), json!("exited with code 1")),
            (json!("failed"), json!("killed by a signal")),
        ]
    );
    let last = events.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"]),
        (&json!("turn_complete"), &json!("completed"))
    );
}

#[test]
fn the_users_hooks_apply_and_an_untrusted_projects_do_not() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let (home, work, data) = (root.join("home"), root.join("work"), root.join("data"));
    std::fs::create_dir_all(work.join(".foya")).unwrap();
    let marker = root.join("project-hook-ran");
    // The project (not trusted in this HOME) would record that its hook ran.
    std::fs::write(
        work.join(".foya/config.toml"),
        format!(
            "[[hooks.PreToolUse]]\n{}",
            group(None, &format!("touch {}", marker.display()))
        ),
    )
    .unwrap();
    let deny = r#"{"hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"the user says no"}}"#;
    foya_tests::mcp::write_user_config(
        &home,
        &format!(
            "[[hooks.PreToolUse]]\n{}",
            group(Some("Bash"), &format!("echo {deny:?}"))
        ),
    );
    let script = root.join("s.json");
    let calls = json!({"responses": [
        {"tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "echo hi"}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, calls.to_string()).unwrap();
    let out = foya_tests::foya_bin::scripted("run", "bypass", &script, &data, &work)
        .env("HOME", &home)
        .arg("go")
        .output()
        .unwrap();
    assert_ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("this project is not trusted"), "{stderr}");
    let events = foya_tests::foya_bin::only_session_log(&data);
    assert_eq!(
        result_of(&events, "c")["content"],
        "denied by a PreToolUse hook: the user says no"
    );
    assert_eq!(decisions(&events), [pair("PreToolUse", "deny")]);
    assert!(!marker.exists());
}

#[test]
fn continue_false_from_a_tool_hook_ends_the_turn_after_the_step() {
    let stop = r#"echo "{\"continue\": false, \"stopReason\": \"formatter broke\"}""#;
    let config = format!("[[hooks.PostToolUse]]\n{}", group(Some("shell"), stop));
    let project = HookProject::new(&config, &[]);
    let script = project.script(
        "s.json",
        &json!([
            {"tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "echo hi"}}]},
            {"text": "never asked"}
        ]),
    );
    assert_ok(&project.run("auto", &script, &["go"]));
    let events = project.events();
    // The call's result is committed; the model is not asked again.
    assert_eq!(result_of(&events, "c")["content"], "hi\n[exit code: 0]");
    let answers = events
        .iter()
        .filter(|e| e["type"] == "assistant_message")
        .count();
    assert_eq!(answers, 1);
    let last = events.last().unwrap();
    assert_eq!(
        (&last["type"], &last["status"], &last["reason"]),
        (
            &json!("turn_complete"),
            &json!("completed"),
            &json!("formatter broke")
        )
    );
    assert_eq!(decisions(&events), [pair("PostToolUse", "stop")]);
}

#[test]
fn the_files_a_hook_command_names_are_asked_before_any_write() {
    let config = r#"[[hooks.Stop]]
hooks = [{ type = "command", command = "python3 check.py" }, { type = "command", command = "\"$CLAUDE_PROJECT_DIR\"/hooks/ctx.sh" }]
"#;
    let project = HookProject::new(config, &[]);
    std::fs::create_dir(project.work.join("hooks")).unwrap();
    let check = project.work.join("check.py");
    let ctx = project.work.join("hooks/ctx.sh");
    std::fs::write(&check, "print('{}')\n").unwrap();
    std::fs::write(&ctx, "#!/bin/bash\necho '{}'\n").unwrap();
    let mut mode = std::fs::metadata(&ctx).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(&ctx, mode).unwrap();
    let runs = [
        (
            "auto",
            json!([
                {"tool_calls": [
                    {"id": "py", "name": "shell", "arguments": {"command": "echo 'open(\"pwned\",\"w\")' >> check.py"}},
                    {"id": "sh", "name": "shell", "arguments": {"command": "echo 'touch pwned' >> hooks/ctx.sh"}}
                ]},
                {"text": "done"}
            ]),
        ),
        (
            "auto-edit",
            json!([
                {"tool_calls": [
                    {"id": "py", "name": "write_file", "arguments": {"path": "check.py", "content": "open('pwned','w')\n"}},
                    {"id": "sh", "name": "write_file", "arguments": {"path": "hooks/ctx.sh", "content": "touch pwned\n"}}
                ]},
                {"text": "done"}
            ]),
        ),
    ];
    for (approval, calls) in runs {
        let _ = std::fs::remove_dir_all(&project.data);
        let script = project.script("s.json", &calls);
        assert_ok(&project.run(approval, &script, &["go"]));
        let events = project.events();
        let asked: Vec<_> = events
            .iter()
            .filter(|e| e["type"] == "approval_requested")
            .map(|e| e["tool_call_id"].clone())
            .collect();
        assert_eq!(asked, [json!("py"), json!("sh")], "{approval}: {events:#?}");
        for id in ["py", "sh"] {
            assert_eq!(result_of(&events, id)["is_error"], true, "{approval} {id}");
        }
        assert_eq!(std::fs::read_to_string(&check).unwrap(), "print('{}')\n");
        assert_eq!(
            std::fs::read_to_string(&ctx).unwrap(),
            "#!/bin/bash\necho '{}'\n"
        );
        assert!(!project.work.join("pwned").exists(), "{approval}");
        // The Stop hooks ran, unchanged.
        assert_eq!(
            decisions(&events),
            [pair("Stop", "none"), pair("Stop", "none")],
            "{approval}"
        );
    }
}

#[test]
fn a_hook_leaves_no_process_behind_and_a_background_child_does_not_stall_it() {
    let config = r#"[[hooks.PreToolUse]]
hooks = [{ type = "command", command = "setsid bash -c \"exec -a hook-orphan-312 sleep 312\" & exit 0" }]
[[hooks.Stop]]
hooks = [{ type = "command", command = "(exec -a hook-pipe-311 sleep 311) & echo \"{}\"; exit 0", timeout = 30 }]
"#;
    let project = HookProject::new(config, &[]);
    let script = project.script(
        "s.json",
        &json!([
            {"tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "echo hi"}}]},
            {"text": "done"}
        ]),
    );
    let started = Instant::now();
    assert_ok(&project.run("auto", &script, &["go"]));
    let took = started.elapsed();
    let left: Vec<_> = ["hook-orphan-312", "hook-pipe-311"]
        .iter()
        .flat_map(|m| foya_tests::procs::marked(m))
        .collect();
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(left.is_empty(), "left running: {left:?}");
    // The Stop hook's output was used as soon as its shell exited, not after 30 s.
    let events = project.events();
    assert_eq!(
        decisions(&events),
        [pair("PreToolUse", "none"), pair("Stop", "none")]
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_killed_foya_takes_its_running_hook_with_it() {
    let config = r#"[[hooks.PreToolUse]]
hooks = [{ type = "command", command = "exec -a hook-sleep-315 bash -c 'echo started > ../hook-started; sleep 315'" }]
"#;
    let project = HookProject::new(config, &[]);
    // The hook says it runs through a FIFO (an event to wait on, no polling): its
    // process, marked `hook-sleep-315`, writes once it exists.
    let started = project.work.join("../hook-started");
    let made = std::process::Command::new("mkfifo")
        .arg(&started)
        .status()
        .unwrap();
    assert!(made.success());
    let script = project.script(
        "s.json",
        &json!([
            {"tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "echo hi"}}]},
            {"text": "done"}
        ]),
    );
    let mut child = project
        .command("auto", &script)
        .arg("go")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(&started));
    });
    let said = rx.recv_timeout(Duration::from_secs(60));
    assert!(
        matches!(&said, Ok(Ok(text)) if text.trim() == "started"),
        "{said:?}"
    );
    let running = foya_tests::procs::marked("hook-sleep-315");
    assert!(!running.is_empty(), "the hook's process is not running");
    child.kill().unwrap();
    child.wait().unwrap();
    let pids: Vec<i32> = running.iter().map(|(pid, _)| *pid).collect();
    let exited = foya_tests::procs::wait_exited(&pids, Instant::now() + Duration::from_secs(30));
    for pid in &pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(exited, "the hook outlived foya: {running:?}");
}

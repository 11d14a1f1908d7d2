//! `foya run` usage errors and output, end to end with the real binary: `--max-steps 0`
//! and an empty prompt are usage errors that create no session; script-load errors
//! name each cause once; a scripted session whose script is used up is refused with a
//! clear message; a model request retried after part of its text streamed prints the
//! answer once (what the log says) and marks the retry on stderr. Bad arguments
//! (`--cwd` a file, `--base-url` not a URL, loadtest values) exit 2 before anything is
//! created; `sessions list` on a missing data dir creates nothing, and `sessions
//! delete|title`, `run --session` and `chat --session` on a session that is not stored
//! say so and exit 1, creating nothing either; `run --session` and `chat --session` on a
//! deleted session say it was deleted (exit 1, whatever the provider) and write nothing.
//! An empty `FOYA_DATA_DIR` counts as unset. A provider that cannot be used (unknown
//! profile, missing API key, `--seed` or `--script` with another provider) exits 2 from `run`, `chat`
//! and `serve` before the data dir is created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::foya;
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

fn run(data: &Path, args: &[&str]) -> Output {
    foya()
        .arg("run")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

fn session_ids(data: &Path) -> Vec<String> {
    let out = foya()
        .args(["sessions", "list", "--json"])
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn write_script(dir: &Path, responses: &[Value]) -> String {
    let path = dir.join("script.json");
    std::fs::write(&path, json!({ "responses": responses }).to_string()).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The stderr of a command refused as a usage error (asserting exit 2).
fn usage_error(out: &std::process::Output) -> String {
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[test]
fn zero_max_steps_and_empty_prompts_are_usage_errors_that_create_no_session() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(tmp.path(), &[json!({"text": "hi"})]);
    let data = tmp.path().join("data");
    let base = [
        "--provider",
        "scripted",
        "--script",
        &script,
        "--approval",
        "bypass",
    ];

    let mut args = base.to_vec();
    args.extend(["--max-steps", "0", "hello"]);
    let out = run(&data, &args);
    let stderr = usage_error(&out);
    assert!(stderr.contains("--max-steps"), "{stderr}");
    assert!(stderr.contains("0 is not in 1.."), "{stderr}");

    for prompt in ["", "   ", "\n\t"] {
        let mut args = base.to_vec();
        args.push(prompt);
        let out = run(&data, &args);
        assert_eq!(out.status.code(), Some(2), "{prompt:?}");
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            "foya: the prompt is empty: give the text of the request\n"
        );
        assert_eq!(out.stdout, b"");
    }
    assert_eq!(session_ids(&data), Vec::<String>::new());
}

#[test]
fn bad_arguments_exit_2_before_anything_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(tmp.path(), &[json!({"text": "hi"})]);
    let data = tmp.path().join("data");
    let scripted = ["--provider", "scripted", "--script", &script];
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            [&scripted[..], &["--cwd", &script, "hi"]].concat(),
            format!("foya: working directory {script} is not a directory\n"),
        ),
        (
            vec!["--base-url", "notaurl", "hi"],
            "error: invalid value 'notaurl' for '--base-url <BASE_URL>'".to_owned(),
        ),
    ];
    for (args, message) in cases {
        let out = run(&data, &args);
        let stderr = usage_error(&out);
        assert!(stderr.starts_with(&message), "{stderr}");
        assert_eq!(out.stdout, b"");
    }
    let report = tmp.path().join("nope/report.json");
    let out = foya()
        .args(["loadtest", "--sessions", "1", "--json"])
        .arg(&report)
        .output()
        .unwrap();
    let stderr = usage_error(&out);
    assert!(
        stderr.contains(&format!(
            "directory {} does not exist",
            tmp.path().join("nope").display()
        )),
        "{stderr}"
    );
    // A node needs a port its peers can dial: port 0 is refused before anything starts.
    let cookie = tmp.path().join("cookie");
    std::fs::write(&cookie, "secret").unwrap();
    let out = foya()
        .args(["node", "--listen", "127.0.0.1:0", "--cookie-file"])
        .arg(&cookie)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let stderr = usage_error(&out);
    assert!(
        stderr.contains("\"127.0.0.1:0\" has port 0: a node needs a fixed port"),
        "{stderr}"
    );
    assert!(!data.exists());
    // Listing a data dir that does not exist says so and creates nothing.
    let out = foya()
        .args(["sessions", "list"])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, b"");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!("foya: data directory {} does not exist\n", data.display())
    );
    assert!(!data.exists());
}

#[test]
fn a_missing_script_names_the_os_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing.json");
    let out = run(
        &tmp.path().join("data"),
        &[
            "--provider",
            "scripted",
            "--script",
            missing.to_str().unwrap(),
            "hi",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "foya: cannot read script {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    std::fs::write(&missing, "{not json").unwrap();
    let out = run(
        &tmp.path().join("data"),
        &[
            "--provider",
            "scripted",
            "--script",
            missing.to_str().unwrap(),
            "hi",
        ],
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "foya: cannot parse script {}: key must be a string",
            missing.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_scripted_session_with_its_script_used_up_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(tmp.path(), &[json!({"text": "only answer"})]);
    let data = tmp.path().join("data");
    let base = [
        "--provider",
        "scripted",
        "--script",
        &script,
        "--approval",
        "bypass",
    ];
    let mut args = base.to_vec();
    args.push("first");
    let out = run(&data, &args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = session_ids(&data).remove(0);

    let mut args = base.to_vec();
    args.extend(["--session", &id, "second"]);
    let out = run(&data, &args);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        format!(
            "foya: session {id} already used the only response of the script {script} (a \
             scripted model answers with response N+1 after N assistant messages); continue \
             it with a script that has more responses\n"
        )
    );
    // Nothing was written to the session.
    let show = foya()
        .args(["sessions", "show", &id, "--json"])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let last: Value = serde_json::from_str(
        String::from_utf8(show.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["type"], "turn_complete");
    assert_eq!(last["status"], "completed");
}

#[test]
fn run_and_chat_on_a_deleted_session_say_it_was_deleted_whatever_the_provider() {
    let tmp = tempfile::tempdir().unwrap();
    let used_up = write_script(tmp.path(), &[json!({"text": "only answer"})]);
    let data = tmp.path().join("data");
    let out = run(
        &data,
        &["--provider", "scripted", "--script", &used_up, "first"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = session_ids(&data).remove(0);
    let deleted = foya()
        .args(["sessions", "delete", &id, "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(deleted.status.code(), Some(0), "{deleted:?}");
    let events = |data: &Path| {
        let show = foya()
            .args(["sessions", "show", &id, "--json", "--data-dir"])
            .arg(data)
            .output()
            .unwrap();
        String::from_utf8(show.stdout).unwrap()
    };
    let before = events(&data);
    assert!(
        before
            .lines()
            .last()
            .unwrap()
            .contains("\"session_deleted\""),
        "{before}"
    );
    let more = tmp.path().join("more.json");
    std::fs::write(
        &more,
        json!({"responses": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}).to_string(),
    )
    .unwrap();
    let more = more.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        // The scripted provider with its script used up, then with responses left.
        vec!["run", "--provider", "scripted", "--script", &used_up],
        vec!["run", "--provider", "scripted", "--script", more],
        // An HTTP provider: refused before any request.
        vec![
            "run",
            "--provider",
            "openai-chat",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ],
        vec!["chat", "--provider", "scripted", "--script", more],
        // The default provider without its API key: the session is judged first.
        vec!["run"],
        vec!["chat"],
    ];
    for args in commands {
        let mut command = foya();
        command.env_remove("OPENAI_API_KEY");
        command.args(&args).args(["--session", &id, "--data-dir"]);
        command.arg(&data);
        if args[0] == "run" {
            command.arg("again");
        }
        let out = command.stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(out.stderr).unwrap()
            ),
            (
                Some(1),
                String::new(),
                format!(
                    "foya: session {id} was deleted: it takes no more inputs (its events stay \
                     readable with `foya sessions show {id}`)\n"
                )
            ),
            "{args:?}"
        );
    }
    assert_eq!(events(&data), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_request_prints_its_answer_once_and_marks_the_retry() {
    let mock = MockProvider::start().await;
    let answer = "The answer streams in several words.";
    // The first attempt sends the role chunk and two words, then the connection drops.
    mock.push(
        MockResponse::sse(openai_chat::text(answer))
            .cut_after(3)
            .chunk_delay_ms(20),
    );
    mock.push(MockResponse::sse(openai_chat::text(answer)));
    let tmp = tempfile::tempdir().unwrap();
    let base_url = format!("{}/v1", mock.base_url());
    let data = tmp.path().join("data");
    let cwd = tmp.path().to_str().unwrap().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        run(
            &data,
            &[
                "--provider",
                "openai-chat",
                "--base-url",
                &base_url,
                "--model",
                "m",
                "--approval",
                "bypass",
                "--cwd",
                &cwd,
                "hi",
            ],
        )
    })
    .await
    .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{answer}\n")
    );
    let retry_lines: Vec<&str> = stderr.lines().filter(|l| l.contains("retry")).collect();
    assert_eq!(retry_lines.len(), 2, "{stderr}");
    assert_eq!(
        retry_lines[0],
        "[retrying: stream_interrupted, attempt 2/4]"
    );
    assert!(retry_lines[1].starts_with("↻ retrying in "), "{stderr}");
}

#[test]
fn commands_on_a_session_that_is_not_stored_exit_1_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(
        tmp.path(),
        &[json!({"text": "hi"}), json!({"text": "again"})],
    );
    let data = tmp.path().join("data");
    let id = "01930000-0000-7000-8000-0000000000ab";
    let scripted = [
        "--provider",
        "scripted",
        "--script",
        &script,
        "--approval",
        "bypass",
    ];
    let commands: Vec<Vec<&str>> = vec![
        vec!["sessions", "delete", id],
        vec!["sessions", "title", id, "A title"],
        [&["run", "--session", id], &scripted[..], &["hello"]].concat(),
        [&["chat", "--session", id], &scripted[..]].concat(),
    ];
    let each = |why: &str| {
        for args in &commands {
            let out = foya()
                .args(args)
                .arg("--data-dir")
                .arg(&data)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            assert_eq!(
                (
                    out.status.code(),
                    String::from_utf8(out.stdout).unwrap(),
                    String::from_utf8(out.stderr).unwrap()
                ),
                (
                    Some(1),
                    String::new(),
                    format!("foya: no session {id}{why}\n")
                ),
                "{args:?}"
            );
        }
    };
    // No data dir: none is created.
    each(&format!(
        ": data directory {} does not exist",
        data.display()
    ));
    assert!(!data.exists());
    // A data dir without a store: nothing is created in it.
    std::fs::create_dir(&data).unwrap();
    each(&format!(": no sessions are stored in {}", data.display()));
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
    // A store holding another session: that one is left as it was.
    let out = run(&data, &[&scripted[..], &["first"]].concat());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let sessions = session_ids(&data);
    assert_eq!(sessions.len(), 1);
    each("");
    assert_eq!(session_ids(&data), sessions);
    // That session, titled by hand: `sessions show` prints the title on its event line.
    let titled = foya()
        .args([
            "sessions",
            "title",
            &sessions[0],
            "Hand title",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(titled.status.code(), Some(0), "{titled:?}");
    let shown = foya()
        .args(["sessions", "show", &sessions[0], "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let shown = String::from_utf8(shown.stdout).unwrap();
    let line = shown.lines().find(|l| l.contains("title_set")).unwrap();
    assert!(line.ends_with("Hand title (by hand)"), "{shown}");
}

#[test]
fn a_sim_server_on_a_taken_port_fails_with_the_same_line_as_serve() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = foya()
        .args(["sim-server", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(
        foya_tests::child::outcome(&out),
        (
            Some(1),
            String::new(),
            format!(
                "foya: cannot listen on {addr}: the address is already in use (another \
                 process listens on it; choose another --listen, or port 0 for a free one)\n"
            )
        )
    );
    drop(taken);
}

#[test]
fn a_node_on_a_taken_port_fails_with_one_line_before_the_data_dir_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let cookie = tmp.path().join("cookie");
    std::fs::write(&cookie, "secret").unwrap();
    let script = tmp.path().join("script.json");
    std::fs::write(&script, r#"{"responses": [{"text": "hi"}]}"#).unwrap();
    let data = tmp.path().join("data");
    let out = foya()
        .args([
            "node",
            "--provider",
            "scripted",
            "--listen",
            &addr,
            "--cookie-file",
        ])
        .arg(&cookie)
        .arg("--script")
        .arg(&script)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(!data.exists(), "the data dir was created: {out:?}");
    assert_eq!(
        foya_tests::child::outcome(&out),
        (
            Some(1),
            String::new(),
            format!(
                "foya: cannot listen on {addr}: the address is already in use (another \
                 process listens on it; choose another --listen)\n"
            )
        )
    );
    drop(taken);
}

#[test]
fn a_broken_project_config_is_reported_before_the_data_dir_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".foya")).unwrap();
    let config = ws.join(".foya/config.toml");
    std::fs::write(&config, "[hooks\n").unwrap();
    foya_tests::foya_bin::trust_project(&ws);
    let script = tmp.path().join("script.json");
    std::fs::write(&script, r#"{"responses": [{"text": "hi"}]}"#).unwrap();
    let data = tmp.path().join("data");
    let out = foya()
        .args(["run", "--provider", "scripted", "--script"])
        .arg(&script)
        .arg("--cwd")
        .arg(&ws)
        .arg("--data-dir")
        .arg(&data)
        .arg("hello")
        .output()
        .unwrap();
    let (code, stdout, stderr) = foya_tests::child::outcome(&out);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.starts_with(&format!("foya: cannot parse {}", config.display())),
        "{stderr}"
    );
    assert!(!data.exists(), "the data dir was created: {stderr}");
}

#[test]
fn an_empty_foya_data_dir_counts_as_unset_and_a_set_one_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let script = write_script(tmp.path(), &[json!({"text": "an answer"})]);
    let xdg = tmp.path().join("xdg");
    let chosen = tmp.path().join("chosen");
    let foya_with = |value: &Path, args: &[&str]| {
        foya()
            .args(args)
            .env("FOYA_DATA_DIR", value)
            .env("XDG_DATA_HOME", &xdg)
            .output()
            .unwrap()
    };
    let run = ["run", "--provider", "scripted", "--script", &script, "hi"];
    for (value, store) in [
        (Path::new(""), xdg.join("foya/foya.redb")),
        (chosen.as_path(), chosen.join("foya.redb")),
    ] {
        let out = foya_with(value, &run);
        assert_eq!(out.status.code(), Some(0), "{value:?}: {out:?}");
        assert!(store.is_file(), "{value:?}: no {}", store.display());
        let out = foya_with(value, &["sessions", "list", "--json"]);
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8(out.stdout).unwrap().lines().count()
            ),
            (Some(0), 1),
            "{value:?}"
        );
    }
}

/// A provider that cannot be used is a usage error (exit 2) of `run`, `chat` and
/// `serve`, before the data dir is created: an unknown profile (the message lists every
/// name that resolves, the commands' own `scripted` and `sim` included, and the files a
/// profile can be defined in), a built-in profile without its API key, `--seed` without
/// `--provider sim`, `--base-url` with it, and `--script` without `--provider scripted`.
#[test]
fn unusable_providers_exit_2_before_the_data_dir_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    let data = tmp.path().join("data");
    let unknown = format!(
        "foya: unknown provider profile `nope` (define [profiles.nope] in {} or {} or use \
         one of: anthropic, openai, openai-chat, openai-responses, scripted, sim)\n",
        home.join(".config/foya/config.toml").display(),
        ws.join(".foya/config.toml").display()
    );
    let cases: [(&[&str], String); 5] = [
        (&["--provider", "nope"], unknown),
        (
            &["--provider", "sim", "--script", "s.json"],
            "foya: --script is for --provider scripted (its model responses); --provider sim would ignore it\n"
                .to_owned(),
        ),
        (
            &["--provider", "openai"],
            "foya: provider profile `openai` needs an API key: set the environment variable \
             OPENAI_API_KEY (or, with no key, `--provider sim`: the built-in simulated model)\n"
                .to_owned(),
        ),
        (
            &["--provider", "openai", "--seed", "3"],
            "foya: --seed is for --provider sim (the simulated model's random choices)\n"
                .to_owned(),
        ),
        (
            &["--provider", "sim", "--base-url", "http://127.0.0.1:9/v1"],
            "foya: --provider sim runs the simulated model in process and takes no --base-url \
             (for the simulator over HTTP start `foya sim-server` and give its address to \
             --provider openai-chat, anthropic or openai-responses)\n"
                .to_owned(),
        ),
    ];
    for (provider, expected) in cases {
        for command in ["run", "chat", "serve"] {
            let mut child = foya();
            child
                .arg(command)
                .args(provider)
                .arg("--data-dir")
                .arg(&data);
            match command {
                "run" => child.arg("--cwd").arg(&ws).arg("hi"),
                "chat" => child.arg("--cwd").arg(&ws),
                _ => child.args(["--listen", "127.0.0.1:0"]),
            };
            let out = child
                .current_dir(&ws)
                .env("HOME", &home)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            assert_eq!(
                foya_tests::child::outcome(&out),
                (Some(2), String::new(), expected.clone()),
                "{command} {provider:?}"
            );
            assert!(
                !data.exists(),
                "{command} {provider:?} created the data dir"
            );
        }
    }
}

//! `foya run` under pressure, end to end (the real binary against the mock provider
//! speaking OpenAI Chat): a 413 "Request Entity Too Large" compacts once and the turn
//! completes (exit 0); with `--no-auto-compact` (or `[context] auto_compact = false` in
//! the project's config) the same 413 fails the turn as `context_overflow` with a clear
//! reason (exit 1) after one request. `foya run --session ID --model NEW` sends NEW, not
//! the model the session was created with, and records `config_changed`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin;
use foya_tests::mock_provider::{MockProvider, MockResponse, openai_chat};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn too_large() -> MockResponse {
    let html = "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body><center><h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></body></html>\r\n";
    MockResponse {
        status: 413,
        headers: vec![("content-type".into(), "text/html".into())],
        body_chunks: vec![html.as_bytes().to_vec().into()],
        chunk_delay_ms: 0,
        cut_after: None,
    }
}

/// `foya run --json` in `cwd` against `mock` with `extra` flags and a long prompt.
async fn run(mock: &MockProvider, cwd: &Path, data: &Path, extra: &[&str]) -> Output {
    run_with(mock, cwd, data, extra, &vec!["lorem"; 2_000].join(" ")).await
}

async fn run_with(
    mock: &MockProvider,
    cwd: &Path,
    data: &Path,
    extra: &[&str],
    prompt: &str,
) -> Output {
    let mut args: Vec<String> = [
        "run",
        "--provider",
        "openai-chat",
        "--base-url",
        &format!("{}/v1", mock.base_url()),
        "--approval",
        "bypass",
        "--json",
        "--cwd",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(cwd.display().to_string());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    if !extra.contains(&"--model") {
        args.extend(["--model".to_owned(), "m".to_owned()]);
    }
    args.push(prompt.to_owned());
    let data = data.to_owned();
    tokio::task::spawn_blocking(move || {
        Command::new(foya_bin())
            .args(&args)
            .arg("--data-dir")
            .arg(&data)
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            // The test home, where `trust_project` records a trusted project.
            .env("HOME", foya_tests::foya_bin::test_home())
            .env("RUST_LOG", "warn")
            .output()
            .expect("spawn foya")
    })
    .await
    .unwrap()
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("seq").is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_413_compacts_once_and_the_turn_completes() {
    let mock = MockProvider::start().await;
    mock.push(too_large());
    mock.push(MockResponse::sse(openai_chat::text("the summary")));
    mock.push(MockResponse::sse(openai_chat::text("done")));
    let cwd = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = run(&mock, cwd.path(), data.path(), &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let events = events(&out);
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "compaction_started")
        .collect();
    assert_eq!(started.len(), 1, "{events:?}");
    assert_eq!(started[0]["trigger"], "overflow");
    let end = events.last().unwrap();
    assert_eq!(
        (&end["type"], &end["status"]),
        (&"turn_complete".into(), &"completed".into())
    );
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_auto_compaction_off_a_413_fails_the_turn_as_an_overflow() {
    for how in ["flag", "config"] {
        let mock = MockProvider::start().await;
        mock.push(too_large());
        let cwd = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let extra: &[&str] = if how == "flag" {
            &["--no-auto-compact"]
        } else {
            std::fs::create_dir(cwd.path().join(".foya")).unwrap();
            std::fs::write(
                cwd.path().join(".foya/config.toml"),
                "[context]\nauto_compact = false\n",
            )
            .unwrap();
            foya_tests::foya_bin::trust_project(cwd.path());
            &[]
        };
        let out = run(&mock, cwd.path(), data.path(), extra).await;
        assert_eq!(out.status.code(), Some(1), "{how}");
        let events = events(&out);
        assert!(
            !events.iter().any(|e| e["type"] == "compaction_started"),
            "{how}"
        );
        let end = events.last().unwrap();
        assert_eq!(end["type"], "turn_complete");
        assert_eq!(end["status"], "failed");
        assert_eq!(end["error"]["class"], "context_overflow", "{how}: {end}");
        assert!(
            end["error"]["message"]
                .as_str()
                .unwrap()
                .ends_with("(automatic compaction is off; send /compact or start a new session)"),
            "{end}"
        );
        assert_eq!(mock.requests().len(), 1, "{how}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_session_uses_the_model_of_the_command_line() {
    let mock = MockProvider::start().await;
    for text in ["one", "two", "three"] {
        mock.push(MockResponse::sse(openai_chat::text(text)));
    }
    let cwd = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let first = run_with(
        &mock,
        cwd.path(),
        data.path(),
        &["--model", "old-model"],
        "hi",
    )
    .await;
    assert_eq!(first.status.code(), Some(0));
    let session = events(&first)[0]["session_id"].as_str().unwrap().to_owned();
    let resume = ["--session", session.as_str(), "--model", "new-model"];
    let second = run_with(&mock, cwd.path(), data.path(), &resume, "again").await;
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let changed: Vec<Value> = events(&second)
        .into_iter()
        .filter(|e| e["type"] == "config_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(
        (&changed[0]["provider"], &changed[0]["model"]),
        (&"openai-chat".into(), &"new-model".into())
    );
    // The same model again: nothing to record.
    let third = run_with(&mock, cwd.path(), data.path(), &resume, "and again").await;
    assert_eq!(third.status.code(), Some(0));
    assert!(!events(&third).iter().any(|e| e["type"] == "config_changed"));
    let models: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(
        models,
        vec![
            Value::from("old-model"),
            Value::from("new-model"),
            Value::from("new-model")
        ]
    );
}

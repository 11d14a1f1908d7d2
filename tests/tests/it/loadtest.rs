//! End-to-end tests of `foya loadtest`: the real binary (built by escargot) drives
//! sessions against the in-process simulator and writes its JSON report; the tests check
//! the report's keys and counts (never its timings); a latency without samples is
//! reported as such (`null` percentiles, `no samples`), not as 0. A `--sim-config` value
//! its flag refuses (0 steps per turn, an error rate outside 0..=1) is refused too (exit 2).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::process::Command;

/// The debug `foya` binary, built once per test process by the shared harness (which
/// keeps cargo's test variables out of the build, so this build and the other tests'
/// reuse each other's artifacts instead of rebuilding dependencies).
fn foya() -> Command {
    let mut command = Command::new(foya_tests::foya_bin());
    // The test home, where `trust_project` records trust.
    command.env("HOME", foya_tests::foya_bin::test_home());
    command
}

/// Runs `foya loadtest ARGS --json FILE`; returns the exit status and the report.
fn loadtest(args: &[&str]) -> (i32, Value) {
    let (code, report, _) = loadtest_with_text(args);
    (code, report)
}

/// [`loadtest`], also returning the text report (stdout).
fn loadtest_with_text(args: &[&str]) -> (i32, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = foya()
        .arg("loadtest")
        .args(args)
        .arg("--json")
        .arg(&json)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no report ({e}); stdout: {stdout}; stderr: {stderr}"));
    assert!(stdout.starts_with("load test: "), "stdout: {stdout}");
    (
        output.status.code().unwrap(),
        serde_json::from_str(&text).unwrap(),
        stdout.into_owned(),
    )
}

fn assert_ordered(report: &Value, key: &str) {
    let p = &report[key];
    let (p50, p95, p99) = (
        p["p50"].as_f64().unwrap(),
        p["p95"].as_f64().unwrap(),
        p["p99"].as_f64().unwrap(),
    );
    assert!(
        0.0 <= p50 && p50 <= p95 && p95 <= p99,
        "{key} not ordered: {p}"
    );
}

/// Keys every report has, with their JSON types.
fn assert_shape(report: &Value) {
    for key in [
        "sessions",
        "turns_completed",
        "turns_failed",
        "steps",
        "events_persisted",
        "peak_rss_bytes",
        "model_requests",
        "tool_calls",
        "tool_calls_run",
    ] {
        assert!(report[key].is_u64(), "{key}: {}", report[key]);
    }
    for key in [
        "wall_s",
        "cpu_s",
        "turns_per_s",
        "steps_per_s",
        "events_per_s",
    ] {
        assert!(report[key].is_f64(), "{key}: {}", report[key]);
    }
    assert!(report["errors"].is_object());
    assert!(report["retries"].is_object());
    for key in ["overhead_us", "relay_latency_ms", "model_latency_ms"] {
        assert_ordered(report, key);
    }
    assert!(report["peak_rss_bytes"].as_u64().unwrap() > 0);
    // The model client's, the tools' and the load driver's CPU are measured and taken
    // out of the runtime's.
    let cpu = report["cpu_s"].as_f64().unwrap();
    let provider = report["provider_cpu_s"].as_f64().unwrap();
    let tools = report["tool_cpu_s"].as_f64().unwrap();
    // The file tools' work on tokio's blocking pool (`read_file` reads there).
    let blocking = report["tool_blocking_cpu_s"].as_f64().unwrap();
    let driver = report["driver_cpu_s"].as_f64().unwrap();
    // What the meters' own clock reads cost outside what they measured is taken out too.
    let meters = report["meter_overhead_s"].as_f64().unwrap();
    assert!(
        provider > 0.0
            && tools > 0.0
            && blocking > 0.0
            && driver > 0.0
            && meters > 0.0
            && provider + tools + blocking + driver + meters < cpu,
        "{report:#}"
    );
    // The store writer's CPU, measured on its thread: part of the runtime's own.
    let storage = report["storage_cpu_s"].as_f64().unwrap();
    assert!(storage > 0.0 && storage < cpu, "{report:#}");
    let steps = report["steps"].as_f64().unwrap();
    let own = report["runtime_cpu_us_per_step"].as_f64().unwrap();
    let expected = (cpu - provider - tools - blocking - driver - meters) * 1e6 / steps;
    assert!(
        (own - expected).abs() < 1e-6 * expected.max(1.0),
        "{report:#}"
    );
}

/// A running `foya sim-server --listen 127.0.0.1:0 ARGS`, killed on drop (even when an
/// assertion fails).
struct SimServer(std::process::Child);

impl SimServer {
    /// Starts the server; also the address (`127.0.0.1:PORT`) of the URL it printed once
    /// it listens.
    fn start(args: &[&str]) -> (Self, String) {
        use std::io::{BufRead as _, BufReader};
        let mut server = Self(
            foya()
                .args(["sim-server", "--listen", "127.0.0.1:0"])
                .args(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(server.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // The first line is a URL to paste as `--base-url` (`http://127.0.0.1:PORT`).
        let addr = line
            .trim()
            .strip_prefix("http://")
            .expect("the first line is an http:// URL")
            .to_owned();
        assert!(addr.starts_with("127.0.0.1:"), "{line}");
        (server, addr)
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn fifty_sessions_run_two_three_step_turns_each_without_errors() {
    let (code, report) = loadtest(&["--sessions", "50", "--turns", "2"]);
    assert_shape(&report);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["sessions"], 50);
    assert_eq!(report["endpoint"], Value::Null, "in-process: no endpoint");
    assert_eq!(report["turns_completed"], 100);
    assert_eq!(report["turns_failed"], 0);
    assert_eq!(report["turns_interrupted"], 0);
    // 3 steps per turn (the simulator's default), one read_file call in each of the
    // first two.
    assert_eq!(report["steps"], 300);
    assert_eq!(report["tool_calls"], 200);
    assert_eq!(report["model_requests"], 300);
    assert_eq!(report["errors"], serde_json::json!({}));
    assert_eq!(report["retries"], serde_json::json!({}));
    assert_eq!(report["stopped_early"], false);
    // session_created, then per turn at least: user_message, turn_started, 3 ×
    // (step_started, assistant_message), 2 × (tool_started, tool_finished,
    // tool_message), turn_complete.
    assert!(report["events_persisted"].as_u64().unwrap() >= 50 + 100 * 15);
}

#[test]
fn rate_limited_requests_are_retried_and_turns_still_complete() {
    let (code, report) = loadtest(&[
        "--sessions",
        "20",
        "--turns",
        "1",
        "--error-rate-rate-limited",
        "0.2",
        "--retry-after-ms",
        "1",
        "--max-attempts",
        "10",
        "--seed",
        "7",
    ]);
    assert_shape(&report);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["turns_completed"], 20);
    assert_eq!(report["turns_failed"], 0);
    assert_eq!(report["steps"], 60);
    assert_eq!(report["errors"], serde_json::json!({}));
    let retries = report["retries"]["rate_limited"].as_u64().unwrap();
    assert!(retries > 0, "{report:#}");
    assert_eq!(report["retries"].as_object().unwrap().len(), 1);
    // Every retry is one more model request.
    assert_eq!(report["model_requests"].as_u64().unwrap(), 60 + retries);
    assert_eq!(report["error_examples"], serde_json::json!({}));
}

#[test]
fn turns_whose_retries_run_out_fail_with_their_class_and_an_example_message() {
    let (code, report, text) = loadtest_with_text(&[
        "--sessions",
        "4",
        "--turns",
        "1",
        "--error-rate-rate-limited",
        "1",
        "--max-attempts",
        "1",
    ]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        (&report["turns_completed"], &report["turns_failed"]),
        (&0.into(), &4.into())
    );
    assert_eq!(report["errors"], serde_json::json!({"rate_limited": 4}));
    assert_eq!(
        report["error_examples"],
        serde_json::json!({"rate_limited": "rate limit reached (simulated)"})
    );
    // No turn reached a tool call or streamed text: overhead and relay have no samples,
    // said as such (null in the JSON, "no samples" in the text), not as 0.
    let none = serde_json::json!({"p50": null, "p95": null, "p99": null, "samples": 0});
    assert_eq!(
        (&report["overhead_us"], &report["relay_latency_ms"]),
        (&none, &none)
    );
    // The failed requests still have a latency each.
    assert_eq!(report["model_latency_ms"]["samples"], 4);
    assert_ordered(&report, "model_latency_ms");
    let latencies: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("overhead") || l.starts_with("relay"))
        .collect();
    assert_eq!(
        latencies,
        ["overhead   no samples", "relay      no samples"],
        "{text}"
    );
}

#[test]
fn sim_server_prints_its_address_and_serves_the_chat_format() {
    let (server, addr) = SimServer::start(&["--seed", "3"]);
    // Drive one session through the server with the real HTTP client.
    let (code, report) = loadtest(&[
        "--sessions",
        "3",
        "--turns",
        "2",
        "--provider",
        "openai-chat",
        "--base-url",
        &format!("http://{addr}/v1"),
        "--compare-bare",
        "--compare-floor",
    ]);
    drop(server);
    assert_eq!(code, 0, "{report:#}");
    // Where the requests went is in the report (and said on stderr before any was sent).
    assert_eq!(report["endpoint"], format!("http://{addr}/v1"));
    assert_eq!(report["turns_completed"], 6);
    assert_eq!(report["steps"], 18);
    assert_eq!(report["errors"], serde_json::json!({}));
    // The bare pass replayed, for each session's turn k, the three requests session 0
    // sent in its turn k (both turns captured).
    let bare = &report["bare_client"];
    assert_eq!(bare["turns"], 6, "{bare}");
    assert_eq!(bare["captured_turns"], 2, "{bare}");
    assert_eq!(bare["requests_ok"], 18, "{bare}");
    assert_eq!(bare["requests_failed"], 0, "{bare}");
    assert!(bare["bytes"].as_u64().unwrap() > 0);
    assert!(report["cpu_ratio_vs_bare"].as_f64().unwrap() > 0.0);
    // The floor read the same SSE bytes, appended the same events and read the files.
    let floor = &report["floor"];
    assert_eq!(
        (
            &floor["model_requests"],
            &floor["model_requests_failed"],
            &floor["events_appended"],
            &floor["files_read"],
        ),
        (
            &18.into(),
            &0.into(),
            &report["events_persisted"],
            &report["tool_calls_run"],
        ),
        "{floor}"
    );
    assert!(report["cpu_ratio_vs_floor"].as_f64().unwrap() > 0.0);
}

/// A run that `--duration` stops early has no complete workload to replay: the bare pass
/// is skipped, and stderr says so instead of leaving `bare_client` null without a word.
#[test]
fn a_run_stopped_by_its_duration_says_the_bare_comparison_was_skipped() {
    // Every answer waits 30 s for its first token: the 0.3 s duration ends the run first.
    let (server, addr) = SimServer::start(&["--ttft-ms", "30000"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = foya()
        .args(["loadtest", "--sessions", "2", "--duration", "0.3"])
        .args(["--provider", "openai-chat", "--compare-bare", "--base-url"])
        .arg(format!("http://{addr}/v1"))
        .arg("--json")
        .arg(&json)
        .current_dir(dir.path())
        .output()
        .unwrap();
    drop(server);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(
            "foya loadtest: the bare-client comparison (--compare-bare) was skipped: \
             --duration stopped the run before every turn ran\n"
        ),
        "{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["stopped_early"], true, "{report:#}");
    assert_eq!(report["bare_client"], serde_json::Value::Null);
    assert_eq!(report["cpu_ratio_vs_bare"], serde_json::Value::Null);
}

#[test]
fn a_subscriber_buffer_smaller_than_a_burst_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = foya()
        .args(["loadtest", "--sessions", "1", "--subscriber-buffer", "127"])
        .arg("--json")
        .arg(&json)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let expected = "error: invalid value '127' for '--subscriber-buffer <SUBSCRIBER_BUFFER>': \
                    must be at least 128: the runtime sends a model stream's live updates in \
                    batches of up to 128 at once, and a smaller buffer cuts the subscriber \
                    off (every turn fails with `lagged`)\n\nFor more information, try \
                    '--help'.\n";
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap()
        ),
        (Some(2), String::new(), expected.to_owned())
    );
    assert!(!json.exists());
    // The minimum is documented where the flag is.
    let help = foya().args(["loadtest", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.contains("Capacity of each subscriber's channel (events + deltas; at least 128)"),
        "{help}"
    );
}

#[test]
fn sim_config_values_are_refused_as_their_flags_are() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let refused = |args: &[&str]| {
        let out = foya()
            .args(args)
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{args:?}");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let file = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).unwrap();
        name.to_owned()
    };
    let json_arg = format!("--json={}", json.display());
    let loadtest = ["loadtest", "--sessions", "1", &json_arg];
    let sim_server = ["sim-server", "--listen", "127.0.0.1:0"];
    // The flag refuses 0 steps per turn; so does the file, for the same reason.
    let flag = refused(&[&loadtest[..], &["--steps-per-turn", "0"]].concat());
    assert!(
        flag.starts_with(
            "error: invalid value '0' for '--steps-per-turn <STEPS_PER_TURN>': must be at \
             least 1\n"
        ),
        "{flag}"
    );
    let zero_steps = file("zero-steps.toml", "steps_per_turn = 0\n");
    let rate = file("rate.json", r#"{"error_rates": {"stream_cut": 1.5}}"#);
    let speed = file("speed.toml", "tokens_per_s = -1.0\n");
    let args = file("args.toml", "tool_args = \"x\"\n");
    for command in [&loadtest[..], &sim_server[..]] {
        for (config, message) in [
            (
                &zero_steps,
                "invalid value '0' for 'steps_per_turn' in the simulator config \
                 zero-steps.toml: must be at least 1",
            ),
            (
                &rate,
                "invalid value '1.5' for 'error_rates.stream_cut' in the simulator config \
                 rate.json: must be between 0 and 1",
            ),
            (
                &speed,
                "invalid value '-1' for 'tokens_per_s' in the simulator config speed.toml: \
                 must be a finite number >= 0",
            ),
            (
                &args,
                "invalid value '\"x\"' for 'tool_args' in the simulator config args.toml: \
                 must be a JSON object",
            ),
        ] {
            let stderr = refused(&[command, &["--sim-config", config]].concat());
            assert_eq!(stderr, format!("foya: {message}\n"), "{command:?}");
        }
    }
    // A flag's bad value still names the flag.
    let stderr = refused(&[&loadtest[..], &["--error-rate-stream-cut", "1.5"]].concat());
    assert_eq!(
        stderr,
        "foya: --error-rate-stream-cut must be between 0 and 1, got 1.5\n"
    );
    // Tool arguments must be a JSON object, as a flag too.
    let stderr = refused(&[&loadtest[..], &["--tool-args", "[1]"]].concat());
    assert!(
        stderr.starts_with(
            "error: invalid value '[1]' for '--tool-args <JSON>': must be a JSON object\n"
        ),
        "{stderr}"
    );
    assert!(!json.exists());
}

#[test]
fn ctrl_c_during_the_bare_comparison_gives_the_partial_report_and_exit_130() {
    use foya_tests::child::{read_until, spawn_stderr_lines};
    use std::time::{Duration, Instant};
    // A slow server (1 s to the first token) keeps the bare pass running for a while.
    let (server, addr) = SimServer::start(&["--ttft-ms", "1000"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let base_url = format!("http://{addr}/v1");
    let mut command = foya();
    command
        .args(["loadtest", "--sessions", "2", "--turns", "1", "--provider"])
        .args([
            "openai-chat",
            "--base-url",
            &base_url,
            "--compare-bare",
            "--json",
        ])
        .arg(&json)
        .current_dir(dir.path());
    // stderr line by line: the bare pass announces itself there.
    let (mut child, errors) = spawn_stderr_lines(&mut command);
    let deadline = Instant::now() + Duration::from_secs(60);
    read_until(&errors, deadline, |line| {
        line.contains("with a bare client")
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    drop(server);
    assert_eq!(status.code(), Some(130));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (
            &report["stopped_early"],
            &report["turns_completed"],
            &report["bare_client"],
            &report["cpu_ratio_vs_bare"]
        ),
        (&Value::Bool(true), &2.into(), &Value::Null, &Value::Null),
        "{report:#}"
    );
}

/// Every tool call of the turns in `data`'s store, in order per session: for each turn,
/// the `(path argument, result text)` of its calls, and how many `tool_finished` were
/// errors. Panics on a call without exactly one result.
fn logged_calls(data: &std::path::Path) -> (Vec<Vec<(String, String)>>, usize) {
    use foya_protocol::{EventKind, Seq};
    use foya_storage::{Store, StoreOptions};
    use std::collections::HashMap;
    let store = Store::open(&data.join("foya.redb"), StoreOptions::default()).unwrap();
    let mut turns = Vec::new();
    let mut failed = 0;
    for session in store.list_sessions().unwrap() {
        let mut paths = HashMap::new();
        let mut turn: Vec<(String, String)> = Vec::new();
        for event in store.read_from(session.id, Seq::FIRST).unwrap() {
            match event.kind {
                EventKind::TurnStarted { .. } => turn.clear(),
                EventKind::AssistantMessage(message) => {
                    for call in message.tool_calls {
                        let path = call.arguments["path"].as_str().unwrap().to_owned();
                        paths.insert(call.id, path);
                    }
                }
                EventKind::ToolFinished { is_error, .. } => failed += usize::from(is_error),
                EventKind::ToolMessage(result) => {
                    let path = paths.remove(&result.tool_call_id).unwrap();
                    turn.push((path, result.content));
                }
                EventKind::TurnComplete { .. } => turns.push(std::mem::take(&mut turn)),
                _ => {}
            }
        }
        assert!(paths.is_empty(), "calls without a result: {paths:?}");
    }
    (turns, failed)
}

/// Long turns (6 steps) with 2 calls per step: the simulator asks for a different file
/// in each call and the load test's workspace has them all, so run protection lets every
/// call run and every turn completes; the log holds each call's real file content.
#[test]
fn long_turns_with_several_calls_per_step_run_every_call_on_its_own_file() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let (code, report) = loadtest(&[
        "--sessions",
        "4",
        "--turns",
        "2",
        "--steps-per-turn",
        "6",
        "--tool-calls-per-step",
        "2",
        "--seed",
        "5",
        "--data-dir",
        data_dir,
    ]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["turns_completed"], 8, "{report:#}");
    assert_eq!(report["turns_failed"], 0);
    assert_eq!(report["errors"], serde_json::json!({}));
    assert_eq!(report["steps"], 8 * 6);
    assert_eq!(report["tool_calls"], 8 * 5 * 2);
    let (turns, failed) = logged_calls(data.path());
    assert_eq!(failed, 0);
    assert_eq!(turns.len(), 8);
    let expected_paths: Vec<String> = (1..=5)
        .flat_map(|step| (0..2).map(move |call| format!("docs/step-{step}-call-{call}.md")))
        .collect();
    for turn in &turns {
        let paths: Vec<&str> = turn.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(paths, expected_paths);
        for (index, (_, content)) in turn.iter().enumerate() {
            // read_file's numbered lines of the file generated for this call.
            let (step, call) = (index / 2 + 1, index % 2);
            assert!(
                content.starts_with(&format!("     1\t# Step {step}, call {call}: the ")),
                "step {step} call {call}: {content}"
            );
        }
    }
}

/// The same long turns over HTTP: `foya sim-server` gets the load test's arguments with
/// `--tool-args` and the same step and call counts as the load test, whose workspace
/// then has every file the server's calls name.
#[test]
fn long_turns_over_http_run_every_call_when_the_server_asks_for_the_workspace_files() {
    let shape = ["--steps-per-turn", "5", "--tool-calls-per-step", "3"];
    let tool_args = [
        "--tool-args",
        r#"{"path": "docs/step-{step}-call-{call}.md"}"#,
    ];
    let (server, addr) = SimServer::start(&[&shape[..], &tool_args[..]].concat());
    let data = tempfile::tempdir().unwrap();
    let base_url = format!("http://{addr}/v1");
    let (code, report) = loadtest(
        &[
            &[
                "--sessions",
                "3",
                "--turns",
                "1",
                "--provider",
                "openai-chat",
            ][..],
            &[
                "--base-url",
                &base_url,
                "--data-dir",
                data.path().to_str().unwrap(),
            ],
            &shape,
        ]
        .concat(),
    );
    drop(server);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["turns_completed"], 3, "{report:#}");
    assert_eq!(report["errors"], serde_json::json!({}));
    assert_eq!(report["tool_calls"], 3 * 4 * 3);
    let (turns, failed) = logged_calls(data.path());
    assert_eq!((turns.len(), failed), (3, 0));
    for turn in &turns {
        assert_eq!(turn.len(), 12);
        let distinct: std::collections::BTreeSet<&String> = turn.iter().map(|(p, _)| p).collect();
        assert_eq!(distinct.len(), 12);
        assert!(turn.iter().all(|(_, content)| content.contains("# Step ")));
    }
}

/// With the simulator's default arguments the server asks for `README.md` every time:
/// a load test over HTTP with the default shape still runs every call (the workspace has
/// a README), and a tool result that is an error would count under `errors`.
#[test]
fn the_default_server_arguments_read_the_workspace_readme() {
    let (server, addr) = SimServer::start(&[]);
    let data = tempfile::tempdir().unwrap();
    let base_url = format!("http://{addr}/v1");
    let data_dir = data.path().to_str().unwrap();
    let (code, report) = loadtest(&[
        "--sessions",
        "2",
        "--turns",
        "1",
        "--provider",
        "openai-chat",
        "--base-url",
        &base_url,
        "--data-dir",
        data_dir,
    ]);
    drop(server);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["tool_calls"], 4);
    let (turns, failed) = logged_calls(data.path());
    assert_eq!(failed, 0);
    for turn in &turns {
        let paths: Vec<&str> = turn.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["README.md", "README.md"]);
        assert!(turn[0].1.contains("# Load-test workspace"), "{}", turn[0].1);
    }
}

/// A simulator that asks for a file the workspace lacks (outside it: the load test writes
/// only the files inside it that the calls name): the failed calls are counted as
/// `tool_error` (with an example) and the exit status is 1.
#[test]
fn tool_results_that_are_errors_count_under_errors() {
    let (code, report) = loadtest(&[
        "--sessions",
        "1",
        "--turns",
        "1",
        "--tool-args",
        r#"{"path": "../missing-{step}.md"}"#,
    ]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["turns_completed"], 1);
    assert_eq!(report["errors"], serde_json::json!({"tool_error": 2}));
    let example = report["error_examples"]["tool_error"].as_str().unwrap();
    assert!(example.contains("missing-1.md"), "{example}");
}

/// Calls refused before running (arguments the tool's schema rejects) still count as
/// tool calls the model asked for; `tool_calls_run` counts only the calls that ran.
#[test]
fn tool_calls_refused_before_running_count_as_asked_for_but_not_as_run() {
    let (code, report) = loadtest(&[
        "--sessions",
        "1",
        "--turns",
        "1",
        "--tool-args",
        r#"{"nope": "{step}"}"#,
    ]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        (
            &report["steps"],
            &report["model_requests"],
            &report["tool_calls"],
            &report["tool_calls_run"],
            &report["turns_completed"],
            &report["errors"],
        ),
        (
            &serde_json::json!(3),
            &serde_json::json!(3),
            &serde_json::json!(2),
            &serde_json::json!(0),
            &serde_json::json!(1),
            &serde_json::json!({"tool_error": 2}),
        ),
        "{report:#}"
    );
}

#[test]
fn explicit_tool_args_are_kept_even_when_they_equal_the_simulators_default() {
    // The same call in every step: the third is blocked and the fourth ends the turn.
    let (code, report) = loadtest(&[
        "--sessions",
        "1",
        "--steps-per-turn",
        "5",
        "--tool-args",
        r#"{"path": "README.md"}"#,
    ]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        (
            report["turns_completed"].as_u64(),
            report["turns_failed"].as_u64()
        ),
        (Some(0), Some(1)),
        "{report}"
    );
    assert_eq!(report["errors"]["loop_detected"], 1, "{report}");
}

#[test]
fn an_unknown_provider_names_sim_and_scripted_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let run = |provider: &str| {
        let out = foya()
            .args(["loadtest", "--sessions", "1", "--provider", provider])
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run("nope");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("use one of: anthropic, openai, openai-chat, openai-responses, sim"),
        "{stderr}"
    );
    let (code, stderr) = run("scripted");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("--provider scripted is for `foya run`, `chat` and `serve`"),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_the_run_with_a_partial_report_and_says_the_bare_comparison_was_skipped() {
    use foya_tests::child::{read_until, spawn_stderr_lines};
    use std::time::{Duration, Instant};
    // A slow server (1 s to the first token, three requests per turn) keeps the run going.
    let (server, addr) = SimServer::start(&["--ttft-ms", "1000"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let base_url = format!("http://{addr}/v1");
    let mut command = foya();
    command
        .args(["loadtest", "--sessions", "2", "--turns", "1", "--provider"])
        .args(["openai-chat", "--base-url", &base_url, "--compare-bare"])
        .arg("--json")
        .arg(&json)
        .current_dir(dir.path());
    let (mut child, lines) = spawn_stderr_lines(&mut command);
    let deadline = Instant::now() + Duration::from_secs(60);
    read_until(&lines, deadline, |line| {
        line.contains("sending requests to")
    });
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    // The reader thread ends with stderr: every remaining line is there.
    let rest: Vec<String> = lines.iter().collect();
    drop(server);
    assert_eq!(status.code(), Some(143), "{rest:?}");
    assert!(
        rest.iter().any(|l| l
            == "foya loadtest: the bare-client comparison (--compare-bare) was skipped: SIGTERM stopped the run"),
        "{rest:?}"
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        (&report["stopped_early"], &report["bare_client"]),
        (&Value::Bool(true), &Value::Null),
        "{report:#}"
    );
}

#[test]
fn a_turn_of_more_tool_calls_than_the_workspace_supports_is_refused_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = foya()
        .args(["loadtest", "--sessions", "1", "--steps-per-turn", "100001"])
        .args(["--tool-calls-per-step", "1000"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .contains("a turn of 100000000 tool calls is more than the load test supports (10000)"),
        "{stderr}"
    );
}

/// `foya run` whose reader falls behind a long burst of deltas (here: stdout not read at
/// all until the turn has ended, so the session drops the subscriber with a `lagged`
/// notice) resumes from the store and prints the whole answer, instead of reporting the
/// session closed and cancelling the turn. The project's stop hook announces the end of
/// the turn on a FIFO the test reads: it runs once the final answer's every delta was
/// published.
#[test]
fn run_resumes_after_falling_behind_and_prints_the_whole_answer() {
    use std::io::Read as _;
    use std::time::Duration;
    const TOKENS: usize = 200_000;
    let (server, addr) = SimServer::start(&[
        "--response-tokens",
        &TOKENS.to_string(),
        "--steps-per-turn",
        "1",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let ended = dir.path().join("turn-ended");
    assert!(
        Command::new("mkfifo")
            .arg(&ended)
            .status()
            .unwrap()
            .success()
    );
    std::fs::create_dir_all(ws.join(".foya")).unwrap();
    std::fs::write(
        ws.join(".foya/config.toml"),
        format!("[hooks]\nstop = [\"echo ended > '{}'\"]\n", ended.display()),
    )
    .unwrap();
    foya_tests::foya_bin::trust_project(&ws);
    // Opening a FIFO for reading waits for its writer: the hook.
    let (tx, turn_ended) = std::sync::mpsc::channel();
    let fifo = ended.clone();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(fifo));
    });
    let mut child = foya()
        .args(["run", "--provider", "openai-chat", "--base-url"])
        .arg(format!("http://{addr}/v1"))
        .args(["--model", "sim-1", "--approval", "bypass", "--cwd"])
        .arg(&ws)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("hi")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads stdout until the turn has ended: the 800 KB answer fills the pipe and
    // the renderer blocks while the session keeps publishing.
    let said = turn_ended
        .recv_timeout(Duration::from_secs(120))
        .expect("the turn never ended");
    assert_eq!(said.unwrap(), "ended\n");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        out
    });
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    let out = reader.join().unwrap();
    drop(server);
    assert_eq!(status.code(), Some(0), "{stderr}");
    // Every token is one 4-character word, and the answer ends with a newline.
    assert_eq!(out.len(), TOKENS * 4 + 1, "{stderr}");
}

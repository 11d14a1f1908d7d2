//! End-to-end tests of `foya loadtest` running real tools: `--approval MODE` (default
//! `read-only`), a `shell` call that really runs its command, `--durability` named in
//! the report, the `--scenario` file that describes the peer comparison turn (one shell
//! call, then a final answer), and the stderr line for turns whose tool calls were all
//! refused. The real binary, a real store and real child processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::path::Path;

/// What one `foya loadtest` run gave.
struct Run {
    code: i32,
    report: Value,
    stdout: String,
    stderr: String,
}

/// Runs `foya loadtest ARGS --json FILE` in `dir`.
fn loadtest(dir: &Path, args: &[&str]) -> Run {
    let json = dir.join("report.json");
    let output = foya_tests::foya_bin::foya()
        .arg("loadtest")
        .args(args)
        .arg("--json")
        .arg(&json)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no report ({e}); stdout: {stdout}; stderr: {stderr}"));
    Run {
        code: output.status.code().unwrap(),
        report: serde_json::from_str(&text).unwrap(),
        stdout,
        stderr,
    }
}

/// The peer comparison turn as a scenario file: one `shell` call appending a line to
/// `marker` (outside the workspace: only `bypass` lets it write there), then the answer.
fn shell_scenario(dir: &Path, name: &str, marker: &Path) -> String {
    let command = format!("echo ran >> {}", marker.display());
    let path = dir.join(name);
    let text = if name.ends_with(".json") {
        serde_json::json!({
            "approval": "bypass",
            "durability": "immediate",
            "sim": {
                "steps_per_turn": 2,
                "tool_calls_per_step": 1,
                "tool_name": "shell",
                "tool_args": {"command": command},
            }
        })
        .to_string()
    } else {
        format!(
            "approval = \"bypass\"\ndurability = \"immediate\"\n[sim]\nsteps_per_turn = 2\n\
             tool_calls_per_step = 1\ntool_name = \"shell\"\n\
             tool_args = {{ command = {command:?} }}\n"
        )
    };
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn a_scenario_runs_one_real_shell_call_per_turn_under_bypass_and_immediate_durability() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker.txt");
    let scenario = shell_scenario(dir.path(), "peer.toml", &marker);
    let run = loadtest(
        dir.path(),
        &["--sessions", "3", "--turns", "2", "--scenario", &scenario],
    );
    let report = &run.report;
    assert_eq!(run.code, 0, "{report:#}\n{}", run.stderr);
    assert_eq!(
        (
            &report["approval"],
            &report["durability"],
            &report["turns_completed"],
            &report["steps"],
            &report["tool_calls"],
            &report["tool_calls_run"],
            &report["turns_tools_refused"],
            &report["errors"],
        ),
        (
            &"bypass".into(),
            &"immediate".into(),
            &6.into(),
            &12.into(),
            &6.into(),
            &6.into(),
            &0.into(),
            &serde_json::json!({}),
        ),
        "{report:#}"
    );
    // Each call really ran its command: one line per turn.
    assert_eq!(lines(&marker), 6);
    assert!(
        report["children_cpu_s"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    let with_children = report["cpu_us_per_turn_with_children"].as_f64().unwrap();
    assert!(with_children >= report["cpu_us_per_turn"].as_f64().unwrap());
    assert!(
        run.stdout.starts_with(
            "load test: 3 sessions x 2 turns, provider sim, durability immediate, approval bypass\n"
        ),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("child processes "), "{}", run.stdout);
    assert!(!run.stderr.contains("ran none"), "{}", run.stderr);
}

#[test]
fn a_json_scenario_is_overridden_by_a_flag_and_read_only_refuses_the_shell_call_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker.txt");
    let scenario = shell_scenario(dir.path(), "peer.json", &marker);
    let run = loadtest(
        dir.path(),
        &[
            "--sessions",
            "2",
            "--scenario",
            &scenario,
            "--approval",
            "read-only",
            "--durability",
            "none",
        ],
    );
    let report = &run.report;
    assert_eq!(run.code, 1, "{report:#}");
    assert_eq!(
        (
            &report["approval"],
            &report["durability"],
            &report["tool_calls"],
            &report["tool_calls_run"],
            &report["turns_tools_refused"],
        ),
        (
            &"read-only".into(),
            &"none".into(),
            &2.into(),
            &0.into(),
            &2.into()
        ),
        "{report:#}"
    );
    assert_eq!(lines(&marker), 0, "a refused command must not run");
    assert!(
        run.stderr.contains(
            "foya loadtest: 2 turns of 2 ran none of the tool calls the model asked for, every one refused (first: "
        ) && run
            .stderr
            .contains("--approval read-only refuses exec and write tools: use --approval auto or bypass"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_default_stays_read_only_and_ask_mode_denies_calls_needing_approval_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker.txt");
    let args = format!(r#"{{"command": "echo ran >> {}"}}"#, marker.display());
    let shell = [
        "--sessions",
        "1",
        "--steps-per-turn",
        "2",
        "--tool-name",
        "shell",
        "--tool-args",
        &args,
    ];
    let default = loadtest(dir.path(), &shell);
    assert_eq!(default.report["approval"], "read-only");
    assert_eq!(
        default.report["turns_tools_refused"], 1,
        "{:#}",
        default.report
    );
    let ask = loadtest(dir.path(), &[&shell[..], &["--approval", "ask"]].concat());
    assert_eq!(ask.code, 1, "{:#}", ask.report);
    assert_eq!(ask.report["turns_completed"], 1, "{:#}", ask.report);
    assert_eq!(ask.report["turns_tools_refused"], 1, "{:#}", ask.report);
    let example = ask.report["error_examples"]["tool_error"].as_str().unwrap();
    assert!(example.contains("no approver is attached"), "{example}");
    assert!(
        ask.stderr.contains("--approval ask refuses"),
        "{}",
        ask.stderr
    );
    assert_eq!(lines(&marker), 0);
}

#[test]
fn auto_mode_runs_the_shell_call_in_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let run = loadtest(
        dir.path(),
        &[
            "--sessions",
            "2",
            "--approval",
            "auto",
            "--steps-per-turn",
            "2",
            "--tool-name",
            "shell",
            "--tool-args",
            r#"{"command": "cat README.md > /dev/null"}"#,
        ],
    );
    assert_eq!(run.code, 0, "{:#}\n{}", run.report, run.stderr);
    assert_eq!(run.report["tool_calls_run"], 2, "{:#}", run.report);
    assert_eq!(run.report["approval"], "auto");
}

#[test]
fn a_scenario_and_a_sim_config_together_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker.txt");
    let scenario = shell_scenario(dir.path(), "peer.toml", &marker);
    let output = foya_tests::foya_bin::foya()
        .args([
            "loadtest",
            "--scenario",
            &scenario,
            "--sim-config",
            &scenario,
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// `--compare-floor` runs the turns' work again with no runtime around it: every shell
/// call's command once more through the sandbox helper (the marker gets a second line
/// per call), the same events appended to its own store.
#[test]
fn the_floor_runs_every_shell_call_again_and_appends_the_same_events() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker.txt");
    let scenario = shell_scenario(dir.path(), "peer.toml", &marker);
    let run = loadtest(
        dir.path(),
        &[
            "--sessions",
            "3",
            "--turns",
            "2",
            "--scenario",
            &scenario,
            "--compare-floor",
        ],
    );
    let report = &run.report;
    assert_eq!(run.code, 0, "{report:#}\n{}", run.stderr);
    assert_eq!(report["tool_calls_run"], 6, "{report:#}");
    // 6 lines from the runtime's calls, 6 from the floor's.
    assert_eq!(lines(&marker), 12);
    let floor = &report["floor"];
    assert_eq!(
        (
            &floor["turns"],
            &floor["processes"],
            &floor["tool_calls_failed"],
            &floor["events_appended"],
            &floor["appends"],
            &floor["model_requests"],
        ),
        (
            &6.into(),
            &6.into(),
            &0.into(),
            &report["events_persisted"],
            &report["appends"],
            &report["model_requests"],
        ),
        "{report:#}"
    );
    assert!(
        floor["children_cpu_s"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    assert!(
        report["cpu_ratio_vs_floor"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    assert!(run.stdout.contains("\nfloor      "), "{}", run.stdout);
}

/// Seconds of CPU that bash's `times` lines report (`0m0.081s 0m0.004s`, one line for
/// the shell, one for its children), summed.
fn seconds_reported(lines: &[&str]) -> f64 {
    lines
        .iter()
        .flat_map(|line| line.split_whitespace())
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum()
}

/// A `shell` call's command is a child of the persistent sandbox helper, not of `foya`,
/// so `getrusage(RUSAGE_CHILDREN)` alone misses it while the helper runs: both sides'
/// `children_cpu_s` must still hold at least the CPU each command reports for itself
/// (`times`, after a busy loop), and the server's pid (the command's grandparent) must
/// be gone once `foya loadtest` exited.
#[test]
fn the_children_cpu_counts_the_commands_the_persistent_helper_ran() {
    let dir = tempfile::tempdir().unwrap();
    let times = dir.path().join("times.txt");
    let servers = dir.path().join("servers.txt");
    let command = format!(
        "read -r _ _ _ gp _ < /proc/$PPID/stat; echo $gp >> {servers}; \
         i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; times >> {times}",
        servers = servers.display(),
        times = times.display()
    );
    let scenario = dir.path().join("burn.json");
    let text = serde_json::json!({
        "approval": "bypass",
        "sim": {
            "steps_per_turn": 2,
            "tool_calls_per_step": 1,
            "tool_name": "shell",
            "tool_args": {"command": command},
        }
    });
    std::fs::write(&scenario, text.to_string()).unwrap();
    let run = loadtest(
        dir.path(),
        &[
            "--sessions",
            "2",
            "--scenario",
            scenario.to_str().unwrap(),
            "--compare-floor",
        ],
    );
    let report = &run.report;
    assert_eq!(run.code, 0, "{report:#}\n{}", run.stderr);
    assert_eq!(report["tool_calls_run"], 2, "{report:#}");
    let text = std::fs::read_to_string(&times).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Two lines per call: the runtime's two calls, then the floor's two.
    assert_eq!(lines.len(), 8, "{text}");
    let (runtime, floor) = (seconds_reported(&lines[..4]), seconds_reported(&lines[4..]));
    assert!(runtime > 0.0 && floor > 0.0, "{text}");
    let children = report["children_cpu_s"].as_f64().unwrap();
    assert!(
        children >= runtime,
        "children_cpu_s {children} < the commands' own {runtime}:\n{report:#}"
    );
    let floor_children = report["floor"]["children_cpu_s"].as_f64().unwrap();
    assert!(
        floor_children >= floor,
        "floor children_cpu_s {floor_children} < the commands' own {floor}:\n{report:#}"
    );
    // Each call ran in a child of a persistent helper (one for the runtime, one for
    // the floor), and neither outlived `foya loadtest`.
    let text = std::fs::read_to_string(&servers).unwrap();
    let mut pids: Vec<i32> = text.lines().map(|l| l.parse().unwrap()).collect();
    pids.dedup();
    assert_eq!(pids.len(), 2, "{text}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    assert!(
        foya_tests::procs::wait_exited(&pids, deadline),
        "a persistent helper outlived foya loadtest: {pids:?}"
    );
}

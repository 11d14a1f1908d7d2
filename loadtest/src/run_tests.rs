//! A whole load test in process (the simulator, a real store in a temporary directory,
//! real tools), read back from its `--json` report: the store writer's CPU is measured
//! and reported on its own (`storage_cpu_s`) without being taken out of the runtime's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use clap::Parser as _;

/// `foya loadtest`'s arguments alone.
#[derive(clap::Parser)]
struct Loadtest {
    #[command(flatten)]
    args: super::LoadtestArgs,
}

#[test]
fn good_values_parse() {
    let dir = tempfile::tempdir().unwrap();
    let ok = format!("--json={}", dir.path().join("report.json").display());
    let argv = [
        "foya",
        "--duration",
        "0.5",
        "--turns",
        "2",
        "--sessions",
        "3",
        "--concurrency",
        "1",
        &ok,
        "--base-url",
        "http://127.0.0.1:8000/v1",
    ];
    let args = Loadtest::try_parse_from(argv).unwrap().args;
    assert_eq!(
        (args.duration, args.turns, args.sessions, args.concurrency),
        (Some(std::time::Duration::from_millis(500)), 2, 3, Some(1))
    );
}

/// Runs an in-process load test of 4 sessions × 2 turns with `extra` flags; it must
/// exit 0. Its JSON report.
async fn json_report(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let json_arg = json.to_str().unwrap().to_owned();
    let mut argv = vec![
        "foya",
        "--sessions",
        "4",
        "--turns",
        "2",
        "--json",
        &json_arg,
    ];
    argv.extend_from_slice(extra);
    let args = Loadtest::try_parse_from(argv).unwrap().args;
    let ended = super::loadtest_inner(args).await.unwrap();
    assert_eq!(ended, Ok(()));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_report_gives_the_store_writers_cpu() {
    let report = json_report(&[]).await;
    assert_eq!(
        (
            &report["turns_completed"],
            &report["steps"],
            &report["errors"]
        ),
        (&8.into(), &24.into(), &serde_json::json!({})),
        "{report:#}"
    );
    let storage = report["storage_cpu_s"].as_f64().unwrap();
    let cpu = report["cpu_s"].as_f64().unwrap();
    assert!(storage > 0.0 && storage < cpu, "{report:#}");
    // Persistence is the runtime's own work: not subtracted from its CPU per step.
    let minus = [
        "provider_cpu_s",
        "tool_cpu_s",
        "tool_blocking_cpu_s",
        "driver_cpu_s",
        "meter_overhead_s",
    ]
    .iter()
    .map(|key| report[key].as_f64().unwrap())
    .sum::<f64>();
    let own = report["runtime_cpu_us_per_step"].as_f64().unwrap();
    let expected = (cpu - minus).max(0.0) * 1e6 / 24.0;
    assert!(
        (own - expected).abs() < 1e-6 * expected.max(1.0),
        "{report:#}"
    );
}

/// `--compare-floor` in process: the floor made the same appends of the same events,
/// read the same files and the same number of model streams as the runtime's turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_floor_appends_the_same_events_and_reads_the_same_files() {
    let report = json_report(&["--concurrency", "2", "--compare-floor"]).await;
    let floor = &report["floor"];
    let pairs = [
        ("events_appended", "events_persisted"),
        ("appends", "appends"),
        ("files_read", "tool_calls_run"),
        ("model_requests", "model_requests"),
        ("turns", "turns_completed"),
    ];
    for (floor_key, runtime_key) in pairs {
        assert_eq!(
            floor[floor_key], report[runtime_key],
            "{floor_key}: {report:#}"
        );
    }
    // 4 sessions × 2 turns, each: 3 steps, 2 read_file calls.
    assert_eq!(
        (&report["model_requests"], &report["tool_calls_run"]),
        (&24.into(), &16.into()),
        "{report:#}"
    );
    assert_eq!(
        (
            &floor["model_requests_failed"],
            &floor["tool_calls_failed"],
            &floor["tool_calls_skipped"],
            &floor["processes"]
        ),
        (&0.into(), &0.into(), &0.into(), &0.into()),
        "{report:#}"
    );
    assert!(
        floor["cpu_us_per_turn"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    let ratio = report["cpu_ratio_vs_floor"].as_f64().unwrap();
    let expected = report["cpu_us_per_turn_with_children"].as_f64().unwrap()
        / floor["cpu_us_per_turn"].as_f64().unwrap();
    assert!((ratio - expected).abs() < 1e-9 * expected, "{report:#}");
}

//! The load-test report: percentiles, process resources (`/proc/self/status`,
//! `getrusage`), the human-readable table and the JSON form.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// p50/p95/p99 of a sample (nearest rank) and its size. An empty sample has no
/// percentiles: `None`, `null` in the JSON report (`{"p50": null, "p95": null, "p99":
/// null, "samples": 0}`), `no samples` in the text report — never a made-up 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Percentiles {
    pub(crate) p50: Option<f64>,
    pub(crate) p95: Option<f64>,
    pub(crate) p99: Option<f64>,
    /// How many values the sample had.
    pub(crate) samples: u64,
}

impl Percentiles {
    /// Percentiles of `values` (sorted in place).
    pub(crate) fn of(values: &mut [f64]) -> Self {
        values.sort_by(f64::total_cmp);
        let rank = |q: f64| -> Option<f64> {
            let n = values.len();
            // Nearest rank: the smallest value with at least q of the sample at or below it.
            let idx = ((q * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
            values.get(idx).copied()
        };
        Self {
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            samples: values.len() as u64,
        }
    }

    /// The percentiles `quantile` gives (`None`: no value) of a sample of `samples`
    /// values (a histogram's estimates).
    pub(crate) fn from_quantiles(samples: u64, quantile: impl Fn(f64) -> Option<f64>) -> Self {
        Self {
            p50: quantile(0.50),
            p95: quantile(0.95),
            p99: quantile(0.99),
            samples,
        }
    }

    /// Every percentile multiplied by `factor` (a unit change: `1e-3` for µs → ms).
    pub(crate) fn scaled(self, factor: f64) -> Self {
        let scale = |x: Option<f64>| x.map(|x| x * factor);
        Self {
            p50: scale(self.p50),
            p95: scale(self.p95),
            p99: scale(self.p99),
            samples: self.samples,
        }
    }

    /// `p50 1.000 ms  p95 2.000 ms  p99 3.000 ms`, or `no samples` for an empty sample.
    pub(crate) fn to_text(self, unit: &str) -> String {
        match (self.p50, self.p95, self.p99) {
            (Some(p50), Some(p95), Some(p99)) => {
                format!("p50 {p50:.3} {unit}  p95 {p95:.3} {unit}  p99 {p99:.3} {unit}")
            }
            _ => "no samples".to_owned(),
        }
    }
}

/// Everything the load test measured. Serialised as the `--json` report.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Report {
    /// Provider driven (`sim` or a profile name).
    pub(crate) provider: String,
    /// Store durability (`none` or `immediate`).
    pub(crate) durability: String,
    /// The sessions' approval mode (`read-only`, `ask`, `auto-edit`, `auto`, `bypass`).
    pub(crate) approval: String,
    /// Sessions driven.
    pub(crate) sessions: usize,
    /// Turns asked of each session.
    pub(crate) turns_per_session: u32,
    /// Turns that ended `completed`.
    pub(crate) turns_completed: u64,
    /// Turns that ended `failed` or `cancelled`.
    pub(crate) turns_failed: u64,
    /// Turns left unfinished because the run was stopped (Ctrl-C, `--duration`).
    pub(crate) turns_interrupted: u64,
    /// Steps started (`step_started` events).
    pub(crate) steps: u64,
    /// Tool calls the model asked for (the calls of every `assistant_message`), those
    /// refused before running (bad arguments, unknown tool, denied, blocked) included.
    pub(crate) tool_calls: u64,
    /// Tool calls that ran (`tool_finished` events).
    pub(crate) tool_calls_run: u64,
    /// Turns that asked for tool calls and ran none of them (every call refused:
    /// `read-only` mode, a denied approval, bad arguments, run protection).
    pub(crate) turns_tools_refused: u64,
    /// Mean wall time of a tool call that ran (`tool_finished.duration_ms`), in
    /// milliseconds: the cost of a call as the model waits for it (an MCP tool's
    /// round trip to its server included).
    pub(crate) tool_ms_per_call: Option<f64>,
    /// Model requests sent (retries included).
    pub(crate) model_requests: u64,
    /// Events committed to the store during the run.
    pub(crate) events_persisted: u64,
    /// Store write transactions committed during the run (group commit: one holds the
    /// appends of every session that were queued together).
    pub(crate) commits: u64,
    /// Live deltas received by the subscribers.
    pub(crate) deltas_received: u64,
    /// Wall time of the run, in seconds (session creation included).
    pub(crate) wall_s: f64,
    /// CPU time of the whole process during the run (user + system), in seconds.
    pub(crate) cpu_s: f64,
    /// `cpu_s` per step, in microseconds; `None` (JSON `null`, text `n/a`) when no step
    /// ran, never a made-up 0.
    pub(crate) cpu_us_per_step: Option<f64>,
    /// `cpu_s` per completed turn, in microseconds; `None` when no turn completed.
    pub(crate) cpu_us_per_turn: Option<f64>,
    /// CPU time of the child processes during the run (user + system, in seconds):
    /// `getrusage(RUSAGE_CHILDREN)` (those ended and waited for) plus the persistent
    /// sandbox helper's own and its reaped calls' (each call's helper and the command it
    /// ran), see `cpu::children_cpu_time`.
    pub(crate) children_cpu_s: f64,
    /// `cpu_s` plus `children_cpu_s` per completed turn, in microseconds: a turn's whole
    /// CPU with its tools' processes; `None` when no turn completed.
    pub(crate) cpu_us_per_turn_with_children: Option<f64>,
    /// CPU time spent inside the model client (its `stream()` calls and stream polls;
    /// the in-process simulator, or the HTTP client's decoding), in seconds.
    pub(crate) provider_cpu_s: f64,
    /// CPU time spent inside tool calls (the tools' own work), in seconds.
    pub(crate) tool_cpu_s: f64,
    /// CPU time of tokio's blocking-pool threads during the run, in seconds: the file
    /// tools' file-system work, which they run there (`spawn_blocking`) out of the
    /// tool meter's sight (`loadtest/pool.rs`).
    pub(crate) tool_blocking_cpu_s: f64,
    /// CPU time the load driver spent handling the updates its subscribers received
    /// (counting, relay timing): the load generator's work, in seconds. Receiving them
    /// (the subscription's channel) stays the runtime's.
    pub(crate) driver_cpu_s: f64,
    /// CPU time the three meters above cost outside what they measured (their clock
    /// reads: the number of measurements times the calibrated cost of one), in seconds.
    pub(crate) meter_overhead_s: f64,
    /// The runtime's own CPU per step: `cpu_s` minus `provider_cpu_s`, `tool_cpu_s`,
    /// `tool_blocking_cpu_s`,
    /// `driver_cpu_s` and `meter_overhead_s`, per step, in microseconds (session
    /// creation, subscriptions and event delivery included); `None` when no step ran.
    pub(crate) runtime_cpu_us_per_step: Option<f64>,
    /// CPU time of the store's writer thread during the run (validating and committing
    /// the appends: redb's btree work, checksums and, with `--durability immediate`,
    /// the fsync calls' CPU), in seconds, read from the thread's own CPU clock after
    /// each commit (`Store::writer_cpu`). Persistence is the runtime's own work: this
    /// is a part of `runtime_cpu_us_per_step`, reported on its own, not subtracted.
    pub(crate) storage_cpu_s: f64,
    /// The bare-client pass (`--compare-bare`), when it ran.
    pub(crate) bare_client: Option<super::bare::BareReport>,
    /// `cpu_us_per_turn` divided by the bare client's CPU per turn (`--compare-bare`).
    pub(crate) cpu_ratio_vs_bare: Option<f64>,
    /// Appends the runtime made (one per commit group of a session; group commit joins
    /// many in one of `commits`).
    pub(crate) appends: u64,
    /// The floor pass (`--compare-floor`), when it ran.
    pub(crate) floor: Option<super::floor::FloorReport>,
    /// `cpu_us_per_turn_with_children` divided by the floor's CPU per turn (children
    /// included on both sides; `--compare-floor`).
    pub(crate) cpu_ratio_vs_floor: Option<f64>,
    /// Completed turns per wall second.
    pub(crate) turns_per_s: f64,
    /// Steps per wall second.
    pub(crate) steps_per_s: f64,
    /// Persisted events per wall second.
    pub(crate) events_per_s: f64,
    /// Peak resident set size of the process (`VmHWM`), in bytes.
    pub(crate) peak_rss_bytes: u64,
    /// Model request latency (first byte asked to last event), in milliseconds.
    pub(crate) model_latency_ms: Percentiles,
    /// Runtime overhead between a response's last event and the next request of the
    /// same turn, tool time excluded, in microseconds.
    pub(crate) overhead_us: Percentiles,
    /// From a text chunk leaving the model client to its `TextDelta` reaching the
    /// subscriber, in milliseconds.
    pub(crate) relay_latency_ms: Percentiles,
    /// Failures by class (turn failures by error class, plus `lagged`,
    /// `create_session`, `submit`, `subscription_closed`).
    pub(crate) errors: BTreeMap<String, u64>,
    /// One message per error class in `errors` that had one (the first a session saw).
    pub(crate) error_examples: BTreeMap<String, String>,
    /// Retried model requests by error class (`provider_retry` events).
    pub(crate) retries: BTreeMap<String, u64>,
    /// The base URL requests went to (HTTP providers; `None` for the in-process `sim`).
    pub(crate) endpoint: Option<String>,
    /// The shared store the events went to (`--store`, its URL without a password;
    /// `None`: a redb file).
    pub(crate) store: Option<String>,
    /// Append latency as the runtime saw it (an append's call to its acknowledgement:
    /// queueing, the group commit and, with `--durability immediate`, the flush), in
    /// milliseconds; each value within 6 % (the store's histogram buckets).
    pub(crate) append_latency_ms: Percentiles,
    /// Whether the run was stopped before every turn ran.
    pub(crate) stopped_early: bool,
}

/// `class=count` pairs of a report's count by class (`errors`, `retries`), or `none`.
pub(crate) fn classes(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        "none".to_owned()
    } else {
        counts
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Adds a session's counts by class to the report's.
pub(crate) fn add_counts(into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>) {
    for (class, n) in from {
        *into.entry(class).or_default() += n;
    }
}

/// Adds a session's error examples to the report's: a class keeps the first it got.
pub(crate) fn add_examples(into: &mut BTreeMap<String, String>, from: BTreeMap<String, String>) {
    for (class, message) in from {
        into.entry(class).or_insert(message);
    }
}

/// `n` per second of `wall_s` (0 for no wall time).
pub(crate) fn per_second(n: u64, wall_s: f64) -> f64 {
    if wall_s > 0.0 { n as f64 / wall_s } else { 0.0 }
}

/// The end of a text report's first line: whether the run was stopped early.
pub(crate) fn stopped_note(stopped_early: bool) -> &'static str {
    if stopped_early {
        " (stopped early: partial report)"
    } else {
        ""
    }
}

/// The text report's `turns` line.
pub(crate) fn turns_line(completed: u64, failed: u64, interrupted: u64) -> String {
    format!("turns      completed {completed}  failed {failed}  interrupted {interrupted}")
}

/// The text report's `errors` line and one line per example.
pub(crate) fn error_lines(
    errors: &BTreeMap<String, u64>,
    examples: &BTreeMap<String, String>,
) -> String {
    let mut out = format!("errors     {}\n", classes(errors));
    for (class, message) in examples {
        out.push_str(&format!("           {class}: {message}\n"));
    }
    out
}

/// A per-step or per-turn figure for the text report with its unit (`827.4 us/step`), or
/// `n/a per step` when there was nothing to divide by (JSON `null`).
fn per_unit(value: Option<f64>, per: &str) -> String {
    value.map_or_else(|| format!("n/a per {per}"), |v| format!("{v:.1} us/{per}"))
}

impl Report {
    /// Fills the rates from the counters and the wall/CPU time.
    pub(crate) fn finish(&mut self, wall: Duration, cpu: Duration) {
        self.wall_s = wall.as_secs_f64();
        self.cpu_s = cpu.as_secs_f64();
        let per = |n: u64, total: f64| (n > 0).then(|| total / n as f64);
        self.cpu_us_per_step = per(self.steps, self.cpu_s * 1e6);
        self.cpu_us_per_turn = per(self.turns_completed, self.cpu_s * 1e6);
        self.cpu_us_per_turn_with_children = per(
            self.turns_completed,
            (self.cpu_s + self.children_cpu_s) * 1e6,
        );
        let own = (self.cpu_s
            - self.provider_cpu_s
            - self.tool_cpu_s
            - self.tool_blocking_cpu_s
            - self.driver_cpu_s
            - self.meter_overhead_s)
            .max(0.0);
        self.runtime_cpu_us_per_step = per(self.steps, own * 1e6);
        let rate = |n: u64| per_second(n, self.wall_s);
        self.turns_per_s = rate(self.turns_completed);
        self.steps_per_s = rate(self.steps);
        self.events_per_s = rate(self.events_persisted);
        self.peak_rss_bytes = peak_rss_bytes().unwrap_or(0);
    }

    /// Records the append latency percentiles of `latency` (microsecond buckets).
    pub(crate) fn set_append_latency(&mut self, latency: &foya_storage::Latencies) {
        self.append_latency_ms = Percentiles::from_quantiles(latency.count(), |q| {
            latency.quantile_us(q).map(|us| us / 1e3)
        });
    }

    /// Records the bare-client pass and the CPU ratio against it. No ratio when a turn
    /// failed: the runtime's CPU per completed turn then carries the failed turns' work,
    /// and the bare client replays session 0's turns, which may themselves have failed
    /// (or be fewer than the run's, the last replayed again), so the two sides did not
    /// do comparable work.
    pub(crate) fn set_bare(&mut self, bare: super::bare::BareReport) {
        self.cpu_ratio_vs_bare = match self.cpu_us_per_turn {
            Some(per_turn) if bare.cpu_us_per_turn > 0.0 && self.turns_failed == 0 => {
                Some(per_turn / bare.cpu_us_per_turn)
            }
            _ => None,
        };
        self.bare_client = Some(bare);
    }

    /// Records the floor pass and the CPU ratio against it (children included on both
    /// sides). No ratio when a turn failed, as for [`Self::set_bare`].
    pub(crate) fn set_floor(&mut self, floor: super::floor::FloorReport) {
        self.cpu_ratio_vs_floor = match self.cpu_us_per_turn_with_children {
            Some(per_turn) if floor.cpu_us_per_turn > 0.0 && self.turns_failed == 0 => {
                Some(per_turn / floor.cpu_us_per_turn)
            }
            _ => None,
        };
        self.floor = Some(floor);
    }

    /// The human-readable report.
    pub(crate) fn to_text(&self) -> String {
        let p = |x: &Percentiles, unit: &str| x.to_text(unit);
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "load test: {} x {}, provider {}{}, durability {}, approval {}{}",
            foya_cli::words::count(self.sessions as u64, "session"),
            foya_cli::words::count(self.turns_per_session.into(), "turn"),
            self.provider,
            self.endpoint
                .as_ref()
                .map_or(String::new(), |url| format!(" at {url}")),
            self.durability,
            self.approval,
            stopped_note(self.stopped_early)
        ));
        line(turns_line(
            self.turns_completed,
            self.turns_failed,
            self.turns_interrupted,
        ));
        line(format!(
            "work       steps {}  tool calls {} ({} ran, {})  model requests {}  events persisted {} in {} commits  deltas {}",
            self.steps,
            self.tool_calls,
            self.tool_calls_run,
            self.tool_ms_per_call.map_or_else(
                || "no wall time".to_owned(),
                |ms| format!("{ms:.2} ms each")
            ),
            self.model_requests,
            self.events_persisted,
            self.commits,
            self.deltas_received
        ));
        line(format!(
            "throughput {:.1} turns/s  {:.1} steps/s  {:.1} events/s  (wall {:.2} s)",
            self.turns_per_s, self.steps_per_s, self.events_per_s, self.wall_s
        ));
        line(format!(
            "cpu        {:.2} s  ({}, {})",
            self.cpu_s,
            per_unit(self.cpu_us_per_step, "step"),
            per_unit(self.cpu_us_per_turn, "turn")
        ));
        line(format!(
            "           child processes {:.2} s; with them {}",
            self.children_cpu_s,
            per_unit(self.cpu_us_per_turn_with_children, "turn")
        ));
        line(format!(
            "           provider {:.2} s, tools {:.2} s (+{:.2} s on the blocking pool), load driver {:.2} s, meters {:.2} s; runtime's own {}",
            self.provider_cpu_s,
            self.tool_cpu_s,
            self.tool_blocking_cpu_s,
            self.driver_cpu_s,
            self.meter_overhead_s,
            per_unit(self.runtime_cpu_us_per_step, "step")
        ));
        let per = |n: u64| (n > 0).then(|| self.storage_cpu_s * 1e6 / n as f64);
        line(format!(
            "           of which the store's writer {:.2} s ({}, {})",
            self.storage_cpu_s,
            per_unit(per(self.steps), "step"),
            per_unit(per(self.turns_completed), "turn")
        ));
        if let Some(bare) = &self.bare_client {
            line(format!(
                "bare       {:.2} s for {} ({:.1} us/turn, {} failed); runtime/bare {}",
                bare.cpu_s,
                foya_cli::words::count(bare.turns, "turn"),
                bare.cpu_us_per_turn,
                foya_cli::words::count(bare.requests_failed, "request"),
                self.cpu_ratio_vs_bare.map_or_else(
                    || "not comparable (turns failed)".to_owned(),
                    |r| format!("{r:.2}x")
                )
            ));
        }
        if let Some(floor) = &self.floor {
            line(floor_line(floor, self.cpu_ratio_vs_floor));
        }
        line(format!(
            "memory     peak RSS {:.1} MiB",
            self.peak_rss_bytes as f64 / (1024.0 * 1024.0)
        ));
        // Every latency in milliseconds (the JSON keeps overhead in microseconds).
        line(format!("model req  {}", p(&self.model_latency_ms, "ms")));
        line(format!(
            "overhead   {}",
            p(&self.overhead_us.scaled(1e-3), "ms")
        ));
        line(format!("relay      {}", p(&self.relay_latency_ms, "ms")));
        line(format!(
            "append     {}  ({})",
            p(&self.append_latency_ms, "ms"),
            self.store.as_deref().unwrap_or("redb")
        ));
        line(format!("retries    {}", classes(&self.retries)));
        out.push_str(&error_lines(&self.errors, &self.error_examples));
        out
    }
}

/// `VmHWM` (peak resident set) of this process, from `/proc/self/status`, in bytes.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The text report's line for the floor pass.
fn floor_line(floor: &super::floor::FloorReport, ratio: Option<f64>) -> String {
    format!(
        "floor      {:.2} s + {:.2} s children for {} ({:.1} us/turn; {} appends, {} \
         files read, {} processes); runtime/floor {}",
        floor.cpu_s,
        floor.children_cpu_s,
        foya_cli::words::count(floor.turns, "turn"),
        floor.cpu_us_per_turn,
        floor.appends,
        floor.files_read,
        floor.processes,
        ratio.map_or_else(
            || "not comparable (turns failed)".to_owned(),
            |r| format!("{r:.2}x")
        )
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_bare_ratio_is_given_only_when_every_turn_completed() {
        let bare = || super::super::bare::BareReport {
            turns: 4,
            captured_turns: 1,
            requests_ok: 12,
            requests_failed: 0,
            bytes: 1,
            wall_s: 0.1,
            cpu_s: 0.001,
            cpu_us_per_turn: 250.0,
        };
        let mut report = Report {
            turns_completed: 4,
            cpu_us_per_turn: Some(1000.0),
            ..Report::default()
        };
        report.set_bare(bare());
        assert_eq!(report.cpu_ratio_vs_bare, Some(4.0));
        report.turns_failed = 1;
        report.set_bare(bare());
        assert_eq!(report.cpu_ratio_vs_bare, None);
        assert!(
            report
                .to_text()
                .contains("runtime/bare not comparable (turns failed)")
        );
    }

    #[test]
    fn cpu_per_step_and_turn_are_null_and_n_a_without_steps_or_turns() {
        let mut report = Report::default();
        report.finish(Duration::from_secs(1), Duration::from_millis(20));
        let json = serde_json::to_value(&report).unwrap();
        for key in [
            "cpu_us_per_step",
            "cpu_us_per_turn",
            "runtime_cpu_us_per_step",
        ] {
            assert_eq!(json[key], serde_json::Value::Null, "{key}");
        }
        let text = report.to_text();
        assert!(
            text.contains("cpu        0.02 s  (n/a per step, n/a per turn)"),
            "{text}"
        );
        assert!(text.contains("runtime's own n/a per step"), "{text}");
        assert!(
            text.contains("of which the store's writer 0.00 s (n/a per step, n/a per turn)"),
            "{text}"
        );

        let mut report = Report {
            steps: 4,
            turns_completed: 2,
            storage_cpu_s: 0.004,
            ..Report::default()
        };
        report.finish(Duration::from_secs(1), Duration::from_millis(20));
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["cpu_us_per_step"], serde_json::json!(5000.0));
        assert_eq!(json["cpu_us_per_turn"], serde_json::json!(10000.0));
        // The store writer's CPU is shown on its own, not taken out of the runtime's.
        assert_eq!(json["runtime_cpu_us_per_step"], serde_json::json!(5000.0));
        assert_eq!(json["storage_cpu_s"], serde_json::json!(0.004));
        assert!(
            report
                .to_text()
                .contains("of which the store's writer 0.00 s (1000.0 us/step, 2000.0 us/turn)")
        );
        assert!(
            report
                .to_text()
                .contains("(5000.0 us/step, 10000.0 us/turn)")
        );
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(
            Percentiles::of(&mut values),
            Percentiles {
                p50: Some(50.0),
                p95: Some(95.0),
                p99: Some(99.0),
                samples: 100,
            }
        );
        assert_eq!(
            Percentiles::of(&mut []),
            Percentiles {
                p50: None,
                p95: None,
                p99: None,
                samples: 0,
            }
        );
        assert_eq!(
            Percentiles::of(&mut [7.0]),
            Percentiles {
                p50: Some(7.0),
                p95: Some(7.0),
                p99: Some(7.0),
                samples: 1,
            }
        );
    }

    #[test]
    fn the_text_report_gives_every_latency_in_milliseconds() {
        let report = Report {
            provider: "sim".into(),
            durability: "none".into(),
            sessions: 2,
            turns_per_session: 1,
            turns_completed: 2,
            steps: 6,
            model_latency_ms: Percentiles {
                p50: Some(1.0),
                p95: Some(2.0),
                p99: Some(3.0),
                samples: 6,
            },
            overhead_us: Percentiles {
                p50: Some(250.0),
                p95: Some(1500.0),
                p99: Some(12_345.0),
                samples: 4,
            },
            relay_latency_ms: Percentiles {
                p50: Some(0.01),
                p95: Some(0.5),
                p99: Some(20.5),
                samples: 128,
            },
            ..Report::default()
        };
        let text = report.to_text();
        let latencies: Vec<&str> = text
            .lines()
            .filter(|l| {
                ["model req", "overhead", "relay"]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .collect();
        assert_eq!(
            latencies,
            [
                "model req  p50 1.000 ms  p95 2.000 ms  p99 3.000 ms",
                "overhead   p50 0.250 ms  p95 1.500 ms  p99 12.345 ms",
                "relay      p50 0.010 ms  p95 0.500 ms  p99 20.500 ms",
            ]
        );
        assert!(!text.contains(" us "), "{text}");
        // The JSON keys and units stay: overhead in µs, relay in ms.
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["overhead_us"]["p95"], 1500.0);
        assert_eq!(json["relay_latency_ms"]["p99"], 20.5);
    }

    #[test]
    fn counts_of_one_are_singular_in_the_text_report() {
        let mut report = Report {
            provider: "sim".into(),
            durability: "none".into(),
            sessions: 1,
            turns_per_session: 1,
            ..Report::default()
        };
        report.set_bare(super::super::bare::BareReport {
            turns: 1,
            requests_failed: 1,
            ..Default::default()
        });
        let text = report.to_text();
        assert!(
            text.starts_with("load test: 1 session x 1 turn, "),
            "{text}"
        );
        assert!(text.contains(" for 1 turn (") && text.contains(", 1 request failed)"));
        report.sessions = 3;
        report.turns_per_session = 2;
        assert!(
            report
                .to_text()
                .starts_with("load test: 3 sessions x 2 turns, ")
        );
    }

    #[test]
    fn process_resources_are_read() {
        assert!(peak_rss_bytes().is_some_and(|b| b > 0));
        let _ = crate::cpu::cpu_time();
    }
}

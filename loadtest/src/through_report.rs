//! The report of `foya loadtest --through`: what the driver saw over HTTP (turns, steps,
//! tool calls, the events its streams delivered, turn latency, errors) beside what the
//! nodes measured themselves (`/metrics`: events committed, commits, appends and their
//! latency), per node and in total. Text on stdout, JSON with `--json`.
//!
//! `events_per_s` is the events the nodes committed during the run
//! (`foya_store_events_total`, after − before, summed over the nodes) over the run's wall
//! time (the first session's creation to the last turn's end).

use super::prom::{self, Histogram};
use super::report::{self, Percentiles};
use serde::Serialize;
use std::collections::BTreeMap;

/// One node's share of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct NodeFigures {
    /// The URL given in `--through`.
    pub(crate) url: String,
    /// Its name (the `foya-node` header of the sessions it created), when known.
    pub(crate) name: Option<String>,
    /// Sessions created through it.
    pub(crate) sessions_created: u64,
    /// Events its store committed during the run.
    pub(crate) events_committed: u64,
    /// Its store's group commits during the run.
    pub(crate) commits: u64,
    /// Appends acknowledged during the run (its append histogram's count).
    pub(crate) appends: u64,
    /// Appends refused or failed.
    pub(crate) append_errors: u64,
    /// Its append latency, in milliseconds (estimated from its histogram).
    pub(crate) append_latency_ms: Percentiles,
    /// Its append and commit histograms of the run (seconds).
    #[serde(skip)]
    pub(crate) append: Histogram,
    #[serde(skip)]
    pub(crate) commit: Histogram,
}

/// The bucket a histogram quantile lies in, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Bucket {
    pub(crate) lower_ms: f64,
    pub(crate) upper_ms: f64,
}

/// Everything `--through` measured. Serialised as the `--json` report.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ThroughReport {
    /// `through`: the turns ran in `foya node` processes reached over HTTP.
    pub(crate) mode: String,
    /// `owner` (inputs and streams through the node that created, so owns, the session)
    /// or `forwarded` (through the next node of the list, which forwards to the owner).
    pub(crate) route: String,
    /// The nodes, in `--through` order.
    pub(crate) nodes: Vec<NodeFigures>,
    /// The sessions' approval mode.
    pub(crate) approval: String,
    /// Sessions driven.
    pub(crate) sessions: usize,
    /// Turns asked of each session.
    pub(crate) turns_per_session: u32,
    /// Most turns in flight at once (`--concurrency`; default: every session).
    pub(crate) concurrency: usize,
    /// Turns that ended `completed`.
    pub(crate) turns_completed: u64,
    /// Turns that ended `failed` or `cancelled`, or whose end was never seen.
    pub(crate) turns_failed: u64,
    /// Turns left unfinished because the run was stopped.
    pub(crate) turns_interrupted: u64,
    /// Steps started (`step_started` events).
    pub(crate) steps: u64,
    /// Tool calls the model asked for.
    pub(crate) tool_calls: u64,
    /// Tool calls that ran (`tool_finished`).
    pub(crate) tool_calls_run: u64,
    /// Persisted events the driver's event streams delivered (every session's log, from
    /// `session_created` to its last `turn_complete`; seqs checked dense).
    pub(crate) events_received: u64,
    /// Live deltas the streams delivered.
    pub(crate) deltas_received: u64,
    /// Inputs the node asked did not serve itself (its `foya-node` answer named another
    /// node: forwarded to the owner).
    pub(crate) inputs_forwarded: u64,
    /// Events the nodes' stores committed during the run (`foya_store_events_total`).
    pub(crate) events_committed: u64,
    /// Group commits of the nodes' stores during the run.
    pub(crate) commits: u64,
    /// Appends the nodes' runtimes made (their append histograms' count).
    pub(crate) appends: u64,
    /// Appends refused or failed on the nodes.
    pub(crate) append_errors: u64,
    /// Wall time: the first session's creation to the last turn's end, in seconds.
    pub(crate) wall_s: f64,
    /// Completed turns per wall second.
    pub(crate) turns_per_s: f64,
    /// `events_committed` per wall second.
    pub(crate) events_per_s: f64,
    /// Append latency on the nodes (`foya_store_append_seconds`: an append's call to its
    /// acknowledgement, queue and group commit included), every node's appends of the
    /// run together, in milliseconds, interpolated within the histogram's buckets.
    pub(crate) append_latency_ms: Percentiles,
    /// The bucket holding the append p99 (the estimate is only known to lie in it).
    pub(crate) append_p99_bucket_ms: Option<Bucket>,
    /// One group commit on the nodes (`foya_store_commit_seconds`), in milliseconds.
    pub(crate) commit_latency_ms: Percentiles,
    /// A turn as the driver saw it: its input posted to its `turn_complete` received, in
    /// milliseconds.
    pub(crate) turn_latency_ms: Percentiles,
    /// CPU time of the driver process during the run (user + system), in seconds.
    pub(crate) driver_cpu_s: f64,
    /// Requests answered 503 with `Retry-After` (no shard claimed yet, a shard moving)
    /// and sent again, by error code.
    pub(crate) retries: BTreeMap<String, u64>,
    /// Event streams that ended before their turn did and were resumed with
    /// `Last-Event-ID`.
    pub(crate) stream_resumes: u64,
    /// Failures by class.
    pub(crate) errors: BTreeMap<String, u64>,
    /// One message per error class (the first seen).
    pub(crate) error_examples: BTreeMap<String, String>,
    /// Whether the run was stopped before every turn ran.
    pub(crate) stopped_early: bool,
}

/// Percentiles of a histogram in seconds, in milliseconds.
pub(crate) fn percentiles_ms(h: &Histogram) -> Percentiles {
    Percentiles::from_quantiles(h.count, |q| h.quantile(q).map(|x| x.value * 1e3))
}

impl ThroughReport {
    /// Fills the totals and rates from the nodes' figures and the wall time; the
    /// histograms of nodes whose bounds differ are not added (an error says so).
    pub(crate) fn finish(&mut self, wall: std::time::Duration) {
        self.wall_s = wall.as_secs_f64();
        let sum = |f: fn(&NodeFigures) -> u64| self.nodes.iter().map(f).sum::<u64>();
        self.events_committed = sum(|n| n.events_committed);
        self.commits = sum(|n| n.commits);
        self.appends = sum(|n| n.appends);
        self.append_errors = sum(|n| n.append_errors);
        let mut append = Histogram::default();
        let mut commit = Histogram::default();
        for node in &self.nodes {
            match (append.plus(&node.append), commit.plus(&node.commit)) {
                (Some(a), Some(c)) => (append, commit) = (a, c),
                _ => {
                    *self.errors.entry("metrics".into()).or_default() += 1;
                    self.error_examples
                        .entry("metrics".into())
                        .or_insert_with(|| {
                            format!(
                                "{}: histogram buckets differ from the other nodes'",
                                node.url
                            )
                        });
                }
            }
        }
        self.append_latency_ms = percentiles_ms(&append);
        self.append_p99_bucket_ms = append.quantile(0.99).map(|q| Bucket {
            lower_ms: q.lower * 1e3,
            upper_ms: q.upper * 1e3,
        });
        self.commit_latency_ms = percentiles_ms(&commit);
        let rate = |n: u64| report::per_second(n, self.wall_s);
        self.turns_per_s = rate(self.turns_completed);
        self.events_per_s = rate(self.events_committed);
    }

    /// The human-readable report.
    pub(crate) fn to_text(&self) -> String {
        let p = |x: &Percentiles| x.to_text("ms");
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!(
            "load test through {} (route {}): {} x {}, approval {}, concurrency {}{}",
            foya_cli::words::count(self.nodes.len() as u64, "node"),
            self.route,
            foya_cli::words::count(self.sessions as u64, "session"),
            foya_cli::words::count(self.turns_per_session.into(), "turn"),
            self.approval,
            self.concurrency,
            report::stopped_note(self.stopped_early)
        ));
        for node in &self.nodes {
            line(format!(
                "node       {} {}: {} created, {} events committed in {} commits ({} appends), append {}",
                node.name.as_deref().unwrap_or("?"),
                node.url,
                foya_cli::words::count(node.sessions_created, "session"),
                node.events_committed,
                node.commits,
                node.appends,
                p(&node.append_latency_ms)
            ));
        }
        line(report::turns_line(
            self.turns_completed,
            self.turns_failed,
            self.turns_interrupted,
        ));
        line(format!(
            "work       steps {}  tool calls {} ({} ran)  events received {}  deltas {}  inputs forwarded {}",
            self.steps,
            self.tool_calls,
            self.tool_calls_run,
            self.events_received,
            self.deltas_received,
            self.inputs_forwarded
        ));
        line(format!(
            "store      {} events committed by the nodes in {} commits ({} appends, {} failed)",
            self.events_committed, self.commits, self.appends, self.append_errors
        ));
        line(format!(
            "throughput {:.1} turns/s  {:.1} events/s committed  (wall {:.2} s)",
            self.turns_per_s, self.events_per_s, self.wall_s
        ));
        line(format!(
            "append     {}{}  (the nodes' {}, all nodes)",
            p(&self.append_latency_ms),
            self.append_p99_bucket_ms.map_or(String::new(), |b| format!(
                "; p99 in ({:.1}, {:.1}] ms",
                b.lower_ms, b.upper_ms
            )),
            prom::APPEND
        ));
        line(format!("commit     {}", p(&self.commit_latency_ms)));
        line(format!(
            "turn       {}  (input posted to turn_complete received)",
            p(&self.turn_latency_ms)
        ));
        line(format!("driver     cpu {:.2} s", self.driver_cpu_s));
        line(format!(
            "retries    {}  stream resumes {}",
            report::classes(&self.retries),
            self.stream_resumes
        ));
        out.push_str(&report::error_lines(&self.errors, &self.error_examples));
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn histogram(counts: &[(f64, u64)]) -> Histogram {
        Histogram {
            buckets: counts.to_vec(),
            sum: 0.0,
            count: counts.last().map_or(0, |c| c.1),
        }
    }

    #[test]
    fn totals_add_the_nodes_and_the_rate_is_committed_events_over_wall_time() {
        let node = |events, a: &[(f64, u64)]| NodeFigures {
            url: "http://127.0.0.1:1".into(),
            events_committed: events,
            commits: 10,
            appends: a.last().unwrap().1,
            append: histogram(a),
            ..NodeFigures::default()
        };
        let mut report = ThroughReport {
            nodes: vec![
                node(3000, &[(0.001, 90), (0.002, 100), (f64::INFINITY, 100)]),
                node(1000, &[(0.001, 0), (0.002, 0), (f64::INFINITY, 0)]),
            ],
            turns_completed: 20,
            ..ThroughReport::default()
        };
        report.finish(std::time::Duration::from_secs(2));
        assert_eq!(report.events_committed, 4000);
        assert_eq!(report.events_per_s, 2000.0);
        assert_eq!(report.turns_per_s, 10.0);
        assert_eq!(report.appends, 100);
        assert_eq!(report.commits, 20);
        assert_eq!(report.append_latency_ms.samples, 100);
        let bucket = report.append_p99_bucket_ms.unwrap();
        assert_eq!((bucket.lower_ms, bucket.upper_ms), (1.0, 2.0));
        assert!(report.errors.is_empty());
        let text = report.to_text();
        assert!(text.contains("2000.0 events/s committed"), "{text}");
        assert!(text.contains("p99 in (1.0, 2.0] ms"), "{text}");
        // Nodes whose buckets differ are not mixed: an error names the node.
        report.nodes.push(node(1, &[(0.5, 1)]));
        report.finish(std::time::Duration::from_secs(2));
        assert_eq!(report.errors.get("metrics"), Some(&1));
    }
}

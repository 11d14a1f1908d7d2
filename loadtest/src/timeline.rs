//! A load test over time, for the HTML report: when each turn completed, each step
//! started, each error happened and each model request was retried (seconds since the run started, recorded by the
//! drivers as they count), and the process's resident set sampled every
//! [`RSS_EVERY`]; turned into per-interval rates and running totals ([`rates`],
//! [`totals_by_class`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the resident set size is sampled.
pub(crate) const RSS_EVERY: Duration = Duration::from_millis(100);

/// When things happened in one driver (or, merged, in the whole run).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Timeline {
    /// The run's start (`None`: nothing is recorded).
    pub(crate) started: Option<Instant>,
    /// Seconds at which turns completed.
    pub(crate) turns_s: Vec<f64>,
    /// Seconds at which steps started.
    pub(crate) steps_s: Vec<f64>,
    /// Seconds and class of each error counted.
    pub(crate) errors_s: Vec<(f64, String)>,
    /// Seconds and error class of each model request retried (`provider_retry`).
    pub(crate) retries_s: Vec<(f64, String)>,
}

impl Timeline {
    /// An empty timeline of a run that started at `started`.
    pub(crate) fn since(started: Instant) -> Self {
        Self {
            started: Some(started),
            ..Self::default()
        }
    }

    fn now_s(&self) -> Option<f64> {
        self.started.map(|s| s.elapsed().as_secs_f64())
    }

    pub(crate) fn turn_completed(&mut self) {
        if let Some(t) = self.now_s() {
            self.turns_s.push(t);
        }
    }

    pub(crate) fn step_started(&mut self) {
        if let Some(t) = self.now_s() {
            self.steps_s.push(t);
        }
    }

    pub(crate) fn error(&mut self, class: &str) {
        if let Some(t) = self.now_s() {
            self.errors_s.push((t, class.to_owned()));
        }
    }

    pub(crate) fn retry(&mut self, class: &str) {
        if let Some(t) = self.now_s() {
            self.retries_s.push((t, class.to_owned()));
        }
    }

    /// Adds `other`'s records to these.
    pub(crate) fn merge(&mut self, other: Timeline) {
        self.started = self.started.or(other.started);
        self.turns_s.extend(other.turns_s);
        self.steps_s.extend(other.steps_s);
        self.errors_s.extend(other.errors_s);
        self.retries_s.extend(other.retries_s);
    }
}

/// One sample of the process's memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RssSample {
    /// Seconds since the run started.
    pub(crate) at_s: f64,
    /// Resident set size (`VmRSS`), in bytes.
    pub(crate) rss_bytes: u64,
    /// Peak resident set size so far (`VmHWM`), in bytes.
    pub(crate) peak_bytes: u64,
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Samples the memory every [`RSS_EVERY`] from now until `stop`, then once more.
pub(crate) fn sample_memory(
    started: Instant,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Vec<RssSample>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(RSS_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopped = tokio::select! {
                _ = tick.tick() => false,
                () = stop.cancelled() => true,
            };
            if let Some((rss_bytes, peak_bytes)) = memory() {
                samples.push(RssSample {
                    at_s: started.elapsed().as_secs_f64(),
                    rss_bytes,
                    peak_bytes,
                });
            }
            if stopped {
                return samples;
            }
        }
    })
}

/// The interval rates are counted over for a run of `wall_s` seconds: 1 s for runs of
/// 20 s or more, else a twentieth of the run (at least 10 ms), so a short run still
/// has a curve.
pub(crate) fn interval_s(wall_s: f64) -> f64 {
    if wall_s >= 20.0 {
        1.0
    } else {
        (wall_s / 20.0).max(0.01)
    }
}

/// Number of intervals of `width` seconds covering `wall_s`.
fn intervals(wall_s: f64, width: f64) -> usize {
    ((wall_s / width).ceil() as usize).max(1)
}

/// Events per second in each interval of `width` seconds, as (interval end, rate).
pub(crate) fn rates(times_s: &[f64], width: f64, wall_s: f64) -> Vec<(f64, f64)> {
    let n = intervals(wall_s, width);
    let mut counts = vec![0u64; n];
    for t in times_s {
        let i = ((t / width).floor().max(0.0) as usize).min(n - 1);
        counts[i] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, c)| ((i + 1) as f64 * width, *c as f64 / width))
        .collect()
}

/// Errors so far by class at the end of each interval: (interval end, running total).
pub(crate) fn totals_by_class(
    errors: &[(f64, String)],
    width: f64,
    wall_s: f64,
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let n = intervals(wall_s, width);
    let mut by_class: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (t, class) in errors {
        by_class.entry(class.clone()).or_default().push(*t);
    }
    by_class
        .into_iter()
        .map(|(class, times)| {
            let per = rates(&times, width, wall_s);
            let mut total = 0.0;
            let series = (0..n)
                .map(|i| {
                    total += per[i].1 * width;
                    (per[i].0, total.round())
                })
                .collect();
            (class, series)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_count_each_event_once_in_its_interval() {
        let r = rates(&[0.05, 0.15, 0.18, 0.95, 1.0], 0.1, 1.0);
        assert_eq!(r.len(), 10);
        let counts: Vec<u64> = r.iter().map(|(_, v)| (v * 0.1).round() as u64).collect();
        assert_eq!(counts, [1, 2, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert!((r[0].0 - 0.1).abs() < 1e-9 && (r[9].0 - 1.0).abs() < 1e-9);
        assert_eq!(interval_s(40.0), 1.0);
        assert!((interval_s(2.0) - 0.1).abs() < 1e-12);
        assert_eq!(interval_s(0.0), 0.01);
    }

    #[test]
    fn error_totals_run_on_per_class() {
        let errors = vec![
            (0.1, "tool_error".to_owned()),
            (0.5, "rate_limited".to_owned()),
            (0.6, "tool_error".to_owned()),
        ];
        let t = totals_by_class(&errors, 0.25, 1.0);
        assert_eq!(
            t["tool_error"],
            [(0.25, 1.0), (0.5, 1.0), (0.75, 2.0), (1.0, 2.0)]
        );
        assert_eq!(
            t["rate_limited"],
            [(0.25, 0.0), (0.5, 0.0), (0.75, 1.0), (1.0, 1.0)]
        );
    }
}

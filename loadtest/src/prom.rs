//! What `foya loadtest --through` reads from each node's `GET /metrics` (Prometheus /
//! OpenMetrics text, `docs/observability.md`): the store's counters and its append and
//! commit histograms, read before and after the run and subtracted, so the figures are
//! the nodes' own for the run (an append's latency measured inside the node, from its call
//! to its acknowledgement, not the driver's view of a turn).
//!
//! Percentiles from a histogram are estimated as Prometheus' `histogram_quantile` does:
//! the bucket that holds the rank, linearly interpolated between its bounds (the first
//! bucket from 0; a rank in the `+Inf` bucket is the last finite bound). The store's
//! buckets double (0.1 ms, 0.2 ms, … 1.6 s), so the bucket holding the p99 is reported
//! with it: the estimate is only known to lie within it.

use std::collections::BTreeMap;

/// The metric names read.
pub(crate) const APPEND: &str = "foya_store_append_seconds";
pub(crate) const COMMIT: &str = "foya_store_commit_seconds";
pub(crate) const EVENTS: &str = "foya_store_events_total";
pub(crate) const COMMITS: &str = "foya_store_commits_total";
pub(crate) const APPEND_ERRORS: &str = "foya_store_append_errors_total";

/// One cumulative histogram: `(upper bound, count at or below it)` in increasing bound
/// order (`+Inf` last when present), and its sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    pub(crate) buckets: Vec<(f64, u64)>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl Histogram {
    /// `self − before` bucket by bucket (a histogram of what was observed in between);
    /// `None` when the bounds differ or a count went down (the node restarted).
    pub(crate) fn since(&self, before: &Histogram) -> Option<Histogram> {
        if before.buckets.is_empty() {
            return Some(self.clone());
        }
        if before.buckets.len() != self.buckets.len() || self.count < before.count {
            return None;
        }
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for ((le, n), (le0, n0)) in self.buckets.iter().zip(&before.buckets) {
            if le.to_bits() != le0.to_bits() || n < n0 {
                return None;
            }
            buckets.push((*le, n - n0));
        }
        Some(Histogram {
            buckets,
            sum: self.sum - before.sum,
            count: self.count - before.count,
        })
    }

    /// The sum of two histograms with the same bounds (`None` when they differ); an
    /// empty one adds nothing.
    pub(crate) fn plus(&self, other: &Histogram) -> Option<Histogram> {
        if self.buckets.is_empty() {
            return Some(other.clone());
        }
        if other.buckets.is_empty() {
            return Some(self.clone());
        }
        if self.buckets.len() != other.buckets.len() {
            return None;
        }
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for ((le, n), (le2, n2)) in self.buckets.iter().zip(&other.buckets) {
            if le.to_bits() != le2.to_bits() {
                return None;
            }
            buckets.push((*le, n + n2));
        }
        Some(Histogram {
            buckets,
            sum: self.sum + other.sum,
            count: self.count + other.count,
        })
    }

    /// The bucket holding quantile `q` (`0 < q ≤ 1`) as `(lower, upper)` bounds and the
    /// interpolated estimate; `None` for an empty histogram.
    pub(crate) fn quantile(&self, q: f64) -> Option<Quantile> {
        let total = self.buckets.last().map_or(0, |(_, n)| *n);
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let mut lower = 0.0;
        let mut below = 0u64;
        for (le, n) in &self.buckets {
            if *n as f64 >= rank && *n > 0 {
                if le.is_infinite() {
                    return Some(Quantile {
                        value: lower,
                        lower,
                        upper: *le,
                    });
                }
                let inside = (n - below) as f64;
                let fraction = if inside > 0.0 {
                    (rank - below as f64) / inside
                } else {
                    1.0
                };
                return Some(Quantile {
                    value: lower + (le - lower) * fraction.clamp(0.0, 1.0),
                    lower,
                    upper: *le,
                });
            }
            lower = *le;
            below = *n;
        }
        None
    }
}

/// A quantile estimated from a histogram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quantile {
    /// Interpolated within the bucket.
    pub(crate) value: f64,
    /// The bucket's lower bound (the previous bucket's upper, 0 for the first).
    pub(crate) lower: f64,
    /// The bucket's upper bound (`le`).
    pub(crate) upper: f64,
}

/// What one scrape of `/metrics` gave: every sample without labels by name, and the
/// histograms named in [`HISTOGRAMS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Scrape {
    pub(crate) values: BTreeMap<String, f64>,
    pub(crate) histograms: BTreeMap<String, Histogram>,
}

/// The histograms kept by [`parse`].
const HISTOGRAMS: [&str; 2] = [APPEND, COMMIT];

impl Scrape {
    /// A counter's value (0 when the node does not report it).
    pub(crate) fn counter(&self, name: &str) -> u64 {
        // Counts are exact integers in the text; a value out of range reads as 0.
        self.values
            .get(name)
            .filter(|v| v.is_finite() && **v >= 0.0)
            .map_or(0, |v| *v as u64)
    }

    /// A histogram (empty when the node does not report it).
    pub(crate) fn histogram(&self, name: &str) -> Histogram {
        self.histograms.get(name).cloned().unwrap_or_default()
    }
}

/// Reads Prometheus / OpenMetrics text: comments and blank lines skipped, a sample line
/// `name{labels} value [timestamp] [# exemplar]`.
///
/// # Errors
/// A sample line whose value is not a number (the text is not metrics).
pub(crate) fn parse(text: &str) -> anyhow::Result<Scrape> {
    let mut scrape = Scrape::default();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let close = line[open..]
                    .find('}')
                    .map(|c| open + c)
                    .ok_or_else(|| anyhow::anyhow!("line {}: unclosed labels", number + 1))?;
                (&line[..open], &line[open + 1..close], &line[close + 1..])
            }
            None => match line.split_once(char::is_whitespace) {
                Some((name, rest)) => (name, "", rest),
                None => anyhow::bail!("line {}: no value", number + 1),
            },
        };
        let value_text = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| anyhow::anyhow!("line {}: no value", number + 1))?;
        let value = parse_number(value_text).ok_or_else(|| {
            anyhow::anyhow!("line {}: {value_text:?} is not a number", number + 1)
        })?;
        if let Some(family) = HISTOGRAMS.iter().find(|h| name.starts_with(**h)) {
            let histogram = scrape.histograms.entry((*family).to_owned()).or_default();
            match &name[family.len()..] {
                "_bucket" => {
                    let le = label(labels, "le").and_then(parse_number).ok_or_else(|| {
                        anyhow::anyhow!("line {}: a bucket without le", number + 1)
                    })?;
                    histogram.buckets.push((le, value as u64));
                }
                "_sum" => histogram.sum = value,
                "_count" => histogram.count = value as u64,
                _ => {}
            }
            continue;
        }
        if labels.is_empty() {
            scrape.values.insert(name.to_owned(), value);
        }
    }
    for histogram in scrape.histograms.values_mut() {
        histogram.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Ok(scrape)
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN`.
fn parse_number(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

/// The value of label `key` in `a="1",le="0.5"`.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TEXT: &str = "# HELP foya_store_append_seconds Latency\n\
        # TYPE foya_store_append_seconds histogram\n\
        foya_store_append_seconds_sum 0.5\n\
        foya_store_append_seconds_count 100\n\
        foya_store_append_seconds_bucket{le=\"0.001\"} 50\n\
        foya_store_append_seconds_bucket{le=\"0.002\"} 90\n\
        foya_store_append_seconds_bucket{le=\"0.004\"} 100\n\
        foya_store_append_seconds_bucket{le=\"+Inf\"} 100\n\
        # TYPE foya_store_events_total counter\n\
        foya_store_events_total 2100\n\
        foya_tool_calls_total{tool=\"read_file\"} 7\n\
        # EOF\n";

    #[test]
    fn the_store_figures_are_read_from_the_text() {
        let scrape = parse(TEXT).unwrap();
        assert_eq!(scrape.counter(EVENTS), 2100);
        assert_eq!(scrape.counter(COMMITS), 0);
        let h = scrape.histogram(APPEND);
        assert_eq!(h.count, 100);
        assert_eq!(h.buckets.len(), 4);
        assert!(h.buckets[3].0.is_infinite());
        assert!(scrape.histogram(COMMIT).buckets.is_empty());
        assert!(parse("foya_x notanumber\n").is_err());
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_holding_the_rank() {
        let h = parse(TEXT).unwrap().histogram(APPEND);
        // Rank 50 is the first bucket's last: its upper bound.
        let p50 = h.quantile(0.5).unwrap();
        assert_eq!((p50.lower, p50.upper), (0.0, 0.001));
        assert!((p50.value - 0.001).abs() < 1e-12);
        // Rank 99: 9 of the 10 in (0.002, 0.004].
        let p99 = h.quantile(0.99).unwrap();
        assert_eq!((p99.lower, p99.upper), (0.002, 0.004));
        assert!((p99.value - 0.0038).abs() < 1e-12, "{p99:?}");
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn a_run_is_the_difference_of_two_scrapes_and_nodes_add_up() {
        let before = parse(TEXT).unwrap().histogram(APPEND);
        let after = Histogram {
            buckets: vec![
                (0.001, 60),
                (0.002, 100),
                (0.004, 130),
                (f64::INFINITY, 131),
            ],
            sum: 0.9,
            count: 131,
        };
        let run = after.since(&before).unwrap();
        assert_eq!(
            run.buckets,
            vec![(0.001, 10), (0.002, 10), (0.004, 30), (f64::INFINITY, 31)]
        );
        assert_eq!(run.count, 31);
        // The +Inf bucket holds the p99: the last finite bound.
        let p99 = run.quantile(0.99).unwrap();
        assert_eq!(p99.value, 0.004);
        let both = run.plus(&run).unwrap();
        assert_eq!(both.count, 62);
        assert_eq!(both.buckets[2], (0.004, 60));
        // A node that restarted (counts went down) gives no difference.
        assert_eq!(before.since(&after), None);
    }
}

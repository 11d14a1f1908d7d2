//! Append latency as the caller sees it (from the append call to its acknowledgement),
//! recorded by every [`crate::EventLog`] implementation in a lock-free histogram, for
//! load tests ([`crate::EventLog::append_latency`]).
//!
//! The histogram is log-linear over microseconds: exact below 16 µs, then 16 buckets per
//! power of two (a bucket is at most 1/16 ≈ 6 % wide); a quantile is its bucket's
//! midpoint. Recording is one clock read and one relaxed atomic add.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two.
const SUB: u64 = 16;
/// Powers of two covered above the exact range (up to 2^44 µs, about 200 days).
const POWERS: u64 = 40;
/// Number of buckets.
const BUCKETS: usize = (SUB + POWERS * SUB) as usize;

/// The bucket of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us < SUB {
        return usize::try_from(us).unwrap_or(0);
    }
    let power = u64::from(63 - us.leading_zeros()); // >= 4
    let sub = (us >> (power - 4)) & (SUB - 1);
    let index = SUB + (power - 4) * SUB + sub;
    usize::try_from(index)
        .unwrap_or(BUCKETS - 1)
        .min(BUCKETS - 1)
}

/// The midpoint of bucket `index`, in microseconds.
fn midpoint(index: usize) -> f64 {
    let index = index as u64;
    if index < SUB {
        return index as f64;
    }
    let power = (index - SUB) / SUB + 4;
    let sub = (index - SUB) % SUB;
    let width = 1u64 << (power - 4);
    ((SUB + sub) * width) as f64 + (width as f64 - 1.0) / 2.0
}

/// A histogram of append latencies, shared by an event log's clones.
#[derive(Debug)]
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl LatencyHistogram {
    /// Counts one append that took `took`.
    pub fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        if let Some(b) = self.buckets.get(bucket(us)) {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts so far.
    #[must_use]
    pub fn snapshot(&self) -> Latencies {
        Latencies {
            counts: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// A snapshot of a [`LatencyHistogram`] (empty: nothing recorded, or an event log that
/// does not record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latencies {
    counts: Vec<u64>,
}

impl Latencies {
    /// What was recorded after `earlier` (a snapshot of the same histogram).
    #[must_use]
    pub fn since(&self, earlier: &Latencies) -> Latencies {
        Latencies {
            counts: self
                .counts
                .iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(earlier.counts.get(i).copied().unwrap_or(0)))
                .collect(),
        }
    }

    /// Appends recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0 to 1) in microseconds, within its bucket's width (≤ 6 %);
    /// `None` when nothing was recorded.
    #[must_use]
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The smallest bucket whose cumulative count reaches q of the total (at least 1).
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(midpoint(i));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn quantiles_fall_within_a_bucket_of_the_recorded_values() {
        let h = LatencyHistogram::default();
        assert_eq!(h.snapshot().quantile_us(0.5), None);
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let before = h.snapshot();
        let p50 = before.quantile_us(0.5).unwrap();
        let p99 = before.quantile_us(0.99).unwrap();
        assert!((p50 - 500.0).abs() / 500.0 < 0.07, "{p50}");
        assert!((p99 - 990.0).abs() / 990.0 < 0.07, "{p99}");
        assert_eq!(before.count(), 1000);
        h.record(Duration::from_millis(40));
        let after = h.snapshot().since(&before);
        assert_eq!(after.count(), 1);
        let only = after.quantile_us(0.5).unwrap();
        assert!((only - 40_000.0).abs() / 40_000.0 < 0.07, "{only}");
        // Exact below 16 µs, and every value lands in a bucket.
        assert_eq!(midpoint(bucket(7)), 7.0);
        assert!(bucket(u64::MAX) < BUCKETS);
        for us in [16u64, 17, 31, 32, 1 << 20, (1 << 20) + 12345] {
            let mid = midpoint(bucket(us));
            assert!(
                (mid - us as f64).abs() / us as f64 <= 1.0 / 16.0,
                "{us} {mid}"
            );
        }
    }
}

//! A Prometheus histogram whose observations take no lock: per-thread-group cells of
//! atomic bucket counts (`cells.rs`, each on its own cache lines), summed when the metrics are
//! encoded. Replaces `prometheus_client`'s `Histogram` (a lock per observation) on the
//! paths every append and every step takes; encoded the same way (its
//! `encode_histogram`: sum, count, cumulative buckets, `+Inf` last).

use crate::cells::{CELLS, cell_index};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One thread group's counts: the buckets (not cumulative) and the sum (`f64` bits).
#[derive(Debug)]
#[repr(align(128))]
struct Cell {
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
}

#[derive(Debug)]
struct Cells {
    /// Upper bounds, `f64::MAX` (`+Inf`) last.
    bounds: Box<[f64]>,
    cells: [Cell; CELLS],
}

/// A histogram (cheap to clone: clones share the counts).
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    inner: Arc<Cells>,
}

impl Histogram {
    /// Buckets with upper bounds `bounds` (increasing), and `+Inf`.
    pub(crate) fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = bounds
            .into_iter()
            .chain(std::iter::once(f64::MAX))
            .collect();
        let cell = || Cell {
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0_f64.to_bits()),
        };
        Self {
            inner: Arc::new(Cells {
                cells: std::array::from_fn(|_| cell()),
                bounds,
            }),
        }
    }

    /// Counts `value` in the first bucket whose bound is at least it (as
    /// `prometheus_client` does; a NaN is counted in none, but in the sum).
    pub(crate) fn observe(&self, value: f64) {
        let cell = &self.inner.cells[cell_index()];
        if let Some(i) = self.inner.bounds.iter().position(|bound| *bound >= value) {
            cell.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        let mut old = cell.sum.load(Ordering::Relaxed);
        loop {
            let new = (f64::from_bits(old) + value).to_bits();
            match cell
                .sum
                .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => old = now,
            }
        }
    }

    /// Sum, count and the buckets' counts (not cumulative), over every cell. The count is
    /// the buckets' total, so it always equals the `+Inf` bucket.
    pub(crate) fn get(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut buckets: Vec<(f64, u64)> = self.inner.bounds.iter().map(|b| (*b, 0)).collect();
        let mut sum = 0.0;
        for cell in &self.inner.cells {
            sum += f64::from_bits(cell.sum.load(Ordering::Relaxed));
            for (total, count) in buckets.iter_mut().zip(cell.buckets.iter()) {
                total.1 += count.load(Ordering::Relaxed);
            }
        }
        let count = buckets.iter().map(|(_, n)| n).sum();
        (sum, count, buckets)
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.get();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cells::encoded as text;
    use prometheus_client::metrics::histogram::exponential_buckets;

    #[test]
    fn it_encodes_as_the_locked_histogram_does_from_any_thread() {
        let ours = Histogram::new(exponential_buckets(0.005, 2.0, 15));
        let theirs = prometheus_client::metrics::histogram::Histogram::new(exponential_buckets(
            0.005, 2.0, 15,
        ));
        let values = [0.0, 0.004, 0.005, 0.0051, 0.3, 1.5, 81.92, 1e9, -1.0];
        std::thread::scope(|scope| {
            for chunk in values.chunks(2) {
                let ours = ours.clone();
                scope.spawn(move || {
                    for v in chunk {
                        ours.observe(*v);
                    }
                });
            }
        });
        for v in values {
            theirs.observe(v);
        }
        // The same text but the sum's last digits (added in another order).
        let no_sum = |text: String| {
            text.lines()
                .filter(|l| !l.starts_with("d_sum"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(no_sum(text("d", ours.clone())), no_sum(text("d", theirs)));
        let (sum, count, buckets) = ours.get();
        assert_eq!(count, 9);
        assert_eq!(buckets.last(), Some(&(f64::MAX, 1)));
        assert!((sum - values.iter().sum::<f64>()).abs() < 1e-6);
    }
}

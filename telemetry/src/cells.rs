//! Counts kept per thread group so that the threads that count rarely write one cache
//! line: each thread counts in its own cell (of [`CELLS`], each on its own cache lines),
//! and a read sums the cells. The runtime's workers follow every committed event
//! (`tap.rs`); a shared atomic they all add to moves its cache line between the cores
//! at each addition, which cost telemetry a measured part of its CPU
//! (docs/benchmarks.md, "Telemetry's cost in concurrent pairs").

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Cells per count: threads are spread over them (a runtime's workers, the store's
/// writer, the exporter) so that two threads rarely share one.
pub(crate) const CELLS: usize = 8;

/// The cell of the current thread.
pub(crate) fn cell_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed) % CELLS;
    }
    INDEX.with(|i| *i)
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot(AtomicU64);

/// A monotonic count, counted per thread group and summed when read: a Prometheus
/// counter (it replaces `prometheus_client`'s `Counter`, one atomic shared by every
/// thread, and is encoded as it is) and a figure of the embedding API. Cheap to clone:
/// clones share the count.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counter {
    cells: Arc<[Slot; CELLS]>,
}

impl Counter {
    pub(crate) fn inc(&self) {
        self.inc_by(1);
    }

    pub(crate) fn inc_by(&self, n: u64) {
        self.cells[cell_index()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count: every cell's, summed.
    pub(crate) fn get(&self) -> u64 {
        self.cells.iter().fold(0_u64, |sum, cell| {
            sum.wrapping_add(cell.0.load(Ordering::Relaxed))
        })
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// `metric`'s text as `/metrics` writes it, registered as `name` (for the tests of the
/// metric types here and in `histogram.rs`).
#[cfg(test)]
pub(crate) fn encoded(
    name: &str,
    metric: impl EncodeMetric + TypedMetric + Send + Sync + std::fmt::Debug + 'static,
) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register(name, "m", metric);
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_counts_from_every_thread_and_encodes_as_the_shared_counter_does() {
        let ours = Counter::default();
        let theirs: prometheus_client::metrics::counter::Counter =
            prometheus_client::metrics::counter::Counter::default();
        std::thread::scope(|scope| {
            for t in 0..(2 * CELLS) {
                let ours = ours.clone();
                scope.spawn(move || {
                    for _ in 0..100 {
                        ours.inc();
                    }
                    ours.inc_by(t as u64);
                });
            }
        });
        theirs.inc_by((0..(2 * CELLS) as u64).map(|t| 100 + t).sum());
        assert_eq!(
            ours.get(),
            100 * 2 * CELLS as u64 + (0..2 * CELLS as u64).sum::<u64>()
        );
        assert_eq!(encoded("c", ours), encoded("c", theirs));
    }
}

//! CPU accounting of the load test's outside parts: the model client and the tools run
//! inside the runtime's tasks, so their cost is measured where they run — thread CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) around every poll of the provider's stream and of each
//! tool call — and subtracted from the process's CPU to give the runtime's own CPU per
//! step.
//!
//! The two clock reads per measurement are system calls, and at some forty measured
//! polls per step they add 25–30 µs of CPU per step (measured with and without the
//! meters). About half of that lands inside the measured sections; the rest lands
//! outside them, where it would count as the runtime's own. So every meter counts its
//! measurements, [`outside_overhead`] calibrates the cost each one leaves outside (by
//! measuring empty sections at start-up), and the report subtracts it as
//! `meter_overhead_s`. The calibration runs in a tight loop with warm caches, so it is a
//! lower bound: on this project's 2-vCPU VM it finds about 7 µs per step of the 25–30 µs
//! the meters cost, and the runtime's own figure stays a little high. What tokio's
//! blocking pool runs for a tool (`read_file`'s file read) is measured by
//! [`super::pool`].

use async_trait::async_trait;
use foya_actors::tools::{ProgressSink, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec};
use futures::Stream;
use nix::time::{ClockId, clock_gettime};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// CPU time consumed by the calling thread so far, in nanoseconds (0 if unavailable).
pub(crate) fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0)
    })
}

/// A shared CPU-time counter: nanoseconds measured and the number of measurements.
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    ns: AtomicU64,
    count: AtomicU64,
}

impl CpuMeter {
    /// Runs `f`, adding the thread CPU time it took.
    pub(crate) fn measure<R>(&self, f: impl FnOnce() -> R) -> R {
        let start = thread_cpu_ns();
        let out = f();
        let spent = thread_cpu_ns().saturating_sub(start);
        self.ns.fetch_add(spent, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// Everything measured so far.
    pub(crate) fn total(&self) -> Duration {
        Duration::from_nanos(self.ns.load(Ordering::Relaxed))
    }

    /// How many sections were measured so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// The CPU time one [`CpuMeter::measure`] costs outside the section it measures (the
/// part of its clock reads and bookkeeping no meter counts), calibrated on the calling
/// thread: the median over 5 rounds of the thread CPU time of 2 000 measurements of an
/// empty section, minus what they measured, per measurement.
pub(crate) fn outside_overhead() -> Duration {
    const ROUNDS: usize = 5;
    const PER_ROUND: u32 = 2_000;
    let mut rounds: Vec<u64> = (0..ROUNDS)
        .map(|_| {
            let meter = CpuMeter::default();
            let start = thread_cpu_ns();
            for _ in 0..PER_ROUND {
                meter.measure(|| std::hint::black_box(()));
            }
            let total = thread_cpu_ns().saturating_sub(start);
            let inside = u64::try_from(meter.total().as_nanos()).unwrap_or(u64::MAX);
            total.saturating_sub(inside) / u64::from(PER_ROUND)
        })
        .collect();
    rounds.sort_unstable();
    Duration::from_nanos(rounds[ROUNDS / 2])
}

/// A stream whose polls are measured.
pub(crate) struct Metered<S> {
    pub(crate) inner: S,
    pub(crate) meter: Arc<CpuMeter>,
}

impl<S: Stream + Unpin> Stream for Metered<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        this.meter
            .measure(|| Pin::new(&mut this.inner).poll_next(cx))
    }
}

/// A future whose polls are measured.
struct MeteredFuture<F> {
    inner: F,
    meter: Arc<CpuMeter>,
}

impl<F: Future + Unpin> Future for MeteredFuture<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.meter.measure(|| Pin::new(&mut this.inner).poll(cx))
    }
}

/// A tool whose calls are measured (spec and behaviour unchanged).
#[derive(Debug)]
struct MeteredTool {
    inner: Arc<dyn Tool>,
    meter: Arc<CpuMeter>,
}

#[async_trait]
impl Tool for MeteredTool {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let call = self.inner.call(ctx, args, cancel, progress);
        MeteredFuture {
            inner: call,
            meter: Arc::clone(&self.meter),
        }
        .await
    }
}

/// The built-in tools, each measured by `meter`.
pub(crate) fn metered_builtins(meter: &Arc<CpuMeter>) -> ToolRegistry {
    let builtin = ToolRegistry::builtin();
    let mut registry = ToolRegistry::new();
    for name in builtin.names() {
        if let Some(tool) = builtin.get(&name) {
            registry.register(Arc::new(MeteredTool {
                inner: tool,
                meter: Arc::clone(meter),
            }));
        }
    }
    registry
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures::StreamExt as _;

    #[tokio::test]
    async fn a_metered_stream_counts_the_cpu_of_its_polls() {
        let meter = Arc::new(CpuMeter::default());
        let busy = futures::stream::iter(0..3).map(|i| {
            // Real work inside the poll: hash a buffer a few thousand times.
            let mut x = i as u64;
            for n in 0..200_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(n));
            }
            x
        });
        let mut metered = Metered {
            inner: busy,
            meter: Arc::clone(&meter),
        };
        let mut n = 0;
        while metered.next().await.is_some() {
            n += 1;
        }
        assert_eq!(n, 3);
        assert!(meter.total() > Duration::ZERO);
    }

    #[test]
    fn a_meter_counts_its_measurements_and_the_calibration_finds_their_outside_cost() {
        let meter = CpuMeter::default();
        assert_eq!(meter.measure(|| 7), 7);
        meter.measure(|| ());
        assert_eq!(meter.count(), 2);
        let overhead = outside_overhead();
        // At least a clock read happens outside each measured section; far below a
        // millisecond on any machine.
        assert!(overhead > Duration::ZERO, "{overhead:?}");
        assert!(overhead < Duration::from_millis(1), "{overhead:?}");
    }

    #[test]
    fn metered_builtins_offer_the_same_tools() {
        let meter = Arc::new(CpuMeter::default());
        assert_eq!(
            metered_builtins(&meter).names(),
            ToolRegistry::builtin().names()
        );
    }
}

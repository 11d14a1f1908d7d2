//! CPU accounting of the load test's outside parts: the model client and the tools run
//! inside the runtime's tasks, so their cost is measured where they run — thread CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) around every poll of the provider's stream and of each
//! tool call — and subtracted from the process's CPU to give the runtime's own CPU per
//! step.
//!
//! The two clock reads per poll (one `clock_gettime` system call each, well under a
//! microsecond) are themselves counted partly on each side; at tens of polls per step
//! that is noise next to the numbers reported.

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
fn thread_cpu_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0)
    })
}

/// A shared CPU-time counter.
#[derive(Debug, Default)]
pub(crate) struct CpuMeter(AtomicU64);

impl CpuMeter {
    /// Runs `f`, adding the thread CPU time it took.
    pub(crate) fn measure<R>(&self, f: impl FnOnce() -> R) -> R {
        let start = thread_cpu_ns();
        let out = f();
        let spent = thread_cpu_ns().saturating_sub(start);
        self.0.fetch_add(spent, Ordering::Relaxed);
        out
    }

    /// Everything measured so far.
    pub(crate) fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
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
    fn metered_builtins_offer_the_same_tools() {
        let meter = Arc::new(CpuMeter::default());
        assert_eq!(
            metered_builtins(&meter).names(),
            ToolRegistry::builtin().names()
        );
    }
}

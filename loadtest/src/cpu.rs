//! CPU accounting of the load test's outside parts: the model client and the tools run
//! inside the runtime's tasks, so their cost is measured where they run — thread CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) around polls of the provider's stream and of each tool
//! call — and subtracted from the process's CPU to give the runtime's own CPU per step.
//!
//! The two clock reads of a measurement are system calls. Measuring every one of the
//! some forty polls of a step cost 25–30 µs of CPU per step (measured with and without
//! the meters), most of it landing where it counts as the runtime's own, and a
//! calibration could only find about 7 µs of it. So a meter measures exactly its first
//! [`EXACT_FIRST`] sections and after that a random sample of one section in
//! [`SAMPLE_EVERY`], each sampled section counting `SAMPLE_EVERY` times what it took:
//! the sum stays an unbiased estimate of the CPU the sections took (each section is
//! measured with probability `1 / SAMPLE_EVERY`, drawn independently of what it does),
//! its relative error falls with the square root of the number of samples (about
//! 150 000 in the 10 000-session scenario), and the meters' cost falls by about the
//! sampling factor. Every meter counts the measurements it took, [`outside_overhead`]
//! calibrates the cost each one leaves outside the sections (by measuring empty
//! sections at start-up; a lower bound, since it runs in a tight loop with warm caches),
//! and the report subtracts it as `meter_overhead_s`. What tokio's blocking pool runs
//! for a tool (`read_file`'s file read) is measured by [`super::pool`].
//! The process's own CPU time and its children's (`getrusage`, plus the persistent sandbox
//! helpers' own figures), which every pass reads before and after, are read here too
//! ([`cpu_time`], [`children_cpu_time`]).

use async_trait::async_trait;
use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::tools::{ProgressSink, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec};
use futures::Stream;
use nix::time::{ClockId, clock_gettime};
use std::cell::Cell;
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

/// Sections a meter measures exactly before it starts sampling.
pub(crate) const EXACT_FIRST: u64 = 4_096;

/// After [`EXACT_FIRST`], one section in this many (at random) is measured, and counts
/// this many times what it took.
pub(crate) const SAMPLE_EVERY: u32 = 8;

thread_local! {
    /// State of this thread's sampling generator (xorshift64; never 0).
    static SAMPLER: Cell<u64> = Cell::new(seed());
}

/// A per-thread seed for [`SAMPLER`]: the thread's CPU clock mixed with a counter, so
/// threads draw different sequences; never 0.
fn seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let n = NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    (n ^ thread_cpu_ns().rotate_left(32)) | 1
}

/// True with probability `1 / SAMPLE_EVERY`, independently of the sections measured.
fn sampled() -> bool {
    SAMPLER.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x % u64::from(SAMPLE_EVERY) == 0
    })
}

/// A shared CPU-time counter: the (estimated) nanoseconds its sections took and the
/// number of measurements taken.
///
/// The first [`EXACT_FIRST`] sections are measured exactly; later ones are sampled
/// (module docs), so [`Self::total`] is an unbiased estimate.
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    ns: AtomicU64,
    /// Sections seen, measured or not.
    seen: AtomicU64,
    /// Sections measured (two clock reads each).
    count: AtomicU64,
}

impl CpuMeter {
    /// Runs `f`, adding the thread CPU time it took (or, for a section not sampled,
    /// nothing; a sampled one adds [`SAMPLE_EVERY`] times its time).
    pub(crate) fn measure<R>(&self, f: impl FnOnce() -> R) -> R {
        let weight = if self.seen.fetch_add(1, Ordering::Relaxed) < EXACT_FIRST {
            1
        } else if sampled() {
            u64::from(SAMPLE_EVERY)
        } else {
            return f();
        };
        let start = thread_cpu_ns();
        let out = f();
        let spent = thread_cpu_ns().saturating_sub(start);
        self.ns.fetch_add(spent * weight, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// Everything measured so far.
    pub(crate) fn total(&self) -> Duration {
        Duration::from_nanos(self.ns.load(Ordering::Relaxed))
    }

    /// How many measurements were taken so far (sections not sampled are not counted).
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
    let builtin = ToolRegistry::builtin_with_sandbox(SandboxRunner::this_binary());
    let mut registry = ToolRegistry::new();
    for name in builtin.names() {
        if let Some(tool) = builtin.get(&name) {
            // The same schemas the built-in registry took: never refused.
            let metered = Arc::new(MeteredTool {
                inner: tool,
                meter: Arc::clone(meter),
            });
            if let Err(e) = registry.register(metered) {
                // The target it had as a module of the binary (users filter on it with `RUST_LOG`).
                tracing::error!(target: "foya::loadtest::cpu", error = %e, "a metered built-in tool was refused");
            }
        }
    }
    registry
}

/// User + system CPU time of this process so far (`getrusage(RUSAGE_SELF)`).
pub(crate) fn cpu_time() -> Duration {
    rusage_cpu(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

/// User + system CPU time of this process's child processes so far: those ended and
/// waited for (`getrusage(RUSAGE_CHILDREN)`: each includes its own waited-for children)
/// plus every live persistent sandbox helper's own and its reaped calls'
/// ([`servers_cpu_time`](foya_actors::tools::sandbox::servers_cpu_time)). A `shell`
/// call's helper and command are children of that server, not of this process, so
/// `RUSAGE_CHILDREN` alone would count them only once the server is gone; a server
/// dropped moves from the second figure into the first once reaped, which
/// `servers_cpu_time` waits for (so `RUSAGE_CHILDREN` is read after it). Read it when no
/// server is being dropped (before and after a pass).
pub(crate) async fn children_cpu_time() -> Duration {
    let served = foya_actors::tools::sandbox::servers_cpu_time().await;
    rusage_cpu(nix::sys::resource::UsageWho::RUSAGE_CHILDREN) + served
}

fn rusage_cpu(who: nix::sys::resource::UsageWho) -> Duration {
    use nix::sys::resource::getrusage;
    let Ok(usage) = getrusage(who) else {
        return Duration::ZERO;
    };
    let tv = |t: nix::sys::time::TimeVal| {
        let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
        let micros = u64::try_from(t.tv_usec()).unwrap_or(0);
        Duration::from_secs(secs) + Duration::from_micros(micros)
    };
    tv(usage.user_time()) + tv(usage.system_time())
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
    fn after_its_exact_start_a_meter_samples_one_section_in_eight() {
        let meter = CpuMeter::default();
        let later = 80_000u64;
        let mut ran = 0u64;
        for _ in 0..EXACT_FIRST + later {
            meter.measure(|| ran += 1);
        }
        // Every section ran, measured or not.
        assert_eq!(ran, EXACT_FIRST + later);
        // The first EXACT_FIRST were all measured; of the rest about one in eight
        // (binomial: mean 10 000, standard deviation about 94).
        let sampled = meter.count() - EXACT_FIRST;
        let expected = later / u64::from(SAMPLE_EVERY);
        assert!(
            sampled.abs_diff(expected) < 1_000,
            "{sampled} sampled of {later}, expected about {expected}"
        );
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

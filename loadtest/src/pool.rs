//! CPU accounting of tokio's blocking pool: the file tools (`read_file`, `list_dir`,
//! `glob`, `grep`, …) run their file-system work there (`spawn_blocking`), on threads the
//! tool meter (`cpu.rs`'s `CpuMeter` around each call's polls) never sees. That work
//! is the tools' own, so the load test measures it here and subtracts it from the
//! runtime's own CPU like the rest of the tools' work.
//!
//! tokio runs its worker threads on the same pool as blocking tasks; a thread is a worker
//! once it has parked (tokio calls the park hook only on workers, and every worker parks
//! as soon as it has nothing to do, so long before a load test's first session). Every
//! other thread of the pool is a blocking thread. A live thread's CPU time is read from
//! `/proc/self/task/<tid>/schedstat` (nanoseconds; `stat`'s clock ticks when schedstat is
//! missing); a thread that ended reported its own on the way out.
//!
//! The hooks are installed on the binary's one tokio runtime (`main.rs`) for every
//! command; they cost a lock at thread start and stop and a thread-local check per park.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A live thread of the runtime's pool.
#[derive(Debug)]
struct Thread {
    tid: i32,
    worker: bool,
}

/// The pool's live threads (an ended thread leaves, so a long-running command's list
/// stays as long as its pool).
static THREADS: Mutex<Vec<Thread>> = Mutex::new(Vec::new());

/// CPU time of the blocking threads that ended, in nanoseconds.
static ENDED_BLOCKING_NS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread is already known to be a worker.
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

fn threads() -> std::sync::MutexGuard<'static, Vec<Thread>> {
    THREADS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn this_tid() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// tokio's `on_thread_start` hook.
pub fn thread_started() {
    threads().push(Thread {
        tid: this_tid(),
        worker: false,
    });
}

/// tokio's `on_thread_park` hook (worker threads only).
pub fn worker_parked() {
    if WORKER.with(Cell::get) {
        return;
    }
    WORKER.with(|w| w.set(true));
    let tid = this_tid();
    if let Some(thread) = threads().iter_mut().find(|t| t.tid == tid) {
        thread.worker = true;
    }
}

/// tokio's `on_thread_stop` hook.
pub fn thread_stopped() {
    let spent = super::cpu::thread_cpu_ns();
    let tid = this_tid();
    let mut threads = threads();
    if let Some(index) = threads.iter().position(|t| t.tid == tid)
        && !threads.swap_remove(index).worker
    {
        ENDED_BLOCKING_NS.fetch_add(spent, Ordering::Relaxed);
    }
}

/// CPU time of the live thread `tid` of this process, in nanoseconds.
fn live_cpu_ns(tid: i32) -> u64 {
    let dir = format!("/proc/self/task/{tid}");
    if let Ok(text) = std::fs::read_to_string(format!("{dir}/schedstat"))
        && let Some(ns) = text.split_whitespace().next().and_then(|f| f.parse().ok())
    {
        return ns;
    }
    // `stat` fields 14 and 15 (utime, stime), counted after the `(comm)` field.
    let ticks = std::fs::read_to_string(format!("{dir}/stat"))
        .ok()
        .and_then(|text| {
            let rest = text.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    // /proc reports these in USER_HZ, which Linux fixes at 100 per second.
    ticks * 10_000_000
}

/// CPU time used so far by the pool's blocking threads (live and ended), for the
/// difference between two readings (exact: a thread that ends in between moves from the
/// live sum to the ended sum with its whole CPU time).
pub(crate) fn blocking_cpu() -> Duration {
    let (live, ended): (Vec<i32>, u64) = {
        let threads = threads();
        let live = threads
            .iter()
            .filter(|t| !t.worker)
            .map(|t| t.tid)
            .collect();
        (live, ENDED_BLOCKING_NS.load(Ordering::Relaxed))
    };
    Duration::from_nanos(ended + live.into_iter().map(live_cpu_ns).sum::<u64>())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The hooks on a runtime of its own: a blocking task's CPU is counted, the workers'
    /// is not.
    #[test]
    fn blocking_threads_are_counted_and_workers_are_not() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .on_thread_start(thread_started)
            .on_thread_stop(thread_stopped)
            .on_thread_park(worker_parked)
            .build()
            .unwrap();
        let busy = |n: u64| {
            let mut x = n;
            for i in 0..30_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
            }
            x
        };
        // The worker parks as soon as it has nothing to do.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !threads().iter().any(|t| t.worker) {
            assert!(
                std::time::Instant::now() < deadline,
                "the worker never parked"
            );
            std::thread::yield_now();
        }
        let before = blocking_cpu();
        // Worker CPU: not counted.
        runtime.block_on(async move { tokio::spawn(async move { busy(1) }).await.unwrap() });
        let after_worker = blocking_cpu();
        // Blocking-pool CPU: counted.
        runtime
            .block_on(async move { tokio::task::spawn_blocking(move || busy(2)).await.unwrap() });
        let after_blocking = blocking_cpu();
        let counted = after_blocking.saturating_sub(after_worker);
        let leaked = after_worker.saturating_sub(before);
        assert!(
            counted > leaked * 10 && counted > Duration::from_millis(5),
            "blocking {counted:?}, worker leaked {leaked:?}"
        );
    }
}

//! Durable append throughput next to the disk's raw fsync rate.
//!
//! - `durable_append/sessions/N`: N sessions each append one single-event batch
//!   concurrently per iteration, `Durability::Immediate`; throughput = appends/s. With
//!   group commit, N appends share few fsyncs, so appends/s grows with N while
//!   `disk/fsync_100_bytes` (write 100 bytes + `sync_all`, fsyncs/s) bounds N = 1;
//!   `disk/fdatasync_100_bytes` is the same with `sync_data`, which is what redb calls.
//!
//! Files live under cargo's `CARGO_TARGET_TMPDIR` (the real disk, not a tmpfs).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use foya_protocol::{Event, EventKind, Seq, SessionConfig, SessionId};
use foya_storage::{Durability, Store, StoreOptions};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::JoinSet;

fn event(session: SessionId, seq: u64) -> Event {
    let kind = if seq == 1 {
        EventKind::SessionCreated {
            config: SessionConfig::new("/work/project"),
        }
    } else {
        EventKind::ToolUpdate {
            tool_call_id: foya_protocol::ToolCallId::new("call_1"),
            message: "x".repeat(64),
        }
    };
    Event {
        session_id: session,
        seq: Seq(seq),
        run_id: None,
        at_ms: seq,
        kind,
    }
}

fn durable_append(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut group = c.benchmark_group("durable_append");
    group.sample_size(10).warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for sessions in [1usize, 50, 500] {
        let options = StoreOptions {
            durability: Durability::Immediate,
            ..StoreOptions::default()
        };
        let store =
            Store::open(&dir.path().join(format!("append-{sessions}.redb")), options).unwrap();
        let ids: Arc<Vec<SessionId>> = Arc::new((0..sessions).map(|_| SessionId::new()).collect());
        runtime.block_on(async {
            for id in ids.iter() {
                store.append(vec![event(*id, 1)]).await.unwrap();
            }
        });
        let next: Arc<Vec<AtomicU64>> =
            Arc::new((0..sessions).map(|_| AtomicU64::new(2)).collect());
        group.throughput(Throughput::Elements(sessions as u64));
        group.bench_function(BenchmarkId::new("sessions", sessions), |b| {
            b.to_async(&runtime).iter(|| {
                let (store, ids, next) = (store.clone(), Arc::clone(&ids), Arc::clone(&next));
                async move {
                    let mut appends = JoinSet::new();
                    for (i, id) in ids.iter().enumerate() {
                        let seq = next[i].fetch_add(1, Ordering::Relaxed);
                        let (store, id) = (store.clone(), *id);
                        appends.spawn(async move { store.append(vec![event(id, seq)]).await });
                    }
                    while let Some(done) = appends.join_next().await {
                        done.unwrap().unwrap();
                    }
                }
            });
        });
        let stats = store.stats();
        eprintln!(
            "durable_append/sessions/{sessions}: {} events in {} commits ({:.1} events/commit)",
            stats.appended_events,
            stats.commits,
            stats.appended_events as f64 / stats.commits.max(1) as f64
        );
        runtime.block_on(store.close());
    }
    group.finish();
}

fn disk_fsync(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut file = std::fs::File::create(dir.path().join("fsync.bin")).unwrap();
    let mut group = c.benchmark_group("disk");
    group.sample_size(10).warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));
    group.bench_function("fsync_100_bytes", |b| {
        b.iter(|| {
            file.write_all(&[7u8; 100]).unwrap();
            file.sync_all().unwrap();
        });
    });
    // redb syncs with `sync_data` (fdatasync), which skips metadata-only updates.
    group.bench_function("fdatasync_100_bytes", |b| {
        b.iter(|| {
            file.write_all(&[7u8; 100]).unwrap();
            file.sync_data().unwrap();
        });
    });
    group.finish();
}

criterion_group!(benches, disk_fsync, durable_append);
criterion_main!(benches);

//! `foya loadtest --compare-floor`: the work the specification demands of the runtime's
//! turns, done again with no runtime around it, and its CPU.
//!
//! After the runtime's pass, every session's log is read back from the runtime's store
//! (before the timed section) and replayed, session by session, at the same
//! concurrency (`--concurrency` turns at once):
//!
//! - **model streams**: for each model request of a turn (each `assistant_message`
//!   and `provider_retry`), session 0's request of that turn ([`super::probe::Captured`],
//!   as `--compare-bare` replays them) is sent again and its stream read to the end — the
//!   in-process simulator's stream of events for `--provider sim`, the raw SSE bytes of
//!   the same HTTP endpoint otherwise (no decoding);
//! - **events**: the same events are appended to a fresh redb store through
//!   `foya_storage` with the same options (durability, group commit), in the groups the
//!   session commits them ([`groups`]), one append after another per session, each
//!   awaited before the session goes on, as the session does;
//! - **tool calls**: the calls the runtime ran (those with a `tool_started`) are run
//!   again after their step's append ([`tools`]): the same files read, the same commands
//!   started through the same sandbox helper; a step's calls at once.
//!
//! Nothing else: no actors, no subscriptions, no context building, no request encoding
//! (the bodies are encoded before the timed section), no event decoding. Its process CPU
//! per turn, with the CPU of the child processes it waited for, is the floor; the report
//! gives the runtime's CPU per turn (children included) as a multiple of it.

mod groups;
mod tools;

pub(crate) use groups::groups;
pub(crate) use tools::FloorTools;

use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{Event, EventKind, ToolCall};
use foya_storage::{Store, StoreOptions};
use futures::StreamExt as _;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tools::ToolWork;

/// Where the floor reads its model streams from.
#[derive(Debug, Clone)]
pub(crate) enum Model {
    /// The in-process simulator (the runtime's client, without the probe).
    Sim(Arc<dyn ModelClient>),
    /// The same HTTP endpoint, read as raw bytes (`--compare-bare`'s client).
    Http(Arc<super::bare::Replay>),
}

/// What the floor pass did and what it cost.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct FloorReport {
    /// Turns replayed (`turn_started` events).
    pub(crate) turns: u64,
    /// Model streams read to the end.
    pub(crate) model_requests: u64,
    /// Model streams that failed (HTTP error or a stream that ended in an error).
    pub(crate) model_requests_failed: u64,
    /// Events appended to the floor's store (the runtime's `events_persisted`).
    pub(crate) events_appended: u64,
    /// Appends made (one per commit group of a session).
    pub(crate) appends: u64,
    /// Write transactions of the floor's store (group commit joins appends).
    pub(crate) commits: u64,
    /// Files read (`read_file` calls).
    pub(crate) files_read: u64,
    /// Processes started through the sandbox helper and reaped (`shell` calls).
    pub(crate) processes: u64,
    /// Tool calls that failed when replayed.
    pub(crate) tool_calls_failed: u64,
    /// Tool calls of tools the floor does not replay (neither `read_file` nor `shell`).
    pub(crate) tool_calls_skipped: u64,
    /// Wall time of the pass, in seconds.
    pub(crate) wall_s: f64,
    /// Process CPU time of the pass (user + system), in seconds.
    pub(crate) cpu_s: f64,
    /// CPU time of its child processes (sandbox helpers and commands), counted as the
    /// runtime's `children_cpu_s` is.
    pub(crate) children_cpu_s: f64,
    /// CPU time of the floor store's writer thread (part of `cpu_s`).
    pub(crate) storage_cpu_s: f64,
    /// `cpu_s` + `children_cpu_s` per turn, in microseconds.
    pub(crate) cpu_us_per_turn: f64,
}

/// Inputs of the floor pass.
#[derive(Debug)]
pub(crate) struct Floor {
    pub(crate) model: Model,
    /// Session 0's requests by turn.
    pub(crate) captured: Vec<Vec<ModelRequest>>,
    /// Every session's log, as the runtime persisted it.
    pub(crate) logs: Vec<Vec<Event>>,
    pub(crate) tools: FloorTools,
    pub(crate) concurrency: usize,
}

/// One session's share of the counts.
#[derive(Debug, Default)]
struct Counts {
    turns: u64,
    requests: (u64, u64),
    tools: ToolWork,
    failure: Option<String>,
}

impl Floor {
    /// Replays every log into a new store at `path` opened with `options`.
    ///
    /// # Errors
    /// The store cannot be opened; an append failed; nothing to replay.
    pub(crate) async fn run(
        self,
        path: &Path,
        options: StoreOptions,
    ) -> anyhow::Result<FloorReport> {
        anyhow::ensure!(
            self.captured.iter().any(|turn| !turn.is_empty()),
            "--compare-floor: the runtime pass sent no model request to replay"
        );
        let store = Store::open(path, options)?;
        let turns: u64 = self.logs.iter().map(|log| turns_in(log)).sum();
        let logs = self.logs;
        let floor = Arc::new(Shared {
            model: self.model,
            captured: self.captured,
            tools: self.tools,
            permits: Semaphore::new(self.concurrency.max(1)),
            store: store.clone(),
        });
        let cpu_before = super::cpu::cpu_time();
        let children_before = super::cpu::children_cpu_time().await;
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for log in logs {
            tasks.spawn(replay(Arc::clone(&floor), log));
        }
        let mut report = FloorReport::default();
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            let counts = joined.unwrap_or_else(|e| Counts {
                failure: Some(e.to_string()),
                ..Counts::default()
            });
            report.model_requests += counts.requests.0;
            report.model_requests_failed += counts.requests.1;
            report.files_read += counts.tools.files_read;
            report.processes += counts.tools.processes;
            report.tool_calls_failed += counts.tools.failed;
            report.tool_calls_skipped += counts.tools.skipped;
            failure = failure.or(counts.failure);
        }
        report.wall_s = started.elapsed().as_secs_f64();
        report.cpu_s = since(cpu_before, super::cpu::cpu_time());
        report.children_cpu_s = since(children_before, super::cpu::children_cpu_time().await);
        report.storage_cpu_s = store.writer_cpu().as_secs_f64();
        let stats = store.stats();
        report.events_appended = stats.appended_events;
        report.commits = stats.commits;
        report.appends = store.appends_committed();
        report.turns = turns;
        if turns > 0 {
            report.cpu_us_per_turn = (report.cpu_s + report.children_cpu_s) * 1e6 / turns as f64;
        }
        store.close().await;
        if let Some(failure) = failure {
            anyhow::bail!("--compare-floor: a replayed append failed: {failure}");
        }
        Ok(report)
    }
}

/// Every session's log in `store` (read before the timed section).
///
/// # Errors
/// A log cannot be read.
pub(crate) fn read_logs(store: &Store) -> anyhow::Result<Vec<Vec<Event>>> {
    store
        .list_sessions()?
        .into_iter()
        .map(|session| Ok(store.read_from(session.id, foya_protocol::Seq::FIRST)?))
        .collect()
}

fn since(before: std::time::Duration, now: std::time::Duration) -> f64 {
    now.saturating_sub(before).as_secs_f64()
}

fn turns_in(log: &[Event]) -> u64 {
    log.iter()
        .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
        .count() as u64
}

/// What the session replays share.
#[derive(Debug)]
struct Shared {
    model: Model,
    captured: Vec<Vec<ModelRequest>>,
    tools: FloorTools,
    /// Turns at once (`--concurrency`), as the load driver holds one per turn.
    permits: Semaphore,
    store: Store,
}

impl Shared {
    /// Reads the stream of session 0's request `sent` of turn `turn` to its end (the
    /// last captured one past the end of either); `None` when there is none, else
    /// whether it ended well.
    async fn stream(&self, turn: usize, sent: usize) -> Option<bool> {
        let requests = self.captured.get(turn).or_else(|| self.captured.last())?;
        let request = requests.get(sent).or_else(|| requests.last())?;
        Some(match &self.model {
            Model::Sim(client) => {
                let mut stream = client.stream(request.clone(), CancellationToken::new());
                let mut ok = true;
                while let Some(event) = stream.next().await {
                    ok &= !matches!(event, foya_protocol::StreamEvent::Error { .. });
                }
                ok
            }
            Model::Http(replay) => replay.send_of(turn, sent).await.is_some(),
        })
    }
}

/// Replays one session's log.
async fn replay(floor: Arc<Shared>, log: Vec<Event>) -> Counts {
    let mut counts = Counts::default();
    let mut calls: HashMap<&str, &ToolCall> = HashMap::new();
    // The turn in flight: its index, its permit and how many of its requests were read.
    let mut turn: Option<(usize, tokio::sync::SemaphorePermit<'_>, usize)> = None;
    for group in groups(&log) {
        if group
            .iter()
            .any(|e| matches!(e.kind, EventKind::UserMessage { .. }))
        {
            let Ok(permit) = floor.permits.acquire().await else {
                break;
            };
            turn = Some((counts.turns as usize, permit, 0));
            counts.turns += 1;
        }
        let requests = group.iter().filter(|e| is_model_request(&e.kind)).count();
        if let Some((index, _, sent)) = &mut turn {
            for _ in 0..requests {
                match floor.stream(*index, *sent).await {
                    Some(true) => counts.requests.0 += 1,
                    Some(false) => counts.requests.1 += 1,
                    None => {}
                }
                *sent += 1;
            }
        }
        if let Err(e) = floor.store.append_all(group).await {
            counts.failure = Some(e.to_string());
            return counts;
        }
        let started = started_calls(group, &mut calls);
        let work = futures::future::join_all(started.iter().map(|c| floor.tools.run(c))).await;
        for w in work {
            counts.tools.add(w);
        }
        if group
            .iter()
            .any(|e| matches!(e.kind, EventKind::TurnComplete { .. }))
        {
            turn = None;
        }
    }
    counts
}

/// Whether this event stands for one model request (a step's answer, or a failed
/// attempt that is retried).
fn is_model_request(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::AssistantMessage(_) | EventKind::ProviderRetry { .. }
    )
}

/// The calls `group` starts (its `tool_started`), looked up in the calls the model asked
/// for so far (remembered in `calls`).
fn started_calls<'a>(
    group: &'a [Event],
    calls: &mut HashMap<&'a str, &'a ToolCall>,
) -> Vec<&'a ToolCall> {
    let mut started = Vec::new();
    for event in group {
        match &event.kind {
            EventKind::AssistantMessage(message) => {
                calls.extend(message.tool_calls.iter().map(|c| (c.id.as_str(), c)));
            }
            EventKind::ToolStarted { tool_call_id, .. } => {
                started.extend(calls.get(tool_call_id.as_str()).copied());
            }
            _ => {}
        }
    }
    started
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

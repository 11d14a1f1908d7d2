//! One load-test session: create it, subscribe, submit its turns one after another and
//! count what the subscriber sees (steps, tools, retries, failures, relay latency; a
//! tool result that is an error counts as a `tool_error`).
//!
//! Counts: `tool_calls` is every call the model asked for (the calls of each
//! `assistant_message`, whether they ran or were refused before running: bad arguments,
//! unknown tool, denied, blocked by run protection); `tool_calls_run` only those that
//! ran (`tool_finished`). When the run is stopped, the driver cancels its turn in flight
//! and keeps counting until that turn's `turn_complete`: every model request the turn
//! started has its `step_started` committed before it (so its step is counted), and
//! none starts after the turn ended, so `steps` and `model_requests` agree (a stopped
//! driver that left at once missed the steps the runtime went on with).

use super::probe::{self, Slots};
use super::timeline::Timeline;
use foya_actors::{Runtime, SessionHandle, SubscribeOptions, Subscription};
use foya_protocol::{
    ApprovalMode, Delta, EventKind, Input, Seq, SessionConfig, SessionUpdate, TurnStatus,
};
use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// What every session driver shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) runtime: Runtime,
    pub(crate) slots: Slots,
    pub(crate) turns: u32,
    pub(crate) cwd: PathBuf,
    pub(crate) model: String,
    /// Limits the turns running at once (`--concurrency`).
    pub(crate) permits: Semaphore,
    /// Cancelled by Ctrl-C or `--duration`.
    pub(crate) stop: CancellationToken,
    pub(crate) progress: ProgressBar,
    /// CPU the drivers spend handling received updates (the load generator's own work,
    /// not the runtime's).
    pub(crate) driver_cpu: Arc<super::cpu::CpuMeter>,
    /// When the run started: the drivers' [`Timeline`]s count from it.
    pub(crate) started: Instant,
    /// The sessions' MCP servers (`--mcp`/`--no-mcp`).
    pub(crate) mcp_servers: Option<Vec<String>>,
    /// The sessions' approval mode (`--approval`, default `read-only`).
    pub(crate) approval: ApprovalMode,
}

/// What one session driver counted.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The session's index.
    pub(crate) index: usize,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) interrupted: u64,
    pub(crate) steps: u64,
    /// Tool calls the model asked for (run or refused before running).
    pub(crate) tool_calls: u64,
    /// Tool calls that ran (`tool_finished`).
    pub(crate) tool_calls_run: u64,
    /// Turns that asked for tool calls of which none ran (all refused: read-only mode,
    /// denied approvals, bad arguments, run protection).
    pub(crate) turns_tools_refused: u64,
    /// Tool calls asked for and run in the turn in flight.
    pub(crate) turn_calls: (u64, u64),
    pub(crate) deltas: u64,
    /// Tool time (sum of `tool_finished.duration_ms`) of each step that called tools, in
    /// order; pairs with the probe's gaps.
    pub(crate) tool_ms: Vec<u64>,
    /// Relay latencies, in milliseconds.
    pub(crate) relay_ms: Vec<f64>,
    pub(crate) errors: BTreeMap<String, u64>,
    /// The first message seen for each error class.
    pub(crate) error_examples: BTreeMap<String, String>,
    pub(crate) retries: BTreeMap<String, u64>,
    /// When turns completed, steps started and errors happened (the HTML report).
    pub(crate) timeline: Timeline,
}

impl Outcome {
    fn error(&mut self, class: &str) {
        *self.errors.entry(class.to_owned()).or_default() += 1;
        self.timeline.error(class);
    }

    /// Drops the spare capacity of what the report keeps until every driver is done.
    fn shrink(&mut self) {
        self.tool_ms.shrink_to_fit();
        self.relay_ms.shrink_to_fit();
        self.timeline.turns_s.shrink_to_fit();
        self.timeline.steps_s.shrink_to_fit();
    }

    /// [`Self::error`], keeping `message` as the class's example if it has none yet.
    fn error_with(&mut self, class: &str, message: impl std::fmt::Display) {
        self.error(class);
        self.error_examples
            .entry(class.to_owned())
            .or_insert_with(|| message.to_string());
    }
}

/// `text` on one line (its non-empty lines trimmed and joined by a space), cut to at most
/// `max` characters with `…` at the end when cut: an error example for the report.
fn one_line(text: &str, max: usize) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if joined.chars().count() <= max {
        return joined;
    }
    let mut cut: String = joined.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Drives session `index` through its turns; stops early when `shared.stop` fires.
pub(crate) async fn drive(index: usize, shared: Arc<Shared>) -> Outcome {
    let mut out = Outcome {
        index,
        timeline: Timeline::since(shared.started),
        ..Outcome::default()
    };
    let mut config = SessionConfig::new(shared.cwd.clone());
    config.approval_mode = shared.approval;
    config.provider = "loadtest".into();
    config.model.clone_from(&shared.model);
    config.title = Some(format!("loadtest {index}"));
    config.mcp_servers.clone_from(&shared.mcp_servers);
    let created = tokio::select! {
        () = shared.stop.cancelled() => {
            out.interrupted = u64::from(shared.turns);
            return out;
        }
        // Boxed, like the subscription and each turn below: every driver task is spawned
        // at the start and most wait a while for their session, so only what a driver
        // is doing now should take memory (`drive_holds_little_while_it_waits`).
        created = Box::pin(shared.runtime.create_session(config)) => created,
    };
    let session = match created {
        Ok(session) => session,
        Err(e) => {
            out.error_with("create_session", e);
            out.failed = u64::from(shared.turns);
            return out;
        }
    };
    let mut updates =
        match Box::pin(session.subscribe(Seq::FIRST, SubscribeOptions::default())).await {
            Ok(updates) => updates,
            Err(e) => {
                out.error_with("subscribe", e);
                out.failed = u64::from(shared.turns);
                return out;
            }
        };
    for turn in 0..shared.turns {
        let permit = tokio::select! {
            () = shared.stop.cancelled() => None,
            permit = shared.permits.acquire() => permit.ok(),
        };
        let Some(_permit) = permit else {
            out.interrupted += u64::from(shared.turns - turn);
            break;
        };
        let text = probe::user_text(index, turn);
        if let Err(e) = Box::pin(session.submit(Input::text(text))).await {
            out.error_with("submit", e);
            out.failed += 1;
            continue;
        }
        match Box::pin(run_turn(index, &shared, &session, &mut updates, &mut out)).await {
            TurnEnd::Done => shared.progress.inc(1),
            TurnEnd::Stopped => {
                out.interrupted += u64::from(shared.turns - turn);
                break;
            }
            TurnEnd::Lost => {
                out.failed += u64::from(shared.turns - turn);
                break;
            }
        }
    }
    // Kept until the report: no spare capacity (about 240 bytes a session).
    out.shrink();
    out
}

/// How one driven turn ended (the in-process driver's and `--through`'s).
pub(crate) enum TurnEnd {
    /// `turn_complete` arrived (counted as completed or failed).
    Done,
    /// The run was stopped (the turn in flight was cancelled and its end received).
    Stopped,
    /// The turn's end was not seen: the subscription ended (lagged or closed), or over
    /// HTTP its input was refused or its stream lost.
    Lost,
}

/// Receives until the turn in flight completes. When the run is stopped meanwhile, the
/// turn is cancelled and counted until its `turn_complete` (then `Stopped`, unless it
/// had ended on its own first).
async fn run_turn(
    index: usize,
    shared: &Shared,
    session: &SessionHandle,
    updates: &mut Subscription,
    out: &mut Outcome,
) -> TurnEnd {
    let mut step_tool_ms = 0u64;
    let mut stopping = false;
    loop {
        let update = if stopping {
            updates.recv().await
        } else {
            tokio::select! {
                () = shared.stop.cancelled() => {
                    stopping = true;
                    // An error means the session is gone: its subscription ends too.
                    let _ = session.cancel().await;
                    continue;
                }
                update = updates.recv() => update,
            }
        };
        let Some(update) = update else {
            out.error("subscription_closed");
            return TurnEnd::Lost;
        };
        let handled = shared
            .driver_cpu
            .measure(|| handle(index, shared, update, &mut step_tool_ms, stopping, out));
        if let Some(end) = handled {
            return end;
        }
    }
}

/// Counts one update; `Some` when the turn in flight ended (or the subscription is lost).
/// `stopping`: the run was stopped and the driver cancelled the turn, whose cancelled
/// end is then `Stopped` (interrupted), not a failure.
fn handle(
    index: usize,
    shared: &Shared,
    update: SessionUpdate,
    step_tool_ms: &mut u64,
    stopping: bool,
    out: &mut Outcome,
) -> Option<TurnEnd> {
    match update {
        SessionUpdate::Delta(delta) => {
            out.deltas += 1;
            if let Delta::TextDelta { .. } = delta.delta {
                let now = Instant::now();
                let emitted = probe::lock(&shared.slots[index]).emits.pop_front();
                if let Some(at) = emitted {
                    out.relay_ms
                        .push(now.saturating_duration_since(at).as_secs_f64() * 1e3);
                }
            }
        }
        SessionUpdate::Notice(notice) => {
            match notice {
                foya_protocol::event::Notice::Lagged { last_seq, .. } => out.error_with(
                    "lagged",
                    format!(
                        "the load driver's subscriber fell behind after seq {}: more updates \
                         at once than --subscriber-buffer holds (raise it, or lower \
                         --response-tokens / --tool-calls-per-step)",
                        last_seq.0
                    ),
                ),
                foya_protocol::event::Notice::Closed { reason, .. } => {
                    out.error_with("subscription_closed", reason);
                }
                foya_protocol::event::Notice::Moved { reason, .. } => {
                    out.error_with("session_moved", reason);
                }
            }
            return Some(TurnEnd::Lost);
        }
        SessionUpdate::Event(event) => match event.kind {
            EventKind::StepStarted { step } => {
                out.steps += 1;
                out.timeline.step_started();
                if step > 1 {
                    out.tool_ms.push(std::mem::take(step_tool_ms));
                }
            }
            EventKind::AssistantMessage(message) => {
                let calls = u64::try_from(message.tool_calls.len()).unwrap_or(u64::MAX);
                out.tool_calls += calls;
                out.turn_calls.0 += calls;
            }
            EventKind::ToolFinished { duration_ms, .. } => {
                out.tool_calls_run += 1;
                out.turn_calls.1 += 1;
                *step_tool_ms += duration_ms;
            }
            // A tool call that failed or was not run (e.g. blocked by run protection):
            // the load test's tool work did not happen as configured. Not the calls the
            // driver's own cancel ends once the run was stopped.
            EventKind::ToolMessage(message) if message.is_error && !stopping => {
                out.error_with("tool_error", one_line(&message.content, 300));
            }
            EventKind::ProviderRetry { error, .. } => {
                *out.retries
                    .entry(error.class.as_str().to_owned())
                    .or_default() += 1;
                out.timeline.retry(error.class.as_str());
            }
            EventKind::TurnComplete {
                status: TurnStatus::Cancelled,
                ..
            } if stopping => {
                probe::lock(&shared.slots[index]).forget_emits();
                return Some(TurnEnd::Stopped);
            }
            EventKind::TurnComplete { status, error, .. } => {
                let (asked, ran) = std::mem::take(&mut out.turn_calls);
                if asked > 0 && ran == 0 {
                    out.turns_tools_refused += 1;
                }
                match (status, error) {
                    (TurnStatus::Completed, _) => {
                        out.completed += 1;
                        out.timeline.turn_completed();
                    }
                    (TurnStatus::Cancelled, _) => {
                        out.failed += 1;
                        out.error("cancelled");
                    }
                    (TurnStatus::Failed, Some(error)) => {
                        out.failed += 1;
                        out.error_with(error.class.as_str(), &error.message);
                    }
                    (TurnStatus::Failed, None) => {
                        out.failed += 1;
                        out.error("unknown");
                    }
                }
                // Chunks of a response the runtime dropped (a cut stream) never
                // reach a subscriber: start the next turn's matching afresh.
                probe::lock(&shared.slots[index]).forget_emits();
                return Some(TurnEnd::Done);
            }
            _ => {}
        },
    }
    None
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod driver_tests;

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn an_error_example_keeps_every_line_on_one_and_marks_a_cut() {
        // A tool's validation error: the reason is on the lines after an empty-ish first.
        let text = "invalid arguments for `read_file`:\n  - \"path\" is a required property\n\n  - 'file' was unexpected\n";
        assert_eq!(
            one_line(text, 300),
            "invalid arguments for `read_file`: - \"path\" is a required property - 'file' was unexpected"
        );
        assert_eq!(one_line("abcdef", 6), "abcdef");
        assert_eq!(one_line("abcdefg", 6), "abcde…");
        assert_eq!(one_line("ééééééé", 4), "ééé…");
        assert_eq!(one_line("\n \n", 10), "");
    }
}

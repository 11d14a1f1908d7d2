//! The Prometheus metrics (`prometheus-client`): what the event deriver, the model
//! wrapper and the store wrapper count, encoded as OpenMetrics text for `GET /metrics`.
//! Labels are bounded: statuses, classes, decisions, hook points, and tool names (at most
//! [`MAX_TOOL_LABELS`] distinct; later ones count as `other`). No session id is a label.

use crate::cells::Counter;
use crate::histogram::Histogram;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinct tool names kept as label values; further names count as `other`.
pub const MAX_TOOL_LABELS: usize = 64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StateLabels {
    pub(crate) state: String,
}

/// What the runtime itself counts (read at each scrape, no actor asked).
#[derive(Debug, Clone)]
pub(crate) struct RuntimeSource {
    pub(crate) stats: foya_actors::StatsSource,
    pub(crate) mcp: Option<std::sync::Arc<foya_actors::mcp::McpManager>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StatusLabels {
    pub(crate) status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ClassLabels {
    pub(crate) class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToolLabels {
    pub(crate) tool: String,
    pub(crate) outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ToolNameLabels {
    pub(crate) tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HookLabels {
    pub(crate) hook_event: String,
    pub(crate) decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    pub(crate) decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TriggerLabels {
    pub(crate) trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DirectionLabels {
    pub(crate) direction: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, 5 ms to about 80 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Store appends: 0.1 ms to about 3 s.
fn store_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

/// Events per append: 1 to 512.
fn sizes() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 10))
}

/// The figures the embedding API reads ([`crate::Telemetry::figures`]): the same counts
/// `/metrics` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Figures {
    /// Turns started.
    pub turns_started: u64,
    /// Turns finished, by status (`completed`, `cancelled`, `failed`).
    pub turns_finished: BTreeMap<String, u64>,
    /// Turns running now.
    pub turns_active: u64,
    /// Inputs waiting in session queues (seen queued by this process).
    pub inputs_queued: u64,
    /// Approval requests waiting for a decision.
    pub approvals_pending: u64,
    /// Model requests (steps) answered.
    pub steps: u64,
    /// Tool calls, by (tool, outcome).
    pub tool_calls: BTreeMap<(String, String), u64>,
    /// Provider errors by class (every failed attempt, retried or not).
    pub provider_errors: BTreeMap<String, u64>,
    /// Model request retries.
    pub retries: u64,
    /// Hook runs, by (hook point, decision).
    pub hook_runs: BTreeMap<(String, String), u64>,
    /// Compactions.
    pub compactions: u64,
    /// Sessions loaded now (the runtime's own count; 0 before a runtime is joined).
    pub sessions_live: u64,
    /// Sessions the runtime hibernated and did not load since.
    pub sessions_hibernated: u64,
    /// The runtime's MCP servers by state (`not_started`, `running`, `failed`,
    /// `stopped`).
    pub mcp_servers: BTreeMap<String, u64>,
}

/// Every metric, registered once.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) turns_started: Counter,
    pub(crate) turns_finished: Family<StatusLabels, Counter>,
    pub(crate) turn_duration: Histograms<StatusLabels>,
    pub(crate) turns_active: Gauge,
    pub(crate) inputs_queued: Gauge,
    pub(crate) approvals_pending: Gauge,
    pub(crate) sessions_live: Gauge,
    pub(crate) sessions_hibernated: Gauge,
    pub(crate) mcp_servers: Family<StateLabels, Gauge>,
    /// The runtime joined by `Telemetry::instrument`: the live gauges come from it.
    pub(crate) runtime: std::sync::OnceLock<RuntimeSource>,
    pub(crate) approvals: Family<DecisionLabels, Counter>,
    pub(crate) approval_wait: Histogram,
    pub(crate) step_duration: Histogram,
    pub(crate) ttft: Histogram,
    pub(crate) model_request_duration: Histogram,
    pub(crate) provider_errors: Family<ClassLabels, Counter>,
    pub(crate) retries: Family<ClassLabels, Counter>,
    pub(crate) tokens: Family<DirectionLabels, Counter>,
    pub(crate) tool_calls: Family<ToolLabels, Counter>,
    pub(crate) tool_duration: Histograms<ToolNameLabels>,
    pub(crate) hook_runs: Family<HookLabels, Counter>,
    pub(crate) hook_duration: Histograms<HookLabels>,
    pub(crate) compactions: Family<TriggerLabels, Counter>,
    pub(crate) sessions_created: Counter,
    pub(crate) sessions_deleted: Counter,
    pub(crate) store_append: Histogram,
    pub(crate) store_append_events: Histogram,
    pub(crate) store_commit: Histogram,
    pub(crate) store_commit_events: Histogram,
    pub(crate) store_commit_appends: Histogram,
    pub(crate) store_append_errors: Counter,
    store_commits: Counter,
    store_events: Counter,
    pub(crate) dropped_events: Counter,
    /// The last store counters read, for the deltas of `store_commits` / `store_events`.
    store_seen: (AtomicU64, AtomicU64),
    /// Tool names used as labels so far.
    tools: Mutex<BTreeSet<String>>,
    /// The embedding API's tool call figures by tool name, by outcome ([`OUTCOMES`]):
    /// atomics each deriver's handles count in without a lock (merged by
    /// [`Self::snapshot`]).
    tool_figures: Mutex<BTreeMap<String, std::sync::Arc<ToolFigures>>>,
    /// The store whose counters `foya_store_commits` and `foya_store_events` follow, read
    /// at each scrape ([`Self::refresh`]) rather than on every append.
    pub(crate) store: std::sync::OnceLock<foya_storage::LogStore>,
    pub(crate) figures: Mutex<Figures>,
    /// The figures counted on every turn, without the figures' lock (merged into them by
    /// [`Self::snapshot`]).
    pub(crate) counts: FigureCounts,
}

/// The per-turn figures, counted per thread group.
#[derive(Debug, Default)]
pub(crate) struct FigureCounts {
    pub(crate) turns_started: Counter,
    pub(crate) steps: Counter,
    pub(crate) retries: Counter,
    pub(crate) compactions: Counter,
    /// Turns finished by status: completed, cancelled, failed.
    pub(crate) finished: [Counter; 3],
}

/// The statuses of [`FigureCounts::finished`], in its order.
pub(crate) const STATUSES: [&str; 3] = ["completed", "cancelled", "failed"];

impl FigureCounts {
    pub(crate) fn inc(counter: &Counter) {
        counter.inc();
    }
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            turns_started: Counter::default(),
            turns_finished: Family::default(),
            turn_duration: Family::new_with_constructor(seconds),
            turns_active: Gauge::default(),
            inputs_queued: Gauge::default(),
            approvals_pending: Gauge::default(),
            sessions_live: Gauge::default(),
            sessions_hibernated: Gauge::default(),
            mcp_servers: Family::default(),
            runtime: std::sync::OnceLock::new(),
            approvals: Family::default(),
            approval_wait: seconds(),
            step_duration: seconds(),
            ttft: seconds(),
            model_request_duration: seconds(),
            provider_errors: Family::default(),
            retries: Family::default(),
            tokens: Family::default(),
            tool_calls: Family::default(),
            tool_duration: Family::new_with_constructor(seconds),
            hook_runs: Family::default(),
            hook_duration: Family::new_with_constructor(seconds),
            compactions: Family::default(),
            sessions_created: Counter::default(),
            sessions_deleted: Counter::default(),
            store_append: store_seconds(),
            store_append_events: sizes(),
            store_commit: store_seconds(),
            store_commit_events: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            store_commit_appends: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            store_append_errors: Counter::default(),
            store_commits: Counter::default(),
            store_events: Counter::default(),
            dropped_events: Counter::default(),
            store_seen: (AtomicU64::new(0), AtomicU64::new(0)),
            tools: Mutex::new(BTreeSet::new()),
            tool_figures: Mutex::new(BTreeMap::new()),
            store: std::sync::OnceLock::new(),
            figures: Mutex::new(Figures::default()),
            counts: FigureCounts::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "foya_turns_started",
            "Turns started",
            m.turns_started.clone(),
        );
        r.register(
            "foya_turns_finished",
            "Turns finished, by status (completed, cancelled, failed)",
            m.turns_finished.clone(),
        );
        r.register(
            "foya_turn_duration_seconds",
            "Wall time of a turn, turn_started to turn_complete, by status",
            m.turn_duration.clone(),
        );
        r.register(
            "foya_turns_active",
            "Turns running now",
            m.turns_active.clone(),
        );
        r.register(
            "foya_inputs_queued",
            "Inputs waiting in session queues (queue depth)",
            m.inputs_queued.clone(),
        );
        r.register(
            "foya_approvals_pending",
            "Approval requests waiting for a decision",
            m.approvals_pending.clone(),
        );
        r.register(
            "foya_sessions_live",
            "Sessions loaded now (a session actor running)",
            m.sessions_live.clone(),
        );
        r.register(
            "foya_sessions_hibernated",
            "Sessions hibernated by this runtime and not loaded since",
            m.sessions_hibernated.clone(),
        );
        r.register(
            "foya_mcp_servers",
            "MCP servers by state (not_started, running, failed, stopped)",
            m.mcp_servers.clone(),
        );
        r.register(
            "foya_approvals",
            "Approval decisions, by decision",
            m.approvals.clone(),
        );
        r.register(
            "foya_approval_wait_seconds",
            "Time from an approval request to its decision",
            m.approval_wait.clone(),
        );
        r.register(
            "foya_step_duration_seconds",
            "Latency of a step's model request (step_started to the assistant message), retries included",
            m.step_duration.clone(),
        );
        r.register(
            "foya_time_to_first_token_seconds",
            "Time from sending a model request to its first streamed token (text, reasoning or tool call)",
            m.ttft.clone(),
        );
        r.register(
            "foya_model_request_duration_seconds",
            "Wall time of one model request attempt, to the end of its stream",
            m.model_request_duration.clone(),
        );
        r.register(
            "foya_provider_errors",
            "Failed model request attempts, by error class (retried or not)",
            m.provider_errors.clone(),
        );
        r.register(
            "foya_provider_retries",
            "Model request retries, by the class of the error retried",
            m.retries.clone(),
        );
        r.register(
            "foya_tokens",
            "Tokens reported by providers, by direction (input, output)",
            m.tokens.clone(),
        );
        r.register(
            "foya_tool_calls",
            "Tool calls, by tool and outcome (ok, error, denied, not_run)",
            m.tool_calls.clone(),
        );
        r.register(
            "foya_tool_call_duration_seconds",
            "Run time of a tool call, by tool",
            m.tool_duration.clone(),
        );
        r.register(
            "foya_hook_runs",
            "Hook runs, by hook point and decision",
            m.hook_runs.clone(),
        );
        r.register(
            "foya_hook_duration_seconds",
            "Run time of a hook, by hook point and decision",
            m.hook_duration.clone(),
        );
        r.register(
            "foya_compactions",
            "Context compactions, by trigger",
            m.compactions.clone(),
        );
        r.register(
            "foya_sessions_created",
            "Sessions created",
            m.sessions_created.clone(),
        );
        r.register(
            "foya_sessions_deleted",
            "Sessions deleted",
            m.sessions_deleted.clone(),
        );
        r.register(
            "foya_store_append_seconds",
            "Latency of a store append as the runtime waits for it (queue and group commit)",
            m.store_append.clone(),
        );
        r.register(
            "foya_store_commit_seconds",
            "Time of one group commit of the store's writer (its write transaction)",
            m.store_commit.clone(),
        );
        r.register(
            "foya_store_commit_events",
            "Events per group commit of the store's writer (batch size)",
            m.store_commit_events.clone(),
        );
        r.register(
            "foya_store_commit_appends",
            "Appends (one per session commit) per group commit of the store's writer",
            m.store_commit_appends.clone(),
        );
        r.register(
            "foya_store_append_events",
            "Events per store append",
            m.store_append_events.clone(),
        );
        r.register(
            "foya_store_append_errors",
            "Store appends refused or failed",
            m.store_append_errors.clone(),
        );
        r.register(
            "foya_store_commits",
            "Store write transactions since the store opened (group commits)",
            m.store_commits.clone(),
        );
        r.register(
            "foya_store_events",
            "Events committed since the store opened",
            m.store_events.clone(),
        );
        r.register(
            "foya_telemetry_dropped_events",
            "Events telemetry could not follow (its queue was full)",
            m.dropped_events.clone(),
        );
        Self { registry, ..m }
    }

    /// The label of tool `name`: itself while fewer than [`MAX_TOOL_LABELS`] names were
    /// seen, else `other`.
    pub(crate) fn tool_label(&self, name: &str) -> String {
        let Ok(mut tools) = self.tools.lock() else {
            return "other".to_owned();
        };
        if tools.contains(name) {
            return name.to_owned();
        }
        if tools.len() < MAX_TOOL_LABELS {
            tools.insert(name.to_owned());
            return name.to_owned();
        }
        "other".to_owned()
    }

    /// Brings the store's counters up to `stats`.
    pub(crate) fn observe_store(&self, commits: u64, events: u64) {
        let before = self.store_seen.0.fetch_max(commits, Ordering::Relaxed);
        self.store_commits.inc_by(commits.saturating_sub(before));
        let before = self.store_seen.1.fetch_max(events, Ordering::Relaxed);
        self.store_events.inc_by(events.saturating_sub(before));
    }

    /// Changes the figures.
    pub(crate) fn figures(&self, change: impl FnOnce(&mut Figures)) {
        if let Ok(mut figures) = self.figures.lock() {
            change(&mut figures);
        }
    }

    /// Tool `name`'s call figures (made on its first call).
    fn tool_figures(&self, name: &str) -> std::sync::Arc<ToolFigures> {
        let mut figures = self
            .tool_figures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counts) = figures.get(name) {
            return std::sync::Arc::clone(counts);
        }
        let counts = std::sync::Arc::<ToolFigures>::default();
        figures.insert(name.to_owned(), std::sync::Arc::clone(&counts));
        counts
    }

    /// Sets the store's counters and the live gauges (from the runtime, when one is
    /// joined).
    pub(crate) fn refresh(&self) {
        if let Some(store) = self.store.get() {
            use foya_storage::EventLog as _;
            let stats = store.stats();
            self.observe_store(stats.commits, stats.appended_events);
        }
        let Some(source) = self.runtime.get() else {
            return;
        };
        let s = source.stats.read();
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.sessions_live.set(gauge(s.sessions_live));
        self.sessions_hibernated.set(gauge(s.sessions_hibernated));
        self.turns_active.set(gauge(s.turns_active));
        self.inputs_queued.set(gauge(s.inputs_queued));
        self.approvals_pending.set(gauge(s.approvals_pending));
        let mut by_state: BTreeMap<String, u64> = ["not_started", "running", "failed", "stopped"]
            .into_iter()
            .map(|state| (state.to_owned(), 0))
            .collect();
        if let Some(mcp) = &source.mcp {
            for (_, state) in mcp.states() {
                use foya_actors::mcp::ServerState;
                let name = match state {
                    ServerState::NotStarted => "not_started",
                    ServerState::Running => "running",
                    ServerState::Failed { .. } => "failed",
                    ServerState::Stopped => "stopped",
                    _ => "other",
                };
                *by_state.entry(name.to_owned()).or_default() += 1;
            }
        }
        for (state, n) in &by_state {
            self.mcp_servers
                .get_or_create(&StateLabels {
                    state: state.clone(),
                })
                .set(gauge(*n));
        }
        self.figures(|f| {
            f.sessions_live = s.sessions_live;
            f.sessions_hibernated = s.sessions_hibernated;
            f.turns_active = s.turns_active;
            f.inputs_queued = s.inputs_queued;
            f.approvals_pending = s.approvals_pending;
            f.mcp_servers = by_state;
        });
    }

    /// A copy of the figures.
    pub(crate) fn snapshot(&self) -> Figures {
        let mut figures = self.figures.lock().map(|f| f.clone()).unwrap_or_default();
        let c = &self.counts;
        let read = Counter::get;
        figures.turns_started += read(&c.turns_started);
        figures.steps += read(&c.steps);
        figures.retries += read(&c.retries);
        figures.compactions += read(&c.compactions);
        if let Ok(tools) = self.tool_figures.lock() {
            for (name, counts) in tools.iter() {
                for (outcome, counter) in OUTCOMES.iter().zip(counts.iter()) {
                    let n = read(counter);
                    if n > 0 {
                        *figures
                            .tool_calls
                            .entry((name.clone(), (*outcome).to_owned()))
                            .or_default() += n;
                    }
                }
            }
        }
        for (status, counter) in STATUSES.iter().zip(&c.finished) {
            let n = read(counter);
            if n > 0 {
                *figures
                    .turns_finished
                    .entry((*status).to_owned())
                    .or_default() += n;
            }
        }
        figures
    }

    /// OpenMetrics text of every metric.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

/// The store's group commits, into the histograms.
#[derive(Debug)]
pub(crate) struct CommitMetrics(pub(crate) std::sync::Arc<Metrics>);

impl foya_storage::CommitObserver for CommitMetrics {
    #[allow(clippy::cast_precision_loss)]
    fn committed(&self, commit: foya_storage::CommitStat) {
        self.0.store_commit.observe(commit.duration.as_secs_f64());
        self.0.store_commit_events.observe(commit.events as f64);
        self.0.store_commit_appends.observe(commit.appends as f64);
    }
}

/// A tool's call counts by outcome ([`OUTCOMES`]), for the embedding API's figures.
type ToolFigures = [Counter; 4];

/// A tool's label handles, resolved once.
#[derive(Debug)]
struct ToolHandles {
    duration: Histogram,
    /// By outcome: ok, error, denied, not_run.
    calls: [Option<Counter>; 4],
    /// Its figures, by outcome.
    figures: std::sync::Arc<ToolFigures>,
}

/// The outcomes of a tool call, as labels (the index of [`ToolHandles::calls`]).
const OUTCOMES: [&str; 4] = ["ok", "error", "denied", "not_run"];

/// Most tool names whose handles are kept (past it the cache starts over; the label set
/// itself is bounded by [`MAX_TOOL_LABELS`]).
const MAX_TOOL_HANDLES: usize = 4 * MAX_TOOL_LABELS;

/// The maps telemetry looks up on every event: keyed by ids (random UUIDs, a model's
/// call ids), hashed with foldhash instead of SipHash (no map here is keyed by anything
/// an attacker picks to collide: a session's own ids).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Label handles resolved on first use and kept (by the deriver, under its lock): an
/// observation then builds, hashes and looks up no label set.
#[derive(Debug, Default)]
pub(crate) struct Handles {
    /// Turns finished and their durations, by status (completed, cancelled, failed).
    finished: [Option<(Counter, Histogram)>; 3],
    /// Tokens, input and output.
    tokens: Option<(Counter, Counter)>,
    tools: FastMap<String, ToolHandles>,
}

impl Handles {
    /// The turns-finished counter and duration histogram of status `index` (`name`).
    pub(crate) fn finished(
        &mut self,
        m: &Metrics,
        index: usize,
        name: &str,
    ) -> Option<&(Counter, Histogram)> {
        let slot = self.finished.get_mut(index)?;
        Some(slot.get_or_insert_with(|| {
            let labels = StatusLabels {
                status: name.to_owned(),
            };
            (
                m.turns_finished.get_or_create(&labels).clone(),
                m.turn_duration.get_or_create(&labels).clone(),
            )
        }))
    }

    /// The input and output token counters.
    pub(crate) fn tokens(&mut self, m: &Metrics) -> &(Counter, Counter) {
        self.tokens.get_or_insert_with(|| {
            let counter = |direction: &str| {
                m.tokens
                    .get_or_create(&DirectionLabels {
                        direction: direction.to_owned(),
                    })
                    .clone()
            };
            (counter("input"), counter("output"))
        })
    }

    fn tool(&mut self, m: &Metrics, name: &str) -> Option<&mut ToolHandles> {
        if !self.tools.contains_key(name) {
            if self.tools.len() >= MAX_TOOL_HANDLES {
                self.tools.clear();
            }
            let duration = m
                .tool_duration
                .get_or_create(&ToolNameLabels {
                    tool: m.tool_label(name),
                })
                .clone();
            self.tools.insert(
                name.to_owned(),
                ToolHandles {
                    duration,
                    calls: Default::default(),
                    figures: m.tool_figures(name),
                },
            );
        }
        self.tools.get_mut(name)
    }

    /// The duration histogram of tool `name`.
    pub(crate) fn tool_duration(&mut self, m: &Metrics, name: &str) -> Option<&Histogram> {
        self.tool(m, name).map(|h| &h.duration)
    }

    /// Counts a call of tool `name` with outcome `outcome` (one of ok, error, denied,
    /// not_run): its counter, and its figure (one lookup of the tool's handles).
    pub(crate) fn count_tool_call(&mut self, m: &Metrics, name: &str, outcome: &str) {
        let index = OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(3);
        let Some(handles) = self.tool(m, name) else {
            return;
        };
        if let Some(counter) = handles.calls.get_mut(index) {
            counter
                .get_or_insert_with(|| Self::tool_counter(m, name, outcome))
                .inc();
        }
        if let Some(figure) = handles.figures.get(index) {
            figure.inc();
        }
    }

    fn tool_counter(m: &Metrics, name: &str, outcome: &str) -> Counter {
        m.tool_calls
            .get_or_create(&ToolLabels {
                tool: m.tool_label(name),
                outcome: outcome.to_owned(),
            })
            .clone()
    }

    /// The call counter of tool `name` with outcome `outcome` (one of ok, error, denied,
    /// not_run).
    #[cfg(test)]
    pub(crate) fn tool_calls(&mut self, m: &Metrics, name: &str, outcome: &str) -> Option<Counter> {
        let index = OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(3);
        let handles = self.tool(m, name)?;
        let counter = handles.calls.get_mut(index)?;
        Some(
            counter
                .get_or_insert_with(|| Self::tool_counter(m, name, outcome))
                .clone(),
        )
    }
}

/// The content type of the metrics' text ([`crate::Telemetry::metrics_text`]).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn handles_are_resolved_once_and_count_in_the_families() {
        let m = Metrics::new();
        let mut handles = Handles::default();
        for _ in 0..3 {
            handles.tool_calls(&m, "read_file", "ok").unwrap().inc();
        }
        handles.tool_calls(&m, "read_file", "error").unwrap().inc();
        handles
            .tool_duration(&m, "read_file")
            .unwrap()
            .observe(0.01);
        let (finished, duration) = handles.finished(&m, 2, "failed").unwrap();
        finished.inc();
        duration.observe(1.0);
        let (input, output) = handles.tokens(&m);
        input.inc_by(7);
        output.inc_by(2);
        // One handle per label set, resolved once: the family holds the same counter.
        assert_eq!(handles.tools.len(), 1);
        assert!(handles.finished(&m, 3, "other").is_none());
        let text = m.encode();
        assert!(
            line(
                &text,
                r#"foya_tool_calls_total{tool="read_file",outcome="ok"} 3"#
            )
            .is_some(),
            "{text}"
        );
        assert!(
            line(
                &text,
                r#"foya_tool_calls_total{tool="read_file",outcome="error"} 1"#
            )
            .is_some()
        );
        assert!(
            line(
                &text,
                r#"foya_tool_call_duration_seconds_count{tool="read_file"} 1"#
            )
            .is_some()
        );
        assert!(line(&text, r#"foya_turns_finished_total{status="failed"} 1"#).is_some());
        assert!(
            line(
                &text,
                r#"foya_turn_duration_seconds_count{status="failed"} 1"#
            )
            .is_some()
        );
        assert!(line(&text, r#"foya_tokens_total{direction="input"} 7"#).is_some());
        assert!(line(&text, r#"foya_tokens_total{direction="output"} 2"#).is_some());
    }

    #[test]
    fn tool_handles_past_the_label_bound_count_as_other() {
        let m = Metrics::new();
        let mut handles = Handles::default();
        for i in 0..MAX_TOOL_LABELS {
            handles
                .tool_calls(&m, &format!("tool{i}"), "ok")
                .unwrap()
                .inc();
        }
        handles.tool_calls(&m, "late", "ok").unwrap().inc();
        handles.tool_calls(&m, "later", "ok").unwrap().inc();
        let text = m.encode();
        assert!(
            line(
                &text,
                r#"foya_tool_calls_total{tool="other",outcome="ok"} 2"#
            )
            .is_some(),
            "{text}"
        );
        // The cache of handles is bounded too.
        for i in 0..2 * MAX_TOOL_HANDLES {
            handles.tool_calls(&m, &format!("n{i}"), "denied");
        }
        assert!(handles.tools.len() <= MAX_TOOL_HANDLES);
    }
}

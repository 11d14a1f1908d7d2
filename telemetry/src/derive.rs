//! Spans and metrics derived from a runtime's committed events, one event at a time, in
//! each session's `seq` order. Pure: no I/O, no clock (every time comes from the events'
//! `at_ms`), so the same log always gives the same spans.
//!
//! The span tree of a turn (one trace per turn; its root is the caller's span when the
//! input came with a W3C `traceparent`):
//!
//! ```text
//! turn                                  turn_started → turn_complete
//! ├─ chat {model}                       step_started → assistant_message (one per step)
//! ├─ execute_tool {tool}                the call issued (assistant_message) → its tool_message
//! │  ├─ approval {tool}                 approval_requested → approval_decided
//! │  └─ hook PreToolUse / PostToolUse   hook_ran − duration → hook_ran
//! ├─ compaction                         compaction_started → compaction_checkpoint
//! └─ hook UserPromptSubmit / Stop / …
//! ```
//!
//! Nothing of a prompt, a completion, a tool's arguments or result, an approval's action
//! or a hook's command or reason is recorded unless `capture_content` is set; error
//! messages never are (only their class).

use crate::metrics::{
    ClassLabels, DecisionLabels, FastMap, FigureCounts, Handles, HookLabels, Metrics, TriggerLabels,
};
use crate::otlp::{Attr, Attributes, Encoded, Head, SpanStatus, SpanWriter};
use foya_protocol::command::ParentRef;
use foya_protocol::{
    ApprovalRequestId, Event, EventKind, FinishReason, InputId, RunId, SessionId, ToolCallId,
    TurnStatus, Usage,
};
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use rand::{Rng as _, SeedableRng as _};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The caller's span a turn continues (from a W3C `traceparent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// The caller's trace.
    pub trace_id: TraceId,
    /// The caller's span: the turn span's parent.
    pub span_id: SpanId,
    /// The caller's sampled flag.
    pub sampled: bool,
}

impl Parent {
    /// Parses a W3C `traceparent` header value (`00-<trace id>-<span id>-<flags>`);
    /// `None` when it is not a valid one.
    #[must_use]
    pub fn from_traceparent(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let span = parts.next()?;
        let flags = parts.next()?;
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !hex(version, 2)
            || version == "ff"
            || !hex(trace, 32)
            || !hex(span, 16)
            || !hex(flags, 2)
        {
            return None;
        }
        // Version 00 has exactly four fields; later versions may add more.
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if trace_id == 0 || span_id == 0 {
            return None;
        }
        Some(Self {
            trace_id: TraceId::from(trace_id),
            span_id: SpanId::from(span_id),
            sampled: flags & 1 == 1,
        })
    }
}

/// Input ids whose turns continue a caller's trace, registered before the input is
/// submitted.
pub(crate) type Parents = Arc<ParentMap>;

/// [`Parents`]: the map, and whether it holds anything (read without its lock: a turn
/// of a pipeline no caller ever gave a `traceparent` takes no lock).
#[derive(Debug, Default)]
pub(crate) struct ParentMap {
    map: Mutex<FastMap<InputId, Parent>>,
    any: AtomicBool,
}

impl ParentMap {
    /// Registers `parent` for the turn of `input` (past [`MAX_PARENTS`] the map starts
    /// over).
    pub(crate) fn insert(&self, input: InputId, parent: Parent) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_PARENTS {
            map.clear();
        }
        map.insert(input, parent);
        self.any.store(true, Ordering::Release);
    }

    /// The parent registered for `input`, taken out.
    fn take(&self, input: InputId) -> Option<Parent> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let parent = map.remove(&input);
        if map.is_empty() {
            self.any.store(false, Ordering::Release);
        }
        parent
    }
}

/// Most input ids waiting in [`Parents`]; beyond it the oldest registrations are lost.
pub(crate) const MAX_PARENTS: usize = 10_000;

thread_local! {
    /// The ids' generator: a small fast one per thread (what the OpenTelemetry SDK's
    /// `RandomIdGenerator` uses), seeded from the thread's cryptographic generator, which
    /// made every id before.
    static IDS: RefCell<rand::rngs::SmallRng> =
        RefCell::new(rand::rngs::SmallRng::from_rng(&mut rand::rng()));
}

fn new_trace_id() -> TraceId {
    TraceId::from(IDS.with(|rng| rng.borrow_mut().random::<u128>()).max(1))
}

fn new_span_id() -> SpanId {
    SpanId::from(IDS.with(|rng| rng.borrow_mut().random::<u64>()).max(1))
}

/// A UUID id as text (hyphenated, lowercase: its `Display`), written into `buf` without
/// the formatting machinery.
fn uuid_text(id: uuid::Uuid, buf: &mut [u8; uuid::fmt::Hyphenated::LENGTH]) -> &str {
    id.hyphenated().encode_lower(buf)
}

/// A retry of a step's request (a `retry` event of its span).
#[derive(Debug)]
struct Retry {
    at_ms: u64,
    attempt: u32,
    max_attempts: u32,
    delay_ms: u64,
    class: String,
}

#[derive(Debug)]
struct Step {
    number: u32,
    span_id: SpanId,
    start_ms: u64,
    end_ms: Option<u64>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
    interrupted: bool,
    retries: Vec<Retry>,
    output: Option<String>,
    /// The time to first token of its latest request attempt, in ms.
    ttft_ms: Option<f64>,
}

#[derive(Debug)]
struct Approval {
    span_id: SpanId,
    start_ms: u64,
    end_ms: Option<u64>,
    decision: Option<String>,
    action: Option<String>,
}

/// A tool's name, made once per name (per deriver) and shared by its calls.
type ToolName = Arc<str>;

/// Most tool names a deriver keeps made; past it they are made again.
const MAX_TOOL_NAMES: usize = 256;

/// A few items keyed by an id, found by comparing (a turn has a few tool calls, a
/// session a queued input or two): no hashing, no allocation for the first `N`.
#[derive(Debug)]
struct Few<K, V, const N: usize>(SmallVec<[(K, V); N]>);

impl<K, V, const N: usize> Default for Few<K, V, N> {
    fn default() -> Self {
        Self(SmallVec::new())
    }
}

impl<K: PartialEq, V, const N: usize> Few<K, V, N> {
    fn get(&self, key: &K) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key`, made by `make` when there is none.
    fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let index = match self.0.iter().position(|(k, _)| *k == key) {
            Some(index) => index,
            None => {
                self.0.push((key, make()));
                self.0.len() - 1
            }
        };
        &mut self.0[index].1
    }

    /// Whether `key` was new.
    fn insert(&mut self, key: K, value: V) -> bool {
        if self.get(&key).is_some() {
            return false;
        }
        self.0.push((key, value));
        true
    }

    fn remove(&mut self, key: &K) -> Option<(K, V)> {
        let index = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(index))
    }
}

impl<K, V, const N: usize> Few<K, V, N> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }

    fn drain(&mut self) -> impl Iterator<Item = (K, V)> + '_ {
        self.0.drain(..)
    }
}

#[derive(Debug)]
struct Tool {
    name: ToolName,
    span_id: SpanId,
    start_ms: u64,
    step: u32,
    finished: Option<(bool, u64)>,
    approval: Option<Approval>,
    arguments: Option<String>,
}

#[derive(Debug)]
struct Compaction {
    span_id: SpanId,
    start_ms: u64,
    trigger: String,
}

#[derive(Debug)]
struct Turn {
    /// The session's model when the turn started (kept up to date by
    /// [`Deriver::set_model`]): its spans name it without a lookup.
    model: Option<Arc<ModelOf>>,
    run_id: Option<RunId>,
    input_id: InputId,
    trace_id: TraceId,
    span_id: SpanId,
    parent: Option<SpanId>,
    sampled: bool,
    start_ms: u64,
    steps: u32,
    step: Option<Step>,
    tools: Few<ToolCallId, Tool, 2>,
    input_tokens: u64,
    output_tokens: u64,
    user_text: Option<String>,
    compaction: Option<Compaction>,
    /// Why it is being cancelled (`turn_cancelled`).
    cancel_reason: Option<String>,
    /// The first attributes of its chat spans (the operation, the conversation id),
    /// encoded at its first.
    chat_head: Option<Attributes>,
}

#[derive(Debug, Default)]
struct Session {
    turn: Option<Turn>,
    queued: Few<InputId, (), 2>,
    approvals: Few<ApprovalRequestId, (), 1>,
    /// The text of the latest user message, while it waits for its turn (opt-in only).
    user_text: Option<(InputId, String)>,
}

impl Session {
    fn is_idle(&self) -> bool {
        self.turn.is_none() && self.queued.is_empty() && self.approvals.is_empty()
    }
}

/// The provider and model a session's requests name, made once per session and shared
/// by its turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelOf {
    pub(crate) provider: String,
    pub(crate) model: String,
    /// Its chat spans' name: `chat {model}`, or `chat`.
    chat: String,
    /// Its attributes on a span, encoded once: the model and the provider, when named.
    attributes: Attributes,
}

impl ModelOf {
    pub(crate) fn new(provider: &str, model: &str) -> Arc<Self> {
        let mut attributes = Vec::with_capacity(2);
        if !model.is_empty() {
            attributes.push(("gen_ai.request.model", Attr::Str(model)));
        }
        if !provider.is_empty() {
            attributes.push(("gen_ai.provider.name", Attr::Str(provider)));
        }
        Arc::new(Self {
            provider: provider.to_owned(),
            chat: if model.is_empty() {
                "chat".to_owned()
            } else {
                format!("chat {model}")
            },
            model: model.to_owned(),
            attributes: Attributes::new(&attributes),
        })
    }

    /// Its attributes on a span: the model and the provider, when named.
    fn write(model: Option<&Self>, span: &mut SpanWriter<'_>) {
        if let Some(m) = model {
            span.attrs(&m.attributes);
        }
    }
}

/// What every shard of a pipeline counts together (the gauges' figures when no runtime
/// is joined).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    active: AtomicI64,
    queued: AtomicI64,
    pending: AtomicI64,
}

impl Counts {
    /// Adds `n` to `counter`, when its figure is read: with metrics on and no runtime
    /// joined (a joined runtime's own counts are the gauges).
    fn add(metrics: &Option<Arc<Metrics>>, counter: &AtomicI64, n: i64) {
        if metrics.as_ref().is_some_and(|m| m.runtime.get().is_none()) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The first attributes of every tool call's span, encoded once.
static EXECUTE_TOOL: std::sync::LazyLock<Attributes> = std::sync::LazyLock::new(|| {
    Attributes::new(&[("gen_ai.operation.name", Attr::Str("execute_tool"))])
});

/// The first attributes of every turn's span, encoded once.
static INVOKE_AGENT: std::sync::LazyLock<Attributes> = std::sync::LazyLock::new(|| {
    Attributes::new(&[
        ("gen_ai.operation.name", Attr::Str("invoke_agent")),
        ("gen_ai.agent.name", Attr::Str("foya")),
    ])
});

/// Most sessions whose model is remembered; past it the map starts over (a session not
/// in it has its model read from the store again).
const MAX_MODELS: usize = 100_000;

/// Follows the events; finished spans collect, encoded, in [`Self::spans_mut`].
#[derive(Debug)]
pub(crate) struct Deriver {
    metrics: Option<Arc<Metrics>>,
    traces: bool,
    capture: bool,
    parents: Parents,
    sessions: FastMap<SessionId, Session>,
    models: FastMap<SessionId, Arc<ModelOf>>,
    /// Sub-agent sessions: the `agent` call that started each.
    sub_agents: FastMap<SessionId, ParentRef>,
    /// Tool names made into attribute values.
    tool_names: FastMap<String, ToolName>,
    /// Finished spans, encoded as OTLP protobuf as they close (sampled ones only).
    spans: Encoded,
    /// Metric handles resolved once.
    handles: Handles,
    counts: Arc<Counts>,
    /// Most sessions whose model is remembered by this deriver.
    max_models: usize,
}

fn seconds(ms: u64) -> f64 {
    // Milliseconds as seconds (exact for any span shorter than 2^53 ms).
    #[allow(clippy::cast_precision_loss)]
    let s = ms as f64 / 1000.0;
    s
}

/// A finish reason's wire name (its serde name; `finish_names_are_the_wire_names` checks
/// them), without serializing it.
pub(crate) fn finish_name(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::PauseTurn => "pause_turn",
        FinishReason::ContextWindow => "context_window",
        FinishReason::Other => "other",
    }
}

fn status_name(status: TurnStatus) -> &'static str {
    match status {
        TurnStatus::Completed => "completed",
        TurnStatus::Cancelled => "cancelled",
        TurnStatus::Failed => "failed",
    }
}

fn class_name<T: serde::Serialize>(class: &T) -> String {
    serde_json::to_value(class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

impl Deriver {
    pub(crate) fn new(
        metrics: Option<Arc<Metrics>>,
        traces: bool,
        capture: bool,
        parents: Parents,
    ) -> Self {
        Self {
            metrics,
            traces,
            capture,
            parents,
            sessions: FastMap::default(),
            models: FastMap::default(),
            sub_agents: FastMap::default(),
            tool_names: FastMap::default(),
            spans: Encoded::default(),
            handles: Handles::default(),
            counts: Arc::default(),
            max_models: MAX_MODELS,
        }
    }

    /// One of `shards` derivers of a pipeline: the gauges' counts are `counts`, shared,
    /// and the model map's bound is split between them.
    pub(crate) fn shard(mut self, counts: Arc<Counts>, shards: usize) -> Self {
        self.counts = counts;
        self.max_models = (MAX_MODELS / shards.max(1)).max(1);
        self
    }

    /// Lets go of everything it follows (its pipeline is gone): sessions, models, names
    /// and spans not yet exported.
    pub(crate) fn clear(&mut self) {
        self.sessions = FastMap::default();
        self.models = FastMap::default();
        self.sub_agents = FastMap::default();
        self.tool_names = FastMap::default();
        self.spans = Encoded::default();
    }

    /// Records the model of `session` (from its log, read by the runtime), and of its
    /// open turn's next spans.
    pub(crate) fn set_model(&mut self, session: SessionId, model: Arc<ModelOf>) {
        if self.models.len() >= self.max_models {
            self.models.clear();
            self.sub_agents.clear();
        }
        if let Some(turn) = self.turn_mut(session) {
            turn.model = Some(Arc::clone(&model));
        }
        self.models.insert(session, model);
    }

    /// Records the model of `session` read from its log (each time the runtime reads
    /// it): made again only when it changed.
    pub(crate) fn model_read(&mut self, session: SessionId, provider: &str, model: &str) {
        if self
            .models
            .get(&session)
            .is_some_and(|m| m.provider == provider && m.model == model)
        {
            return;
        }
        self.set_model(session, ModelOf::new(provider, model));
    }

    /// Tool `name`, shared.
    fn tool_name(&mut self, name: &str) -> ToolName {
        if let Some(made) = self.tool_names.get(name) {
            return Arc::clone(made);
        }
        if self.tool_names.len() >= MAX_TOOL_NAMES {
            self.tool_names.clear();
        }
        let made: ToolName = Arc::from(name);
        self.tool_names.insert(name.to_owned(), Arc::clone(&made));
        made
    }

    /// The spans finished so far, read back from their encoding.
    #[cfg(test)]
    pub(crate) fn take_spans(&mut self) -> Vec<crate::otlp::testing::SpanRecord> {
        let spans = crate::otlp::testing::decode(self.spans.slice(0, self.spans.len()));
        self.spans.clear();
        spans
    }

    /// The spans finished so far (encoded), to be drained.
    pub(crate) fn spans_mut(&mut self) -> &mut Encoded {
        &mut self.spans
    }

    fn metrics(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &self.metrics {
            f(m);
        }
    }

    fn gauges(&self) {
        self.metrics(|m| {
            if m.runtime.get().is_some() {
                return; // the runtime's own counts (`Metrics::refresh`)
            }
            let active = self.counts.active.load(Ordering::Relaxed);
            let queued = self.counts.queued.load(Ordering::Relaxed);
            let pending = self.counts.pending.load(Ordering::Relaxed);
            m.turns_active.set(active);
            m.inputs_queued.set(queued);
            m.approvals_pending.set(pending);
            m.figures(|f| {
                f.turns_active = u64::try_from(active).unwrap_or(0);
                f.inputs_queued = u64::try_from(queued).unwrap_or(0);
                f.approvals_pending = u64::try_from(pending).unwrap_or(0);
            });
        });
    }

    /// Follows one committed event.
    pub(crate) fn event(&mut self, event: &Event) {
        let sid = event.session_id;
        let at = event.at_ms;
        match &event.kind {
            EventKind::SessionCreated { config } => {
                if let Some(parent) = &config.parent {
                    self.sub_agents.insert(sid, parent.clone());
                }
                self.set_model(sid, ModelOf::new(&config.provider, &config.model));
                self.metrics(|m| {
                    m.sessions_created.inc();
                });
            }
            EventKind::ConfigChanged { provider, model } => {
                self.set_model(sid, ModelOf::new(provider, model));
            }
            EventKind::SessionDeleted {} => {
                self.metrics(|m| {
                    m.sessions_deleted.inc();
                });
                if let Some(session) = self.sessions.remove(&sid) {
                    Counts::add(
                        &self.metrics,
                        &self.counts.queued,
                        -(session.queued.len() as i64),
                    );
                    Counts::add(
                        &self.metrics,
                        &self.counts.pending,
                        -(session.approvals.len() as i64),
                    );
                    if session.turn.is_some() {
                        Counts::add(&self.metrics, &self.counts.active, -1);
                    }
                }
                self.models.remove(&sid);
                self.sub_agents.remove(&sid);
                self.gauges();
            }
            EventKind::InputQueued { input_id, .. } => {
                if self
                    .sessions
                    .entry(sid)
                    .or_default()
                    .queued
                    .insert(*input_id, ())
                {
                    Counts::add(&self.metrics, &self.counts.queued, 1);
                    self.gauges();
                }
            }
            EventKind::InputDropped { input_id, .. } => {
                self.unqueue(sid, *input_id);
                self.forget_if_idle(sid);
            }
            EventKind::UserMessage { input_id, input } => {
                self.unqueue(sid, *input_id);
                if self.capture {
                    self.sessions.entry(sid).or_default().user_text =
                        Some((*input_id, input.text.clone()));
                }
            }
            EventKind::TurnStarted { input_id } => self.turn_started(event, *input_id),
            EventKind::StepStarted { step } => {
                self.close_step(sid, None);
                if let Some(turn) = self.turn_mut(sid) {
                    turn.steps = turn.steps.max(*step);
                    turn.step = Some(Step {
                        number: *step,
                        span_id: new_span_id(),
                        start_ms: at,
                        end_ms: None,
                        usage: None,
                        finish: None,
                        interrupted: false,
                        retries: Vec::new(),
                        output: None,
                        ttft_ms: None,
                    });
                }
            }
            EventKind::AssistantMessage(message) => {
                let capture = self.capture;
                let mut latency = None;
                let names: SmallVec<[ToolName; 2]> = if self.traces || self.metrics.is_some() {
                    message
                        .tool_calls
                        .iter()
                        .map(|call| self.tool_name(&call.name))
                        .collect()
                } else {
                    SmallVec::new()
                };
                if let Some(turn) = self.turn_mut(sid) {
                    let number = turn.step.as_ref().map_or(turn.steps, |s| s.number);
                    if let Some(step) = turn.step.as_mut() {
                        step.end_ms = Some(at);
                        step.finish = message.finish_reason;
                        step.interrupted = message.interrupted;
                        if capture {
                            step.output = Some(message.text.clone());
                        }
                        latency = Some(at.saturating_sub(step.start_ms));
                    }
                    for (call, name) in message.tool_calls.iter().zip(names) {
                        turn.tools.get_or_insert_with(call.id.clone(), || Tool {
                            name,
                            span_id: new_span_id(),
                            start_ms: at,
                            step: number,
                            finished: None,
                            approval: None,
                            arguments: capture.then(|| call.arguments.to_string()),
                        });
                    }
                }
                if let Some(ms) = latency {
                    self.metrics(|m| {
                        m.step_duration.observe(seconds(ms));
                        FigureCounts::inc(&m.counts.steps);
                    });
                }
            }
            EventKind::Usage(usage) => {
                if let Some(turn) = self.turn_mut(sid) {
                    turn.input_tokens += usage.input_tokens;
                    turn.output_tokens += usage.output_tokens;
                    if let Some(step) = turn.step.as_mut() {
                        step.usage = Some(*usage);
                    }
                }
                if let Some(m) = &self.metrics {
                    let (input, output) = self.handles.tokens(m);
                    input.inc_by(usage.input_tokens);
                    output.inc_by(usage.output_tokens);
                }
            }
            EventKind::ProviderRetry {
                attempt,
                max_attempts,
                delay_ms,
                error,
            } => {
                let class = class_name(&error.class);
                if let Some(step) = self.turn_mut(sid).and_then(|t| t.step.as_mut()) {
                    step.retries.push(Retry {
                        at_ms: at,
                        attempt: *attempt,
                        max_attempts: *max_attempts,
                        delay_ms: *delay_ms,
                        class: class.clone(),
                    });
                }
                self.metrics(|m| {
                    m.retries.get_or_create(&ClassLabels { class }).inc();
                    FigureCounts::inc(&m.counts.retries);
                });
            }
            EventKind::ApprovalRequested {
                request_id,
                tool_call_id,
                tool_name,
                action,
                ..
            } => {
                let capture = self.capture;
                let name = self.tool_name(tool_name);
                let session = self.sessions.entry(sid).or_default();
                if session.approvals.insert(*request_id, ()) {
                    Counts::add(&self.metrics, &self.counts.pending, 1);
                }
                if let Some(turn) = session.turn.as_mut() {
                    let number = turn.steps;
                    let tool = turn
                        .tools
                        .get_or_insert_with(tool_call_id.clone(), || Tool {
                            name,
                            span_id: new_span_id(),
                            start_ms: at,
                            step: number,
                            finished: None,
                            approval: None,
                            arguments: None,
                        });
                    tool.approval = Some(Approval {
                        span_id: new_span_id(),
                        start_ms: at,
                        end_ms: None,
                        decision: None,
                        action: capture.then(|| action.clone()),
                    });
                }
                self.gauges();
            }
            EventKind::ApprovalDecided {
                request_id,
                tool_call_id,
                decision,
                ..
            } => {
                let decision = class_name(decision);
                let mut wait = None;
                let session = self.sessions.entry(sid).or_default();
                if session.approvals.remove(request_id).is_some() {
                    Counts::add(&self.metrics, &self.counts.pending, -1);
                }
                if let Some(approval) = session
                    .turn
                    .as_mut()
                    .and_then(|t| t.tools.get_mut(tool_call_id))
                    .and_then(|t| t.approval.as_mut())
                {
                    approval.end_ms = Some(at);
                    approval.decision = Some(decision.clone());
                    wait = Some(at.saturating_sub(approval.start_ms));
                }
                self.metrics(|m| {
                    m.approvals
                        .get_or_create(&DecisionLabels { decision })
                        .inc();
                    if let Some(ms) = wait {
                        m.approval_wait.observe(seconds(ms));
                    }
                });
                self.gauges();
            }
            EventKind::ToolStarted { .. } | EventKind::ToolUpdate { .. } => {}
            EventKind::ToolFinished {
                tool_call_id,
                is_error,
                duration_ms,
            } => {
                // The fields apart: the tool's name is read where it is kept (no clone of
                // a shared name per call).
                let Self {
                    sessions,
                    handles,
                    metrics,
                    ..
                } = self;
                if let Some(tool) = sessions
                    .get_mut(&sid)
                    .and_then(|s| s.turn.as_mut())
                    .and_then(|t| t.tools.get_mut(tool_call_id))
                {
                    tool.finished = Some((*is_error, *duration_ms));
                    if let Some(m) = metrics
                        && let Some(histogram) = handles.tool_duration(m, &tool.name)
                    {
                        histogram.observe(seconds(*duration_ms));
                    }
                }
            }
            EventKind::ToolMessage(message) => {
                let result = self.capture.then(|| message.content.clone());
                let tool = self
                    .turn_mut(sid)
                    .and_then(|t| t.tools.remove(&message.tool_call_id));
                if let Some((id, tool)) = tool {
                    self.close_tool(sid, &id, tool, at, result);
                }
            }
            EventKind::TurnCancelled { reason } => {
                if let Some(turn) = self.turn_mut(sid) {
                    turn.cancel_reason = Some(bounded_reason(reason));
                }
            }
            EventKind::TitleSet { .. }
            | EventKind::ContextDiagnostics { .. }
            | EventKind::HookContinued { .. } => {}
            EventKind::TurnComplete {
                status,
                reason,
                error,
            } => {
                let class = error.as_ref().map(|e| class_name(&e.class));
                self.turn_complete(event, *status, reason.as_deref(), class);
            }
            EventKind::CompactionStarted { trigger, .. } => {
                if let Some(turn) = self.turn_mut(sid) {
                    turn.compaction = Some(Compaction {
                        span_id: new_span_id(),
                        start_ms: at,
                        trigger: trigger.clone(),
                    });
                }
            }
            EventKind::CompactionCheckpoint {
                tokens_before,
                tokens_after,
                ..
            } => {
                let compaction = self.turn_mut(sid).and_then(|t| t.compaction.take());
                let trigger = compaction
                    .as_ref()
                    .map_or_else(|| "manual".to_owned(), |c| c.trigger.clone());
                self.metrics(|m| {
                    m.compactions
                        .get_or_create(&TriggerLabels {
                            trigger: trigger.clone(),
                        })
                        .inc();
                    FigureCounts::inc(&m.counts.compactions);
                });
                if let Some(c) = compaction {
                    self.compaction_span(sid, c, at, Some((*tokens_before, *tokens_after)));
                }
            }
            EventKind::HookRan {
                hook_event,
                matcher,
                tool_call_id,
                duration_ms,
                decision,
                ..
            } => self.hook_ran(
                event,
                hook_event,
                matcher.as_deref(),
                tool_call_id.as_ref(),
                *duration_ms,
                decision.as_str(),
            ),
        }
    }

    /// A request attempt of turn `run`'s open step streamed its first token after `ms`.
    pub(crate) fn first_token(&mut self, sid: SessionId, run: RunId, ms: f64) {
        if let Some(turn) = self.turn_mut(sid)
            && turn.run_id == Some(run)
            && let Some(step) = turn.step.as_mut()
        {
            step.ttft_ms = Some(ms);
        }
    }

    fn turn_mut(&mut self, sid: SessionId) -> Option<&mut Turn> {
        self.sessions.get_mut(&sid).and_then(|s| s.turn.as_mut())
    }

    fn unqueue(&mut self, sid: SessionId, input: InputId) {
        if let Some(session) = self.sessions.get_mut(&sid)
            && session.queued.remove(&input).is_some()
        {
            Counts::add(&self.metrics, &self.counts.queued, -1);
            self.gauges();
        }
    }

    fn forget_if_idle(&mut self, sid: SessionId) {
        if self.sessions.get(&sid).is_some_and(Session::is_idle) {
            self.sessions.remove(&sid);
        }
    }

    fn turn_started(&mut self, event: &Event, input_id: InputId) {
        let sid = event.session_id;
        let parent = self.parents.take(input_id).or_else(|| self.agent_call(sid));
        let model = self.models.get(&sid).cloned();
        let session = self.sessions.entry(sid).or_default();
        let user_text = match session.user_text.take() {
            Some((id, text)) if id == input_id => Some(text),
            _ => None,
        };
        let had_turn = session.turn.is_some();
        session.turn = Some(Turn {
            model,
            run_id: event.run_id,
            input_id,
            trace_id: parent.map_or_else(new_trace_id, |p| p.trace_id),
            span_id: new_span_id(),
            parent: parent.map(|p| p.span_id),
            sampled: parent.is_none_or(|p| p.sampled),
            start_ms: event.at_ms,
            steps: 0,
            step: None,
            tools: Few::default(),
            input_tokens: 0,
            output_tokens: 0,
            user_text,
            compaction: None,
            cancel_reason: None,
            chat_head: None,
        });
        if !had_turn {
            Counts::add(&self.metrics, &self.counts.active, 1);
        }
        self.metrics(|m| {
            m.turns_started.inc();
            FigureCounts::inc(&m.counts.turns_started);
        });
        self.gauges();
    }

    /// The span of the `agent` call that started sub-agent session `sid`, while its
    /// parent's turn runs: the sub-agent's turns are its children.
    fn agent_call(&self, sid: SessionId) -> Option<Parent> {
        let parent = self.sub_agents.get(&sid)?;
        let turn = self.sessions.get(&parent.session_id)?.turn.as_ref()?;
        if turn.run_id != Some(parent.run_id) {
            return None;
        }
        let tool = turn.tools.get(&parent.tool_call_id)?;
        Some(Parent {
            trace_id: turn.trace_id,
            span_id: tool.span_id,
            sampled: turn.sampled,
        })
    }

    /// Ends the open step's chat span (at its assistant message, else at `end`).
    fn close_step(&mut self, sid: SessionId, end: Option<(u64, Option<&str>)>) {
        let traces = self.traces;
        let Some(turn) = self.sessions.get_mut(&sid).and_then(|s| s.turn.as_mut()) else {
            return;
        };
        let Some(step) = turn.step.take() else {
            return;
        };
        if !traces || !turn.sampled {
            return;
        }
        let (end_ms, error) = match (step.end_ms, end) {
            (Some(at), _) => (at, None),
            (None, Some((at, class))) => (at, class),
            (None, None) => (step.start_ms, None),
        };
        let head = turn.chat_head.get_or_insert_with(|| {
            let mut id = [0; uuid::fmt::Hyphenated::LENGTH];
            Attributes::new(&[
                ("gen_ai.operation.name", Attr::Str("chat")),
                (
                    "gen_ai.conversation.id",
                    Attr::Str(uuid_text(sid.0, &mut id)),
                ),
            ])
        });
        let model = turn.model.as_deref();
        let mut span = SpanWriter::begin(
            &mut self.spans,
            &Head {
                trace_id: turn.trace_id,
                span_id: step.span_id,
                parent: Some(turn.span_id),
                sampled: true,
                name: (model.map_or("chat", |m| m.chat.as_str()), ""),
                kind: SpanKind::Client,
                start_ms: step.start_ms,
                end_ms: end_ms.max(step.start_ms),
            },
        );
        span.attrs(head);
        span.attr("foya.step", Attr::Int(i64::from(step.number)));
        span.attr("foya.retries", Attr::count(step.retries.len() as u64));
        ModelOf::write(model, &mut span);
        if let Some(usage) = step.usage {
            span.attr("gen_ai.usage.input_tokens", Attr::count(usage.input_tokens));
            span.attr(
                "gen_ai.usage.output_tokens",
                Attr::count(usage.output_tokens),
            );
        }
        if let Some(reason) = step.finish {
            span.attr(
                "gen_ai.response.finish_reasons",
                Attr::Strs(&[finish_name(reason)]),
            );
        }
        if step.interrupted {
            span.attr("foya.interrupted", Attr::Bool(true));
        }
        if let Some(ms) = step.ttft_ms {
            span.attr("foya.time_to_first_token_ms", Attr::F64(ms));
        }
        if let Some(text) = &step.output {
            span.attr("gen_ai.output.messages", Attr::Str(text));
        }
        if let Some(class) = error {
            span.attr("error.type", Attr::Str(class));
        }
        for retry in &step.retries {
            span.event(
                "retry",
                retry.at_ms,
                &[
                    ("foya.retry.attempt", Attr::Int(i64::from(retry.attempt))),
                    (
                        "foya.retry.max_attempts",
                        Attr::Int(i64::from(retry.max_attempts)),
                    ),
                    ("foya.retry.delay_ms", Attr::count(retry.delay_ms)),
                    ("error.type", Attr::Str(&retry.class)),
                ],
            );
        }
        span.end(error.map_or(SpanStatus::Unset, SpanStatus::Error));
    }

    fn close_tool(
        &mut self,
        sid: SessionId,
        id: &ToolCallId,
        tool: Tool,
        end_ms: u64,
        result: Option<String>,
    ) {
        let denied = tool
            .approval
            .as_ref()
            .and_then(|a| a.decision.as_deref())
            .is_some_and(|d| d == "deny");
        let outcome = match (denied, tool.finished) {
            (true, _) => "denied",
            (false, Some((true, _))) => "error",
            (false, Some((false, _))) => "ok",
            (false, None) => "not_run",
        };
        if let Some(m) = &self.metrics {
            self.handles.count_tool_call(m, &tool.name, outcome);
        }
        if !self.traces {
            return;
        }
        let Some(turn) = self.sessions.get(&sid).and_then(|s| s.turn.as_ref()) else {
            return;
        };
        if !turn.sampled {
            return;
        }
        let name: &str = &tool.name;
        if let Some(approval) = &tool.approval {
            let mut span = SpanWriter::begin(
                &mut self.spans,
                &Head {
                    trace_id: turn.trace_id,
                    span_id: approval.span_id,
                    parent: Some(tool.span_id),
                    sampled: true,
                    name: ("approval ", name),
                    kind: SpanKind::Internal,
                    start_ms: approval.start_ms,
                    end_ms: approval.end_ms.unwrap_or(end_ms).max(approval.start_ms),
                },
            );
            span.attr("gen_ai.tool.name", Attr::Str(name));
            span.attr("gen_ai.tool.call.id", Attr::Str(&id.0));
            span.attr(
                "foya.approval.decision",
                Attr::Str(approval.decision.as_deref().unwrap_or("none")),
            );
            if let Some(action) = &approval.action {
                span.attr("foya.approval.action", Attr::Str(action));
            }
            span.end(SpanStatus::Unset);
        }
        let mut span = SpanWriter::begin(
            &mut self.spans,
            &Head {
                trace_id: turn.trace_id,
                span_id: tool.span_id,
                parent: Some(turn.span_id),
                sampled: true,
                name: ("execute_tool ", name),
                kind: SpanKind::Internal,
                start_ms: tool.start_ms,
                end_ms: end_ms.max(tool.start_ms),
            },
        );
        span.attrs(&EXECUTE_TOOL);
        span.attr("gen_ai.tool.name", Attr::Str(name));
        span.attr("gen_ai.tool.call.id", Attr::Str(&id.0));
        span.attr("foya.tool.outcome", Attr::Str(outcome));
        span.attr("foya.step", Attr::Int(i64::from(tool.step)));
        if let Some((_, ms)) = tool.finished {
            span.attr("foya.tool.duration_ms", Attr::count(ms));
        }
        if let Some(arguments) = &tool.arguments {
            span.attr("gen_ai.tool.call.arguments", Attr::Str(arguments));
        }
        if let Some(result) = &result {
            span.attr("gen_ai.tool.call.result", Attr::Str(result));
        }
        if outcome == "error" {
            span.attr("error.type", Attr::Str("tool_error"));
            span.end(SpanStatus::Error("tool_error"));
        } else {
            span.end(SpanStatus::Unset);
        }
    }

    /// A compaction's span; `tokens`: before and after, when it finished.
    fn compaction_span(
        &mut self,
        sid: SessionId,
        c: Compaction,
        end_ms: u64,
        tokens: Option<(u64, u64)>,
    ) {
        if !self.traces {
            return;
        }
        let Some(turn) = self.sessions.get(&sid).and_then(|s| s.turn.as_ref()) else {
            return;
        };
        if !turn.sampled {
            return;
        }
        let mut span = SpanWriter::begin(
            &mut self.spans,
            &Head {
                trace_id: turn.trace_id,
                span_id: c.span_id,
                parent: Some(turn.span_id),
                sampled: true,
                name: ("compaction", ""),
                kind: SpanKind::Internal,
                start_ms: c.start_ms,
                end_ms: end_ms.max(c.start_ms),
            },
        );
        if let Some((before, after)) = tokens {
            span.attr("foya.compaction.tokens_before", Attr::count(before));
            span.attr("foya.compaction.tokens_after", Attr::count(after));
        }
        span.attr("foya.compaction.trigger", Attr::Str(&c.trigger));
        let mut id = [0; uuid::fmt::Hyphenated::LENGTH];
        span.attr(
            "gen_ai.conversation.id",
            Attr::Str(uuid_text(sid.0, &mut id)),
        );
        span.end(SpanStatus::Unset);
    }

    fn hook_ran(
        &mut self,
        event: &Event,
        hook_event: &str,
        matcher: Option<&str>,
        tool_call_id: Option<&ToolCallId>,
        duration_ms: u64,
        decision: &str,
    ) {
        let labels = HookLabels {
            hook_event: bounded_hook_event(hook_event),
            decision: decision.to_owned(),
        };
        self.metrics(|m| {
            m.hook_runs.get_or_create(&labels).inc();
            m.hook_duration
                .get_or_create(&labels)
                .observe(seconds(duration_ms));
            m.figures(|f| {
                *f.hook_runs
                    .entry((labels.hook_event.clone(), labels.decision.clone()))
                    .or_default() += 1;
            });
        });
        if !self.traces {
            return;
        }
        let sid = event.session_id;
        let turn = self.sessions.get(&sid).and_then(|s| s.turn.as_ref());
        let (trace_id, parent, sampled) = match turn {
            Some(turn) => {
                let parent = tool_call_id
                    .and_then(|id| turn.tools.get(id))
                    .map_or(turn.span_id, |t| t.span_id);
                (turn.trace_id, Some(parent), turn.sampled)
            }
            None => (new_trace_id(), None, true),
        };
        if !sampled {
            return;
        }
        let mut span = SpanWriter::begin(
            &mut self.spans,
            &Head {
                trace_id,
                span_id: new_span_id(),
                parent,
                sampled,
                name: ("hook ", hook_event),
                kind: SpanKind::Internal,
                start_ms: event.at_ms.saturating_sub(duration_ms),
                end_ms: event.at_ms,
            },
        );
        span.attr("foya.hook.event", Attr::Str(hook_event));
        span.attr("foya.hook.decision", Attr::Str(decision));
        span.attr("foya.hook.duration_ms", Attr::count(duration_ms));
        let mut id = [0; uuid::fmt::Hyphenated::LENGTH];
        span.attr(
            "gen_ai.conversation.id",
            Attr::Str(uuid_text(sid.0, &mut id)),
        );
        if let Some(matcher) = matcher {
            span.attr("foya.hook.matcher", Attr::Str(matcher));
        }
        if let Some(id) = tool_call_id {
            span.attr("gen_ai.tool.call.id", Attr::Str(&id.0));
        }
        if decision == "failed" {
            span.attr("error.type", Attr::Str("hook_failed"));
            span.end(SpanStatus::Error("hook_failed"));
        } else {
            span.end(SpanStatus::Unset);
        }
    }

    fn turn_complete(
        &mut self,
        event: &Event,
        status: TurnStatus,
        reason: Option<&str>,
        class: Option<String>,
    ) {
        let sid = event.session_id;
        let at = event.at_ms;
        let failed_class = (status == TurnStatus::Failed)
            .then(|| class.clone().unwrap_or_else(|| "failed".to_owned()));
        self.close_step(sid, Some((at, failed_class.as_deref())));
        // Calls without a result (never expected: every call has one before the end).
        let open: Vec<(ToolCallId, Tool)> = self
            .turn_mut(sid)
            .map(|t| t.tools.drain().collect())
            .unwrap_or_default();
        for (id, tool) in open {
            self.close_tool(sid, &id, tool, at, None);
        }
        if let Some(c) = self.turn_mut(sid).and_then(|t| t.compaction.take()) {
            self.compaction_span(sid, c, at, None);
        }
        let Some(session) = self.sessions.get_mut(&sid) else {
            return;
        };
        // Approvals still open when the turn ended were never decided.
        Counts::add(
            &self.metrics,
            &self.counts.pending,
            -(session.approvals.len() as i64),
        );
        session.approvals.clear();
        let Some(turn) = session.turn.take() else {
            self.gauges();
            return;
        };
        Counts::add(&self.metrics, &self.counts.active, -1);
        let status_name = status_name(status);
        let duration = at.saturating_sub(turn.start_ms);
        let index = match status {
            TurnStatus::Completed => 0,
            TurnStatus::Cancelled => 1,
            TurnStatus::Failed => 2,
        };
        if let Some(m) = &self.metrics
            && let Some((finished, durations)) = self.handles.finished(m, index, status_name)
        {
            finished.inc();
            durations.observe(seconds(duration));
        }
        self.metrics(|m| FigureCounts::inc(&m.counts.finished[index]));
        self.gauges();
        if self.traces && turn.sampled {
            self.turn_span(sid, at, &turn, status, reason, class.as_deref());
        }
        self.forget_if_idle(sid);
    }
}

impl Deriver {
    /// A finished turn's span.
    fn turn_span(
        &mut self,
        sid: SessionId,
        at: u64,
        turn: &Turn,
        status: TurnStatus,
        reason: Option<&str>,
        class: Option<&str>,
    ) {
        let mut span = SpanWriter::begin(
            &mut self.spans,
            &Head {
                trace_id: turn.trace_id,
                span_id: turn.span_id,
                parent: turn.parent,
                sampled: turn.sampled,
                name: ("turn", ""),
                kind: SpanKind::Internal,
                start_ms: turn.start_ms,
                end_ms: at.max(turn.start_ms),
            },
        );
        let mut id = [0; uuid::fmt::Hyphenated::LENGTH];
        let session = uuid_text(sid.0, &mut id);
        span.attrs(&INVOKE_AGENT);
        span.attr("gen_ai.conversation.id", Attr::Str(session));
        span.attr("foya.session.id", Attr::Str(session));
        let mut id = [0; uuid::fmt::Hyphenated::LENGTH];
        span.attr(
            "foya.input.id",
            Attr::Str(uuid_text(turn.input_id.0, &mut id)),
        );
        span.attr("foya.turn.status", Attr::Str(status_name(status)));
        span.attr("foya.turn.steps", Attr::Int(i64::from(turn.steps)));
        span.attr("gen_ai.usage.input_tokens", Attr::count(turn.input_tokens));
        span.attr(
            "gen_ai.usage.output_tokens",
            Attr::count(turn.output_tokens),
        );
        if let Some(run) = turn.run_id {
            span.attr("foya.run.id", Attr::Str(uuid_text(run.0, &mut id)));
        }
        ModelOf::write(turn.model.as_deref(), &mut span);
        if let Some(reason) = reason
            .map(bounded_reason)
            .or_else(|| turn.cancel_reason.clone())
        {
            span.attr("foya.turn.reason", Attr::Str(&reason));
        }
        if let Some(text) = &turn.user_text {
            span.attr("gen_ai.input.messages", Attr::Str(text));
        }
        match status {
            TurnStatus::Completed => span.end(SpanStatus::Ok),
            TurnStatus::Cancelled => span.end(SpanStatus::Unset),
            TurnStatus::Failed => {
                let class = class.unwrap_or("failed");
                span.attr("error.type", Attr::Str(class));
                span.end(SpanStatus::Error(class));
            }
        }
    }
}

/// The hook point as a label: the known points, else `other`.
fn bounded_hook_event(event: &str) -> String {
    const KNOWN: [&str; 8] = [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PreCompact",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    ];
    if KNOWN.contains(&event) {
        event.to_owned()
    } else {
        "other".to_owned()
    }
}

/// A turn's short reason, cut to 64 characters (a reason is a short code such as
/// `max_steps`, never content).
fn bounded_reason(reason: &str) -> String {
    reason.chars().take(64).collect()
}

/// A record of the model client's metrics for one request attempt.
pub(crate) fn observe_request(
    metrics: &Metrics,
    ttft_ms: Option<f64>,
    total_ms: f64,
    error: Option<String>,
) {
    if let Some(ms) = ttft_ms {
        metrics.ttft.observe(ms / 1000.0);
    }
    metrics.model_request_duration.observe(total_ms / 1000.0);
    if let Some(class) = error {
        metrics
            .provider_errors
            .get_or_create(&ClassLabels {
                class: class.clone(),
            })
            .inc();
        metrics.figures(|f| *f.provider_errors.entry(class).or_default() += 1);
    }
}

#[cfg(test)]
#[path = "derive_tests.rs"]
mod tests;

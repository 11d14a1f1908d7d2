//! Where telemetry taps the runtime without being part of it: the store it appends every
//! event to ([`Tap`], which the redb store calls itself through an [`Observer`]; another engine is wrapped in
//! an [`ObservedLog`]) and the model clients it streams from ([`ObservedModel`], a
//! [`ModelClient`] around each).
//!
//! [`Tap`] times each append and follows each committed batch at once, on the
//! appending task, by reference ([`Follower`]: the derivers are sharded by session, each
//! behind its own mutex held for the batch's events, so appends of different sessions on
//! different workers do not wait for one lock; spans are handed to the exporter after
//! it is released). Nothing is copied, boxed or queued per append, and no task is woken:
//! a measured part of telemetry's cost before (docs/benchmarks.md). [`ObservedModel`]
//! times each request attempt: the first streamed token, the end of the stream, the
//! class of a failure.

use crate::derive::{Counts, Deriver};
use crate::export::Exporter;
use crate::metrics::Metrics;
use foya_actors::CancellationToken;
use foya_actors::provider::{ImageBudget, ModelClient, ModelRequest, retry::RetryPolicy};
use foya_protocol::{Event, EventKind, Seq, SessionId, SessionSummary, StreamEvent};
use foya_storage::{
    AppendError, AppendObserver, EventLog, Fence, LogStore, Page, ReadError, StoreStats,
};
use futures::Stream;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Derivers per pipeline: a session's events always go to the same one.
pub(crate) const SHARDS: usize = 16;

/// Most sub-agent sessions routed to their parent's shard; past it the routes start
/// over (as the deriver's own sub-agent map does).
const MAX_ROUTES: usize = 100_000;

/// Follows the committed events: the derivers (sharded by session) and where their
/// spans go.
#[derive(Debug)]
pub(crate) struct Follower {
    shards: Box<[Mutex<Deriver>]>,
    /// Sub-agent sessions, each followed by its parent's shard (the parent's turn and
    /// `agent` call are its turns' parents).
    routes: RwLock<HashMap<SessionId, usize>>,
    /// Whether `routes` has any entry (read without its lock).
    routed: AtomicBool,
    exporter: Option<Arc<Exporter>>,
}

impl Follower {
    /// `make` builds each shard's deriver.
    pub(crate) fn new(make: impl Fn() -> Deriver, exporter: Option<Arc<Exporter>>) -> Self {
        let counts = Arc::new(Counts::default());
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(make().shard(Arc::clone(&counts), SHARDS)))
                .collect(),
            routes: RwLock::default(),
            routed: AtomicBool::new(false),
            exporter,
        }
    }

    /// The shard following `session`.
    fn shard_of(&self, session: SessionId) -> usize {
        if self.routed.load(Ordering::Acquire)
            && let Some(shard) = self
                .routes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&session)
        {
            return *shard;
        }
        // A v7 UUID's low bits are random.
        #[allow(clippy::cast_possible_truncation)]
        let bits = session.0.as_u128() as usize;
        bits % self.shards.len()
    }

    fn deriver(&self, session: SessionId) -> std::sync::MutexGuard<'_, Deriver> {
        self.shards[self.shard_of(session)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A sub-agent session `session` (first seen in its `session_created`): it is
    /// followed where its parent is.
    fn route(&self, session: SessionId, parent: SessionId) {
        let shard = self.shard_of(parent);
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        if routes.len() >= MAX_ROUTES {
            routes.clear();
        }
        routes.insert(session, shard);
        self.routed.store(true, Ordering::Release);
    }

    /// A committed batch of one session's events (in its seq order).
    pub(crate) fn events(&self, events: &[Event]) {
        let Some(first) = events.first() else {
            return;
        };
        if let EventKind::SessionCreated { config } = &first.kind
            && let Some(parent) = &config.parent
        {
            self.route(first.session_id, parent.session_id);
        }
        let mut deriver = self.deriver(first.session_id);
        for event in events {
            deriver.event(event);
        }
        // Finished spans go to the exporter's queue in one move (the deriver keeps its
        // buffer's capacity); without traces none are made.
        if let Some(exporter) = &self.exporter {
            exporter.export(deriver.spans_mut());
        }
    }

    /// Lets go of what every shard keeps (its pipeline is gone).
    fn clear(&self) {
        for shard in &self.shards {
            shard.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
        self.routes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// A step's request attempt streamed its first token after `ms` milliseconds (before
    /// the step's assistant message, which is committed after the stream: the step's
    /// span gets it when it closes).
    pub(crate) fn first_token(&self, step: foya_actors::provider::StepOf, ms: f64) {
        self.deriver(step.session)
            .first_token(step.session, step.run, ms);
    }

    /// A session's provider and model, seen in its log as the runtime read it (a
    /// session created before this process started).
    pub(crate) fn model(&self, session: SessionId, provider: &str, model: &str) {
        self.deriver(session).model_read(session, provider, model);
    }
}

/// What telemetry sees of the runtime's store: each append (its time, its size, its
/// events, followed at once) and each log read (a session's model).
#[derive(Debug)]
pub(crate) struct Tap {
    pub(crate) follower: Arc<Follower>,
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// Whether its pipeline still runs ([`Self::detach`] when it is dropped). Read on
    /// every append by the store's observer, written once: its cache line stays shared
    /// between the cores, where a `Weak` upgraded per append moved it at each.
    live: AtomicBool,
}

impl Tap {
    pub(crate) fn new(follower: Arc<Follower>, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            follower,
            metrics,
            live: AtomicBool::new(true),
        }
    }

    /// Its pipeline is gone: later appends and reads are not followed, and what the
    /// derivers kept is let go (the store keeps its observer, and so this, while it
    /// lives).
    pub(crate) fn detach(&self) {
        self.live.store(false, Ordering::Release);
        self.follower.clear();
    }

    fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    fn appended(&self, events: &[Event], elapsed: Duration) {
        if let Some(m) = &self.metrics {
            m.store_append.observe(elapsed.as_secs_f64());
            #[allow(clippy::cast_precision_loss)]
            m.store_append_events.observe(events.len() as f64);
        }
        self.follower.events(events);
    }

    fn append_failed(&self, events: &[Event], elapsed: Duration) {
        if let Some(m) = &self.metrics {
            m.store_append.observe(elapsed.as_secs_f64());
            #[allow(clippy::cast_precision_loss)]
            m.store_append_events.observe(events.len() as f64);
            m.store_append_errors.inc();
        }
    }

    fn read(&self, session: SessionId, events: &[Event]) {
        // The model of a session loaded from the log: its latest configuration read.
        let model = events.iter().rev().find_map(|e| match &e.kind {
            EventKind::SessionCreated { config } => {
                Some((config.provider.as_str(), config.model.as_str()))
            }
            EventKind::ConfigChanged { provider, model } => {
                Some((provider.as_str(), model.as_str()))
            }
            _ => None,
        });
        if let Some((provider, model)) = model {
            self.follower.model(session, provider, model);
        }
    }
}

/// The [`Tap`] as the redb store's own observer ([`EventLog::observe_appends`]: no
/// wrapper, no boxed future per append). The store keeps it as long as the store lives;
/// it follows the store only while its pipeline does ([`Tap::detach`]: a later pipeline
/// on the same store, once this one is dropped, is not shadowed by it).
#[derive(Debug)]
pub(crate) struct Observer(pub(crate) Arc<Tap>);

impl AppendObserver for Observer {
    fn appended(&self, events: &[Event], elapsed: Duration) {
        if self.0.is_live() {
            self.0.appended(events, elapsed);
        }
    }

    fn append_failed(&self, events: &[Event], elapsed: Duration) {
        if self.0.is_live() {
            self.0.append_failed(events, elapsed);
        }
    }

    fn read(&self, session: SessionId, events: &[Event]) {
        if self.0.is_live() {
            self.0.read(session, events);
        }
    }
}

/// A store that takes no [`AppendObserver`] (a shared engine, whose every call is a
/// network round trip anyway, or a store observed already), observed by wrapping it.
#[derive(Debug, Clone)]
pub(crate) struct ObservedLog {
    pub(crate) inner: LogStore,
    pub(crate) tap: Arc<Tap>,
}

impl EventLog for ObservedLog {
    async fn append(&self, events: &[Event], fence: Fence) -> Result<(), AppendError> {
        let start = Instant::now();
        let result = self.inner.append(events, fence).await;
        match &result {
            Ok(()) => self.tap.appended(events, start.elapsed()),
            Err(_) => self.tap.append_failed(events, start.elapsed()),
        }
        result
    }

    async fn read_range(
        &self,
        session: SessionId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<Event>, ReadError> {
        let events = self.inner.read_range(session, from, limit).await?;
        self.tap.read(session, &events);
        Ok(events)
    }

    async fn last_seq(&self, session: SessionId) -> Result<Option<Seq>, ReadError> {
        self.inner.last_seq(session).await
    }

    async fn session(&self, session: SessionId) -> Result<Option<SessionSummary>, ReadError> {
        self.inner.session(session).await
    }

    async fn list_sessions(&self, page: Page) -> Result<Vec<SessionSummary>, ReadError> {
        self.inner.list_sessions(page).await
    }

    async fn pending_sessions(&self) -> Result<Vec<SessionId>, ReadError> {
        self.inner.pending_sessions().await
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }

    fn append_latency(&self) -> foya_storage::Latencies {
        self.inner.append_latency()
    }

    fn attachments(&self) -> Option<Arc<dyn foya_storage::SharedAttachments>> {
        self.inner.attachments()
    }

    fn observe_commits(&self, observer: Arc<dyn foya_storage::CommitObserver>) -> bool {
        self.inner.observe_commits(observer)
    }

    fn location(&self) -> String {
        self.inner.location()
    }
}

/// A model client, observed.
#[derive(Debug)]
pub(crate) struct ObservedModel {
    pub(crate) inner: Arc<dyn ModelClient>,
    pub(crate) observe: Arc<Observe>,
}

/// What a model request's stream reports to (one handle, cloned once per request).
#[derive(Debug)]
pub(crate) struct Observe {
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// Where a step's time to first token is sent (traces on).
    pub(crate) follower: Option<Arc<Follower>>,
}

impl ModelClient for ObservedModel {
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let inner = self.inner.stream(request, cancel);
        let step = self
            .observe
            .follower
            .is_some()
            .then(foya_actors::provider::current_step)
            .flatten();
        Box::pin(Timed {
            inner,
            observe: Arc::clone(&self.observe),
            step,
            start: Instant::now(),
            first: None,
            error: None,
            done: false,
        })
    }

    fn context_window(&self) -> u64 {
        self.inner.context_window()
    }

    fn supports_images(&self) -> bool {
        self.inner.supports_images()
    }

    fn image_budget(&self) -> ImageBudget {
        self.inner.image_budget()
    }

    fn retry_policy(&self) -> Option<RetryPolicy> {
        self.inner.retry_policy()
    }
}

/// One request attempt's stream, timed.
struct Timed {
    inner: BoxStream<'static, StreamEvent>,
    observe: Arc<Observe>,
    /// A step's request (traces on): its first token's time goes to its step's span.
    step: Option<foya_actors::provider::StepOf>,
    start: Instant,
    first: Option<f64>,
    error: Option<String>,
    done: bool,
}

impl Timed {
    fn record(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let total = self.start.elapsed().as_secs_f64() * 1000.0;
        if let Some(metrics) = &self.observe.metrics {
            crate::derive::observe_request(metrics, self.first, total, self.error.take());
        }
    }
}

impl Stream for Timed {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(event)) => match event {
                StreamEvent::TextDelta { .. }
                | StreamEvent::ReasoningDelta { .. }
                | StreamEvent::ToolCallDelta { .. }
                    if self.first.is_none() =>
                {
                    let ms = self.start.elapsed().as_secs_f64() * 1000.0;
                    self.first = Some(ms);
                    if let (Some(follower), Some(step)) = (&self.observe.follower, self.step) {
                        follower.first_token(step, ms);
                    }
                }
                StreamEvent::Error { error } => {
                    self.error = Some(
                        serde_json::to_value(error.class)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_else(|| "unknown".to_owned()),
                    );
                }
                _ => {}
            },
            Poll::Ready(None) => self.record(),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        self.record();
    }
}

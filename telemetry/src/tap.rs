//! Where telemetry taps the runtime without being part of it: the store it appends every
//! event to ([`ObservedLog`], an [`EventLog`] around the runtime's own) and the model
//! clients it streams from ([`ObservedModel`], a [`ModelClient`] around each).
//!
//! [`ObservedLog`] times each append and follows each committed batch at once, on the
//! appending task, by reference ([`Follower`]: the deriver behind a mutex held for the
//! batch's events; spans are handed to the exporter after it is released). Nothing is
//! copied or queued per append, and no task is woken: a measured part of telemetry's
//! cost before (docs/benchmarks.md). [`ObservedModel`] times each request attempt: the
//! first streamed token, the end of the stream, the class of a failure.

use crate::derive::{Deriver, ModelOf};
use crate::export::Exporter;
use crate::metrics::Metrics;
use foya_actors::CancellationToken;
use foya_actors::provider::{ImageBudget, ModelClient, ModelRequest, retry::RetryPolicy};
use foya_protocol::{Event, EventKind, Seq, SessionId, SessionSummary, StreamEvent};
use foya_storage::{AppendError, EventLog, Fence, LogStore, Page, ReadError, StoreStats};
use futures::Stream;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

/// Follows the committed events: the deriver (one per pipeline) and where its spans go.
#[derive(Debug)]
pub(crate) struct Follower {
    deriver: Mutex<Deriver>,
    exporter: Option<Arc<Exporter>>,
}

impl Follower {
    pub(crate) fn new(deriver: Deriver, exporter: Option<Arc<Exporter>>) -> Self {
        Self {
            deriver: Mutex::new(deriver),
            exporter,
        }
    }

    fn deriver(&self) -> std::sync::MutexGuard<'_, Deriver> {
        self.deriver.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A committed batch of one session's events (in its seq order).
    pub(crate) fn events(&self, events: &[Event]) {
        let mut deriver = self.deriver();
        for event in events {
            deriver.event(event);
        }
        // Finished spans go to the exporter's queue in one move (the deriver keeps its
        // buffer's capacity); without traces none are made.
        if let Some(exporter) = &self.exporter {
            exporter.export(deriver.spans_mut());
        }
    }

    /// A step's request attempt streamed its first token after `ms` milliseconds (before
    /// the step's assistant message, which is committed after the stream: the step's
    /// span gets it when it closes).
    pub(crate) fn first_token(&self, step: foya_actors::provider::StepOf, ms: f64) {
        self.deriver().first_token(step.session, step.run, ms);
    }

    /// A session's provider and model, seen in its log as the runtime read it (a
    /// session created before this process started).
    pub(crate) fn model(&self, session: SessionId, provider: String, model: String) {
        self.deriver()
            .set_model(session, ModelOf { provider, model });
    }
}

/// The runtime's store, observed.
#[derive(Debug, Clone)]
pub(crate) struct ObservedLog {
    pub(crate) inner: LogStore,
    pub(crate) follower: Arc<Follower>,
    pub(crate) metrics: Option<Arc<Metrics>>,
}

impl EventLog for ObservedLog {
    async fn append(&self, events: &[Event], fence: Fence) -> Result<(), AppendError> {
        let start = self.metrics.is_some().then(Instant::now);
        let result = self.inner.append(events, fence).await;
        if let (Some(m), Some(start)) = (&self.metrics, start) {
            let stats = self.inner.stats();
            m.observe_store(stats.commits, stats.appended_events);
            m.store_append.observe(start.elapsed().as_secs_f64());
            #[allow(clippy::cast_precision_loss)]
            m.store_append_events.observe(events.len() as f64);
            if result.is_err() {
                m.store_append_errors.inc();
            }
        }
        if result.is_ok() {
            self.follower.events(events);
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
        // The model of a session loaded from the log: its latest configuration read.
        let model = events.iter().rev().find_map(|e| match &e.kind {
            EventKind::SessionCreated { config } => {
                Some((config.provider.clone(), config.model.clone()))
            }
            EventKind::ConfigChanged { provider, model } => Some((provider.clone(), model.clone())),
            _ => None,
        });
        if let Some((provider, model)) = model {
            self.follower.model(session, provider, model);
        }
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
            .follower
            .clone()
            .zip(foya_actors::provider::current_step());
        Box::pin(Timed {
            inner,
            metrics: self.metrics.clone(),
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
    metrics: Option<Arc<Metrics>>,
    /// A step's request (traces on): where its first token's time goes.
    step: Option<(Arc<Follower>, foya_actors::provider::StepOf)>,
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
        if let Some(metrics) = &self.metrics {
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
                    if let Some((follower, step)) = &self.step {
                        follower.first_token(*step, ms);
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

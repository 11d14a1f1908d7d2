//! Where telemetry taps the runtime without being part of it: the store it appends every
//! event to ([`ObservedLog`], an [`EventLog`] around the runtime's own) and the model
//! clients it streams from ([`ObservedModel`], a [`ModelClient`] around each).
//!
//! [`ObservedLog`] hands each committed batch to the telemetry task (a bounded queue that
//! never blocks an append: when full, the batch is counted as dropped) and times the
//! append. [`ObservedModel`] times each request attempt: the first streamed token, the end
//! of the stream, the class of a failure.

use crate::metrics::Metrics;
use foya_actors::CancellationToken;
use foya_actors::provider::{ImageBudget, ModelClient, ModelRequest, retry::RetryPolicy};
use foya_protocol::{Event, EventKind, Seq, SessionId, SessionSummary, StreamEvent};
use foya_storage::{AppendError, EventLog, Fence, LogStore, Page, ReadError, StoreStats};
use futures::Stream;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::mpsc;

/// What the telemetry task is told.
#[derive(Debug)]
pub(crate) enum Feed {
    /// A committed batch of one session's events.
    Events(Vec<Event>),
    /// Answered once every batch sent before it has been followed.
    Sync(tokio::sync::oneshot::Sender<()>),
    /// A step's request attempt streamed its first token after this many milliseconds.
    FirstToken(foya_actors::provider::StepOf, f64),
    /// A session's provider and model, seen in its log as the runtime read it (a session
    /// created before this process started).
    Model(SessionId, String, String),
}

/// The runtime's store, observed.
#[derive(Debug, Clone)]
pub(crate) struct ObservedLog {
    pub(crate) inner: LogStore,
    pub(crate) feed: mpsc::Sender<Feed>,
    pub(crate) metrics: Option<Arc<Metrics>>,
}

impl EventLog for ObservedLog {
    async fn append(&self, events: &[Event], fence: Fence) -> Result<(), AppendError> {
        let start = Instant::now();
        let result = self.inner.append(events, fence).await;
        if let Some(m) = &self.metrics {
            let stats = self.inner.stats();
            m.observe_store(stats.commits, stats.appended_events);
            m.store_append.observe(start.elapsed().as_secs_f64());
            #[allow(clippy::cast_precision_loss)]
            m.store_append_events.observe(events.len() as f64);
            if result.is_err() {
                m.store_append_errors.inc();
            }
        }
        if result.is_ok()
            && self.feed.try_send(Feed::Events(events.to_vec())).is_err()
            && let Some(m) = &self.metrics
        {
            m.dropped_events.inc_by(events.len() as u64);
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
            let _ = self.feed.try_send(Feed::Model(session, provider, model));
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
    pub(crate) feed: Option<mpsc::Sender<Feed>>,
}

impl ModelClient for ObservedModel {
    fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let inner = self.inner.stream(request, cancel);
        let step = self.feed.clone().zip(foya_actors::provider::current_step());
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
    step: Option<(mpsc::Sender<Feed>, foya_actors::provider::StepOf)>,
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
                    if let Some((feed, step)) = &self.step {
                        // Before the step's assistant message, which is committed after
                        // the stream: the span gets it when it closes.
                        let _ = feed.try_send(Feed::FirstToken(*step, ms));
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

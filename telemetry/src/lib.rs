//! `foya-telemetry`: what a Foya runtime does, seen from outside it — OpenTelemetry
//! traces of every turn (OTLP over HTTP/protobuf) and Prometheus metrics — derived from
//! the runtime's committed events. See `docs/observability.md`.
//!
//! Design: the runtime's behaviour is not changed. [`Telemetry::instrument`] observes the
//! [`RuntimeConfig`]'s store (every event is committed through it, in each session's
//! order: the redb store reports each append to an observer itself,
//! [`foya_storage::EventLog::observe_appends`]; another engine is wrapped) and wraps its
//! model clients (the first token and the failures of each request attempt); each
//! committed batch is followed as its append returns (by reference: no copy, no box, no
//! queue) to derive spans with explicit start and end times and the metrics
//! (`derive.rs`). The live gauges are read from the
//! runtime's own counts ([`foya_actors::RuntimeConfig::stats`], its MCP servers' states)
//! at each scrape, and the store reports its group commits
//! ([`foya_storage::EventLog::observe_commits`]). Without telemetry nothing is wrapped,
//! nothing is built and nothing costs.
//!
//! ```no_run
//! # async fn demo(config: foya_actors::RuntimeConfig) -> anyhow::Result<()> {
//! use foya_telemetry::{Telemetry, TelemetryConfig};
//! let settings = TelemetryConfig::load(None, true)?; // OTEL_* variables; metrics on
//! let telemetry = Telemetry::start(settings)?;
//! let config = match &telemetry {
//!     Some(t) => t.instrument(config),
//!     None => config,
//! };
//! let runtime = foya_actors::Runtime::start(config).await?;
//! // … work …
//! if let Some(t) = &telemetry {
//!     println!("{}", t.metrics_text().await.unwrap_or_default());
//! }
//! runtime.shutdown().await;
//! if let Some(t) = telemetry {
//!     t.shutdown().await; // every span exported
//! }
//! # Ok(()) }
//! ```

mod cells;
mod config;
mod derive;
mod export;
mod histogram;
pub mod http;
mod metrics;
mod otlp;
mod tap;

pub use config::{DEFAULT_SERVICE_NAME, TelemetryConfig, TraceExport};
pub use derive::Parent;
pub use metrics::{CONTENT_TYPE, Figures, MAX_TOOL_LABELS};

use derive::{Deriver, Parents};
use export::Exporter;
use foya_actors::RuntimeConfig;
use foya_actors::provider::ModelClient;
use foya_protocol::InputId;
use foya_storage::LogStore;
use metrics::Metrics;
use std::sync::Arc;
use tap::{Follower, Observe, ObservedLog, ObservedModel, Observer, Tap};

#[derive(Debug)]
struct Shared {
    config: TelemetryConfig,
    metrics: Option<Arc<Metrics>>,
    exporter: Option<Arc<Exporter>>,
    /// What follows the store's appends and reads (its follower: the derivers).
    tap: Arc<Tap>,
    parents: Parents,
}

impl Drop for Shared {
    /// The pipeline is gone (its last clone dropped): the store it observes (which keeps
    /// its observer) is no longer followed, and its exporter's thread stops.
    fn drop(&mut self) {
        self.tap.detach();
        if let Some(exporter) = &self.exporter {
            exporter.stop();
        }
    }
}

/// A running telemetry pipeline (cheap to clone). Made by [`Telemetry::start`], joined
/// to a runtime by [`Telemetry::instrument`].
#[derive(Debug, Clone)]
pub struct Telemetry {
    shared: Arc<Shared>,
}

impl Telemetry {
    /// Starts the pipeline `config` asks for; `None` when it asks for nothing. The trace
    /// exporter sends through the current tokio runtime: call it inside one.
    ///
    /// # Errors
    /// The trace exporter cannot be built (an invalid endpoint URL).
    pub fn start(config: TelemetryConfig) -> anyhow::Result<Option<Self>> {
        if config.is_off() {
            return Ok(None);
        }
        let exporter = match &config.traces {
            Some(traces) => Some(Arc::new(Exporter::new(traces)?)),
            None => None,
        };
        let metrics = config.metrics.then(|| Arc::new(Metrics::new()));
        let parents: Parents = Arc::default();
        let make = || {
            Deriver::new(
                metrics.clone(),
                exporter.is_some(),
                config.capture_content,
                Arc::clone(&parents),
            )
        };
        let follower = Arc::new(Follower::new(make, exporter.clone()));
        let tap = Arc::new(Tap::new(follower, metrics.clone()));
        Ok(Some(Self {
            shared: Arc::new(Shared {
                config,
                metrics,
                exporter,
                tap,
                parents,
            }),
        }))
    }

    /// What this pipeline does.
    #[must_use]
    pub fn config(&self) -> &TelemetryConfig {
        &self.shared.config
    }

    /// `config` with its store and model clients observed: give the result to
    /// [`foya_actors::Runtime::start`]. Call it once per pipeline, and keep the pipeline
    /// (or a clone) while the runtime runs: a redb store is followed while it lives.
    #[must_use]
    pub fn instrument(&self, mut config: RuntimeConfig) -> RuntimeConfig {
        if let Some(metrics) = &self.shared.metrics {
            let _ = metrics.store.set(config.store.clone());
        }
        use foya_storage::EventLog as _;
        // The redb store calls the observer itself; another engine is wrapped.
        let observer = Arc::new(Observer(Arc::clone(&self.shared.tap)));
        if !config.store.observe_appends(observer) {
            config.store = LogStore::shared(ObservedLog {
                inner: config.store,
                tap: Arc::clone(&self.shared.tap),
            });
        }
        if let Some(metrics) = &self.shared.metrics {
            config
                .store
                .observe_commits(Arc::new(metrics::CommitMetrics(Arc::clone(metrics))));
            let _ = metrics.runtime.set(metrics::RuntimeSource {
                stats: config.stats.clone(),
                mcp: config.mcp.clone(),
            });
        }
        if self.shared.metrics.is_some() || self.shared.exporter.is_some() {
            // The time to first token goes to the step's span only when spans are made.
            let follower = self
                .shared
                .exporter
                .is_some()
                .then(|| Arc::clone(&self.shared.tap.follower));
            let observe = Arc::new(Observe {
                metrics: self.shared.metrics.clone(),
                follower,
            });
            let wrap = |model: Arc<dyn ModelClient>| -> Arc<dyn ModelClient> {
                Arc::new(ObservedModel {
                    inner: model,
                    observe: Arc::clone(&observe),
                })
            };
            config.model = wrap(config.model);
            config.models = config
                .models
                .into_iter()
                .map(|(name, model)| (name, wrap(model)))
                .collect();
        }
        config
    }

    /// Makes the turn of input `input` continue the caller's trace of `traceparent` (a
    /// W3C `traceparent` value): its turn span becomes the caller's span's child. Call it
    /// before submitting the input (with
    /// [`SessionHandle::submit_with_id`](foya_actors::SessionHandle::submit_with_id)).
    /// Returns whether `traceparent` was valid (an invalid one is ignored, as W3C says).
    pub fn continue_trace(&self, input: InputId, traceparent: &str) -> bool {
        let Some(parent) = Parent::from_traceparent(traceparent) else {
            return false;
        };
        if self.shared.exporter.is_none() {
            return true;
        }
        self.shared.parents.insert(input, parent);
        true
    }

    /// Waits until every event committed before the call has been followed (so metrics
    /// and spans include it). Each batch is followed before its append returns, so this
    /// returns at once; kept for callers written against a queued pipeline.
    #[allow(clippy::unused_async)]
    pub async fn sync(&self) {}

    /// The metrics as OpenMetrics text ([`CONTENT_TYPE`]), after [`Self::sync`]; `None`
    /// when metrics are off.
    pub async fn metrics_text(&self) -> Option<String> {
        let metrics = self.shared.metrics.as_ref()?;
        self.sync().await;
        metrics.refresh();
        Some(metrics.encode())
    }

    /// The figures behind the metrics, after [`Self::sync`]; `None` when metrics are
    /// off.
    pub async fn figures(&self) -> Option<Figures> {
        let metrics = self.shared.metrics.as_ref()?;
        self.sync().await;
        metrics.refresh();
        Some(metrics.snapshot())
    }

    /// Sends every span derived so far to the collector (waits for the export).
    pub async fn flush(&self) {
        self.sync().await;
        if let Some(exporter) = &self.shared.exporter {
            let exporter = Arc::clone(exporter);
            let _ = tokio::task::spawn_blocking(move || exporter.flush()).await;
        }
    }

    /// Follows what was committed, exports every span and stops the exporter. Call it
    /// after the runtime's shutdown (its last events are then followed too).
    pub async fn shutdown(self) {
        self.sync().await;
        if let Some(exporter) = &self.shared.exporter {
            let exporter = Arc::clone(exporter);
            let _ = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
        }
    }
}

//! The OTLP exporter: derived [`SpanRecord`]s queued as they are made (one lock per
//! committed batch, no object built on the runtime's threads) and turned into the
//! OpenTelemetry SDK's [`SpanData`] on the exporter's own thread, which sends them in
//! large batches through the OTLP span exporter (HTTP/protobuf; its endpoint, headers and
//! timeout from the standard `OTEL_EXPORTER_OTLP_*` variables).
//!
//! No SDK tracer or span processor sits in between: a span's ids, parent and times are
//! already known when it is derived, so spans are written straight into the export
//! batch. Batching follows the standard variables of the SDK's batch span processor:
//! `OTEL_BSP_SCHEDULE_DELAY` (ms between exports, default 5 000),
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (spans per request, default 512; the thread is woken
//! early once that many wait) and `OTEL_BSP_MAX_QUEUE_SIZE` (spans waiting at most,
//! default 2 048; beyond it new spans are dropped and counted).

use crate::config::TraceExport;
use crate::derive::SpanRecord;
use anyhow::Context as _;
use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use std::borrow::Cow;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The exporter's HTTP client: the workspace's async reqwest, driven on the runtime that
/// built the exporter. The exporter's thread blocks on
/// [`HttpClient::send_bytes`](opentelemetry_http::HttpClient::send_bytes); the request
/// itself is a task of that tokio runtime, so it has the reactor it needs.
#[derive(Debug, Clone)]
struct OtlpHttp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

/// How long one export request may take (the SDK's default export timeout).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

impl OtlpHttp {
    fn new() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current()
            .context("the trace exporter is built inside a tokio runtime")?;
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .context("cannot build the OTLP exporter's HTTP client")?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpHttp {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let sent = self.runtime.spawn(async move {
            let response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// How spans are batched (the SDK batch span processor's variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batching {
    /// Longest wait between a span and its export.
    pub(crate) delay: Duration,
    /// Spans per export request; reaching it wakes the exporter.
    pub(crate) batch: usize,
    /// Spans waiting at most; beyond it new ones are dropped.
    pub(crate) queue: usize,
}

impl Batching {
    /// From `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` and
    /// `OTEL_BSP_MAX_QUEUE_SIZE` (through `env`), with the SDK's defaults; an unreadable
    /// value keeps the default, as the SDK does.
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| env(name).and_then(|v| v.trim().parse::<u64>().ok());
        let delay = Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY").unwrap_or(5_000));
        let size = |name: &str, default: usize| {
            number(name)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(default)
        };
        let queue = size("OTEL_BSP_MAX_QUEUE_SIZE", 2_048);
        let batch = size("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512).min(queue);
        Self {
            delay,
            batch,
            queue,
        }
    }
}

/// Where a span batch goes: the OTLP exporter, or (in tests) anything else.
pub(crate) trait Sink: Send + 'static {
    /// Sends one batch (blocking the exporter's thread until it is answered).
    fn send(&mut self, batch: Vec<SpanData>);
    /// The exporter stops: nothing more will be sent.
    fn shutdown(&mut self) {}
}

/// The OTLP span exporter (its own resource set), as a [`Sink`].
struct Otlp(opentelemetry_otlp::SpanExporter);

impl Sink for Otlp {
    fn send(&mut self, batch: Vec<SpanData>) {
        if let Err(e) = futures::executor::block_on(self.0.export(batch)) {
            tracing::warn!(error = %e, "cannot export spans");
        }
    }

    fn shutdown(&mut self) {
        let _ = self.0.shutdown();
    }
}

/// What the runtime's threads and the exporter's thread share.
#[derive(Debug, Default)]
struct Queue {
    spans: Vec<SpanRecord>,
    /// Spans dropped because the queue was full, not yet reported.
    dropped: u64,
    /// Flushes asked for, and done (the exporter's generation counters).
    flush_asked: u64,
    flush_done: u64,
    stop: bool,
    stopped: bool,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the exporter's thread (a full batch, a flush, the stop).
    wake: Condvar,
    /// Wakes who waits for a flush or the stop.
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The exporter: a queue and the thread that empties it.
#[derive(Debug)]
pub(crate) struct Exporter {
    shared: Arc<Shared>,
    batching: Batching,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Exporter {
    /// Builds the OTLP exporter and starts its thread (nothing is sent until the first
    /// span).
    ///
    /// # Errors
    /// The endpoint is not a valid URL, the HTTP client cannot be built or the thread
    /// cannot be started.
    pub(crate) fn new(config: &TraceExport) -> anyhow::Result<Self> {
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OtlpHttp::new()?)
            .with_protocol(Protocol::HttpBinary);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        let mut exporter = builder
            .build()
            .context("cannot build the OTLP trace exporter")?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self::with_sink(Otlp(exporter), Batching::from_env(&env))
    }

    /// An exporter sending to `sink`, batching as `batching` says.
    pub(crate) fn with_sink(sink: impl Sink, batching: Batching) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("foya-otlp".to_owned())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run(&shared, sink, batching)
            })
            .context("cannot start the trace exporter's thread")?;
        Ok(Self {
            shared,
            batching,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `spans` (one lock for them all; the exporter's thread is woken only when a
    /// full batch waits). Unsampled spans are not exported (the caller's trace said so).
    pub(crate) fn export(&self, spans: &mut Vec<SpanRecord>) {
        if spans.is_empty() {
            return;
        }
        let wake = {
            let mut queue = self.shared.lock();
            if queue.stopped {
                spans.clear();
                return;
            }
            let before = queue.spans.len();
            let room = self.batching.queue.saturating_sub(before);
            for span in spans.drain(..) {
                if !span.sampled {
                    continue;
                }
                if queue.spans.len() - before < room {
                    queue.spans.push(span);
                } else {
                    queue.dropped += 1;
                }
            }
            before < self.batching.batch && queue.spans.len() >= self.batching.batch
        };
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// Sends what is queued and waits until it was answered (blocking: call it off the
    /// async threads).
    pub(crate) fn flush(&self) {
        let mut queue = self.shared.lock();
        if queue.stopped {
            return;
        }
        queue.flush_asked += 1;
        let asked = queue.flush_asked;
        self.shared.wake.notify_one();
        while queue.flush_done < asked && !queue.stopped {
            queue = self
                .shared
                .done
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Sends what is queued and stops the exporter's thread (blocking).
    pub(crate) fn shutdown(&self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::warn!("the trace exporter's thread panicked");
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The exporter's thread: waits for a full batch, a flush, the stop or the delay, then
/// sends everything queued.
fn run(shared: &Shared, mut sink: impl Sink, batching: Batching) {
    let scope = InstrumentationScope::builder("foya").build();
    let mut deadline = Instant::now() + batching.delay;
    let mut spare = Vec::new();
    loop {
        let (mut spans, dropped, flush, stop) = {
            let mut queue = shared.lock();
            loop {
                if queue.stop || queue.flush_asked > queue.flush_done {
                    break;
                }
                if queue.spans.len() >= batching.batch {
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                queue = shared
                    .wake
                    .wait_timeout(queue, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            std::mem::swap(&mut queue.spans, &mut spare);
            (
                spare,
                std::mem::take(&mut queue.dropped),
                queue.flush_asked,
                queue.stop,
            )
        };
        deadline = Instant::now() + batching.delay;
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "the trace exporter's queue was full: spans were dropped \
                 (OTEL_BSP_MAX_QUEUE_SIZE)"
            );
        }
        while !spans.is_empty() {
            let rest = spans.split_off(spans.len().min(batching.batch));
            let batch = spans
                .drain(..)
                .map(|span| span_data(span, &scope))
                .collect();
            sink.send(batch);
            spans = rest;
        }
        spare = spans;
        let mut queue = shared.lock();
        queue.flush_done = flush;
        if stop {
            queue.stopped = true;
            queue.spans.clear();
            drop(queue);
            shared.done.notify_all();
            sink.shutdown();
            return;
        }
        drop(queue);
        shared.done.notify_all();
    }
}

/// A derived span as the SDK's exported span (what its tracer would have made of it).
fn span_data(span: SpanRecord, scope: &InstrumentationScope) -> SpanData {
    let flags = if span.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let mut events = SpanEvents::default();
    events.events = span
        .events
        .into_iter()
        .map(|(name, at, attributes)| {
            opentelemetry::trace::Event::new(name, time(at), attributes, 0)
        })
        .collect();
    SpanData {
        span_context: SpanContext::new(
            span.trace_id,
            span.span_id,
            flags,
            false,
            TraceState::default(),
        ),
        parent_span_id: span.parent.unwrap_or(opentelemetry::trace::SpanId::INVALID),
        parent_span_is_remote: span.parent.is_some(),
        span_kind: span.kind,
        name: Cow::Owned(span.name),
        start_time: time(span.start_ms),
        end_time: time(span.end_ms.max(span.start_ms)),
        attributes: span.attributes,
        dropped_attributes_count: 0,
        events,
        links: SpanLinks::default(),
        status: span.status,
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
    use std::sync::mpsc;

    /// Hands every batch to the test.
    struct Collect(mpsc::Sender<Vec<SpanData>>);

    impl Sink for Collect {
        fn send(&mut self, batch: Vec<SpanData>) {
            let _ = self.0.send(batch);
        }
    }

    fn record(n: u64, sampled: bool) -> SpanRecord {
        SpanRecord {
            name: format!("span {n}"),
            trace_id: TraceId::from(7_u128),
            span_id: SpanId::from(n + 1),
            parent: (n > 0).then(|| SpanId::from(1)),
            sampled,
            kind: SpanKind::Internal,
            start_ms: 1_000 + n,
            end_ms: 2_000 + n,
            attributes: vec![KeyValue::new("foya.n", i64::try_from(n).unwrap())],
            status: Status::Unset,
            events: vec![("retry", 1_500, Vec::new())],
        }
    }

    const HOUR: Duration = Duration::from_secs(3_600);

    #[test]
    fn spans_wait_for_a_full_batch_and_go_in_batches_of_its_size() {
        let (tx, rx) = mpsc::channel();
        let batching = Batching {
            delay: HOUR,
            batch: 100,
            queue: 1_000,
        };
        let exporter = Exporter::with_sink(Collect(tx), batching).unwrap();
        // 99 spans, in pieces: not a batch yet, nothing is sent (the delay is an hour).
        for piece in 0..9 {
            let mut spans: Vec<_> = (0..11).map(|i| record(piece * 11 + i, true)).collect();
            exporter.export(&mut spans);
            assert!(spans.is_empty(), "the spans were moved");
        }
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        // The hundredth fills a batch: one request of 100.
        exporter.export(&mut vec![record(99, true)]);
        let batch = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(batch.len(), 100);
        let first = &batch[0];
        assert_eq!(first.name, "span 0");
        assert_eq!(first.span_context.span_id(), SpanId::from(1));
        assert_eq!(first.span_context.trace_id(), TraceId::from(7_u128));
        assert!(first.span_context.is_sampled());
        assert_eq!(first.start_time, UNIX_EPOCH + Duration::from_millis(1_000));
        assert_eq!(first.end_time, UNIX_EPOCH + Duration::from_millis(2_000));
        assert_eq!(first.events.events.len(), 1);
        assert_eq!(first.instrumentation_scope.name(), "foya");
        assert_eq!(batch[1].parent_span_id, SpanId::from(1));
        // 250 more at once: two full requests, the remaining 50 at the flush.
        exporter.export(&mut (100..350).map(|n| record(n, true)).collect());
        exporter.flush();
        let sizes: Vec<usize> = rx.try_iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        exporter.shutdown();
    }

    #[test]
    fn the_delay_sends_what_waits_and_unsampled_or_overflowing_spans_are_not_sent() {
        let (tx, rx) = mpsc::channel();
        let batching = Batching {
            delay: Duration::from_millis(20),
            batch: 512,
            queue: 10,
        };
        let exporter = Exporter::with_sink(Collect(tx), batching).unwrap();
        let mut spans: Vec<_> = (0..14).map(|n| record(n, n % 2 == 0)).collect();
        exporter.export(&mut spans);
        // 7 sampled spans, under the queue's 10: sent after the delay, without a flush.
        let batch = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(batch.len(), 7);
        assert!(batch.iter().all(|s| s.span_context.is_sampled()));
        // A burst beyond the queue: the first 10 are kept.
        exporter.export(&mut (0..30).map(|n| record(n, true)).collect());
        exporter.shutdown();
        let kept: usize = rx.try_iter().map(|b| b.len()).sum();
        assert_eq!(kept, 10);
        // After the stop nothing is queued, and a flush returns at once.
        exporter.export(&mut vec![record(1, true)]);
        exporter.flush();
        assert!(rx.try_iter().next().is_none());
    }

    #[test]
    fn the_batch_variables_are_read_with_the_sdk_defaults() {
        let none = |_: &str| None;
        assert_eq!(
            Batching::from_env(&none),
            Batching {
                delay: Duration::from_secs(5),
                batch: 512,
                queue: 2_048
            }
        );
        let set = |name: &str| match name {
            "OTEL_BSP_SCHEDULE_DELAY" => Some("50".to_owned()),
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" => Some("4096".to_owned()),
            "OTEL_BSP_MAX_QUEUE_SIZE" => Some("1000".to_owned()),
            _ => None,
        };
        assert_eq!(
            Batching::from_env(&set),
            Batching {
                delay: Duration::from_millis(50),
                batch: 1_000,
                queue: 1_000
            }
        );
        let bad = |_: &str| Some("many".to_owned());
        assert_eq!(Batching::from_env(&bad), Batching::from_env(&none));
    }
}

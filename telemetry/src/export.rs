//! The OTLP exporter: spans, already encoded as OTLP protobuf when they closed
//! (`otlp.rs`), queued as bytes (one lock and one copy per committed batch), and posted
//! in large batches by the exporter's own thread, which only frames them as a request
//! (OTLP over HTTP/protobuf).
//!
//! No SDK tracer, span processor or span object sits in between: a span's ids, parent
//! and times are already known when it is derived. What the SDK's OTLP exporter and
//! batch span processor read is read here the same way: the endpoint
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` +
//! `/v1/traces`), headers (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else
//! `OTEL_EXPORTER_OTLP_HEADERS`: `key=value,…`, values percent-decoded), the timeout
//! (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT`, ms, default
//! 10 000), and batching: `OTEL_BSP_SCHEDULE_DELAY` (ms between exports, default 5 000),
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (spans per request, default 512; the thread is woken
//! early once that many wait) and `OTEL_BSP_MAX_QUEUE_SIZE` (spans waiting at most,
//! default 2 048; beyond it new spans are dropped and counted).

use crate::config::TraceExport;
use crate::otlp::{Encoded, EncodedResource, request};
use anyhow::Context as _;
use opentelemetry::KeyValue;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// How long one export request may take by default (the SDK's default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where traces go when no endpoint is named (the SDK's default).
const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/traces";

/// Where and how requests are sent, from the configuration and the `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transport {
    pub(crate) endpoint: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
}

impl Transport {
    /// `endpoint` (the `[telemetry]` table's, already `…/v1/traces`) or the
    /// environment's (through `env`).
    pub(crate) fn resolve(endpoint: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> Self {
        let endpoint = match endpoint {
            Some(endpoint) => endpoint.to_owned(),
            None => match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                Some(endpoint) => endpoint.trim().to_owned(),
                None => env("OTEL_EXPORTER_OTLP_ENDPOINT").map_or_else(
                    || DEFAULT_ENDPOINT.to_owned(),
                    |base| format!("{}/v1/traces", base.trim().trim_end_matches('/')),
                ),
            },
        };
        let headers = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"))
            .map(|list| parse_headers(&list))
            .unwrap_or_default();
        let timeout = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .map_or(EXPORT_TIMEOUT, Duration::from_millis);
        Self {
            endpoint,
            headers,
            timeout,
        }
    }
}

/// `key=value,key=value` (W3C baggage-like, as the OTLP exporters read it): keys and
/// values trimmed, values percent-decoded; a pair without `=` is skipped.
fn parse_headers(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let name = name.trim();
            (!name.is_empty()).then(|| (name.to_owned(), percent_decode(value.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            #[allow(clippy::cast_possible_truncation)]
            out.push((high * 16 + low) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The OTLP/HTTP sender: the workspace's async reqwest, driven on the runtime that built
/// the exporter (the request is a task of that tokio runtime, so it has the reactor it
/// needs; the exporter's thread waits for it).
struct Otlp {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    endpoint: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    resource: EncodedResource,
}

impl Otlp {
    fn new(config: &TraceExport) -> anyhow::Result<Self> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let transport = Transport::resolve(config.endpoint.as_deref(), &env);
        let endpoint = reqwest::Url::parse(&transport.endpoint)
            .context("cannot build the OTLP trace exporter: its endpoint is not a URL")?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &transport.headers {
            // As the SDK does, a header that is not a valid one is left out (its value
            // is never shown: it is often a key).
            if let (Ok(name), Ok(value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(value),
            ) {
                headers.insert(name, value);
            }
        }
        let runtime = tokio::runtime::Handle::try_current()
            .context("the trace exporter is built inside a tokio runtime")?;
        let mut client = reqwest::Client::builder().timeout(transport.timeout);
        if endpoint.scheme() == "http" {
            // A plain-HTTP collector (the usual local one) needs no certificate: the
            // system's roots are not read (about 20 million instructions at each start).
            client = client.tls_certs_only(std::iter::empty());
        }
        let client = client
            .build()
            .context("cannot build the OTLP exporter's HTTP client")?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            client,
            runtime,
            endpoint,
            headers,
            resource: EncodedResource::new(&resource),
        })
    }
}

impl Sink for Otlp {
    fn send(&mut self, spans: &[u8], count: usize) {
        // Framed into a buffer of its own that the request takes (no copy of the batch
        // beyond the framing).
        let mut body = Vec::new();
        request(&self.resource, spans, &mut body);
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body);
        let sent = self.runtime.spawn(async move {
            let response = request.send().await?;
            let status = response.status();
            // The answer is read to its end, so the connection is kept for the next one.
            let _ = response.bytes().await;
            Ok::<_, reqwest::Error>(status)
        });
        match futures::executor::block_on(sent) {
            Ok(Ok(status)) if status.is_success() => {}
            Ok(Ok(status)) => {
                tracing::warn!(%status, spans = count, "the OTLP collector refused spans");
            }
            Ok(Err(e)) => tracing::warn!(error = %e, spans = count, "cannot export spans"),
            Err(e) => tracing::warn!(error = %e, "cannot export spans"),
        }
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

/// Where a span batch goes: the OTLP collector, or (in tests) anything else.
pub(crate) trait Sink: Send + 'static {
    /// Sends one batch of `count` spans, encoded (`ScopeSpans.spans` fields), blocking
    /// the exporter's thread until it is answered.
    fn send(&mut self, spans: &[u8], count: usize);
}

/// What the runtime's threads and the exporter's thread share.
#[derive(Debug, Default)]
struct Queue {
    spans: Encoded,
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

impl Exporter {
    /// Builds the OTLP exporter and starts its thread (nothing is sent until the first
    /// span).
    ///
    /// # Errors
    /// The endpoint is not a valid URL, the HTTP client cannot be built or the thread
    /// cannot be started.
    pub(crate) fn new(config: &TraceExport) -> anyhow::Result<Self> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self::with_sink(Otlp::new(config)?, Batching::from_env(&env))
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

    /// Queues `spans` and clears them (one lock and one copy of their bytes for them
    /// all; the exporter's thread is woken only when a full batch waits). The deriver
    /// encodes no unsampled span (the caller's trace said so).
    pub(crate) fn export(&self, spans: &mut Encoded) {
        if spans.is_empty() {
            return;
        }
        let wake = {
            let mut queue = self.shared.lock();
            if queue.stopped {
                drop(queue);
                spans.clear();
                return;
            }
            let before = queue.spans.len();
            let room = self.batching.queue.saturating_sub(before);
            queue.spans.append(spans, room);
            queue.dropped += len_u64(spans.len().saturating_sub(room));
            before < self.batching.batch && queue.spans.len() >= self.batching.batch
        };
        spans.clear();
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

impl Exporter {
    /// Asks the thread to send what is queued and stop, without waiting for it (called
    /// where the runtime's own thread, which the send needs, may be the caller's).
    pub(crate) fn stop(&self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The exporter's thread: waits for a full batch, a flush, the stop or the delay, then
/// sends everything queued.
fn run(shared: &Shared, mut sink: impl Sink, batching: Batching) {
    let mut deadline = Instant::now() + batching.delay;
    let mut spare = Encoded::default();
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
        let mut from = 0;
        while from < spans.len() {
            let to = (from + batching.batch).min(spans.len());
            sink.send(spans.slice(from, to), to - from);
            from = to;
        }
        spans.clear();
        spare = spans;
        let mut queue = shared.lock();
        queue.flush_done = flush;
        if stop {
            queue.stopped = true;
            queue.spans.clear();
            drop(queue);
            shared.done.notify_all();
            return;
        }
        drop(queue);
        shared.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::otlp::testing::{SpanRecord, decode, encoded};
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
    use std::sync::mpsc;

    /// Hands every batch to the test, decoded.
    struct Collect(mpsc::Sender<Vec<SpanRecord>>);

    impl Sink for Collect {
        fn send(&mut self, spans: &[u8], count: usize) {
            let batch = decode(spans);
            assert_eq!(batch.len(), count);
            let _ = self.0.send(batch);
        }
    }

    fn spans(records: impl IntoIterator<Item = SpanRecord>) -> Encoded {
        encoded(&records.into_iter().collect::<Vec<_>>())
    }

    fn record(n: u64, sampled: bool) -> SpanRecord {
        SpanRecord {
            name: format!("span {n}").into(),
            trace_id: TraceId::from(7_u128),
            span_id: SpanId::from(n + 1),
            parent: (n > 0).then(|| SpanId::from(1)),
            sampled,
            kind: SpanKind::Internal,
            start_ms: 1_000 + n,
            end_ms: 2_000 + n,
            attributes: vec![KeyValue::new("foya.n", i64::try_from(n).unwrap())],
            status: Status::Unset,
            events: vec![("retry".to_owned(), 1_500, Vec::new())],
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
            let mut spans = spans((0..11).map(|i| record(piece * 11 + i, true)));
            exporter.export(&mut spans);
            assert!(spans.is_empty(), "the spans were moved");
        }
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        // The hundredth fills a batch: one request of 100.
        exporter.export(&mut spans([record(99, true)]));
        let batch = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(batch.len(), 100);
        assert_eq!(batch, (0..100).map(|n| record(n, true)).collect::<Vec<_>>());
        // 250 more at once: two full requests, the remaining 50 at the flush.
        exporter.export(&mut spans((100..350).map(|n| record(n, true))));
        exporter.flush();
        let sizes: Vec<usize> = rx.try_iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        exporter.shutdown();
    }

    #[test]
    fn the_delay_sends_what_waits_and_overflowing_spans_are_not_sent() {
        let (tx, rx) = mpsc::channel();
        let batching = Batching {
            delay: Duration::from_millis(20),
            batch: 512,
            queue: 10,
        };
        let exporter = Exporter::with_sink(Collect(tx), batching).unwrap();
        exporter.export(&mut spans((0..7).map(|n| record(n, true))));
        // 7 spans, under the queue's 10: sent after the delay, without a flush.
        let batch = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(batch.len(), 7);
        // A burst beyond the queue: the first 10 are kept.
        let mut burst = spans((0..30).map(|n| record(n, true)));
        exporter.export(&mut burst);
        assert!(burst.is_empty());
        exporter.shutdown();
        let kept: usize = rx.try_iter().map(|b| b.len()).sum();
        assert_eq!(kept, 10);
        // After the stop nothing is queued, and a flush returns at once.
        exporter.export(&mut spans([record(1, true)]));
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

#[cfg(test)]
mod transport_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn resolve(endpoint: Option<&str>, vars: &[(&str, &str)]) -> Transport {
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        Transport::resolve(endpoint, &env)
    }

    #[test]
    fn the_endpoint_headers_and_timeout_are_read_as_the_otlp_exporters_read_them() {
        let none = resolve(None, &[]);
        assert_eq!(none.endpoint, "http://localhost:4318/v1/traces");
        assert!(none.headers.is_empty());
        assert_eq!(none.timeout, Duration::from_secs(10));
        let base = resolve(
            None,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")],
        );
        assert_eq!(base.endpoint, "http://127.0.0.1:4318/v1/traces");
        let both = resolve(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://127.0.0.1:2/custom",
                ),
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                    "x-api-key = se%3Dcret , broken, tenant=t1",
                ),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ],
        );
        assert_eq!(both.endpoint, "http://127.0.0.1:2/custom");
        assert_eq!(
            both.headers,
            [
                ("x-api-key".to_owned(), "se=cret".to_owned()),
                ("tenant".to_owned(), "t1".to_owned())
            ]
        );
        assert_eq!(both.timeout, Duration::from_millis(2_500));
        let file = resolve(
            Some("http://127.0.0.1:3/v1/traces"),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")],
        );
        assert_eq!(file.endpoint, "http://127.0.0.1:3/v1/traces");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}

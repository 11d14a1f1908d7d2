//! A real OTLP/HTTP trace receiver for the telemetry tests: an axum server on loopback
//! that takes `POST /v1/traces` (`application/x-protobuf`), decodes each body with the
//! OpenTelemetry proto definitions (`opentelemetry-proto`) and keeps the raw bytes too
//! (the canary tests search them).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use prost::Message as _;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// One received span, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Trace id, lowercase hex.
    pub trace_id: String,
    /// Span id, lowercase hex.
    pub span_id: String,
    /// Parent span id, lowercase hex (empty for a root span).
    pub parent_span_id: String,
    /// Attributes, as JSON values (strings, integers, booleans, arrays).
    pub attributes: BTreeMap<String, Value>,
    /// Status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    /// Status message.
    pub status_message: String,
    /// Start and end, ns since the Unix epoch.
    pub start_ns: u64,
    /// End, ns since the Unix epoch.
    pub end_ns: u64,
    /// The names of its span events.
    pub events: Vec<String>,
    /// `service.name` of its resource.
    pub service_name: String,
}

impl ReceivedSpan {
    /// Attribute `key` as a string (`None` when absent or not a string).
    #[must_use]
    pub fn str(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }

    /// Attribute `key` as an integer.
    #[must_use]
    pub fn int(&self, key: &str) -> Option<i64> {
        self.attributes.get(key).and_then(Value::as_i64)
    }
}

#[derive(Debug, Default)]
struct Received {
    /// Woken on every request.
    arrived: Arc<tokio::sync::Notify>,
    spans: Vec<ReceivedSpan>,
    /// Every request's headers and body, as received.
    raw: Vec<u8>,
    requests: usize,
}

/// The receiver; stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    shared: Arc<Mutex<Received>>,
    server: tokio::task::JoinHandle<()>,
}

fn json_of(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::from(s.clone()),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::BoolValue(b)) => Value::from(*b),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|v| json_of(Some(v))).collect())
        }
        Some(other) => Value::from(format!("{other:?}")),
        None => Value::Null,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn traces(
    State(shared): State<Arc<Mutex<Received>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        return (StatusCode::BAD_REQUEST, "not an ExportTraceServiceRequest").into_response();
    };
    let mut received = shared.lock().unwrap_or_else(PoisonError::into_inner);
    received.requests += 1;
    for (name, value) in &headers {
        received.raw.extend_from_slice(name.as_str().as_bytes());
        received.raw.extend_from_slice(b": ");
        received.raw.extend_from_slice(value.as_bytes());
        received.raw.push(b'\n');
    }
    received.raw.extend_from_slice(&body);
    for resource_spans in request.resource_spans {
        let service_name = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| {
                json_of(kv.value.as_ref())
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                let status = span.status.clone().unwrap_or_default();
                received.spans.push(ReceivedSpan {
                    name: span.name.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), json_of(kv.value.as_ref())))
                        .collect(),
                    status_code: status.code,
                    status_message: status.message,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    events: span.events.iter().map(|e| e.name.clone()).collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    received.arrived.notify_waiters();
    drop(received);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

impl OtlpReceiver {
    /// Starts it on `127.0.0.1:0`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let shared = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", axum::routing::post(traces))
            .with_state(Arc::clone(&shared));
        #[expect(clippy::expect_used, reason = "test harness")]
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        #[expect(clippy::expect_used, reason = "test harness")]
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    #[must_use]
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spans
            .clone()
    }

    /// Every byte received (headers and bodies).
    #[must_use]
    pub fn raw(&self) -> Vec<u8> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .raw
            .clone()
    }

    /// Waits (one global `timeout`) until `done` holds for the spans received; them.
    ///
    /// # Panics
    /// On the timeout, naming `what` and listing what was received.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let arrived = Arc::clone(
            &self
                .shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .arrived,
        );
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a request in between is not missed.
            let next = arrived.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::timeout_at(deadline, next).await.is_err() {
                panic!(
                    "timed out waiting for {what}; received: {:#?}",
                    self.spans()
                        .iter()
                        .map(|s| s.name.clone())
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

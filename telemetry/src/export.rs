//! The OTLP exporter: derived [`SpanRecord`]s handed to the OpenTelemetry SDK (a batch
//! span processor, OTLP over HTTP/protobuf) with their own ids, parents and times.

use crate::config::TraceExport;
use crate::derive::SpanRecord;
use anyhow::Context as _;
use opentelemetry::trace::{
    Span as _, SpanContext, TraceContextExt as _, TraceFlags, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The exporter's HTTP client: the workspace's async reqwest, driven on the runtime that
/// built the exporter. The SDK's batch processor runs on its own thread and blocks on
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

/// The SDK's provider and Foya's tracer.
#[derive(Debug)]
pub(crate) struct Exporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Exporter {
    /// Builds the exporter (nothing is sent until the first span).
    ///
    /// # Errors
    /// The endpoint is not a valid URL, or the HTTP client cannot be built.
    pub(crate) fn new(config: &TraceExport) -> anyhow::Result<Self> {
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OtlpHttp::new()?)
            .with_protocol(Protocol::HttpBinary);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        let exporter = builder
            .build()
            .context("cannot build the OTLP trace exporter")?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("foya");
        Ok(Self { provider, tracer })
    }

    /// Hands `span` to the SDK's batch processor.
    pub(crate) fn export(&self, span: SpanRecord) {
        let flags = if span.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let parent = match span.parent {
            Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                span.trace_id,
                parent,
                flags,
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        let events = span
            .events
            .into_iter()
            .map(|(name, at, attributes)| {
                opentelemetry::trace::Event::new(name, time(at), attributes, 0)
            })
            .collect();
        let builder = self
            .tracer
            .span_builder(span.name)
            .with_kind(span.kind)
            .with_trace_id(span.trace_id)
            .with_span_id(span.span_id)
            .with_start_time(time(span.start_ms))
            .with_attributes(span.attributes)
            .with_events(events);
        let mut built = builder.start_with_context(&self.tracer, &parent);
        built.set_status(span.status);
        built.end_with_timestamp(time(span.end_ms));
    }

    /// Sends what is batched (blocking: call it off the async threads).
    pub(crate) fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "cannot flush the trace exporter");
        }
    }

    /// Sends what is batched and stops the exporter (blocking).
    pub(crate) fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "cannot shut the trace exporter down");
        }
    }
}

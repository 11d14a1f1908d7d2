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
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

//! OTLP/HTTP protobuf (`ExportTraceServiceRequest`, opentelemetry-proto's
//! `collector/trace/v1`) written straight from the derived [`SpanRecord`]s into one
//! reused buffer: no intermediate span objects, no copy of an attribute, no allocation per
//! span. The wire is what the OpenTelemetry SDK's OTLP exporter sends for the same spans
//! (checked by decoding it with the proto definitions, `tests` below).

use crate::derive::SpanRecord;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, Value};

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// `SpanFlags`: the flags say whether the parent is remote, and whether it is.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

fn varint(buf: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        buf.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    #[allow(clippy::cast_possible_truncation)]
    buf.push(value as u8);
}

fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from((field << 3) | wire));
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(buf, field, LEN);
    varint(buf, len(data.len()));
    buf.extend_from_slice(data);
}

/// A string field, left out when empty (proto3's default).
fn string(buf: &mut Vec<u8>, field: u32, text: &str) {
    if !text.is_empty() {
        bytes(buf, field, text.as_bytes());
    }
}

fn fixed64(buf: &mut Vec<u8>, field: u32, value: u64) {
    key(buf, field, FIXED64);
    buf.extend_from_slice(&value.to_le_bytes());
}

fn fixed32(buf: &mut Vec<u8>, field: u32, value: u32) {
    key(buf, field, FIXED32);
    buf.extend_from_slice(&value.to_le_bytes());
}

/// A varint field, left out when 0.
fn number(buf: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(buf, field, VARINT);
        varint(buf, value);
    }
}

/// A nested message: `body` writes it in place, then its length is put before it.
fn message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let start = buf.len();
    body(buf);
    let mut head = Vec::with_capacity(0);
    let size = len(buf.len() - start);
    if size < 0x80 {
        // The common case (an attribute, a value): one byte, no scratch.
        #[allow(clippy::cast_possible_truncation)]
        buf.insert(start, size as u8);
    } else {
        varint(&mut head, size);
        buf.splice(start..start, head);
    }
}

/// An `AnyValue`'s fields.
fn any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => bytes(buf, 1, s.as_str().as_bytes()),
        Value::Bool(b) => {
            key(buf, 2, VARINT);
            varint(buf, u64::from(*b));
        }
        Value::I64(i) => {
            key(buf, 3, VARINT);
            #[allow(clippy::cast_sign_loss)]
            varint(buf, *i as u64);
        }
        Value::F64(f) => fixed64(buf, 4, f.to_bits()),
        Value::Array(array) => message(buf, 5, |buf| match array {
            Array::Bool(values) => {
                for v in values {
                    message(buf, 1, |buf| any_value(buf, &Value::Bool(*v)));
                }
            }
            Array::I64(values) => {
                for v in values {
                    message(buf, 1, |buf| any_value(buf, &Value::I64(*v)));
                }
            }
            Array::F64(values) => {
                for v in values {
                    message(buf, 1, |buf| any_value(buf, &Value::F64(*v)));
                }
            }
            Array::String(values) => {
                for v in values {
                    message(buf, 1, |buf| bytes(buf, 1, v.as_str().as_bytes()));
                }
            }
            other => {
                let text = other.to_string();
                message(buf, 1, |buf| bytes(buf, 1, text.as_bytes()));
            }
        }),
        other => bytes(buf, 1, other.to_string().as_bytes()),
    }
}

/// A `KeyValue` as field `field` of its message.
fn key_value(buf: &mut Vec<u8>, field: u32, name: &str, value: &Value) {
    message(buf, field, |buf| {
        string(buf, 1, name);
        message(buf, 2, |buf| any_value(buf, value));
    });
}

fn nanos(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

fn kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

/// A `Span`'s fields.
fn span(buf: &mut Vec<u8>, span: &SpanRecord) {
    bytes(buf, 1, &span.trace_id.to_bytes());
    bytes(buf, 2, &span.span_id.to_bytes());
    if let Some(parent) = span.parent {
        bytes(buf, 4, &parent.to_bytes());
    }
    // As the SDK's tracer made them: the parent context was given as a remote one.
    let mut flags = u32::from(span.sampled) | HAS_IS_REMOTE;
    if span.parent.is_some() {
        flags |= IS_REMOTE;
    }
    fixed32(buf, 16, flags);
    string(buf, 5, span.name.as_str());
    number(buf, 6, kind(&span.kind));
    fixed64(buf, 7, nanos(span.start_ms));
    fixed64(buf, 8, nanos(span.end_ms.max(span.start_ms)));
    for kv in &span.attributes {
        key_value(buf, 9, kv.key.as_str(), &kv.value);
    }
    for (name, at, attributes) in &span.events {
        message(buf, 11, |buf| {
            fixed64(buf, 1, nanos(*at));
            string(buf, 2, name);
            for kv in attributes {
                key_value(buf, 3, kv.key.as_str(), &kv.value);
            }
        });
    }
    message(buf, 15, |buf| match &span.status {
        Status::Unset => {}
        Status::Ok => number(buf, 3, 1),
        Status::Error { description } => {
            string(buf, 2, description);
            number(buf, 3, 2);
        }
    });
}

/// The resource every request names, encoded once.
#[derive(Debug, Clone, Default)]
pub(crate) struct EncodedResource {
    /// The `Resource` message's fields.
    fields: Vec<u8>,
    schema_url: String,
}

impl EncodedResource {
    pub(crate) fn new(resource: &opentelemetry_sdk::Resource) -> Self {
        let mut fields = Vec::new();
        for (name, value) in resource {
            key_value(&mut fields, 1, name.as_str(), value);
        }
        Self {
            fields,
            schema_url: resource.schema_url().unwrap_or_default().to_owned(),
        }
    }
}

/// Writes the `ExportTraceServiceRequest` of `spans` (one resource, scope `foya`) into
/// `buf` (cleared first).
pub(crate) fn encode(resource: &EncodedResource, spans: &[SpanRecord], buf: &mut Vec<u8>) {
    buf.clear();
    message(buf, 1, |buf| {
        bytes(buf, 1, &resource.fields);
        message(buf, 2, |buf| {
            message(buf, 1, |buf| string(buf, 1, "foya"));
            for record in spans {
                message(buf, 2, |buf| span(buf, record));
            }
        });
        string(buf, 3, &resource.schema_url);
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
    use prost::Message as _;
    use std::borrow::Cow;
    use std::time::{Duration, UNIX_EPOCH};

    fn records() -> Vec<SpanRecord> {
        let long = "x".repeat(300);
        vec![
            SpanRecord {
                name: "turn".into(),
                trace_id: TraceId::from(0x0123_4567_89ab_cdef_0011_2233_4455_6677_u128),
                span_id: SpanId::from(0x1111_u64),
                parent: Some(SpanId::from(0xfeed_u64)),
                sampled: true,
                kind: SpanKind::Internal,
                start_ms: 1_700_000_000_000,
                end_ms: 1_700_000_000_500,
                attributes: vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("foya.turn.steps", 2_i64),
                    KeyValue::new("foya.negative", -5_i64),
                    KeyValue::new("foya.interrupted", true),
                    KeyValue::new("foya.time_to_first_token_ms", 12.5),
                    KeyValue::new("foya.empty", ""),
                    KeyValue::new("gen_ai.input.messages", long),
                    KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        Value::Array(Array::String(vec!["stop".into(), "length".into()])),
                    ),
                    KeyValue::new("foya.ints", Value::Array(Array::I64(vec![1, 2]))),
                ],
                status: Status::Ok,
                events: vec![(
                    "retry",
                    1_700_000_000_100,
                    vec![KeyValue::new("error.type", "rate_limit")],
                )],
            },
            SpanRecord {
                name: "chat m".into(),
                trace_id: TraceId::from(9_u128),
                span_id: SpanId::from(0x2222_u64),
                parent: None,
                sampled: false,
                kind: SpanKind::Client,
                start_ms: 5,
                end_ms: 3,
                attributes: Vec::new(),
                status: Status::error("tool_error"),
                events: Vec::new(),
            },
        ]
    }

    /// The same spans as the SDK's OTLP exporter turns them into proto messages.
    fn as_the_sdk_sends(
        resource: &opentelemetry_sdk::Resource,
        records: &[SpanRecord],
    ) -> ExportTraceServiceRequest {
        let time = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
        let scope = opentelemetry::InstrumentationScope::builder("foya").build();
        let spans = records
            .iter()
            .map(|r| {
                let flags = if r.sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                };
                let mut events = SpanEvents::default();
                events.events = r
                    .events
                    .iter()
                    .map(|(name, at, attributes)| {
                        opentelemetry::trace::Event::new(*name, time(*at), attributes.clone(), 0)
                    })
                    .collect();
                SpanData {
                    span_context: SpanContext::new(
                        r.trace_id,
                        r.span_id,
                        flags,
                        false,
                        TraceState::default(),
                    ),
                    parent_span_id: r.parent.unwrap_or(SpanId::INVALID),
                    parent_span_is_remote: r.parent.is_some(),
                    span_kind: r.kind.clone(),
                    name: Cow::Owned(r.name.as_str().to_owned()),
                    start_time: time(r.start_ms),
                    end_time: time(r.end_ms.max(r.start_ms)),
                    attributes: r.attributes.clone(),
                    dropped_attributes_count: 0,
                    events,
                    links: SpanLinks::default(),
                    status: r.status.clone(),
                    instrumentation_scope: scope.clone(),
                }
            })
            .collect();
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(resource),
            ),
        }
    }

    #[test]
    fn the_request_decodes_as_the_sdk_would_have_sent_it() {
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("svc")
            .with_attribute(KeyValue::new("service.version", "1.2.3"))
            .build();
        let records = records();
        let mut buf = Vec::new();
        encode(&EncodedResource::new(&resource), &records, &mut buf);
        let ours = ExportTraceServiceRequest::decode(buf.as_slice()).unwrap();
        assert_eq!(ours, as_the_sdk_sends(&resource, &records));
        // The buffer is reused: a second request replaces the first.
        encode(&EncodedResource::new(&resource), &records[1..], &mut buf);
        let second = ExportTraceServiceRequest::decode(buf.as_slice()).unwrap();
        assert_eq!(second.resource_spans[0].scope_spans[0].spans.len(), 1);
    }

    #[test]
    fn varints_and_long_messages_are_encoded_as_protobuf_says() {
        let mut buf = Vec::new();
        varint(&mut buf, 300);
        assert_eq!(buf, [0xac, 0x02]);
        buf.clear();
        varint(&mut buf, u64::MAX);
        assert_eq!(buf.len(), 10);
        buf.clear();
        message(&mut buf, 1, |b| b.extend_from_slice(&[7; 200]));
        assert_eq!(&buf[..3], &[0x0a, 0xc8, 0x01]);
        assert_eq!(buf.len(), 203);
    }
}

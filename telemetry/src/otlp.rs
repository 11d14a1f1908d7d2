//! OTLP/HTTP protobuf (`ExportTraceServiceRequest`, opentelemetry-proto's
//! `collector/trace/v1`) written as each span closes: the deriver writes a finished span's
//! `Span` message straight into its shard's reused buffer ([`SpanWriter`] into
//! [`Encoded`]), with no attribute list, span object or copy of a value in between, and
//! the exporter's thread only frames a batch of those bytes as a request ([`request`]).
//! The wire is what the OpenTelemetry SDK's OTLP exporter sends for the same spans
//! (checked by decoding it with the proto definitions, `tests` below).

use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::{Array, Value};

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// `SpanFlags`: the flags say whether the parent is remote, and whether it is.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// `ScopeSpans.spans`, `ResourceSpans.scope_spans`…: the field numbers used below.
const SPANS_FIELD: u32 = 2;

#[inline]
fn varint(buf: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        buf.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    #[allow(clippy::cast_possible_truncation)]
    buf.push(value as u8);
}

/// How many bytes `varint` writes for `value`.
fn varint_len(value: u64) -> usize {
    // 1 byte per started 7 bits, at least 1.
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[inline]
fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, u64::from((field << 3) | wire));
}

/// How many bytes a field's key takes (fields below 16: one).
fn key_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// How many bytes a length-delimited field of `n` bytes takes, key and length included.
fn field_len(field: u32, n: usize) -> usize {
    key_len(field) + varint_len(len(n)) + n
}

#[inline]
fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(buf, field, LEN);
    varint(buf, len(data.len()));
    buf.extend_from_slice(data);
}

/// A string field, left out when empty (proto3's default).
#[inline]
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

/// A nested message whose size is not known before: `body` writes it in place, then its
/// length is put before it (one move of the body, no scratch allocation).
fn message(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(buf, field, LEN);
    let start = buf.len();
    body(buf);
    let size = len(buf.len() - start);
    if size < 0x80 {
        #[allow(clippy::cast_possible_truncation)]
        buf.insert(start, size as u8);
    } else {
        let head = buf.len();
        varint(buf, size);
        let n = buf.len() - head;
        buf[start..].rotate_right(n);
    }
}

/// An attribute value (`AnyValue`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Attr<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    F64(f64),
    /// A list of strings (`ArrayValue` of string values).
    Strs(&'a [&'a str]),
}

impl Attr<'_> {
    /// A count as an `Int` (past `i64::MAX`, `i64::MAX`).
    pub(crate) fn count(n: u64) -> Attr<'static> {
        Attr::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }

    /// The `AnyValue` message's size.
    fn size(&self) -> usize {
        match self {
            Attr::Str(s) => field_len(1, s.len()),
            Attr::Bool(_) => 2,
            #[allow(clippy::cast_sign_loss)]
            Attr::Int(i) => 1 + varint_len(*i as u64),
            Attr::F64(_) => 9,
            Attr::Strs(values) => field_len(5, Self::array_size(values)),
        }
    }

    /// The `ArrayValue` message's size.
    fn array_size(values: &[&str]) -> usize {
        values
            .iter()
            .map(|v| field_len(1, field_len(1, v.len())))
            .sum()
    }

    /// The `AnyValue` message's fields.
    #[inline]
    fn write(&self, buf: &mut Vec<u8>) {
        match self {
            Attr::Str(s) => bytes(buf, 1, s.as_bytes()),
            Attr::Bool(b) => {
                key(buf, 2, VARINT);
                varint(buf, u64::from(*b));
            }
            Attr::Int(i) => {
                key(buf, 3, VARINT);
                #[allow(clippy::cast_sign_loss)]
                varint(buf, *i as u64);
            }
            Attr::F64(f) => fixed64(buf, 4, f.to_bits()),
            Attr::Strs(values) => {
                key(buf, 5, LEN);
                varint(buf, len(Self::array_size(values)));
                for v in *values {
                    key(buf, 1, LEN);
                    varint(buf, len(field_len(1, v.len())));
                    bytes(buf, 1, v.as_bytes());
                }
            }
        }
    }
}

/// The size of the `KeyValue` message of `name` and `value`.
fn key_value_size(name: &str, value: Attr<'_>) -> usize {
    let name = if name.is_empty() {
        0
    } else {
        field_len(1, name.len())
    };
    name + field_len(2, value.size())
}

/// A `KeyValue` as field `field` of its message, its sizes counted first (nothing moved).
#[inline]
fn key_value(buf: &mut Vec<u8>, field: u32, name: &str, value: Attr<'_>) {
    let any = value.size();
    let size = if name.is_empty() {
        0
    } else {
        field_len(1, name.len())
    } + field_len(2, any);
    key(buf, field, LEN);
    varint(buf, len(size));
    string(buf, 1, name);
    key(buf, 2, LEN);
    varint(buf, len(any));
    value.write(buf);
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

/// Span attributes encoded once and written into many spans as they are (a turn's
/// conversation id, a session's model, a constant operation name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attributes(Vec<u8>);

impl Attributes {
    pub(crate) fn new(attributes: &[(&str, Attr<'_>)]) -> Self {
        let size = attributes
            .iter()
            .map(|(name, value)| field_len(9, key_value_size(name, *value)))
            .sum();
        let mut buf = Vec::with_capacity(size);
        for (name, value) in attributes {
            key_value(&mut buf, 9, name, *value);
        }
        Self(buf)
    }
}

/// Finished spans, encoded: each a `ScopeSpans.spans` field (key, length, `Span`), back
/// to back, and where each ends (requests are cut at span boundaries).
#[derive(Debug, Default)]
pub(crate) struct Encoded {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Encoded {
    /// How many spans.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Forgets the spans (keeps the buffers' capacity).
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Moves the first `n` spans of `other` (at most all) to the end of `self`.
    pub(crate) fn append(&mut self, other: &Self, n: usize) {
        let n = n.min(other.len());
        if n == 0 {
            return;
        }
        let base = self.bytes.len();
        let end = other.ends[n - 1];
        self.bytes.extend_from_slice(&other.bytes[..end]);
        self.ends.extend(other.ends[..n].iter().map(|e| e + base));
    }

    /// Spans `from..to`, as bytes.
    pub(crate) fn slice(&self, from: usize, to: usize) -> &[u8] {
        let start = if from == 0 { 0 } else { self.ends[from - 1] };
        let end = if to == 0 { 0 } else { self.ends[to - 1] };
        &self.bytes[start..end]
    }
}

/// What a span's head says: where it sits, what it is, when.
#[derive(Debug, Clone)]
pub(crate) struct Head<'a> {
    pub(crate) trace_id: TraceId,
    pub(crate) span_id: SpanId,
    pub(crate) parent: Option<SpanId>,
    pub(crate) sampled: bool,
    /// The name, in two parts (`execute_tool ` and the tool's name: no string built).
    pub(crate) name: (&'a str, &'a str),
    pub(crate) kind: SpanKind,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
}

/// A span's status (`Status`): unset, ok, or an error with its description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanStatus<'a> {
    Unset,
    Ok,
    Error(&'a str),
}

/// Writes one span into an [`Encoded`]: its head at once, then its attributes and events
/// in order, then [`Self::end`] (its status; the span counts only then).
pub(crate) struct SpanWriter<'a> {
    out: &'a mut Encoded,
    /// Where the span's field began (to drop it if never ended) and its body begins.
    field: usize,
    body: usize,
}

impl<'a> SpanWriter<'a> {
    pub(crate) fn begin(out: &'a mut Encoded, head: &Head<'_>) -> Self {
        let buf = &mut out.bytes;
        let field = buf.len();
        key(buf, SPANS_FIELD, LEN);
        // Room for the body's length: two bytes, what almost every span takes (from 128
        // bytes to 16 KiB), written in place at the end.
        buf.extend_from_slice(&[0, 0]);
        let body = buf.len();
        bytes(buf, 1, &head.trace_id.to_bytes());
        bytes(buf, 2, &head.span_id.to_bytes());
        if let Some(parent) = head.parent {
            bytes(buf, 4, &parent.to_bytes());
        }
        // As the SDK's tracer made them: the parent context was given as a remote one.
        let mut flags = u32::from(head.sampled) | HAS_IS_REMOTE;
        if head.parent.is_some() {
            flags |= IS_REMOTE;
        }
        fixed32(buf, 16, flags);
        let (first, second) = head.name;
        if first.len() + second.len() > 0 {
            key(buf, 5, LEN);
            varint(buf, len(first.len() + second.len()));
            buf.extend_from_slice(first.as_bytes());
            buf.extend_from_slice(second.as_bytes());
        }
        number(buf, 6, kind(&head.kind));
        fixed64(buf, 7, nanos(head.start_ms));
        fixed64(buf, 8, nanos(head.end_ms.max(head.start_ms)));
        Self { out, field, body }
    }

    /// An attribute.
    pub(crate) fn attr(&mut self, name: &str, value: Attr<'_>) {
        key_value(&mut self.out.bytes, 9, name, value);
    }

    /// Attributes written once by [`Attributes`] (those many spans share), in their order.
    pub(crate) fn attrs(&mut self, attributes: &Attributes) {
        self.out.bytes.extend_from_slice(&attributes.0);
    }

    /// A span event, with its attributes.
    pub(crate) fn event(&mut self, name: &str, at_ms: u64, attributes: &[(&str, Attr<'_>)]) {
        message(&mut self.out.bytes, 11, |buf| {
            fixed64(buf, 1, nanos(at_ms));
            string(buf, 2, name);
            for (key, value) in attributes {
                key_value(buf, 3, key, *value);
            }
        });
    }

    /// Ends the span with `status`.
    pub(crate) fn end(self, status: SpanStatus<'_>) {
        let buf = &mut self.out.bytes;
        message(buf, 15, |buf| match status {
            SpanStatus::Unset => {}
            SpanStatus::Ok => number(buf, 3, 1),
            SpanStatus::Error(description) => {
                string(buf, 2, description);
                number(buf, 3, 2);
            }
        });
        // The body's length, in the room before it (moved when it takes other than two
        // bytes).
        let size = len(buf.len() - self.body);
        if (0x80..0x4000).contains(&size) {
            #[allow(clippy::cast_possible_truncation)]
            {
                buf[self.body - 2] = (size as u8 & 0x7f) | 0x80;
                buf[self.body - 1] = (size >> 7) as u8;
            }
        } else {
            let mut length = Vec::with_capacity(10);
            varint(&mut length, size);
            buf.splice(self.body - 2..self.body, length);
        }
        self.out.ends.push(buf.len());
        // Ended: not dropped.
        std::mem::forget(self);
    }
}

impl Drop for SpanWriter<'_> {
    /// A span begun and never ended is not kept.
    fn drop(&mut self) {
        self.out.bytes.truncate(self.field);
    }
}

/// An OpenTelemetry `Value` (a resource's attribute: any type) as `AnyValue` fields.
fn any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => Attr::Str(s.as_str()).write(buf),
        Value::Bool(b) => Attr::Bool(*b).write(buf),
        Value::I64(i) => Attr::Int(*i).write(buf),
        Value::F64(f) => Attr::F64(*f).write(buf),
        Value::Array(array) => message(buf, 5, |buf| match array {
            Array::Bool(values) => {
                for v in values {
                    message(buf, 1, |buf| Attr::Bool(*v).write(buf));
                }
            }
            Array::I64(values) => {
                for v in values {
                    message(buf, 1, |buf| Attr::Int(*v).write(buf));
                }
            }
            Array::F64(values) => {
                for v in values {
                    message(buf, 1, |buf| Attr::F64(*v).write(buf));
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
            message(&mut fields, 1, |buf| {
                string(buf, 1, name.as_str());
                message(buf, 2, |buf| any_value(buf, value));
            });
        }
        Self {
            fields,
            schema_url: resource.schema_url().unwrap_or_default().to_owned(),
        }
    }
}

/// The instrumentation scope every span is in: `{name: "foya"}`.
const SCOPE: &[u8] = &[0x0a, 0x06, 0x0a, 0x04, b'f', b'o', b'y', b'a'];

/// Writes the `ExportTraceServiceRequest` of `spans` (encoded `ScopeSpans.spans` fields;
/// one resource, scope `foya`) into `buf` (cleared first). Only lengths are computed: the
/// spans' bytes are copied once.
pub(crate) fn request(resource: &EncodedResource, spans: &[u8], buf: &mut Vec<u8>) {
    buf.clear();
    let scope_spans = SCOPE.len() + spans.len();
    let mut resource_spans =
        field_len(1, resource.fields.len()) + field_len(SPANS_FIELD, scope_spans);
    if !resource.schema_url.is_empty() {
        resource_spans += field_len(3, resource.schema_url.len());
    }
    buf.reserve(field_len(1, resource_spans));
    key(buf, 1, LEN);
    varint(buf, len(resource_spans));
    bytes(buf, 1, &resource.fields);
    key(buf, SPANS_FIELD, LEN);
    varint(buf, len(scope_spans));
    buf.extend_from_slice(SCOPE);
    buf.extend_from_slice(spans);
    string(buf, 3, &resource.schema_url);
}

/// Spans as plain records, for tests: written through [`SpanWriter`] and read back from
/// the wire with the OpenTelemetry proto definitions.
#[cfg(test)]
pub(crate) mod testing {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::{Attr, Encoded, Head, SpanStatus, SpanWriter};
    use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
    use opentelemetry::{Array, KeyValue, StringValue, Value};
    use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
    use opentelemetry_proto::tonic::trace::v1::ScopeSpans;
    use prost::Message as _;

    /// A finished span, with explicit times (ms since the Unix epoch).
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct SpanRecord {
        pub(crate) name: StringValue,
        pub(crate) trace_id: TraceId,
        pub(crate) span_id: SpanId,
        pub(crate) parent: Option<SpanId>,
        pub(crate) sampled: bool,
        pub(crate) kind: SpanKind,
        pub(crate) start_ms: u64,
        pub(crate) end_ms: u64,
        pub(crate) attributes: Vec<KeyValue>,
        pub(crate) status: Status,
        /// Span events: (name, at_ms, attributes).
        pub(crate) events: Vec<(String, u64, Vec<KeyValue>)>,
    }

    fn attr(value: &Value, strings: &mut Vec<&'static str>) -> Attr<'static> {
        // Leaked: test data only, a few bytes.
        let text = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
        match value {
            Value::String(s) => Attr::Str(text(s.as_str())),
            Value::I64(i) => Attr::Int(*i),
            Value::Bool(b) => Attr::Bool(*b),
            Value::F64(f) => Attr::F64(*f),
            Value::Array(Array::String(values)) => {
                strings.clear();
                strings.extend(values.iter().map(|v| text(v.as_str())));
                Attr::Strs(Box::leak(strings.clone().into_boxed_slice()))
            }
            other => panic!("no attribute of {other:?} is written"),
        }
    }

    impl SpanRecord {
        /// Writes it as the deriver writes its spans.
        pub(crate) fn write(&self, out: &mut Encoded) {
            let mut writer = SpanWriter::begin(
                out,
                &Head {
                    trace_id: self.trace_id,
                    span_id: self.span_id,
                    parent: self.parent,
                    sampled: self.sampled,
                    name: (self.name.as_str(), ""),
                    kind: self.kind.clone(),
                    start_ms: self.start_ms,
                    end_ms: self.end_ms,
                },
            );
            let mut strings = Vec::new();
            for kv in &self.attributes {
                writer.attr(kv.key.as_str(), attr(&kv.value, &mut strings));
            }
            for (name, at, attributes) in &self.events {
                let attributes: Vec<(&str, Attr<'_>)> = attributes
                    .iter()
                    .map(|kv| (kv.key.as_str(), attr(&kv.value, &mut strings)))
                    .collect();
                writer.event(name, *at, &attributes);
            }
            writer.end(match &self.status {
                Status::Unset => SpanStatus::Unset,
                Status::Ok => SpanStatus::Ok,
                Status::Error { description } => SpanStatus::Error(description),
            });
        }
    }

    fn value(any: Option<AnyValue>) -> Value {
        match any.and_then(|a| a.value) {
            Some(any_value::Value::StringValue(s)) => Value::from(s),
            Some(any_value::Value::BoolValue(b)) => Value::Bool(b),
            Some(any_value::Value::IntValue(i)) => Value::I64(i),
            Some(any_value::Value::DoubleValue(f)) => Value::F64(f),
            Some(any_value::Value::ArrayValue(array)) => Value::Array(Array::String(
                array
                    .values
                    .into_iter()
                    .map(|v| match value(Some(v)) {
                        Value::String(s) => s,
                        other => panic!("a list of {other:?}"),
                    })
                    .collect(),
            )),
            other => panic!("no attribute of {other:?} is written"),
        }
    }

    fn attributes(list: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>) -> Vec<KeyValue> {
        list.into_iter()
            .map(|kv| KeyValue::new(kv.key, value(kv.value)))
            .collect()
    }

    /// The spans in `bytes` (encoded `ScopeSpans.spans` fields), decoded.
    pub(crate) fn decode(bytes: &[u8]) -> Vec<SpanRecord> {
        let ms = |nanos: u64| nanos / 1_000_000;
        ScopeSpans::decode(bytes)
            .unwrap()
            .spans
            .into_iter()
            .map(|span| SpanRecord {
                name: span.name.into(),
                trace_id: TraceId::from_bytes(span.trace_id.try_into().unwrap()),
                span_id: SpanId::from_bytes(span.span_id.try_into().unwrap()),
                parent: (!span.parent_span_id.is_empty())
                    .then(|| SpanId::from_bytes(span.parent_span_id.try_into().unwrap())),
                sampled: span.flags & 1 == 1,
                kind: match span.kind {
                    1 => SpanKind::Internal,
                    2 => SpanKind::Server,
                    3 => SpanKind::Client,
                    4 => SpanKind::Producer,
                    5 => SpanKind::Consumer,
                    other => panic!("span kind {other}"),
                },
                start_ms: ms(span.start_time_unix_nano),
                end_ms: ms(span.end_time_unix_nano),
                attributes: attributes(span.attributes),
                status: match span.status {
                    Some(s) if s.code == 1 => Status::Ok,
                    Some(s) if s.code == 2 => Status::error(s.message),
                    _ => Status::Unset,
                },
                events: span
                    .events
                    .into_iter()
                    .map(|e| (e.name, ms(e.time_unix_nano), attributes(e.attributes)))
                    .collect(),
            })
            .collect()
    }

    /// `records`, written.
    pub(crate) fn encoded(records: &[SpanRecord]) -> Encoded {
        let mut out = Encoded::default();
        for record in records {
            record.write(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::testing::{SpanRecord, decode, encoded};
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{SpanContext, Status, TraceFlags, TraceState};
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
                    KeyValue::new("gen_ai.input.messages", long.clone()),
                    KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        Value::Array(Array::String(vec!["stop".into(), "length".into()])),
                    ),
                    KeyValue::new(
                        "foya.long_list",
                        Value::Array(Array::String(vec![long.clone().into(); 3])),
                    ),
                ],
                status: Status::Ok,
                events: vec![(
                    "retry".to_owned(),
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
            SpanRecord {
                name: long.clone().into(),
                trace_id: TraceId::from(10_u128),
                span_id: SpanId::from(0x3333_u64),
                parent: None,
                sampled: true,
                kind: SpanKind::Server,
                start_ms: 7,
                end_ms: 8,
                // Over 16 KiB: a length of three bytes (the others take one and two).
                attributes: (0..60)
                    .map(|i| KeyValue::new(format!("foya.a{i}"), long.clone()))
                    .collect(),
                status: Status::Unset,
                events: vec![("e".to_owned(), 7, Vec::new())],
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
                        opentelemetry::trace::Event::new(
                            name.clone(),
                            time(*at),
                            attributes.clone(),
                            0,
                        )
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
            .with_attribute(KeyValue::new("host.cores", 2_i64))
            .build();
        let records = records();
        let spans = encoded(&records);
        assert_eq!(spans.len(), 3);
        let mut buf = Vec::new();
        request(
            &EncodedResource::new(&resource),
            spans.slice(0, 3),
            &mut buf,
        );
        let ours = ExportTraceServiceRequest::decode(buf.as_slice()).unwrap();
        assert_eq!(ours, as_the_sdk_sends(&resource, &records));
        // The buffer is reused: a second request replaces the first.
        request(
            &EncodedResource::new(&resource),
            spans.slice(1, 2),
            &mut buf,
        );
        let second = ExportTraceServiceRequest::decode(buf.as_slice()).unwrap();
        assert_eq!(
            second.resource_spans[0].scope_spans[0].spans,
            as_the_sdk_sends(&resource, &records[1..2]).resource_spans[0].scope_spans[0].spans
        );
        // And read back, the records are what was written (the end never before the
        // start).
        let mut back = records.clone();
        back[1].end_ms = back[1].start_ms;
        assert_eq!(decode(spans.slice(0, 3)), back);
    }

    #[test]
    fn spans_are_moved_whole_and_one_never_ended_is_not_kept() {
        let records = records();
        let all = encoded(&records);
        let mut queue = Encoded::default();
        queue.append(&all, 2);
        queue.append(&all, 0);
        queue.append(&all, 99);
        assert_eq!(queue.len(), 5);
        assert_eq!(decode(queue.slice(2, 5)), decode(all.slice(0, 3)));
        assert_eq!(
            decode(queue.slice(1, 3)),
            decode(all.slice(1, 3))[..1]
                .iter()
                .chain(&decode(all.slice(0, 1)))
                .cloned()
                .collect::<Vec<_>>()
        );
        assert!(queue.slice(0, 0).is_empty());
        let before = queue.slice(0, queue.len()).to_vec();
        {
            let mut writer = SpanWriter::begin(
                &mut queue,
                &Head {
                    trace_id: TraceId::from(1_u128),
                    span_id: SpanId::from(1_u64),
                    parent: None,
                    sampled: true,
                    name: ("abandoned", ""),
                    kind: SpanKind::Internal,
                    start_ms: 0,
                    end_ms: 0,
                },
            );
            writer.attr("k", Attr::Int(1));
        }
        assert_eq!(queue.len(), 5);
        assert_eq!(queue.slice(0, 5), before.as_slice());
        queue.clear();
        assert!(queue.is_empty());
    }

    #[test]
    fn varints_and_long_messages_are_encoded_as_protobuf_says() {
        let mut buf = Vec::new();
        varint(&mut buf, 300);
        assert_eq!(buf, [0xac, 0x02]);
        buf.clear();
        varint(&mut buf, u64::MAX);
        assert_eq!(buf.len(), 10);
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            buf.clear();
            varint(&mut buf, value);
            assert_eq!(varint_len(value), buf.len(), "{value}");
        }
        buf.clear();
        message(&mut buf, 1, |b| b.extend_from_slice(&[7; 200]));
        assert_eq!(&buf[..3], &[0x0a, 0xc8, 0x01]);
        assert_eq!(buf.len(), 203);
        assert!(buf[3..].iter().all(|b| *b == 7));
    }
}

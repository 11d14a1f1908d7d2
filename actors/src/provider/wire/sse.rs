//! SSE framing: drives a [`WireDecoder`] over a byte stream with `eventsource-stream`.
//!
//! Adds what the parser alone does not give: a leading UTF-8 byte-order mark skipped (as
//! the SSE spec says; the parser would panic on it), a final `"\n\n"` at EOF (so a last event
//! without its blank line still counts), a per-event size cap, detection of a JSON body
//! sent instead of an event stream (an error object with status 200), mapping of
//! transport failures to `stream_interrupted` and of bytes that are not UTF-8 to
//! `invalid_response` (like a `data:` payload that is not JSON), and an id for every tool
//! call the provider streamed without one (`ids::generated_call_id`, given just before
//! the final `Done`, so an id arriving on a later fragment still wins). Pure apart from
//! polling the given stream (and the clock and randomness of generated ids): tests feed
//! it in-memory chunks.

use super::WireDecoder;
use super::common::{MAX_EXCERPT_CHARS, excerpt};
use super::ids::generated_call_id;
use crate::provider::classify;
use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use foya_protocol::{ErrorClass, ProviderError, StreamEvent};
use futures::stream::{self, BoxStream, Stream, StreamExt};
use std::collections::BTreeMap;

/// Limits applied while framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// Largest accepted event (bytes between blank lines), default 16 MiB. A larger one
    /// fails the stream with `invalid_request`. Also caps a JSON body sent instead of SSE.
    pub max_event_bytes: usize,
}

impl Default for SseLimits {
    fn default() -> Self {
        Self {
            max_event_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Why the byte stream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No bytes arrived for `after_ms` milliseconds.
    #[error("no data from the provider for {after_ms} ms")]
    Idle {
        /// The idle timeout that elapsed.
        after_ms: u64,
    },
    /// The connection failed mid-body (reset, truncated chunked encoding, …).
    #[error("connection lost: {0}")]
    Io(String),
}

/// Internal error of the framing layer, carried through the SSE parser.
#[derive(Debug)]
enum Framing {
    Transport(TransportError),
    TooLarge(usize),
    JsonBody(String),
}

impl std::fmt::Display for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "{e}"),
            Self::TooLarge(max) => write!(f, "a stream event exceeds {max} bytes"),
            Self::JsonBody(_) => f.write_str("JSON body instead of an event stream"),
        }
    }
}

/// Body sniffing and event-size accounting over raw bytes.
#[derive(Debug)]
struct Scanner {
    max: usize,
    /// `None` until the first non-whitespace byte; then whether the body is JSON.
    json: Option<bool>,
    json_buf: Vec<u8>,
    line_len: usize,
    since_blank: usize,
    prev_cr: bool,
    /// Bytes of a leading UTF-8 byte-order mark consumed so far (3: past the start).
    bom: usize,
}

/// The UTF-8 byte-order mark, which the SSE spec skips at the start of a stream (and
/// `eventsource-stream` does not: it panics on it).
const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Scanner {
    fn new(max: usize) -> Self {
        Self {
            max,
            json: None,
            json_buf: Vec::new(),
            line_len: 0,
            since_blank: 0,
            prev_cr: false,
            bom: 0,
        }
    }

    /// `chunk` without the part of a leading byte-order mark it holds (the mark may
    /// arrive split over chunks).
    fn strip_bom(&mut self, mut chunk: Bytes) -> Bytes {
        while self.bom < BOM.len() {
            match chunk.first() {
                None => return chunk,
                Some(&b) if b == BOM[self.bom] => {
                    self.bom += 1;
                    chunk = chunk.slice(1..);
                }
                Some(_) => self.bom = BOM.len(),
            }
        }
        chunk
    }

    /// Checks a chunk; returns the bytes to hand to the SSE parser (empty in JSON mode).
    fn scan(&mut self, chunk: Bytes) -> Result<Bytes, Framing> {
        let chunk = self.strip_bom(chunk);
        if self.json.is_none()
            && let Some(&b) = chunk.iter().find(|b| !b.is_ascii_whitespace())
        {
            self.json = Some(b == b'{' || b == b'[');
        }
        if self.json == Some(true) {
            self.json_buf.extend_from_slice(&chunk);
            if self.json_buf.len() > self.max {
                return Err(Framing::TooLarge(self.max));
            }
            return Ok(Bytes::new());
        }
        let mut rest: &[u8] = &chunk;
        while !rest.is_empty() {
            // Bytes up to the next line break (or the end) extend the line.
            let run = memchr::memchr2(b'\n', b'\r', rest).unwrap_or(rest.len());
            if run > 0 {
                self.prev_cr = false;
                self.line_len += run;
                self.since_blank += run;
                if self.since_blank > self.max {
                    return Err(Framing::TooLarge(self.max));
                }
            }
            let Some(&b) = rest.get(run) else {
                break;
            };
            if b == b'\n' && self.prev_cr {
                self.prev_cr = false;
            } else {
                if self.line_len == 0 {
                    self.since_blank = 0;
                }
                self.line_len = 0;
                self.prev_cr = b == b'\r';
            }
            rest = &rest[run + 1..];
        }
        Ok(chunk)
    }

    /// At EOF: the JSON body when the stream was one.
    fn end(&mut self) -> Option<Framing> {
        (self.json == Some(true))
            .then(|| Framing::JsonBody(String::from_utf8_lossy(&self.json_buf).into_owned()))
    }
}

/// Decodes an SSE byte stream with `decoder`, yielding its events. The stream always
/// ends with exactly one `Done` or `Error` (a transport failure or an early EOF becomes
/// `stream_interrupted`).
///
/// # Cancel safety
/// Dropping the returned stream drops `bytes` (closing the connection it reads from).
pub fn decode_sse<S>(
    bytes: S,
    decoder: Box<dyn WireDecoder>,
    limits: SseLimits,
) -> BoxStream<'static, StreamEvent>
where
    S: Stream<Item = Result<Bytes, TransportError>> + Send + 'static,
{
    let framed = bytes.map(Some).chain(stream::once(async { None })).scan(
        Scanner::new(limits.max_event_bytes),
        |scanner, item| {
            let out = match item {
                Some(Ok(chunk)) => scanner.scan(chunk),
                Some(Err(e)) => Err(Framing::Transport(e)),
                None => match scanner.end() {
                    Some(json) => Err(json),
                    None => Ok(Bytes::from_static(b"\n\n")),
                },
            };
            futures::future::ready(Some(out))
        },
    );
    let events = framed.eventsource();
    let state = Driver {
        events: Box::pin(events),
        decoder,
        ids: CallIds::default(),
        pending: Vec::new(),
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.pending.pop() {
                return Some((event, state));
            }
            if state.decoder.is_finished() {
                return None;
            }
            let out = &mut state.pending;
            match state.events.next().await {
                Some(Ok(ev)) => state.decoder.on_event(&ev.event, &ev.data, out),
                Some(Err(e)) => state.decoder.fail(framing_error(e), out),
                None => state.decoder.finish(out),
            }
            state.ids.fill(out);
            out.reverse();
        }
    })
    .boxed()
}

/// State of [`decode_sse`]'s stream: the parsed events, the decoder, and the decoded
/// events not yet yielded, in reverse order (popped from the end; the buffer is reused
/// from one SSE event to the next).
struct Driver<E> {
    events: std::pin::Pin<Box<E>>,
    decoder: Box<dyn WireDecoder>,
    ids: CallIds,
    pending: Vec<StreamEvent>,
}

/// Which tool calls (by dense index) got an id so far.
#[derive(Debug, Default)]
struct CallIds {
    has_id: BTreeMap<u32, bool>,
}

impl CallIds {
    /// Inserts into `out`, before a `Done`, an id fragment for every call still without
    /// one (each id generated, unique within the session: never `call_0` again).
    fn fill(&mut self, out: &mut Vec<StreamEvent>) {
        let mut i = 0;
        while i < out.len() {
            match &out[i] {
                StreamEvent::ToolCallDelta { index, id, .. } => {
                    *self.has_id.entry(*index).or_default() |= id.is_some();
                }
                StreamEvent::Done { .. } => {
                    let mut missing = Vec::new();
                    for (index, has_id) in &mut self.has_id {
                        if !*has_id {
                            *has_id = true;
                            missing.push(StreamEvent::ToolCallDelta {
                                index: *index,
                                id: Some(foya_protocol::ToolCallId::new(generated_call_id())),
                                name: None,
                                arguments: String::new(),
                                extra: None,
                            });
                        }
                    }
                    let n = missing.len();
                    out.splice(i..i, missing);
                    i += n;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

fn framing_error(e: EventStreamError<Framing>) -> ProviderError {
    match e {
        EventStreamError::Transport(Framing::Transport(t)) => {
            ProviderError::new(ErrorClass::StreamInterrupted, t.to_string())
        }
        EventStreamError::Transport(f @ Framing::TooLarge(_)) => {
            ProviderError::new(ErrorClass::InvalidRequest, f.to_string())
        }
        EventStreamError::Transport(Framing::JsonBody(body)) => classify::classify_json_body(&body),
        EventStreamError::Utf8(e) => {
            // The bytes from the first invalid sequence on (the parser already took the
            // valid text before it); their line, invalid bytes shown as U+FFFD.
            let text = String::from_utf8_lossy(e.as_bytes()).into_owned();
            let line = text.split(['\n', '\r']).next().unwrap_or_default();
            ProviderError::new(
                ErrorClass::InvalidResponse,
                format!(
                    "malformed stream event: its data is not UTF-8: `{}`",
                    excerpt(line, MAX_EXCERPT_CHARS)
                ),
            )
        }
        EventStreamError::Parser(e) => ProviderError::new(
            ErrorClass::StreamInterrupted,
            format!("invalid event stream: {e}"),
        ),
    }
}

#[cfg(test)]
mod scanner_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use proptest::prelude::*;

    /// The byte-at-a-time accounting the run-based scan replaced: the state after each
    /// chunk, or the chunk index at which an event grew too large.
    fn reference(chunks: &[Vec<u8>], max: usize) -> Result<Vec<(usize, usize, bool)>, usize> {
        let (mut line_len, mut since_blank, mut prev_cr) = (0, 0, false);
        let mut states = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            for &b in chunk {
                if b == b'\n' && prev_cr {
                    prev_cr = false;
                    continue;
                }
                if b == b'\n' || b == b'\r' {
                    if line_len == 0 {
                        since_blank = 0;
                    }
                    line_len = 0;
                    prev_cr = b == b'\r';
                } else {
                    prev_cr = false;
                    line_len += 1;
                    since_blank += 1;
                    if since_blank > max {
                        return Err(i);
                    }
                }
            }
            states.push((line_len, since_blank, prev_cr));
        }
        Ok(states)
    }

    proptest! {
        #[test]
        fn run_based_scan_counts_like_the_byte_loop(
            chunks in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'a')], 0..12),
                1..8,
            ),
            max in 1usize..10,
        ) {
            // A leading `d` keeps the body in SSE mode (not sniffed as JSON).
            let mut chunks = chunks;
            chunks[0].insert(0, b'd');
            let mut scanner = Scanner::new(max);
            let mut got = Ok(Vec::new());
            for (i, chunk) in chunks.iter().enumerate() {
                match scanner.scan(Bytes::from(chunk.clone())) {
                    Ok(passed) => {
                        prop_assert_eq!(&passed[..], &chunk[..]);
                        if let Ok(states) = &mut got {
                            states.push((scanner.line_len, scanner.since_blank, scanner.prev_cr));
                        }
                    }
                    Err(Framing::TooLarge(m)) => {
                        prop_assert_eq!(m, max);
                        got = Err(i);
                        break;
                    }
                    Err(other) => prop_assert!(false, "unexpected {other}"),
                }
            }
            prop_assert_eq!(got, reference(&chunks, max));
        }
    }
}

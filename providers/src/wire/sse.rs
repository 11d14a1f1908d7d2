//! SSE framing: drives a [`WireDecoder`] over a byte stream with `eventsource-stream`.
//!
//! Adds what the parser alone does not give: a leading UTF-8 byte-order mark skipped (as
//! the SSE spec says; the parser would panic on it), a final `"\n\n"` at EOF (so a last
//! event without its blank line still counts), a per-event size cap, detection of a JSON
//! body sent instead of an event stream (an error object with status 200), mapping of
//! transport failures to `stream_interrupted` and of bytes that are not UTF-8 to
//! `invalid_response` (like a `data:` payload that is not JSON), and an id for every tool
//! call the provider streamed without one or with an empty one (`ids::generated_call_id`,
//! given just before the final `Done`, so an id arriving on a later fragment still wins;
//! the same for every protocol, see `CallIds`). It hands the parser only complete lines,
//! LF-terminated, a few at a time (see `Scanner` and `framed`): the parser re-reads its
//! buffer in ways that are quadratic in a long incomplete line or in many lines at once,
//! so this keeps the work linear in the body's size. Pure apart from polling the given
//! stream (and the clock and randomness of generated ids): tests feed it in-memory
//! chunks.

use super::WireDecoder;
use super::common::{MAX_EXCERPT_CHARS, excerpt};
use super::ids::generated_call_id;
use crate::classify;
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
    /// Largest accepted body (all its events), default 256 MiB: a provider that never
    /// ends its answer (each event small, bytes always flowing, so no idle timeout
    /// fires) fails the stream with `invalid_request` instead of growing the answer in
    /// memory without bound. The longest real answers (128k output tokens at a few
    /// hundred bytes of SSE each) stay well below it.
    pub max_stream_bytes: usize,
}

impl Default for SseLimits {
    fn default() -> Self {
        Self {
            max_event_bytes: 16 * 1024 * 1024,
            max_stream_bytes: 256 * 1024 * 1024,
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
    StreamTooLarge(usize),
    JsonBody(String),
}

impl std::fmt::Display for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "{e}"),
            Self::TooLarge(max) => write!(f, "a stream event exceeds {max} bytes"),
            Self::StreamTooLarge(max) => write!(
                f,
                "the answer exceeds {max} bytes without ending (the provider kept streaming)"
            ),
            Self::JsonBody(_) => f.write_str("JSON body instead of an event stream"),
        }
    }
}

/// Body sniffing, event-size accounting and line framing over raw bytes.
///
/// Only complete lines are handed to `eventsource-stream`: its parser re-scans its whole
/// buffer whenever a chunk arrives and the buffer's last line is incomplete, so one large
/// event delivered in many small chunks would cost time quadratic in its size (a 16 MiB
/// event in 1 KiB chunks: half a minute of CPU before the size cap). The bytes after
/// the last line terminator are held here until their line ends (or the stream does),
/// and every terminator (CR, LF or CRLF, even split over chunks) is passed on as LF, so
/// the parser never waits on a trailing CR either. Total work is linear in the body.
#[derive(Debug)]
struct Scanner {
    max: usize,
    /// `None` until the first non-whitespace byte; then whether the body is JSON.
    json: Option<bool>,
    json_buf: Vec<u8>,
    line_len: usize,
    since_blank: usize,
    /// Whether the last byte scanned was a CR (a line terminator; an LF right after it,
    /// even in the next chunk, is the second half of a CRLF).
    prev_cr: bool,
    /// Bytes of a leading UTF-8 byte-order mark consumed so far (3: past the start).
    bom: usize,
    /// The incomplete line held back: the bytes after the last line terminator passed on.
    held: Vec<u8>,
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
            held: Vec::new(),
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

    /// Checks a chunk; returns the bytes to hand to the SSE parser: complete lines only,
    /// each ending in LF (empty in JSON mode and while a line is incomplete).
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
        let after_cr = self.prev_cr;
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
        Ok(self.lines(chunk, after_cr))
    }

    /// The complete lines that `chunk` ends (the held line first), every terminator as LF;
    /// holds back the bytes after its last terminator. `after_cr`: whether the byte
    /// before `chunk` was a CR (then a leading LF completes a CRLF and is dropped).
    fn lines(&mut self, mut chunk: Bytes, after_cr: bool) -> Bytes {
        if after_cr && chunk.first() == Some(&b'\n') {
            chunk = chunk.slice(1..);
        }
        let Some(last) = memchr::memrchr2(b'\n', b'\r', &chunk) else {
            self.held.extend_from_slice(&chunk);
            return Bytes::new();
        };
        let tail = chunk.split_off(last + 1);
        let out = if memchr::memchr(b'\r', &chunk).is_none() && self.held.is_empty() {
            // The usual case: LF-terminated lines, passed on without a copy.
            chunk
        } else {
            let mut out = std::mem::take(&mut self.held);
            out.reserve(chunk.len());
            let mut rest: &[u8] = &chunk;
            while let Some(i) = memchr::memchr2(b'\n', b'\r', rest) {
                out.extend_from_slice(&rest[..i]);
                out.push(b'\n');
                let crlf = rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n');
                rest = &rest[i + 1 + usize::from(crlf)..];
            }
            Bytes::from(out)
        };
        self.held.extend_from_slice(&tail);
        out
    }

    /// At EOF: the JSON body when the stream was one, else the held line and a blank line
    /// (so a last event without its blank line still counts).
    fn end(&mut self) -> Result<Bytes, Framing> {
        if self.json == Some(true) {
            return Err(Framing::JsonBody(
                String::from_utf8_lossy(&self.json_buf).into_owned(),
            ));
        }
        Ok(self.lines(Bytes::from_static(b"\n\n"), self.prev_cr))
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
    let events = framed(bytes, limits).eventsource();
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

/// Most lines handed to the SSE parser at once. The parser moves the rest of its buffer
/// down after every line it reads, so a piece of `n` lines costs it up to `n` times the
/// piece's size: one large network read holding thousands of short lines would be
/// quadratic again. Pieces of at most this many lines keep that linear (each byte moved
/// at most this many times) while the usual event (2 or 3 lines) still goes as one.
const LINES_PER_PIECE: usize = 16;

/// `bytes` as the SSE parser gets them: the complete lines [`Scanner`] passes on, in
/// pieces of at most [`LINES_PER_PIECE`] lines (slices, not copies); at EOF the held line
/// and a blank line; or a framing error.
fn framed<S>(bytes: S, limits: SseLimits) -> impl Stream<Item = Result<Bytes, Framing>>
where
    S: Stream<Item = Result<Bytes, TransportError>>,
{
    bytes
        .map(Some)
        .chain(stream::once(async { None }))
        .scan(
            (Scanner::new(limits.max_event_bytes), 0usize),
            move |(scanner, total), item| {
                let out = match item {
                    Some(Ok(chunk)) => {
                        *total = total.saturating_add(chunk.len());
                        if *total > limits.max_stream_bytes {
                            Err(Framing::StreamTooLarge(limits.max_stream_bytes))
                        } else {
                            scanner.scan(chunk)
                        }
                    }
                    Some(Err(e)) => Err(Framing::Transport(e)),
                    None => scanner.end(),
                };
                futures::future::ready(Some(out))
            },
        )
        .flat_map(|out| stream::iter(Pieces::from(out)))
}

/// The pieces of one [`Scanner`] output: up to [`LINES_PER_PIECE`] lines each, or its
/// error.
struct Pieces {
    rest: Bytes,
    error: Option<Framing>,
}

impl From<Result<Bytes, Framing>> for Pieces {
    fn from(out: Result<Bytes, Framing>) -> Self {
        match out {
            Ok(rest) => Self { rest, error: None },
            Err(e) => Self {
                rest: Bytes::new(),
                error: Some(e),
            },
        }
    }
}

impl Iterator for Pieces {
    type Item = Result<Bytes, Framing>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        if self.rest.is_empty() {
            return None;
        }
        let end = memchr::memchr_iter(b'\n', &self.rest)
            .nth(LINES_PER_PIECE - 1)
            .map_or(self.rest.len(), |i| i + 1);
        Some(Ok(self.rest.split_to(end)))
    }
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

/// Which tool calls (by dense index) got an id so far. The one place where the ids of
/// streamed calls are completed, the same for every protocol: an empty id (`""`) counts
/// as missing (it is removed from its fragment, so a later fragment's id still wins), and
/// a call still without an id when the stream ends `Done` gets a generated one.
#[derive(Debug, Default)]
struct CallIds {
    has_id: BTreeMap<u32, bool>,
}

impl CallIds {
    /// Removes empty ids from the fragments in `out` and inserts, before a `Done`, an id
    /// fragment for every call still without one (each id generated, unique within the
    /// session: never `call_0` again, never `""`).
    fn fill(&mut self, out: &mut Vec<StreamEvent>) {
        let mut i = 0;
        while i < out.len() {
            match &mut out[i] {
                StreamEvent::ToolCallDelta { index, id, .. } => {
                    if id.as_ref().is_some_and(|id| id.as_str().is_empty()) {
                        *id = None;
                    }
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
        EventStreamError::Transport(f @ (Framing::TooLarge(_) | Framing::StreamTooLarge(_))) => {
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
#[path = "sse_tests.rs"]
mod tests;

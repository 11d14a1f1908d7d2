//! An in-process mock of the paid model APIs, speaking their real wire formats: an axum
//! server on 127.0.0.1:0 that answers `/v1/chat/completions`, `/v1/messages`,
//! `/v1/responses` (and the same without `/v1`) with queued [`MockResponse`]s, in order,
//! and records every request. Like the real APIs it refuses (400, the vendor's error
//! body, no queued response consumed) a request whose tool names or replayed call names
//! break `^[a-zA-Z0-9_-]{1,64}$`, and an Anthropic request whose tool-call ids break
//! the API's rules (pattern, uniqueness, pairing; `strict.rs`, `tool_ids.rs`). The builders in [`openai_chat`], [`anthropic`] and
//! [`responses`] produce SSE bodies shaped byte for byte like the vendors' streams
//! (modelled on `actors/tests/fixtures/providers`).

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// One scripted HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockResponse {
    /// HTTP status.
    pub status: u16,
    /// Response headers (name, value).
    pub headers: Vec<(String, String)>,
    /// The body, sent chunk by chunk.
    pub body_chunks: Vec<Bytes>,
    /// Pause before each chunk after the first, in milliseconds (server-side pacing).
    pub chunk_delay_ms: u64,
    /// Close the connection abruptly (no end of the chunked body) after this many chunks.
    /// Set `chunk_delay_ms` too so the chunks before the cut reach the client first;
    /// without a delay the server may reset the connection before the response headers
    /// are flushed (the client then sees a `network` error instead of
    /// `stream_interrupted`).
    pub cut_after: Option<usize>,
}

impl MockResponse {
    /// A 200 `text/event-stream` response; the body is sent one SSE event per chunk.
    #[must_use]
    pub fn sse(text_body: impl Into<String>) -> Self {
        let text: String = text_body.into();
        let mut chunks = Vec::new();
        let mut rest = text.as_str();
        while let Some(end) = rest.find("\n\n") {
            chunks.push(Bytes::from(rest[..end + 2].to_owned()));
            rest = &rest[end + 2..];
        }
        if !rest.is_empty() {
            chunks.push(Bytes::from(rest.to_owned()));
        }
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body_chunks: chunks,
            chunk_delay_ms: 0,
            cut_after: None,
        }
    }

    /// An `application/json` response with `status` and `body`.
    #[must_use]
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body_chunks: vec![Bytes::from(body.to_string())],
            chunk_delay_ms: 0,
            cut_after: None,
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Cuts the connection after `n` chunks.
    #[must_use]
    pub fn cut_after(mut self, n: usize) -> Self {
        self.cut_after = Some(n);
        self
    }

    /// Pauses `ms` milliseconds before each chunk after the first (and before a cut).
    #[must_use]
    pub fn chunk_delay_ms(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = ms;
        self
    }
}

/// One request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/messages`.
    pub path: String,
    /// Headers with lower-case names (last value wins).
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`null` when it was not JSON).
    pub body: serde_json::Value,
}

#[derive(Debug)]
struct Shared {
    queue: VecDeque<MockResponse>,
    requests: Vec<RecordedRequest>,
    /// The number of requests received, for [`MockProvider::wait_for_requests`].
    received: tokio::sync::watch::Sender<usize>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            requests: Vec::new(),
            received: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// A running mock provider; stops when dropped.
#[derive(Debug)]
pub struct MockProvider {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    server: tokio::task::JoinHandle<()>,
}

impl MockProvider {
    /// Binds 127.0.0.1:0 and serves until dropped.
    ///
    /// # Panics
    /// When the loopback port cannot be bound (a broken test environment).
    pub async fn start() -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let mut app = Router::new();
        for path in ["/chat/completions", "/messages", "/responses"] {
            app = app
                .route(path, axum::routing::post(handle))
                .route(&format!("/v1{path}"), axum::routing::post(handle));
        }
        let app = app.with_state(shared.clone());
        #[expect(
            clippy::expect_used,
            reason = "test harness: no port is a broken environment"
        )]
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

    /// `http://127.0.0.1:PORT` (append `/v1` for OpenAI-style base URLs, or not: both
    /// paths are served).
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues a response; responses are consumed in order. With none queued, requests get
    /// a 500 JSON error.
    pub fn push(&self, response: MockResponse) {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .queue
            .push_back(response);
    }

    /// Every request received so far, in order.
    #[must_use]
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .clone()
    }

    /// Waits until at least `n` requests were received (each is recorded before it is
    /// answered), and returns them all. Waits at most [`WAIT_TIMEOUT`].
    ///
    /// # Panics
    /// When fewer than `n` requests arrive within [`WAIT_TIMEOUT`] (a failed test),
    /// naming how many did.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<RecordedRequest> {
        let mut received = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .received
            .subscribe();
        let reached = tokio::time::timeout(WAIT_TIMEOUT, received.wait_for(|&count| count >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        #[expect(clippy::panic, reason = "test harness: a timeout fails the test")]
        if !reached {
            panic!(
                "the mock provider received {} requests within {WAIT_TIMEOUT:?}, expected {n}",
                self.requests().len()
            );
        }
        self.requests()
    }
}

/// How long [`MockProvider::wait_for_requests`] waits.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(60);

impl Drop for MockProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    State(shared): State<Arc<Mutex<Shared>>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = RecordedRequest {
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    };
    let refused = strict::check(&recorded.path, &recorded.body);
    let next = {
        let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
        s.requests.push(recorded);
        let count = s.requests.len();
        s.received.send_replace(count);
        match refused {
            Some(refused) => Some(refused),
            None => s.queue.pop_front(),
        }
    };
    let next = next.unwrap_or_else(|| {
        MockResponse::json(500, &serde_json::json!({"error": {"message": "mock provider: no response queued", "type": "server_error"}}))
    });
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(next.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    for (k, v) in &next.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let delay = Duration::from_millis(next.chunk_delay_ms);
    let cut = next.cut_after;
    let chunks = next.body_chunks.into_iter().enumerate();
    let body = futures::stream::unfold(chunks, move |mut chunks| async move {
        let (i, chunk) = chunks.next()?;
        if cut.is_some_and(|n| i >= n) {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            return Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "mock cut",
                )),
                chunks,
            ));
        }
        if i > 0 && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Some((Ok(chunk), chunks))
    });
    builder
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| Response::new(Body::from("bad mock response")))
}

mod bodies;
mod strict;
mod tool_ids;
pub use bodies::{anthropic, openai_chat, responses};

#[cfg(test)]
mod tests;

//! An in-process mock of the paid model APIs, speaking their real wire formats: an axum
//! server on 127.0.0.1:0 that answers `/v1/chat/completions`, `/v1/messages`,
//! `/v1/responses` (and the same without `/v1`) with queued [`MockResponse`]s, in order,
//! and records every request. The builders in [`openai_chat`], [`anthropic`] and
//! [`responses`] produce SSE bodies shaped byte for byte like the vendors' streams
//! (modelled on `shared/fixtures/providers`).

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

#[derive(Debug, Default)]
struct Shared {
    queue: VecDeque<MockResponse>,
    requests: Vec<RecordedRequest>,
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
}

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
    let next = {
        let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
        s.requests.push(recorded);
        s.queue.pop_front()
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

/// Splits text into a few deltas the way token streams do (at word boundaries).
fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in text.chars() {
        cur.push(ch);
        if ch == ' ' {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() || out.is_empty() {
        out.push(cur);
    }
    out
}

/// OpenAI Chat Completions stream bodies.
pub mod openai_chat {
    use serde_json::{Value, json};

    fn chunk(delta: &Value, finish: Option<&str>) -> String {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_764_400_000,
                   "model": "mock-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    }

    fn tail(finish: &str) -> String {
        let usage = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_764_400_000,
            "model": "mock-1", "choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}});
        format!(
            "{}data: {usage}\n\ndata: [DONE]\n\n",
            chunk(&json!({}), Some(finish))
        )
    }

    /// A text answer: role chunk, content deltas, finish `stop`, usage chunk (42 in,
    /// 7 out), `[DONE]`.
    #[must_use]
    pub fn text(text: &str) -> String {
        let mut out = chunk(&json!({"role": "assistant", "content": ""}), None);
        for p in super::pieces(text) {
            out.push_str(&chunk(&json!({"content": p}), None));
        }
        out + &tail("stop")
    }

    /// One tool call: first fragment with id and name, arguments in two fragments,
    /// finish `tool_calls`, usage, `[DONE]`.
    #[must_use]
    pub fn tool_call(id: &str, name: &str, args_json: &str) -> String {
        let mid = args_json.len() / 2;
        let mid = (0..=mid)
            .rev()
            .find(|i| args_json.is_char_boundary(*i))
            .unwrap_or(0);
        let mut out = chunk(&json!({"role": "assistant", "content": null}), None);
        out.push_str(&chunk(&json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}), None));
        for part in [&args_json[..mid], &args_json[mid..]] {
            out.push_str(&chunk(
                &json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
                None,
            ));
        }
        out + &tail("tool_calls")
    }
}

/// Anthropic Messages stream bodies.
pub mod anthropic {
    use serde_json::{Value, json};

    fn event(v: &Value) -> String {
        format!(
            "event: {}\ndata: {v}\n\n",
            v["type"].as_str().unwrap_or("message")
        )
    }

    fn head() -> String {
        event(
            &json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message", "role": "assistant",
            "model": "mock-2", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 250, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
        ) + &event(&json!({"type": "ping"}))
    }

    fn tail(stop: &str) -> String {
        event(
            &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        ) + &event(&json!({"type": "message_stop"}))
    }

    /// A text answer in one text block; usage 250 in, 9 out; `end_turn`.
    #[must_use]
    pub fn text(text: &str) -> String {
        let mut out = head();
        out.push_str(&event(&json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})));
        for p in super::pieces(text) {
            out.push_str(&event(&json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}})));
        }
        out.push_str(&event(&json!({"type": "content_block_stop", "index": 0})));
        out + &tail("end_turn")
    }

    /// One `tool_use` block with `input_json_delta`s; `tool_use` stop reason.
    #[must_use]
    pub fn tool_call(id: &str, name: &str, args_json: &str) -> String {
        let mut out = head();
        out.push_str(&event(&json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
        out.push_str(&event(&json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": args_json}})));
        out.push_str(&event(&json!({"type": "content_block_stop", "index": 0})));
        out + &tail("tool_use")
    }
}

/// OpenAI Responses stream bodies.
pub mod responses {
    use serde_json::{Value, json};

    fn event(v: &Value) -> String {
        format!(
            "event: {}\ndata: {v}\n\n",
            v["type"].as_str().unwrap_or("message")
        )
    }

    fn created() -> String {
        event(&json!({"type": "response.created", "sequence_number": 0,
            "response": {"id": "resp_mock", "object": "response", "status": "in_progress", "model": "mock-3", "output": []}}))
    }

    fn completed() -> String {
        event(
            &json!({"type": "response.completed", "response": {"id": "resp_mock", "object": "response",
            "status": "completed", "model": "mock-3", "output": [],
            "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 40,
                      "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 340}}}),
        )
    }

    /// A text answer (`output_text` deltas); usage 300 in, 40 out.
    #[must_use]
    pub fn text(text: &str) -> String {
        let mut out = created();
        out.push_str(&event(&json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}})));
        for p in super::pieces(text) {
            out.push_str(&event(
                &json!({"type": "response.output_text.delta", "item_id": "msg_1",
                "output_index": 0, "content_index": 0, "delta": p}),
            ));
        }
        out.push_str(&event(
            &json!({"type": "response.output_text.done", "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "text": text}),
        ));
        out + &completed()
    }

    /// One function call: item added (call id `id`, item id `fc_<id>`), argument deltas
    /// keyed by item id, done events, completed.
    #[must_use]
    pub fn tool_call(id: &str, name: &str, args_json: &str) -> String {
        let item_id = format!("fc_{id}");
        let mut out = created();
        out.push_str(&event(&json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": item_id, "type": "function_call", "status": "in_progress", "call_id": id, "name": name, "arguments": ""}})));
        out.push_str(&event(
            &json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
            "output_index": 0, "delta": args_json}),
        ));
        out.push_str(&event(
            &json!({"type": "response.function_call_arguments.done", "item_id": item_id,
            "output_index": 0, "arguments": args_json}),
        ));
        out.push_str(&event(&json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"id": item_id, "type": "function_call", "status": "completed", "call_id": id, "name": name, "arguments": args_json}})));
        out + &completed()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use foya_actors::provider::config::ProviderProfile;
    use foya_actors::provider::http::HttpModelClient;
    use foya_actors::provider::wire::ProviderKind;
    use foya_actors::provider::{ModelClient, ModelRequest};
    use foya_protocol::{
        ErrorClass, FinishReason, Input, Message, StreamAggregate, ToolCall, ToolCallId,
    };
    use futures::StreamExt;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    async fn run(mock: &MockProvider, kind: ProviderKind) -> StreamAggregate {
        let mut profile = ProviderProfile::for_kind(kind, "mock-model");
        profile.base_url = mock.base_url();
        let client = HttpModelClient::with_env(profile, &|_| Some("k".into())).unwrap();
        let request = ModelRequest {
            messages: vec![Message::User(Input::text("hi"))],
            ..ModelRequest::default()
        };
        let mut agg = StreamAggregate::new();
        for e in client
            .stream(request, CancellationToken::new())
            .collect::<Vec<_>>()
            .await
        {
            agg.apply(&e);
        }
        agg
    }

    #[tokio::test]
    async fn builders_decode_through_the_real_client_for_every_protocol() {
        let mock = MockProvider::start().await;
        type Builders = (
            ProviderKind,
            fn(&str) -> String,
            fn(&str, &str, &str) -> String,
        );
        let builders: [Builders; 3] = [
            (
                ProviderKind::OpenaiChat,
                openai_chat::text,
                openai_chat::tool_call,
            ),
            (
                ProviderKind::Anthropic,
                anthropic::text,
                anthropic::tool_call,
            ),
            (
                ProviderKind::OpenaiResponses,
                responses::text,
                responses::tool_call,
            ),
        ];
        for (kind, text, tool_call) in builders {
            mock.push(MockResponse::sse(text("Hello there, world.")));
            let msg = run(&mock, kind).await.to_message();
            assert_eq!(
                (msg.text.as_str(), msg.finish_reason),
                ("Hello there, world.", Some(FinishReason::Stop)),
                "{kind}"
            );

            mock.push(MockResponse::sse(tool_call(
                "call_1",
                "read_file",
                r#"{"path":"é.txt"}"#,
            )));
            let msg = run(&mock, kind).await.to_message();
            assert_eq!(
                msg.tool_calls,
                vec![ToolCall {
                    id: ToolCallId::new("call_1"),
                    name: "read_file".into(),
                    arguments: json!({"path": "é.txt"}),
                    extra: None
                }],
                "{kind}"
            );
            assert_eq!(msg.finish_reason, Some(FinishReason::ToolCalls));
        }
        let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
        assert_eq!(
            paths,
            [
                "/chat/completions",
                "/chat/completions",
                "/v1/messages",
                "/v1/messages",
                "/responses",
                "/responses"
            ]
        );
        assert_eq!(mock.requests()[2].headers["x-api-key"], "k");
        assert_eq!(
            mock.requests()[0].body["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }

    #[tokio::test]
    async fn json_errors_and_empty_queue_classify() {
        let mock = MockProvider::start().await;
        mock.push(
            MockResponse::json(
                429,
                &json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
            )
            .header("retry-after", "2"),
        );
        let err = run(&mock, ProviderKind::Anthropic).await.error.unwrap();
        assert_eq!(
            (err.class, err.retry_after_ms),
            (ErrorClass::RateLimited, Some(2000))
        );
        let err = run(&mock, ProviderKind::OpenaiChat).await.error.unwrap();
        assert_eq!((err.class, err.status), (ErrorClass::Server, Some(500)));
    }
}

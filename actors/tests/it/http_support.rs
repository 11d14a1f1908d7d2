//! Shared helpers of the `HttpModelClient` tests: an in-process axum server that plays
//! scripted replies (status, headers, body chunks, cut or hang), the fixtures, a client
//! for a protocol and one request run to its end.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code, unreachable_pub)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use foya_actors::provider::http::HttpModelClient;
use foya_actors::provider::profile::ProviderProfile;
use foya_actors::provider::wire::ProviderKind;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_protocol::{Input, Message, StreamAggregate, StreamEvent};
use futures::StreamExt;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A scripted reply: status, headers, body chunks, cut after N chunks, hang after the body.
#[derive(Clone, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, &'static str)>,
    pub chunks: Vec<Bytes>,
    pub cut_after: Option<usize>,
    /// When set, the cut waits for this signal (sent once the client saw events).
    pub cut_signal: Option<Arc<tokio::sync::Notify>>,
    pub hang: bool,
}

pub type Recorded = Arc<Mutex<Vec<(String, HeaderMap, serde_json::Value)>>>;
pub type Queue = Arc<Mutex<VecDeque<Reply>>>;

pub fn sse(body: Vec<u8>) -> Reply {
    // One chunk per line, so the client really streams.
    let chunks = body
        .split_inclusive(|b| *b == b'\n')
        .map(Bytes::copy_from_slice)
        .collect();
    Reply {
        status: 200,
        headers: vec![("content-type", "text/event-stream")],
        chunks,
        ..Reply::default()
    }
}

pub fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/providers")
            .join(rel),
    )
    .unwrap()
}

async fn handle(
    State((queue, recorded)): State<(Queue, Recorded)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    recorded.lock().unwrap().push((
        uri.path().to_owned(),
        headers,
        serde_json::from_slice(&body).unwrap_or_default(),
    ));
    let reply = queue.lock().unwrap().pop_front().expect("a queued reply");
    let mut builder = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        builder = builder.header(*k, *v);
    }
    let mut chunks = reply.chunks;
    chunks.truncate(reply.cut_after.unwrap_or(usize::MAX));
    let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    let body = match (reply.cut_after, reply.cut_signal) {
        (Some(_), signal) => body
            .chain(futures::stream::once(async move {
                if let Some(signal) = signal {
                    signal.notified().await;
                }
                Err(std::io::Error::other("cut"))
            }))
            .boxed(),
        (None, _) => body.boxed(),
    };
    let body = if reply.hang {
        body.chain(futures::stream::pending()).boxed()
    } else {
        body.boxed()
    };
    builder.body(Body::from_stream(body)).unwrap()
}

pub async fn server(replies: Vec<Reply>) -> (String, Recorded) {
    let queue: Queue = Arc::new(Mutex::new(replies.into()));
    let recorded: Recorded = Arc::default();
    let app = Router::new()
        .fallback(axum::routing::post(handle))
        .with_state((queue, recorded.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), recorded)
}

pub fn client(kind: ProviderKind, base_url: &str) -> HttpModelClient {
    let mut profile = ProviderProfile::for_kind(kind, "m-1");
    profile.base_url = base_url.to_owned();
    HttpModelClient::with_env(profile, &|_| Some("sk-test-secret".to_owned())).unwrap()
}

pub fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![Message::User(Input::text("hi"))].into(),
        ..ModelRequest::default()
    }
}

pub async fn run(client: &HttpModelClient) -> (Vec<StreamEvent>, StreamAggregate) {
    let events: Vec<StreamEvent> = client
        .stream(request(), CancellationToken::new())
        .collect()
        .await;
    let mut agg = StreamAggregate::new();
    for e in &events {
        agg.apply(e);
    }
    (events, agg)
}

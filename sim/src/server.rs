//! The simulated model over HTTP: an axum server answering Chat Completions, Messages
//! and Responses requests with SSE bodies in each vendor's wire format
//! (`foya sim-server`).

use super::plan::{SimModel, SimOutcome, TimedEvent};
use super::wire::{self, ErrorResponse, SseEncoder, WireFormat, WireMeta};
use super::{HistorySummary, SimConfig};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::stream::{self, Stream};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Serves the simulator on `listener` until the process ends.
///
/// Routes, the real APIs' paths only: `POST /v1/chat/completions` (OpenAI Chat), `POST
/// /v1/messages` (Anthropic), `POST /v1/responses` (OpenAI Responses). Any other path is
/// a 404 in the vendor's error shape naming the path and these (a base URL without `/v1`
/// for openai-chat, or with it for anthropic, fails here as it would against the real
/// API). The request body is read just enough to find the history; the answer is
/// always a stream (`content-type: text/event-stream`) or a vendor-shaped JSON error.
/// It binds nothing itself: the caller chooses the address (the CLI defaults to
/// 127.0.0.1).
///
/// # Errors
/// The listener's I/O errors.
pub async fn serve_sim(listener: TcpListener, config: SimConfig) -> std::io::Result<()> {
    axum::serve(listener, sim_router(config)).await
}

/// [`serve_sim`] that stops accepting when `shutdown` completes and returns once open
/// responses have finished.
///
/// # Errors
/// The listener's I/O errors.
pub async fn serve_sim_with_shutdown(
    listener: TcpListener,
    config: SimConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, sim_router(config))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The simulator's routes (those of [`serve_sim`], the 404 fallback included), for
/// embedding in another axum app or server.
pub fn sim_router(config: SimConfig) -> Router {
    let model = Arc::new(SimModel::new(config));
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/messages", post(messages))
        .route("/v1/responses", post(responses))
        .fallback(no_route)
        .with_state(model)
}

/// Any path but the three: 404 as the real APIs answer it (OpenAI's `Invalid URL (POST
/// /path)`), in Anthropic's shape for a path ending in `/messages`, else OpenAI's.
async fn no_route(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    let format = if path.ends_with("/messages") {
        WireFormat::Anthropic
    } else {
        WireFormat::OpenAiChat
    };
    error(wire::not_found(
        format,
        &format!(
            "Invalid URL ({method} {path}; the simulator serves only POST /v1/chat/completions \
             for openai-chat, /v1/messages for anthropic and /v1/responses for \
             openai-responses, as the real APIs do)"
        ),
    ))
}

async fn chat(State(model): State<Arc<SimModel>>, body: Bytes) -> Response {
    answer(WireFormat::OpenAiChat, &model, &body)
}

async fn messages(State(model): State<Arc<SimModel>>, body: Bytes) -> Response {
    answer(WireFormat::Anthropic, &model, &body)
}

async fn responses(State(model): State<Arc<SimModel>>, body: Bytes) -> Response {
    answer(WireFormat::OpenAiResponses, &model, &body)
}

#[tracing::instrument(name = "sim_request", skip_all, fields(wire.format = ?format))]
fn answer(format: WireFormat, model: &SimModel, body: &Bytes) -> Response {
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            return error(wire::invalid_request(
                format,
                &format!("invalid JSON body: {e}"),
            ));
        }
    };
    let history = HistorySummary::from_wire(format, &value, body.len());
    let response = model.respond(&history);
    let meta = WireMeta::for_response(format, &response);
    match response.outcome {
        SimOutcome::Rejected(rejection) => error(wire::error_response(format, &rejection)),
        SimOutcome::Streamed { events, .. } => {
            let frames = encode_frames(format, meta, &events);
            let headers = [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ];
            (StatusCode::OK, headers, Body::from_stream(paced(frames))).into_response()
        }
    }
}

fn error(e: ErrorResponse) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response =
        (status, [(header::CONTENT_TYPE, "application/json")], e.body).into_response();
    for (name, value) in e.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// The body as chunks with their due offsets: the start frames at 0, then the frames of
/// all events due at the same moment as one chunk. A cut stream just ends (no end
/// marker), which a client sees as an interrupted stream.
fn encode_frames(
    format: WireFormat,
    meta: WireMeta,
    events: &[TimedEvent],
) -> Vec<(Duration, Bytes)> {
    let mut encoder = SseEncoder::new(format, meta);
    let mut frames = Vec::new();
    let mut current = (Duration::ZERO, String::new());
    encoder.start(&mut current.1);
    for timed in events {
        if timed.at != current.0 {
            let (at, text) = std::mem::replace(&mut current, (timed.at, String::new()));
            if !text.is_empty() {
                frames.push((at, Bytes::from(text)));
            }
        }
        encoder.event(&timed.event, &mut current.1);
    }
    if !current.1.is_empty() {
        frames.push((current.0, Bytes::from(current.1)));
    }
    frames
}

/// Sends each chunk at its offset from the first poll. Dropped when the client goes.
fn paced(frames: Vec<(Duration, Bytes)>) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let state = (frames.into_iter(), None::<Instant>);
    stream::unfold(state, |(mut frames, start)| async move {
        let start = start.unwrap_or_else(Instant::now);
        let (at, bytes) = frames.next()?;
        if !at.is_zero() {
            tokio::time::sleep_until(start + at).await;
        }
        Some((Ok(bytes), (frames, Some(start))))
    })
}

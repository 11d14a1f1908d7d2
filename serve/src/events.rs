//! `GET /sessions/{id}/events`: a session's updates as Server-Sent Events.
//!
//! Persisted events are `event: event` with their seq as the SSE `id`, so a client that
//! reconnects with `Last-Event-ID: N` resumes at `N + 1` with nothing missing or
//! duplicated; live deltas (`event: delta`) and notices (`event: notice`) carry no id, so
//! the client's last event id stays the last persisted seq. `?from_seq=N` starts at `N`
//! (default 1, everything); `Last-Event-ID` wins over it. `?approver=true` makes this
//! subscription count as an approver while it is open. The stream ends after a
//! `closed`, `lagged` or `moved` notice (reconnect to resume), or when the server shuts down (after
//! the updates already delivered to it, such as the end of a turn the shutdown cancelled).

use super::AppState;
use super::error::ApiError;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use foya_actors::SubscribeOptions;
use foya_protocol::{Seq, SessionUpdate};
use futures::{Stream, StreamExt as _};
use serde::Deserialize;
use std::convert::Infallible;

/// Query of the event stream.
#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    /// First seq to deliver (1-based; default 1).
    #[serde(default)]
    from_seq: Option<u64>,
    /// Count this subscription as an approver.
    #[serde(default)]
    approver: bool,
}

pub(crate) async fn events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let Query(query) = query?;
    let resume = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a seq number"))?,
        ),
        None => None,
    };
    let from = resume.map_or(query.from_seq.unwrap_or(1), |last| last.saturating_add(1));
    let session = super::sessions::handle(&state, &id).await?;
    let subscription = session
        .subscribe(
            Seq(from.max(1)),
            SubscribeOptions {
                approver: query.approver,
            },
        )
        .await?;
    let shutdown = state.shutdown.clone();
    // At shutdown the updates already delivered (e.g. the end of a turn the shutdown
    // cancelled) still go out; then the stream ends.
    let stream = futures::stream::unfold(
        (subscription, shutdown),
        |(mut subscription, shutdown)| async move {
            let update = tokio::select! {
                biased;
                update = subscription.next() => update?,
                () = shutdown.cancelled() => return None,
            };
            Some((Ok(to_sse(&update)), (subscription, shutdown)))
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// One update as an SSE event (JSON data; `id` only for persisted events). Every string
/// in it is passed through [`foya_protocol::visible::visible_json`]: a web page shows
/// a bidi override or a zero-width character in a command as `<U+202E>`, never obeys it.
fn to_sse(update: &SessionUpdate) -> SseEvent {
    let data = match serde_json::to_value(update) {
        Ok(mut value) => {
            foya_protocol::visible::visible_json(&mut value);
            value.to_string()
        }
        Err(_) => "null".into(),
    };
    match update {
        SessionUpdate::Event(e) => SseEvent::default()
            .event("event")
            .id(e.seq.0.to_string())
            .data(data),
        SessionUpdate::Delta(_) => SseEvent::default().event("delta").data(data),
        SessionUpdate::Notice(_) => SseEvent::default().event("notice").data(data),
    }
}

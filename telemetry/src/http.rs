//! `GET /metrics` on an address of its own, for the commands that serve no HTTP API
//! (`foya node --http`, `foya loadtest --metrics-listen`). `foya serve` has the route in
//! its own router, behind its auth.

use crate::Telemetry;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct MetricsState {
    telemetry: Telemetry,
    token: Option<Arc<str>>,
}

/// The answer of `GET /metrics`: the OpenMetrics text, or 404 when metrics are off.
pub async fn metrics_response(telemetry: Option<&Telemetry>) -> Response {
    let text = match telemetry {
        Some(t) => t.metrics_text().await,
        None => None,
    };
    match text {
        Some(text) => ([(header::CONTENT_TYPE, crate::CONTENT_TYPE)], text).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "metrics are off (the [telemetry] table of the config file says metrics = false)\n",
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<MetricsState>, headers: axum::http::HeaderMap) -> Response {
    if let Some(token) = &state.token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given.map(str::trim) != Some(&**token) {
            return (
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required\n",
            )
                .into_response();
        }
    }
    metrics_response(Some(&state.telemetry)).await
}

/// A router answering `GET /metrics` (with `Authorization: Bearer <token>` when `token`
/// is set) and 404 elsewhere.
pub fn metrics_router(telemetry: Telemetry, token: Option<Arc<str>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(MetricsState { telemetry, token })
}

/// Serves [`metrics_router`] on `listener` until `stop` is cancelled.
///
/// # Errors
/// The server fails.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    telemetry: Telemetry,
    token: Option<Arc<str>>,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_router(telemetry, token))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// Whether every address `listen` (HOST:PORT) resolves to is a loopback one (`false`
/// when it resolves to none): a server bound there cannot be reached from other
/// machines.
///
/// # Errors
/// `listen` is not HOST:PORT, or does not resolve.
pub fn loopback_only(listen: &str) -> std::io::Result<bool> {
    use std::net::ToSocketAddrs as _;
    let mut addrs = listen.to_socket_addrs()?.peekable();
    Ok(addrs.peek().is_some() && addrs.all(|a| a.ip().is_loopback()))
}

/// Refuses an address that is not loopback (before anything binds it): metrics served
/// without a token must not be reachable from other machines.
///
/// # Errors
/// `listen` does not resolve, or one of its addresses is not loopback.
pub fn check_loopback(listen: &str) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let loopback = loopback_only(listen)
        .with_context(|| format!("{listen}: expected HOST:PORT, e.g. 127.0.0.1:9464"))?;
    if !loopback {
        anyhow::bail!(
            "{listen} is reachable from other machines: serve metrics on a loopback address \
             (or give a token file where the command offers one)"
        );
    }
    Ok(())
}

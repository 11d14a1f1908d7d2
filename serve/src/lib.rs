//! `foya serve`: the kernel as an HTTP service (axum). Sessions, inputs, approvals,
//! attachments and a Server-Sent-Events stream per session; OpenAPI 3.1 description at
//! `/openapi.json`. Loopback by default; a bearer token is required when `--token-file`
//! is given. Recovers unfinished sessions on start; shuts down gracefully on Ctrl-C,
//! SIGTERM or SIGHUP: the server stops accepting connections, no new inputs or sessions
//! are taken (503 `shutting_down` on a connection already open), every running turn is
//! cancelled (its tools' processes killed, `turn_complete{cancelled}` committed and sent
//! to open event streams; waiting at most [`foya_actors::DEFAULT_SHUTDOWN_GRACE`]),
//! then open event streams end, connections get `CONNECTION_GRACE` to close (then they
//! are dropped, with a warning), the runtime stops and the store is flushed and closed —
//! whatever connections are still open — and the exit status is 0.
//!
//! `foya-serve` is this command as a library crate (the web view in `web/`); the binary
//! only dispatches to [`serve`].

mod args;
mod cluster;
mod error;
mod events;
mod guard;
mod openapi;
mod overview;
mod routes;
mod sessions;
mod web;

pub use args::ServeArgs;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use error::ApiError;
use foya_actors::AttachmentStore;
use foya_actors::{DEFAULT_SHUTDOWN_GRACE, Runtime};
use foya_cli::exit::{CommandError, Ended};
use foya_protocol::ApprovalMode;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The target of this command's log lines: `foya::serve`, as when it was a module of the
/// binary (users filter on it with `RUST_LOG`).
const LOG_TARGET: &str = "foya::serve";

/// Largest request body (an attachment upload or a JSON body), in bytes; a larger one is
/// answered 413 `payload_too_large`.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Defaults of sessions created over HTTP.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    pub(crate) cwd: PathBuf,
    pub(crate) approval: ApprovalMode,
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) max_steps: u32,
    /// `mcp_servers` of a session created without them (`--mcp`/`--no-mcp`).
    pub(crate) mcp_servers: Option<Vec<String>>,
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) store: foya_storage::LogStore,
    /// Where `POST /store/backup` writes its backups (`<data dir>/backups`).
    pub(crate) backups: std::path::PathBuf,
    pub(crate) attachments: Arc<AttachmentStore>,
    pub(crate) token: Option<Arc<str>>,
    pub(crate) defaults: Arc<Defaults>,
    /// Cancelled at shutdown: ends open event streams.
    pub(crate) shutdown: CancellationToken,
    /// Each session's state fold for `GET /overview` (read on from its last seq).
    pub(crate) overview: Arc<overview::Folds>,
    /// Which hosts and origins may call (`guard.rs`).
    pub(crate) guard: Arc<guard::Guard>,
    /// Traces and metrics (`GET /metrics`); `None`: off.
    pub(crate) telemetry: Option<foya_telemetry::Telemetry>,
    /// `foya node --http` on a shared store: which node serves each session
    /// (`cluster.rs`); `None`: every session here.
    pub(crate) cluster: Option<Arc<cluster::Cluster>>,
}

/// The router over `state` (every route of [`routes::route_table`]; in front of them
/// the browser guard ([`guard`]: host, origin, form content types), then bearer auth).
pub(crate) fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for (_, path, method_router) in routes::route_table() {
        router = router.route(path, method_router);
    }
    router
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this method is not allowed on this route (see the Allow header)",
            )
        })
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no_route", "no such route") })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::route,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.guard),
            guard::check,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::name_node,
        ))
        .with_state(state)
}

/// Requires `Authorization: Bearer <token>` when a token is configured, except for the
/// web view's page and static files ([`web::PUBLIC_PATHS`]: no session data in them).
async fn auth(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let public = request.method() == axum::http::Method::GET
        && web::PUBLIC_PATHS.contains(&request.uri().path());
    if let (Some(token), false) = (&state.token, public) {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given.map(str::trim) != Some(token) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid bearer token is required",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// `foya serve`: serves until SIGINT, SIGTERM or SIGHUP, then drains.
///
/// # Errors
/// A usage or configuration error (a bad `--listen`, token file or provider); the
/// server cannot start or stops with an error.
pub async fn serve(args: ServeArgs) -> Result<(), CommandError> {
    serve_inner(args).await
}

/// Refuses to serve without a bearer token on anything but a loopback address: the API
/// creates sessions and runs tools (in any approval mode the caller asks for), so an
/// unauthenticated listener must not be reachable from other machines.
///
/// # Errors
/// `listen` does not resolve to socket addresses, or one of them is not loopback and
/// there is no token.
fn check_exposure(listen: &str, has_token: bool) -> anyhow::Result<()> {
    let loopback = foya_telemetry::http::loopback_only(listen)
        .with_context(|| format!("--listen {listen}: expected HOST:PORT, e.g. 127.0.0.1:7878"))?;
    if !loopback && !has_token {
        anyhow::bail!(
            "--listen {listen} is reachable from other machines: give --token-file so that \
             only holders of the token can create sessions and run tools"
        );
    }
    Ok(())
}

async fn serve_inner(args: ServeArgs) -> Result<(), CommandError> {
    let usage = CommandError::Usage;
    let failed = |e: anyhow::Error| CommandError::from(e);
    let cwd = foya_cli::setup::working_dir(None).map_err(usage)?;
    let (model, model_name) = foya_cli::setup::model_client(&args.provider, &cwd).map_err(usage)?;
    let auto_compact =
        foya_cli::context_config::auto_compact(&cwd, args.service.compaction).map_err(usage)?;
    let token = match &args.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read token file {}", path.display()))
                .map_err(usage)?;
            let text = text.trim().to_owned();
            if text.is_empty() {
                return Err(usage(anyhow::anyhow!(
                    "the token file {} is empty",
                    path.display()
                )));
            }
            Some(Arc::<str>::from(text))
        }
        None => None,
    };
    check_exposure(&args.listen, token.is_some()).map_err(usage)?;
    // The listener first: a taken address fails before the data dir or store is touched.
    let listener = foya_cli::listen::bind(&args.listen, foya_cli::listen::Port::AnyOrZero)
        .await
        .map_err(failed)?;
    let addr = listener
        .local_addr()
        .context("no local address")
        .map_err(failed)?;
    let guard = guard::Guard::new(
        &args.listen,
        addr,
        &args.service.allowed_host,
        token.is_some(),
    )
    .map_err(usage)?;
    let dir = foya_cli::data::data_dir(args.data.data_dir.as_deref()).map_err(usage)?;
    let store: foya_storage::LogStore = match foya_cli::shared_store::url(&args.store) {
        Some(url) => foya_cli::shared_store::open(url).await.map_err(failed)?,
        None => foya_cli::data::open_store(&dir).map_err(failed)?.into(),
    };
    let attachments = foya_cli::data::attachments(&dir, &store);
    let mut config = foya_cli::setup::runtime_config(store.clone(), model).map_err(usage)?;
    config.mcp = foya_cli::mcp::load(&cwd, &args.service.mcp).map_err(usage)?;
    let hooks = foya_cli::hooks::load(&cwd).map_err(usage)?;
    foya_cli::hooks::apply(&mut config, hooks, &dir);
    config.attachments = Some(Arc::clone(&attachments));
    config.context.generate_titles = args.service.generate_titles;
    config.context.auto_compact = auto_compact;
    // Metrics on by default (`GET /metrics`); traces when OTEL_* or `[telemetry]` ask.
    let telemetry = foya_cli::setup::telemetry(true).map_err(usage)?;
    if let Some(telemetry) = &telemetry {
        config = telemetry.instrument(config);
    }
    let runtime = Runtime::start(config)
        .await
        .context("cannot start the runtime")
        .map_err(failed)?;
    if let Err(e) = runtime.recover_all().await {
        tracing::warn!(target: LOG_TARGET, error = %e, "recovery of unfinished sessions failed");
    }
    if !store.is_shared() {
        foya_cli::data::record_owner(&dir, Some(&format!("http://{addr}")));
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "http://{addr}");
        let _ = out.flush();
    }
    let shutdown = CancellationToken::new();
    let runtime = Arc::new(runtime);
    let state = AppState {
        runtime: Arc::clone(&runtime),
        store,
        backups: dir.join("backups"),
        attachments,
        token,
        defaults: Arc::new(Defaults {
            cwd,
            approval: args.service.approval,
            provider: args.provider.provider.clone(),
            model: model_name,
            max_steps: args.service.steps.max_steps,
            mcp_servers: args.service.mcp.selection(),
        }),
        shutdown: shutdown.clone(),
        overview: Arc::default(),
        guard: Arc::new(guard),
        telemetry: telemetry.clone(),
        cluster: None,
    };
    let app = router(state);
    let mut signals = foya_cli::signals::Signals::install().ok();
    // The server runs on its own task, so it stops accepting the moment it is told to,
    // while this task drains the runtime.
    let stop_accepting = CancellationToken::new();
    let mut server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(stop_accepting.clone().cancelled_owned())
            .into_future(),
    );
    let served = tokio::select! {
        () = foya_cli::signals::next(&mut signals) => None,
        served = &mut server => Some(served),
    };
    let ended = match served {
        // The server failed on its own (no signal): no connection to wait for.
        Some(served) => {
            runtime.drain(DEFAULT_SHUTDOWN_GRACE).await;
            ended(served)
        }
        None => {
            // No new connections; those open keep being served, so open event streams
            // see the cancelled turns end (the runtime refuses new work meanwhile).
            stop_accepting.cancel();
            runtime.drain(DEFAULT_SHUTDOWN_GRACE).await;
            // Then the event streams end and the connections close; one whose request
            // never completes gets `CONNECTION_GRACE` (less on another signal).
            shutdown.cancel();
            tokio::select! {
                served = &mut server => ended(served),
                () = async {
                    tokio::select! {
                        () = tokio::time::sleep(CONNECTION_GRACE) => {}
                        () = foya_cli::signals::next(&mut signals) => {}
                    }
                } => {
                    tracing::warn!(target: LOG_TARGET, "connections still open after shutdown were closed");
                    server.abort();
                    Ok(())
                }
            }
        }
    };
    shutdown.cancel();
    // Connections still open (or their tasks not yet ended) may hold the runtime, so it
    // is closed by reference: the store is flushed and closed whatever the clients do.
    runtime.close().await;
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    ended
}

/// `foya node --http`: this service over the node's runtime until `http.stop` is
/// cancelled (the node drained its turns first), forwarding requests for sessions other
/// nodes own on a shared store (`cluster.rs`).
pub fn node_http(
    http: foya_cli::node_http::NodeHttp,
) -> foya_cli::node_http::BoxFuture<'static, ()> {
    Box::pin(async move {
        if let Err(e) = node_http_inner(http).await {
            tracing::error!(target: LOG_TARGET, error = %e, "the node's HTTP service stopped");
        }
    })
}

async fn node_http_inner(http: foya_cli::node_http::NodeHttp) -> anyhow::Result<()> {
    let addr = http.listener.local_addr().context("no local address")?;
    let guard = guard::Guard::new(
        &http.listen,
        addr,
        &http.service.allowed_host,
        http.token.is_some(),
    )?;
    let cluster = match http.directory {
        Some(directory) => Some(Arc::new(cluster::Cluster::new(
            directory,
            format!("http://{addr}"),
        )?)),
        None => None,
    };
    let state = AppState {
        runtime: http.runtime,
        store: http.store,
        backups: http.data_dir.join("backups"),
        attachments: http.attachments,
        token: http.token,
        defaults: Arc::new(Defaults {
            cwd: http.cwd,
            approval: http.service.approval,
            provider: http.provider,
            model: http.model,
            max_steps: http.service.steps.max_steps,
            mcp_servers: http.service.mcp.selection(),
        }),
        shutdown: http.stop.clone(),
        overview: Arc::default(),
        guard: Arc::new(guard),
        telemetry: http.telemetry,
        cluster,
    };
    axum::serve(http.listener, router(state))
        .with_graceful_shutdown(http.stop.cancelled_owned())
        .await?;
    Ok(())
}

/// How the command ends for how the server task ended (an error is said at once).
fn ended(served: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), CommandError> {
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            eprintln!("foya: server error: {e}");
            Err(Ended::Failed.into())
        }
        Err(e) => {
            eprintln!("foya: the server stopped: {e}");
            Err(Ended::Failed.into())
        }
    }
}

/// How long open connections may take to finish after the drain before the server
/// stops waiting for them.
const CONNECTION_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::check_exposure;

    #[test]
    fn only_loopback_may_serve_without_a_token() {
        assert!(check_exposure("127.0.0.1:0", false).is_ok());
        assert!(check_exposure("[::1]:7878", false).is_ok());
        assert!(check_exposure("0.0.0.0:7878", true).is_ok());
        let error = check_exposure("0.0.0.0:7878", false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--token-file"), "{error}");
        assert!(check_exposure("192.168.1.5:80", false).is_err());
        let error = check_exposure("no-port", false).unwrap_err().to_string();
        assert!(error.contains("expected HOST:PORT"), "{error}");
    }
}

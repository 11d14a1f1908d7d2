//! Any node serves any session (`foya node --store URL --http ADDR`, docs/cluster.md):
//! each node runs this router over its own runtime, and a request for a session another
//! node owns is forwarded there.
//!
//! Which node owns a session is the shared store's answer
//! ([`foya_cli::node_http::SessionDirectory`]: the session's shard, the live lease that
//! owns it, the HTTP address that node registered). A request naming a session
//! (`/sessions/{id}/…`, and `DELETE /sessions/{id}`) is served here when this node owns
//! it, when the store has no such session, or when no node holds a lease (a store no
//! node places shards of is served wherever asked, as `foya serve` shares one); else it
//! is reverse-proxied to the owner (bodies streamed both ways, the caller's headers —
//! its bearer token included — passed on but `Host`, `Origin`, `Referer`,
//! `Sec-Fetch-*` and hop-by-hop ones, which this node's guard already checked). The
//! proxied request carries [`FORWARDED_BY`]: its receiver serves it itself (one hop at
//! most). While the session's shard has no live owner (a failover in progress), the
//! request waits up to [`OWNER_WAIT`] for one, then is answered 503 `no_owner` with
//! `Retry-After`; an owner that cannot be connected to (dead, its lease not expired yet) is
//! looked up again and the request sent there, for as long, then 502 `owner_unreachable`.
//! `GET /sessions/{id}` (the summary) and the lists read the shared
//! store here; every response says which node served it ([`SERVED_BY`]).
//!
//! An event stream (`GET /sessions/{id}/events`) proxied from the owner follows the
//! session: when it ends other than by the session's deletion (the owner died, shut
//! down, handed the shard off — its `moved` notice — dropped the session or cut the
//! stream off — `lagged`), this node finds the owner again and resumes there with
//! `Last-Event-ID` set to the last seq it forwarded, so the client sees no gap and no
//! duplicate (the old owner's `moved`, `closed` or `lagged` notice is not passed on; live
//! deltas sent meanwhile are not replayed). Only whole SSE events are forwarded.

use super::AppState;
use super::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use foya_cli::node_http::{Placement, SessionDirectory};
use foya_protocol::SessionId;
use foya_storage::EventLog as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Set on a request one node forwards to another: the receiver serves it itself.
pub(crate) const FORWARDED_BY: &str = "foya-forwarded-by";

/// Every response of a node names the node that served it.
pub(crate) const SERVED_BY: &str = "foya-node";

/// How long a request waits for a session's shard to get a live owner (a failover:
/// the dead owner's lease expires, another node claims the shard) before 503.
pub(crate) const OWNER_WAIT: Duration = Duration::from_secs(8);

/// How often the owner is looked up again while waiting.
const POLL: Duration = Duration::from_millis(200);

/// How long an event stream proxied from an owner may stay silent before this node
/// checks that its node still owns the session: a paused owner (SIGSTOP, a frozen VM)
/// keeps its connections open but sends nothing, not even keep-alives, while its lease
/// expires and another node takes the shard.
const SILENCE_CHECK: Duration = Duration::from_secs(5);

/// What `Retry-After` says on a 503 of this module, in seconds.
const RETRY_AFTER: &str = "1";

/// A node's view of the cluster.
#[derive(Debug)]
pub(crate) struct Cluster {
    directory: Arc<dyn SessionDirectory>,
    http: reqwest::Client,
    /// This node's own HTTP address (`http://HOST:PORT`): an event stream that finds
    /// its session moved here resumes through it.
    own: String,
}

impl Cluster {
    pub(crate) fn new(directory: Arc<dyn SessionDirectory>, own: String) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .no_proxy()
            .build()?;
        Ok(Self {
            directory,
            http,
            own,
        })
    }

    fn node(&self) -> &str {
        self.directory.node()
    }
}

/// Where a request goes.
enum Route {
    Local,
    Remote(String),
}

/// The session a request names, if it is one a node forwards to the session's owner.
/// A path the forwarding client would change (dot segments such as `..`, `%2e%2e` or
/// `..\` resolved) is not forwarded: it would reach another route of the owner than
/// the one it names; served here, it matches no route.
fn forwarded_session(method: &Method, path: &str) -> Option<SessionId> {
    if reqwest::Url::parse(&format!("http://node{path}")).map_or(true, |url| url.path() != path) {
        return None;
    }
    let rest = path.strip_prefix("/sessions/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    // The summary is a store read: any node answers it.
    if tail.is_empty() && method != Method::DELETE {
        return None;
    }
    // Read as the routes read it (percent-decoded, then any form a UUID parses from):
    // a session the routes would serve here is one this node forwards.
    percent_encoding::percent_decode_str(id)
        .decode_utf8()
        .ok()?
        .parse()
        .ok()
}

fn is_events(method: &Method, path: &str) -> bool {
    method == Method::GET && path.ends_with("/events")
}

fn unavailable(code: &'static str, message: String) -> Response {
    let mut response =
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER));
    response
}

/// Names this node on `response`.
fn served_by(cluster: &Cluster, mut response: Response) -> Response {
    if let Ok(value) = HeaderValue::from_str(cluster.node()) {
        response.headers_mut().insert(SERVED_BY, value);
    }
    response
}

/// The outermost middleware: a response no node named (the guard's and the bearer
/// check's refusals, a forward that found no owner) was answered by this node. A relayed
/// response keeps the owner's name.
pub(crate) async fn name_node(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    match &state.cluster {
        Some(cluster) if !response.headers().contains_key(SERVED_BY) => {
            served_by(cluster, response)
        }
        _ => response,
    }
}

/// The middleware (inside the guard and the bearer auth): serves here or forwards.
pub(crate) async fn route(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(cluster) = state.cluster.clone() else {
        return next.run(request).await;
    };
    let session = if request.headers().contains_key(FORWARDED_BY) {
        None
    } else {
        forwarded_session(request.method(), request.uri().path())
    };
    let Some(session) = session else {
        return served_by(&cluster, next.run(request).await);
    };
    match resolve(&cluster, session, &state.shutdown).await {
        Ok(Route::Local) => served_by(&cluster, next.run(request).await),
        Ok(Route::Remote(base)) => {
            if is_events(request.method(), request.uri().path()) {
                follow(state.clone(), cluster, session, base, request).await
            } else {
                let (parts, body) = request_parts(request);
                forward(&state, &cluster, session, base, &parts, body).await
            }
        }
        Err(response) => response,
    }
}

/// Where `session` is served, waiting up to [`OWNER_WAIT`] while its shard has no live
/// owner (or the store cannot be read).
async fn resolve(
    cluster: &Cluster,
    session: SessionId,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<Route, Response> {
    let deadline = Instant::now() + OWNER_WAIT;
    loop {
        let why = match cluster.directory.locate(session).await {
            Ok(Placement::Unknown | Placement::Here | Placement::Unowned { leased: false }) => {
                return Ok(Route::Local);
            }
            Ok(Placement::Owner {
                address: Some(address),
                ..
            }) => return Ok(Route::Remote(address.trim_end_matches('/').to_owned())),
            Ok(Placement::Owner {
                node,
                address: None,
            }) => {
                return Err(unavailable(
                    "no_owner_address",
                    format!(
                        "session {session} is served by node {node:?}, which registered no \
                         HTTP address (start it with --http)"
                    ),
                ));
            }
            Ok(Placement::Unowned { leased: true }) => (
                "no_owner",
                format!(
                    "no live node owns session {session} now (a failover is in progress); \
                     retry"
                ),
            ),
            Err(e) => (
                "store_unavailable",
                format!("cannot find which node serves session {session}: {e}"),
            ),
        };
        if Instant::now() + POLL > deadline || shutdown.is_cancelled() {
            return Err(unavailable(why.0, why.1));
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = shutdown.cancelled() => {}
        }
    }
}

/// What a forwarded request is made of (but its body).
struct Parts {
    method: Method,
    path_and_query: String,
    headers: HeaderMap,
}

/// The request's parts and its body, if it has one.
fn request_parts(request: Request) -> (Parts, Option<Body>) {
    let (parts, body) = request.into_parts();
    // A request without a body (no length, or 0, and not chunked) is sent without one.
    let length = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let chunked = parts.headers.contains_key(header::TRANSFER_ENCODING);
    let has_body = chunked || length.is_some_and(|n| n > 0);
    (
        Parts {
            method: parts.method,
            path_and_query: parts
                .uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            headers: parts.headers,
        },
        has_body.then_some(body),
    )
}

/// Headers not passed on: hop-by-hop ones, and those this node's guard checked
/// (the receiver checks its own `Host`).
fn passed_on(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "host"
            | "origin"
            | "referer"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | FORWARDED_BY
    ) && !name.as_str().starts_with("sec-fetch-")
}

/// The headers of `headers` passed on: [`passed_on`]'s, less those the message's own
/// `Connection` header names (hop-by-hop by declaration: RFC 9110, 7.6.1).
fn passed<'a>(
    headers: &'a HeaderMap,
) -> impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)> + 'a {
    let declared: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|token| token.trim().to_ascii_lowercase())
        .filter(|token| !token.is_empty())
        .collect();
    headers
        .iter()
        .filter(move |(name, _)| passed_on(name) && !declared.iter().any(|d| d == name.as_str()))
}

/// Sends `parts` to the node at `base` (its body, if any, streamed); `last_event_id`
/// replaces the caller's `Last-Event-ID`.
async fn send(
    cluster: &Cluster,
    base: &str,
    parts: &Parts,
    last_event_id: Option<u64>,
) -> Result<reqwest::Response, reqwest::Error> {
    send_body(cluster, base, parts, None, last_event_id).await
}

async fn send_body(
    cluster: &Cluster,
    base: &str,
    parts: &Parts,
    body: Option<Body>,
    last_event_id: Option<u64>,
) -> Result<reqwest::Response, reqwest::Error> {
    let url = format!("{base}{}", parts.path_and_query);
    let mut builder = cluster.http.request(parts.method.clone(), &url);
    for (name, value) in passed(&parts.headers) {
        if !(last_event_id.is_some() && name.as_str() == "last-event-id") {
            builder = builder.header(name, value);
        }
    }
    builder = builder.header(FORWARDED_BY, cluster.node());
    if let Some(last) = last_event_id {
        builder = builder.header("last-event-id", last.to_string());
    }
    if let Some(body) = body {
        builder = builder.body(reqwest::Body::wrap_stream(body.into_data_stream()));
    }
    builder.send().await
}

/// 502 `owner_unreachable` (with `Retry-After`): the owner at `base` did not answer.
fn unreachable(base: &str, e: &reqwest::Error) -> Response {
    let mut response = ApiError::new(
        StatusCode::BAD_GATEWAY,
        "owner_unreachable",
        format!("the node serving this session at {base} cannot be reached: {e}"),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER));
    response
}

/// Bodies of at most this many bytes (with a `Content-Length`) are kept while forwarded,
/// so that a request the owner could not be reached for is sent again; longer ones are
/// streamed once.
const KEPT_BODY: usize = 1024 * 1024;

/// A forwarded request's body.
enum Outgoing {
    None,
    Kept(Bytes),
    Streamed(Option<Body>),
}

/// Forwards a request to the owner at `base`. When the owner cannot be connected to (it
/// died and its lease has not expired yet, or it just handed the shard off: the request
/// never reached it), the owner is looked up again and the request sent there, for up
/// to [`OWNER_WAIT`] (a streamed body is sent once).
async fn forward(
    state: &AppState,
    cluster: &Cluster,
    session: SessionId,
    mut base: String,
    parts: &Parts,
    body: Option<Body>,
) -> Response {
    let length = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let mut outgoing = match body {
        None => Outgoing::None,
        Some(body) if length.is_some_and(|n| n <= KEPT_BODY) => {
            match axum::body::to_bytes(body, KEPT_BODY).await {
                Ok(bytes) => Outgoing::Kept(bytes),
                Err(e) => {
                    return ApiError::bad_request(format!("cannot read the body: {e}"))
                        .into_response();
                }
            }
        }
        Some(body) => Outgoing::Streamed(Some(body)),
    };
    let deadline = Instant::now() + OWNER_WAIT;
    loop {
        let (body, again) = match &mut outgoing {
            Outgoing::None => (None, true),
            Outgoing::Kept(bytes) => (Some(Body::from(bytes.clone())), true),
            Outgoing::Streamed(body) => (body.take(), false),
        };
        let sent = send_body(cluster, &base, parts, body, None);
        let e = match unless_moved(cluster, session, &base, sent).await {
            Some(Ok(upstream)) => return relay(upstream),
            Some(Err(e)) => e,
            None => return moved_away(&base),
        };
        if !(again && e.is_connect()) || Instant::now() + POLL > deadline {
            return unreachable(&base, &e);
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = state.shutdown.cancelled() => return unreachable(&base, &e),
        }
        base = match resolve(cluster, session, &state.shutdown).await {
            Ok(Route::Local) => cluster.own.clone(),
            Ok(Route::Remote(next)) => next,
            Err(response) => return response,
        };
    }
}

/// The owner's response, its body streamed.
fn relay(upstream: reqwest::Response) -> Response {
    let status = upstream.status();
    let mut headers = HeaderMap::new();
    for (name, value) in passed(upstream.headers()) {
        headers.append(name.clone(), value.clone());
    }
    let mut response = Response::new(Body::from_stream(upstream.bytes_stream()));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// Forwards the event stream of `session` from the node at `base`, following the
/// session when that stream ends (see the module docs).
async fn follow(
    state: AppState,
    cluster: Arc<Cluster>,
    session: SessionId,
    base: String,
    request: Request,
) -> Response {
    let (parts, body) = request_parts(request);
    let sent = send_body(&cluster, &base, &parts, body, None);
    let (base, upstream) = match unless_moved(&cluster, session, &base, sent).await {
        Some(Ok(upstream)) => (base, upstream),
        // The owner did not answer: wherever the session is served next.
        Some(Err(e)) => match reconnect(&state, &cluster, session, &parts, None).await {
            Some(next) => next,
            None => return unreachable(&base, &e),
        },
        None => match reconnect(&state, &cluster, session, &parts, None).await {
            Some(next) => next,
            None => return moved_away(&base),
        },
    };
    // Refused by a node whose shard is moving (503 `not_owner` while it hands the
    // session off): wherever the session is served next, as a resume would.
    let (base, upstream) = if upstream.status() == StatusCode::SERVICE_UNAVAILABLE {
        match reconnect(&state, &cluster, session, &parts, None).await {
            Some(next) => next,
            None => return relay(upstream),
        }
    } else {
        (base, upstream)
    };
    let is_stream = upstream
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !upstream.status().is_success() || !is_stream {
        return relay(upstream);
    }
    let mut response = relay_head(&upstream);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(pump(state, cluster, session, parts, (base, upstream), tx));
    *response.body_mut() = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, std::convert::Infallible>(chunk), rx))
    }));
    response
}

/// The status and headers of `upstream`, with an empty body.
fn relay_head(upstream: &reqwest::Response) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = upstream.status();
    for (name, value) in passed(upstream.headers()) {
        if name != header::CONTENT_LENGTH {
            response.headers_mut().append(name.clone(), value.clone());
        }
    }
    response
}

/// How one upstream stream ended.
enum Ended {
    /// The client went away, or this node is stopping: the stream ends.
    Done,
    /// The upstream ended (or sent `closed`, held here): follow the session.
    Follow { closed: Option<Bytes> },
}

/// Whether the node at `base` still serves `session` (`true` when the store cannot
/// tell: the stream is kept).
async fn still_served_at(cluster: &Cluster, session: SessionId, base: &str) -> bool {
    match cluster.directory.locate(session).await {
        Ok(Placement::Owner {
            address: Some(address),
            ..
        }) => address.trim_end_matches('/') == base,
        Ok(Placement::Unknown | Placement::Here | Placement::Unowned { leased: false }) => {
            base == cluster.own
        }
        Ok(Placement::Owner { address: None, .. } | Placement::Unowned { leased: true }) => false,
        Err(_) => true,
    }
}

/// `request`'s outcome, or `None` when the node at `base` stops serving `session` before
/// it completes (checked every [`SILENCE_CHECK`]): a paused owner accepts connections
/// (the kernel does) but never answers.
async fn unless_moved<T>(
    cluster: &Cluster,
    session: SessionId,
    base: &str,
    request: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(request);
    loop {
        match tokio::time::timeout(SILENCE_CHECK, &mut request).await {
            Ok(out) => return Some(out),
            Err(_) if still_served_at(cluster, session, base).await => {}
            Err(_) => return None,
        }
    }
}

/// 502 `owner_unreachable` (with `Retry-After`): the node at `base` did not answer before
/// the session moved away from it.
fn moved_away(base: &str) -> Response {
    let mut response = ApiError::new(
        StatusCode::BAD_GATEWAY,
        "owner_unreachable",
        format!(
            "the node at {base} did not answer and no longer serves this session; retry \
             (an input with the same input_id)"
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER));
    response
}

/// Passes whole SSE events from `upstream` (the node at `base`) to `tx`, remembering the
/// last event id. An upstream silent for [`SILENCE_CHECK`] whose node no longer serves
/// the session is left (the session followed).
async fn relay_events(
    cluster: &Cluster,
    session: SessionId,
    (base, mut upstream): (String, reqwest::Response),
    tx: &tokio::sync::mpsc::Sender<Bytes>,
    last: &mut Option<u64>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Ended {
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            chunk = tokio::time::timeout(SILENCE_CHECK, upstream.chunk()) => match chunk {
                Ok(chunk) => chunk,
                Err(_) if still_served_at(cluster, session, &base).await => continue,
                Err(_) => return Ended::Follow { closed: None },
            },
            () = shutdown.cancelled() => return Ended::Done,
            () = tx.closed() => return Ended::Done,
        };
        let chunk = match chunk {
            Ok(Some(chunk)) => chunk,
            Ok(None) | Err(_) => return Ended::Follow { closed: None },
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = find_blank_line(&buffer) {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let (id, notice) = inspect(&block);
            match notice.as_deref() {
                Some("closed") => {
                    return Ended::Follow {
                        closed: Some(Bytes::from(block)),
                    };
                }
                // The owner handed the session off (`moved`), or cut this stream off
                // (`lagged`: it dropped the session — its shard fenced, its lease lost,
                // a handoff that outlasted its grace — or this node read too slowly):
                // resumed from the last seq forwarded, wherever the session is served,
                // as the client would after either notice (not passed on).
                Some("moved" | "lagged") => return Ended::Follow { closed: None },
                _ => {}
            }
            if tx.send(Bytes::from(block)).await.is_err() {
                return Ended::Done;
            }
            if let Some(id) = id {
                *last = Some(id);
            }
        }
    }
}

/// The end of the first SSE event in `buffer` (the index of its blank line's `\n\n`).
fn find_blank_line(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|w| w == b"\n\n")
}

/// An SSE event's id and, for a notice, its type.
fn inspect(block: &[u8]) -> (Option<u64>, Option<String>) {
    let text = String::from_utf8_lossy(block);
    let (mut id, mut event, mut data) = (None, None, String::new());
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("event:") {
            event = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    let notice = (event.as_deref() == Some("notice"))
        .then(|| serde_json::from_str::<serde_json::Value>(&data).ok())
        .flatten()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned));
    (id, notice)
}

/// Forwards the session's events to `tx` across moves of its owner.
async fn pump(
    state: AppState,
    cluster: Arc<Cluster>,
    session: SessionId,
    parts: Parts,
    mut upstream: (String, reqwest::Response),
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let mut last: Option<u64> = None;
    loop {
        let ended = relay_events(&cluster, session, upstream, &tx, &mut last, &state.shutdown);
        let closed = match ended.await {
            Ended::Done => return,
            Ended::Follow { closed } => closed,
        };
        // A deleted session's stream ends (its `closed` notice passed on).
        if let Ok(Some(summary)) = state.store.session(session).await
            && summary.deleted
        {
            if let Some(closed) = closed {
                let _ = tx.send(closed).await;
            }
            return;
        }
        upstream = match reconnect(&state, &cluster, session, &parts, last).await {
            Some(upstream) => upstream,
            None => return,
        };
    }
}

/// The session's event stream from wherever it is served now (this node through its
/// own address), from after `last`, and that node's address; `None` when no owner
/// answers within [`OWNER_WAIT`] (the stream then ends: the client reconnects with
/// `Last-Event-ID`).
async fn reconnect(
    state: &AppState,
    cluster: &Cluster,
    session: SessionId,
    parts: &Parts,
    last: Option<u64>,
) -> Option<(String, reqwest::Response)> {
    let deadline = Instant::now() + OWNER_WAIT;
    loop {
        if state.shutdown.is_cancelled() {
            return None;
        }
        let base = match resolve(cluster, session, &state.shutdown).await {
            Ok(Route::Local) => Some(cluster.own.clone()),
            Ok(Route::Remote(base)) => Some(base),
            Err(_) => None,
        };
        if let Some(base) = base
            && let Some(Ok(upstream)) =
                unless_moved(cluster, session, &base, send(cluster, &base, parts, last)).await
        {
            if upstream.status().is_success() {
                return Some((base, upstream));
            }
            tracing::debug!(target: super::LOG_TARGET, %session, status = %upstream.status(), "resuming an event stream was refused; retrying");
        }
        if Instant::now() + POLL > deadline {
            return None;
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = state.shutdown.cancelled() => return None,
        }
    }
}

/// Fills each summary's `node`: the live node that owns it now (left out while none
/// does). Damage is local: a directory that cannot be read leaves them as they are.
pub(crate) async fn annotate(state: &AppState, sessions: &mut [foya_protocol::SessionSummary]) {
    let Some(cluster) = &state.cluster else {
        return;
    };
    let ids: Vec<SessionId> = sessions.iter().map(|s| s.id).collect();
    match cluster.directory.owners(&ids).await {
        Ok(owners) => {
            for summary in sessions {
                summary.node = owners.get(&summary.id).cloned();
            }
        }
        Err(e) => {
            tracing::warn!(target: super::LOG_TARGET, error = %e, "cannot read which node owns each session");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn headers_the_connection_header_names_are_not_passed_on() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONNECTION,
            "keep-alive, X-Secret-Hop".parse().unwrap(),
        );
        headers.insert("x-secret-hop", "1".parse().unwrap());
        headers.insert("x-kept", "2".parse().unwrap());
        headers.insert(header::HOST, "evil.example".parse().unwrap());
        headers.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        let names: Vec<&str> = passed(&headers).map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["x-kept", "authorization"]);
    }

    #[test]
    fn only_routes_naming_a_session_are_forwarded() {
        let id = SessionId::new();
        let path = |tail: &str| format!("/sessions/{id}{tail}");
        assert_eq!(forwarded_session(&Method::POST, &path("/inputs")), Some(id));
        assert_eq!(forwarded_session(&Method::GET, &path("/events")), Some(id));
        assert_eq!(forwarded_session(&Method::DELETE, &path("")), Some(id));
        assert_eq!(forwarded_session(&Method::GET, &path("")), None);
        assert_eq!(forwarded_session(&Method::GET, "/sessions"), None);
        assert_eq!(
            forwarded_session(&Method::POST, "/sessions/nope/inputs"),
            None
        );
        // Other spellings of the id the routes decode to the same session.
        let text = id.to_string();
        let hex: String = text.bytes().map(|b| format!("%{b:02X}")).collect();
        for spelled in [
            format!("%{:02x}{}", text.as_bytes()[0], &text[1..]),
            hex,
            format!("%7B{text}%7D"),
            text.to_uppercase(),
        ] {
            assert_eq!(
                forwarded_session(&Method::POST, &format!("/sessions/{spelled}/inputs")),
                Some(id),
                "{spelled}"
            );
        }
        for tail in ["/../../metrics", "/%2e%2E/x", "/..\\x", "/./inputs"] {
            assert_eq!(forwarded_session(&Method::GET, &path(tail)), None, "{tail}");
        }
    }

    #[test]
    fn whole_events_are_inspected_for_their_id_and_notice() {
        let event = b"event: event\nid: 7\ndata: {}\n\n";
        assert_eq!(find_blank_line(event), Some(event.len() - 2));
        assert_eq!(inspect(event), (Some(7), None));
        let closed = b"event: notice\ndata: {\"type\":\"closed\",\"reason\":\"x\"}\n\n";
        assert_eq!(inspect(closed), (None, Some("closed".to_owned())));
        assert_eq!(find_blank_line(b"event: event\nid: 8\n"), None);
    }
}

//! The HTTP routes of `foya serve`: one table ([`route_table`]) that both builds the
//! router and is checked against `openapi.json`, and the JSON handlers. The SSE event
//! stream lives in `events.rs`, the session overview in `overview.rs`, the session
//! lookups they share in `sessions.rs`, the web view's files in `web/`.

use super::AppState;
use super::error::ApiError;
use super::sessions::{handle, readable_page, session_id};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::{FromRequest as _, Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use foya_protocol::{
    ApprovalDecision, ApprovalMode, ApprovalRequestId, EventKind, Input, InputId, SessionConfig,
};
use foya_storage::EventLog as _;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Every route: (method, path in OpenAPI template syntax, handler).
pub(crate) fn route_table() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (
            Method::POST,
            "/sessions",
            on(MethodFilter::POST, create_session),
        ),
        (
            Method::GET,
            "/sessions",
            on(MethodFilter::GET, list_sessions),
        ),
        (
            Method::GET,
            "/sessions/{id}",
            on(MethodFilter::GET, get_session),
        ),
        (
            Method::DELETE,
            "/sessions/{id}",
            on(MethodFilter::DELETE, delete_session),
        ),
        (
            Method::POST,
            "/sessions/{id}/inputs",
            on(MethodFilter::POST, submit_input),
        ),
        (
            Method::POST,
            "/store/backup",
            on(MethodFilter::POST, backup_store),
        ),
        (
            Method::POST,
            "/sessions/{id}/cancel",
            on(MethodFilter::POST, cancel),
        ),
        (
            Method::PUT,
            "/sessions/{id}/title",
            on(MethodFilter::PUT, set_title),
        ),
        (
            Method::POST,
            "/sessions/{id}/approvals/{request_id}",
            on(MethodFilter::POST, decide_approval),
        ),
        (
            Method::GET,
            "/sessions/{id}/events",
            on(MethodFilter::GET, super::events::events),
        ),
        (
            Method::POST,
            "/attachments",
            on(MethodFilter::POST, upload_attachment),
        ),
        (Method::GET, "/openapi.json", on(MethodFilter::GET, openapi)),
        (Method::GET, "/metrics", on(MethodFilter::GET, metrics)),
        (
            Method::GET,
            "/overview",
            on(MethodFilter::GET, super::overview::overview),
        ),
        (Method::GET, "/", on(MethodFilter::GET, super::web::index)),
        (
            Method::GET,
            "/web/app.js",
            on(MethodFilter::GET, super::web::app_js),
        ),
        (
            Method::GET,
            "/web/transcript.js",
            on(MethodFilter::GET, super::web::transcript_js),
        ),
        (
            Method::GET,
            "/web/text.js",
            on(MethodFilter::GET, super::web::text_js),
        ),
        (
            Method::GET,
            "/web/app.css",
            on(MethodFilter::GET, super::web::app_css),
        ),
    ]
}

/// Body of `POST /sessions`; every field optional (an empty body is `{}`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    cwd: Option<std::path::PathBuf>,
    approval_mode: Option<ApprovalMode>,
    model: Option<String>,
    title: Option<String>,
    max_steps: Option<u32>,
    /// `false`: this session is never compacted automatically (persisted with it).
    auto_compact: Option<bool>,
    /// The MCP servers the session uses (configured names); default: the server's.
    mcp_servers: Option<Vec<String>>,
}

/// A JSON body in which every field is optional: zero bytes (whatever the content type)
/// count as `T::default()` (`{}`); any other body is read as axum's `Json` extractor
/// reads it, with its content-type check, parse errors and body limit (400, 413).
async fn optional_json<T: DeserializeOwned + Default>(request: Request) -> Result<T, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = Bytes::from_request(Request::from_parts(parts.clone(), body), &()).await?;
    if bytes.is_empty() {
        return Ok(T::default());
    }
    let request = Request::from_parts(parts, axum::body::Body::from(bytes));
    let Json(value) = Json::<T>::from_request(request, &()).await?;
    Ok(value)
}

/// Refuses a title that is empty or only whitespace before a session is created for it
/// (400 `empty_title`, as `SessionHandle::set_title` answers).
fn check_title(title: &str) -> Result<(), ApiError> {
    match foya_actors::context::normalize_title(title) {
        Some(_) => Ok(()),
        None => Err(foya_actors::RuntimeError::EmptyTitle.into()),
    }
}

async fn create_session(
    State(state): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    let body: CreateSession = optional_json(request).await?;
    if body.max_steps == Some(0) {
        return Err(ApiError::bad_request("max_steps must be at least 1"));
    }
    if body.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(ApiError::bad_request(
            "model is empty (leave it out for the server's model)",
        ));
    }
    if let Some(title) = &body.title {
        check_title(title)?;
    }
    let cwd = body.cwd.unwrap_or_else(|| state.defaults.cwd.clone());
    let cwd = std::fs::canonicalize(&cwd).map_err(|_| {
        ApiError::bad_request(format!(
            "working directory {} does not exist",
            cwd.display()
        ))
    })?;
    if !cwd.is_dir() {
        return Err(ApiError::bad_request(format!(
            "working directory {} is not a directory",
            cwd.display()
        )));
    }
    let mut config = SessionConfig::new(cwd);
    config.approval_mode = body.approval_mode.unwrap_or(state.defaults.approval);
    config.provider.clone_from(&state.defaults.provider);
    config.model = body.model.unwrap_or_else(|| state.defaults.model.clone());
    config.max_steps = body.max_steps.or(Some(state.defaults.max_steps));
    config.auto_compact = body.auto_compact.unwrap_or(true);
    if let Some(names) = &body.mcp_servers {
        let known = state.runtime.mcp().map(|m| m.names()).unwrap_or_default();
        if let Some(unknown) = names.iter().find(|n| !known.contains(n)) {
            return Err(ApiError::bad_request(format!(
                "mcp_servers: no MCP server `{unknown}` is configured (configured: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        }
    }
    config.mcp_servers = body
        .mcp_servers
        .or_else(|| state.defaults.mcp_servers.clone());
    let session = state.runtime.create_session(config).await?;
    if let Some(title) = body.title {
        session.set_title(title).await?;
    }
    Ok((StatusCode::CREATED, Json(json!({"id": session.id()}))).into_response())
}

/// `POST /store/backup`: a consistent copy of the store (one read transaction, while the
/// runtime goes on) written to `<data dir>/backups/foya-<unix ms>.redb`; 201 with its
/// path and counts.
async fn backup_store(State(state): State<AppState>) -> Result<Response, ApiError> {
    let Some(store) = state.store.as_redb().cloned() else {
        return Err(ApiError::bad_request(
            "POST /store/backup copies the embedded redb store; this server uses a shared \
             (PostgreSQL) store: back it up with the database's own tools (pg_dump, a standby)",
        ));
    };
    let dir = state.backups.clone();
    let written = tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let path = dir.join(format!("foya-{now}.redb"));
        store
            .backup(&path)
            .map(|report| (path, report))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    let (path, report) = written;
    let body = json!({"path": path, "sessions": report.sessions, "events": report.events});
    Ok((axum::http::StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /sessions`: a page of summaries, most recently updated first, and the cursor
/// of the next page (`next`: null on the last); `live=true`: the live sessions.
async fn list_sessions(
    State(state): State<AppState>,
    query: Result<
        axum::extract::Query<super::sessions::PageQuery>,
        axum::extract::rejection::QueryRejection,
    >,
) -> Result<Response, ApiError> {
    let request = super::sessions::PageQuery::parse(query)?;
    let (sessions, next) = if request.live {
        (
            super::sessions::live_sessions(&state, request.limit).await?,
            None,
        )
    } else {
        readable_page(&state, request.after, request.limit).await?
    };
    Ok(Json(json!({"sessions": sessions, "next": next})).into_response())
}

async fn get_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let sid = session_id(&id)?;
    match state.store.session(sid).await.map_err(ApiError::internal)? {
        Some(summary) => Ok(Json(summary).into_response()),
        None => Err(ApiError::not_found(
            "session_not_found",
            format!("session {sid} not found"),
        )),
    }
}

async fn delete_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    handle(&state, &id).await?.delete().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Body of `POST /sessions/{id}/inputs`: the fields of a `foya_protocol::Input` plus an
/// optional client-chosen `input_id` (a repeated id is applied once). Unknown fields are
/// refused (a misspelt `images` would otherwise drop the images silently), which
/// `#[serde(flatten)]` of `Input` cannot do, hence the fields spelt out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitInput {
    #[serde(default)]
    input_id: Option<InputId>,
    #[serde(default)]
    text: String,
    #[serde(default)]
    command: Option<foya_protocol::CommandInvocation>,
    #[serde(default)]
    images: Vec<foya_protocol::AttachmentRef>,
    #[serde(default)]
    selected_elements: Vec<foya_protocol::PageElement>,
}

/// `GET /metrics`: the telemetry's metrics (behind the same guard and auth as every
/// route).
async fn metrics(State(state): State<AppState>) -> Response {
    foya_telemetry::http::metrics_response(state.telemetry.as_ref()).await
}

async fn submit_input(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Json<SubmitInput>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(SubmitInput {
        input_id,
        text,
        command,
        images,
        selected_elements,
    }) = body?;
    let mut input = Input {
        text,
        command,
        images,
        selected_elements,
    };
    let session = handle(&state, &id).await?;
    for image in &mut input.images {
        match state.attachments.get(&image.id) {
            Ok(Some(a)) => image.media_type = Some(a.media_type),
            Ok(None) | Err(_) => {
                return Err(ApiError::bad_request(format!(
                    "unknown attachment {:?}",
                    image.id
                )));
            }
        }
    }
    let before = state
        .store
        .last_seq(session.id())
        .await
        .map_err(ApiError::internal)?
        .map_or(foya_protocol::Seq::FIRST, foya_protocol::Seq::next);
    let input_id = input_id.unwrap_or_default();
    // A caller's trace: the turn of this input continues it (registered before the
    // submit, so the turn finds it however soon it starts).
    if let (Some(telemetry), Some(traceparent)) = (
        &state.telemetry,
        headers.get("traceparent").and_then(|v| v.to_str().ok()),
    ) {
        telemetry.continue_trace(input_id, traceparent);
    }
    let input_id = session.submit_with_id(input_id, input).await?;
    let since = state
        .store
        .read_from(session.id(), before)
        .await
        .map_err(ApiError::internal)?;
    let queued = if since.iter().any(|e| names_input(e, input_id)) {
        since.iter().any(|e| queues_input(e, input_id))
    } else {
        // Nothing of it written by this request: an input sent again under its id (a
        // client that lost the first answer) is answered as the first time.
        state
            .store
            .read_from(session.id(), foya_protocol::Seq::FIRST)
            .await
            .map_err(ApiError::internal)?
            .iter()
            .any(|e| queues_input(e, input_id))
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"input_id": input_id, "queued": queued})),
    )
        .into_response())
}

async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    handle(&state, &id).await?.cancel().await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetTitle {
    title: String,
}

async fn set_title(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Json<SetTitle>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    handle(&state, &id).await?.set_title(body.title).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    decision: ApprovalDecision,
    #[serde(default)]
    message: Option<String>,
}

async fn decide_approval(
    State(state): State<AppState>,
    Path((id, request_id)): Path<(String, String)>,
    body: Result<Json<Decide>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let session = handle(&state, &id).await?;
    let request_id: ApprovalRequestId = request_id.parse().map_err(|_| {
        ApiError::not_found(
            "approval_not_found",
            format!("no pending approval request {request_id}"),
        )
    })?;
    session
        .decide_approval(request_id, body.decision, body.message)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn upload_attachment(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_owned())
        .unwrap_or_default();
    if body.is_empty() {
        return Err(ApiError::bad_request("the attachment is empty"));
    }
    let store = std::sync::Arc::clone(&state.attachments);
    let mt = media_type.clone();
    let id = tokio::task::spawn_blocking(move || store.put(&body, &mt))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| {
            use foya_actors::AttachmentError;
            match e {
                AttachmentError::InvalidMediaType(_) => {
                    ApiError::bad_request(format!("{e} (send the Content-Type of the image)"))
                }
                AttachmentError::UnsupportedMediaType(_) => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    e.to_string(),
                ),
                AttachmentError::ContentMismatch { .. } | AttachmentError::InvalidImage { .. } => {
                    ApiError::new(StatusCode::BAD_REQUEST, "invalid_image", e.to_string())
                }
                other => ApiError::internal(other),
            }
        })?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": id, "media_type": media_type.to_ascii_lowercase()})),
    )
        .into_response())
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::DOCUMENT,
    )
        .into_response()
}

/// Whether `event` queued input `input`.
fn queues_input(event: &foya_protocol::Event, input: foya_protocol::InputId) -> bool {
    matches!(&event.kind, EventKind::InputQueued { input_id, .. } if *input_id == input)
}

/// Whether `event` took input `input` (queued it, or started it).
fn names_input(event: &foya_protocol::Event, input: foya_protocol::InputId) -> bool {
    queues_input(event, input)
        || matches!(&event.kind, EventKind::UserMessage { input_id, .. } if *input_id == input)
}

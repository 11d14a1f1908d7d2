//! The sessions a handler names: a path's session id parsed, a live session's handle,
//! and the pages of summaries that can be read (shared by the JSON routes and the
//! overview): the paging parameters, the cursor's text form.

use super::AppState;
use super::error::ApiError;
use axum::http::StatusCode;
use foya_actors::SessionHandle;
use foya_protocol::{SessionId, SessionSummary};
use foya_storage::{Cursor, EventLog as _, Page};

/// Parses a session id from the path (an unparsable id names no session: 404).
pub(crate) fn session_id(text: &str) -> Result<SessionId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::not_found("session_not_found", format!("session {text} not found")))
}

/// A handle to a live session (loaded from the log if needed).
pub(crate) async fn handle(state: &AppState, id: &str) -> Result<SessionHandle, ApiError> {
    Ok(state.runtime.session(session_id(id)?).await?)
}

/// Sessions in a page when the request names no `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` a request may name.
pub(crate) const MAX_LIMIT: usize = 1000;

/// The query of a paged listing (`GET /sessions`, `GET /overview`): each parameter as
/// text, parsed by [`PageQuery::parse`] so that a bad one is a clear 400.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct PageQuery {
    limit: Option<String>,
    cursor: Option<String>,
    live: Option<String>,
}

/// What a paged listing asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageRequest {
    /// Start after this session (`None`: the most recently updated first).
    pub(crate) after: Option<Cursor>,
    /// At most this many sessions.
    pub(crate) limit: usize,
    /// Only the live sessions (`GET /overview?live=true`).
    pub(crate) live: bool,
}

impl PageQuery {
    /// The request, or a 400 naming the bad parameter.
    pub(crate) fn parse(
        query: Result<axum::extract::Query<PageQuery>, axum::extract::rejection::QueryRejection>,
    ) -> Result<PageRequest, ApiError> {
        let axum::extract::Query(query) =
            query.map_err(|e| ApiError::bad_request(e.body_text()))?;
        let limit = match query.limit.as_deref() {
            None => DEFAULT_LIMIT,
            Some(text) => match text.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "bad_limit",
                        format!("limit must be a whole number from 1 to {MAX_LIMIT}, not {text:?}"),
                    ));
                }
            },
        };
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let live = match query.live.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(text) => {
                return Err(ApiError::bad_request(format!(
                    "live must be true or false, not {text:?}"
                )));
            }
        };
        Ok(PageRequest { after, limit, live })
    }
}

/// A cursor as the listing hands it out: `<updated_at_ms>-<session id>` (opaque to
/// clients: they pass back what `next` said).
pub(crate) fn encode_cursor(cursor: Cursor) -> String {
    format!("{}-{}", cursor.updated_at_ms, cursor.id)
}

/// A cursor from a request, or a 400 `bad_cursor`.
pub(crate) fn decode_cursor(text: &str) -> Result<Cursor, ApiError> {
    let parsed = text.split_once('-').and_then(|(at, id)| {
        Some(Cursor {
            updated_at_ms: at.parse().ok()?,
            id: id.parse().ok()?,
        })
    });
    parsed.ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_cursor",
            format!(
                "cursor {text:?} is not one this server handed out: pass the `next` of the \
                 previous page unchanged, or no cursor for the first page"
            ),
        )
    })
}

/// A page of the sessions whose summary can be read, most recently updated first, and
/// the cursor of the next page (`None`: this is the last). Damage is local: a summary
/// that cannot be read is left out and logged, not a failure of the page (`foya store
/// check` names it).
pub(crate) async fn readable_page(
    state: &AppState,
    after: Option<Cursor>,
    limit: usize,
) -> Result<(Vec<SessionSummary>, Option<String>), ApiError> {
    // One more than asked: whether a next page exists.
    let page = Page {
        after,
        limit: limit.saturating_add(1),
    };
    let mut sessions = match state.store.as_redb() {
        // The redb store's reads are synchronous: off the async threads.
        Some(store) => {
            let store = store.clone();
            let survey = tokio::task::spawn_blocking(move || {
                store.survey_page(page).or_else(|e| {
                    // A listing index that cannot be read (a damaged file): every
                    // summary instead, slow but whole.
                    tracing::warn!(target: super::LOG_TARGET, error = %e, "the listing index cannot be read; surveying every session");
                    store.survey().map(|mut survey| {
                        survey.sessions.retain(|s| page.after.is_none_or(|c| c.precedes(s)));
                        survey.sessions.truncate(page.limit);
                        survey
                    })
                })
            })
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)?;
            for unreadable in &survey.unreadable {
                tracing::warn!(target: super::LOG_TARGET, session = ?unreadable.session, reason = %unreadable.reason, "a session cannot be listed");
            }
            survey.sessions
        }
        None => state
            .store
            .list_sessions(page)
            .await
            .map_err(ApiError::internal)?,
    };
    let next = if sessions.len() > limit {
        sessions.truncate(limit);
        sessions.last().map(|s| encode_cursor(Cursor::after(s)))
    } else {
        None
    };
    // On a cluster node: each session's current owner.
    super::cluster::annotate(state, &mut sessions).await;
    Ok((sessions, next))
}

/// The live sessions — a turn running, waiting for an approval, or inputs queued (the
/// recovery index) —, at most `limit`, most recently updated first.
pub(crate) async fn live_sessions(
    state: &AppState,
    limit: usize,
) -> Result<Vec<SessionSummary>, ApiError> {
    let ids = state
        .store
        .pending_sessions()
        .await
        .map_err(ApiError::internal)?;
    let mut sessions = Vec::with_capacity(ids.len().min(MAX_LIMIT));
    for id in ids {
        match state.store.session(id).await {
            Ok(Some(summary)) => sessions.push(summary),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(target: super::LOG_TARGET, session = %id, error = %e, "a live session cannot be listed");
            }
        }
    }
    sessions.sort_by_key(|s| std::cmp::Reverse((s.updated_at_ms, s.id)));
    sessions.truncate(limit);
    super::cluster::annotate(state, &mut sessions).await;
    Ok(sessions)
}

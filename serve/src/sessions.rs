//! The sessions a handler names: a path's session id parsed, a live session's handle,
//! and the summaries that can be read (shared by the JSON routes and the overview).

use super::AppState;
use super::error::ApiError;
use foya_actors::SessionHandle;
use foya_protocol::SessionId;
use foya_storage::EventLog as _;

/// Parses a session id from the path (an unparsable id names no session: 404).
pub(crate) fn session_id(text: &str) -> Result<SessionId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::not_found("session_not_found", format!("session {text} not found")))
}

/// A handle to a live session (loaded from the log if needed).
pub(crate) async fn handle(state: &AppState, id: &str) -> Result<SessionHandle, ApiError> {
    Ok(state.runtime.session(session_id(id)?).await?)
}

/// Every session whose summary can be read, most recently updated first. Damage is
/// local: a summary (or a part of the table) that cannot be read is left out and logged,
/// not a failure of the whole list (`foya store check` names it).
pub(crate) async fn readable_sessions(
    state: &AppState,
) -> Result<Vec<foya_protocol::SessionSummary>, ApiError> {
    let mut sessions = match state.store.as_redb() {
        Some(store) => readable_redb(store),
        None => state
            .store
            .list_sessions(foya_storage::Page::ALL)
            .await
            .map_err(ApiError::internal),
    }?;
    super::cluster::annotate(state, &mut sessions).await;
    Ok(sessions)
}

/// [`readable_sessions`] of the redb store (a survey: damage is local).
pub(crate) fn readable_redb(
    store: &foya_storage::Store,
) -> Result<Vec<foya_protocol::SessionSummary>, ApiError> {
    let survey = store.survey().map_err(ApiError::internal)?;
    for unreadable in &survey.unreadable {
        tracing::warn!(target: super::LOG_TARGET, session = ?unreadable.session, reason = %unreadable.reason, "a session cannot be listed");
    }
    Ok(survey.sessions)
}

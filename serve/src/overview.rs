//! `GET /overview`: a page of sessions (most recently updated first, as `GET /sessions`
//! pages them; `live=true`: the live ones) with what each is doing now — `idle`,
//! `running`, `waiting_for_approval`, `compacting` or `deleted` —, its queue length and
//! its last activity, for the web view's session list. The state is a pure fold of the
//! session's persisted events ([`Activity::apply`]); the server keeps the folds of the
//! sessions it showed lately (bounded) and reads only the events committed since. Damage is local: a
//! session whose new events cannot be read (a damaged store) is listed as `unreadable`,
//! the others as they are.

use super::AppState;
use super::error::ApiError;
use super::sessions::{PageQuery, live_sessions, readable_page};
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use foya_protocol::{ApprovalRequestId, Event, EventKind, InputId, Seq, SessionId};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What a session's log says it is doing.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Activity {
    /// Seq of the last event folded in (0 before any).
    last_seq: u64,
    /// `at_ms` of the last event folded in.
    last_at_ms: u64,
    /// Inputs queued and not yet started or dropped.
    queued: HashSet<InputId>,
    /// Whether a turn has `turn_started` and no `turn_complete`.
    running: bool,
    /// Whether a `compaction_started` has no checkpoint or turn end after it.
    compacting: bool,
    /// Approval requests not yet decided.
    pending: HashSet<ApprovalRequestId>,
    deleted: bool,
}

impl Activity {
    /// Folds one event in.
    pub(crate) fn apply(&mut self, event: &Event) {
        self.last_seq = event.seq.0;
        self.last_at_ms = event.at_ms;
        match &event.kind {
            EventKind::InputQueued { input_id, .. } => {
                self.queued.insert(*input_id);
            }
            EventKind::InputDropped { input_id, .. } | EventKind::UserMessage { input_id, .. } => {
                self.queued.remove(input_id);
            }
            EventKind::TurnStarted { .. } => self.running = true,
            EventKind::TurnComplete { .. } => {
                self.running = false;
                self.compacting = false;
                self.pending.clear();
            }
            EventKind::CompactionStarted { .. } => self.compacting = true,
            EventKind::CompactionCheckpoint { .. } => self.compacting = false,
            EventKind::ApprovalRequested { request_id, .. } => {
                self.pending.insert(*request_id);
            }
            EventKind::ApprovalDecided { request_id, .. } => {
                self.pending.remove(request_id);
            }
            EventKind::SessionDeleted {} => self.deleted = true,
            _ => {}
        }
    }

    /// `deleted`, `waiting_for_approval`, `compacting`, `running` or `idle`, in that
    /// order of precedence.
    pub(crate) fn state(&self) -> &'static str {
        if self.deleted {
            "deleted"
        } else if !self.pending.is_empty() {
            "waiting_for_approval"
        } else if self.compacting {
            "compacting"
        } else if self.running {
            "running"
        } else {
            "idle"
        }
    }
}

/// The folds kept between calls, by session: at most [`MAX_FOLDS`] beyond the page
/// being answered. Held across a call's log reads, so two calls never fold the same
/// events twice.
pub(crate) type Folds = tokio::sync::Mutex<HashMap<SessionId, Activity>>;

/// Folds kept between calls beyond the current page's (the rest are dropped and
/// rebuilt from their logs when a page shows them again).
const MAX_FOLDS: usize = 4096;

/// One session of `GET /overview`.
#[derive(Debug, Serialize)]
struct Entry {
    id: SessionId,
    title: Option<String>,
    model: String,
    cwd: std::path::PathBuf,
    state: &'static str,
    queue_length: usize,
    created_at_ms: u64,
    last_activity_ms: u64,
    last_seq: u64,
    /// The node the session lives on (cluster listings); absent for this server.
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
}

/// `GET /overview`: a page of sessions (as `GET /sessions` pages them) or, with
/// `live=true`, the live ones, each with its state. Only the listed sessions' folds are
/// brought up to date.
pub(crate) async fn overview(
    State(state): State<AppState>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let request = PageQuery::parse(query)?;
    let (summaries, next) = if request.live {
        (live_sessions(&state, request.limit).await?, None)
    } else {
        readable_page(&state, request.after, request.limit).await?
    };
    let mut folds = Arc::clone(&state.overview).lock_owned().await;
    if folds.len() > MAX_FOLDS {
        let shown: HashSet<SessionId> = summaries.iter().map(|s| s.id).collect();
        folds.retain(|id, _| shown.contains(id));
    }
    let entries = match state.store.as_redb() {
        // The redb store's reads are synchronous: off the async threads, as one job.
        Some(store) => {
            let store = store.clone();
            tokio::task::spawn_blocking(move || {
                entries(&mut folds, summaries, |id, from| {
                    store.read_from(id, from).map_err(|e| e.to_string())
                })
            })
            .await
            .map_err(ApiError::internal)?
        }
        // A shared store: each log read on from where its fold stopped, then folded.
        None => {
            let wanted: Vec<(SessionId, u64)> = summaries
                .iter()
                .map(|s| {
                    (
                        s.id,
                        folds.get(&s.id).map_or(0, |f| f.last_seq),
                        s.last_seq.0,
                    )
                })
                .filter(|(_, from, last)| from < last)
                .map(|(id, from, _)| (id, from))
                .collect();
            let mut read = HashMap::new();
            for (id, from) in wanted {
                let events = foya_storage::EventLog::read_from(&state.store, id, Seq(from + 1))
                    .await
                    .map_err(|e| e.to_string());
                read.insert(id, events);
            }
            entries(&mut folds, summaries, |id, _| {
                read.remove(&id).unwrap_or_else(|| Ok(Vec::new()))
            })
        }
    };
    Ok(Json(serde_json::json!({ "sessions": entries, "next": next })).into_response())
}

/// The overview entries of `summaries` (in their order), each session's fold brought up
/// to date with the events `read(id, from)` gives.
fn entries(
    folds: &mut HashMap<SessionId, Activity>,
    summaries: Vec<foya_protocol::SessionSummary>,
    mut read: impl FnMut(SessionId, Seq) -> Result<Vec<Event>, String>,
) -> Vec<Entry> {
    let mut out = Vec::with_capacity(summaries.len());
    for summary in summaries {
        let fold = folds.entry(summary.id).or_default();
        let readable = fold.last_seq >= summary.last_seq.0
            || match read(summary.id, Seq(fold.last_seq + 1)) {
                Ok(events) => {
                    events.iter().for_each(|event| fold.apply(event));
                    true
                }
                Err(e) => {
                    tracing::warn!(target: super::LOG_TARGET, session = %summary.id, error = %e, "cannot read the session's log for the overview");
                    false
                }
            };
        out.push(Entry {
            id: summary.id,
            title: summary.title,
            model: summary.model,
            cwd: summary.cwd,
            state: if readable { fold.state() } else { "unreadable" },
            queue_length: fold.queued.len(),
            created_at_ms: summary.created_at_ms,
            last_activity_ms: fold.last_at_ms.max(summary.updated_at_ms),
            last_seq: fold.last_seq,
            node: summary.node,
        });
    }
    out
}

#[cfg(test)]
#[path = "overview_tests.rs"]
mod tests;

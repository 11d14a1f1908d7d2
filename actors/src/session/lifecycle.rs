//! Turn lifecycle of the SessionActor: starting a turn (`user_message` + `turn_started`,
//! then a linked TurnActor), closing a turn that ended without `turn_complete` (crash,
//! restart), running the queue, and finishing a delete.

use super::SessionMsg;
use super::actor::{ActiveTurn, Session};
use super::commands::{self, Plan};
use crate::hooks::{HookEvent, HookInput};
use crate::kernel::{QueuedOnRestart, RuntimeError};
use crate::turn::{TurnActor, TurnArgs, TurnMode};
use foya_protocol::event::Notice;
use foya_protocol::{
    ErrorClass, ErrorInfo, EventKind, Input, InputId, RunId, SessionUpdate, TitleSource, TurnStatus,
};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Result text of a call whose turn failed on a storage error.
pub(crate) const STORAGE_RESULT: &str =
    "outcome unknown: the turn failed on a storage error before this result was saved";
/// `input_dropped` reason under `QueuedOnRestart::Drop`.
pub(crate) const DROPPED_ON_RESTART: &str = "dropped on restart";

impl Session {
    /// Writes `user_message` + `turn_started` and spawns the TurnActor (commands are
    /// expanded first and some complete at once, see `commands.rs`).
    pub(super) async fn start_turn(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input_id: InputId,
        input: Input,
    ) -> Result<(), ActorProcessingErr> {
        let run_id = RunId::new();
        let project = self.load_project();
        let (input, plan) = commands::plan(&project, input);
        let mut kinds = vec![
            EventKind::UserMessage {
                input_id,
                input: input.clone(),
            },
            EventKind::TurnStarted { input_id },
        ];
        let mode = match plan {
            Plan::Model => TurnMode::Model,
            Plan::Compact => TurnMode::Compact,
            Plan::SetTitle(title) => {
                kinds.push(EventKind::TitleSet {
                    title,
                    source: TitleSource::User,
                });
                kinds.push(completed(TurnStatus::Completed, None, None));
                self.persist(Some(run_id), kinds).await?;
                return Ok(());
            }
            Plan::GenerateTitle => {
                kinds.push(completed(TurnStatus::Completed, None, None));
                self.persist(Some(run_id), kinds).await?;
                let text = self.first_user_text()?;
                return self.spawn_title(myself, &text).await;
            }
            Plan::Unknown(message) => {
                let error = ErrorInfo {
                    class: ErrorClass::InvalidRequest,
                    message,
                };
                let reason = Some("unknown_command".to_owned());
                kinds.push(completed(TurnStatus::Failed, reason, Some(error)));
                self.persist(Some(run_id), kinds).await?;
                return Ok(());
            }
        };
        self.persist(Some(run_id), kinds).await?;
        self.maybe_generate_title(myself, &input).await?;
        let log = self.shared_log()?;
        let cancel = CancellationToken::new();
        let args = TurnArgs {
            session: myself.clone(),
            log,
            deps: Arc::clone(&self.deps),
            session_id: self.fold.id,
            config: self.fold.config.clone(),
            run_id,
            cancel: cancel.clone(),
            project,
            mode,
            first_in_runtime: !std::mem::replace(&mut self.hooks_started, true),
        };
        let (actor, _) = Actor::spawn_linked(None, TurnActor, args, myself.get_cell()).await?;
        self.turn = Some(ActiveTurn { actor, cancel });
        Ok(())
    }

    /// The text of the session's first user message with text (for `/title`).
    fn first_user_text(&mut self) -> Result<String, ActorProcessingErr> {
        Ok(self
            .shared_log()?
            .read()
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::UserMessage { input, .. } if !input.text.trim().is_empty() => {
                    Some(input.text.clone())
                }
                _ => None,
            })
            .unwrap_or_default())
    }

    /// Starts the next queued input when idle.
    pub(super) async fn start_next(
        &mut self,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        if self.busy() || self.deleting.is_some() || self.shutdown.is_some() {
            return Ok(());
        }
        // A command turn may complete at once: go on with the queue then.
        while !self.busy()
            && let Some((input_id, input)) = self.fold.queue.front().cloned()
        {
            self.start_turn(myself, input_id, input).await?;
        }
        Ok(())
    }

    /// Closes an open turn that has no `turn_complete`: results for unanswered calls,
    /// then `turn_complete{failed}`.
    pub(super) async fn close_open_turn(
        &mut self,
        result_text: &str,
        reason: &str,
        error: ErrorInfo,
    ) -> Result<(), RuntimeError> {
        let Some(open) = &self.fold.open_turn else {
            return Ok(());
        };
        let run_id = open.run_id;
        let mut kinds: Vec<EventKind> = self
            .fold
            .unanswered_results(result_text)
            .into_iter()
            .map(EventKind::ToolMessage)
            .collect();
        kinds.push(EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some(reason.to_owned()),
            error: Some(error),
        });
        self.persist(Some(run_id), kinds).await.map(|_| ())
    }

    /// The TurnActor exited (normally or not).
    pub(super) async fn turn_exited(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        failure: Option<String>,
    ) -> Result<(), ActorProcessingErr> {
        self.turn = None;
        self.approvals.clear();
        if let Some(message) = self.storage_failure.take() {
            self.close_open_turn(
                STORAGE_RESULT,
                ErrorClass::Storage.as_str(),
                ErrorInfo {
                    class: ErrorClass::Storage,
                    message,
                },
            )
            .await?;
        } else {
            let message = failure.unwrap_or_else(|| "the turn stopped without completing".into());
            self.close_open_turn(
                "the turn crashed before this call finished",
                "turn crashed",
                ErrorInfo {
                    class: ErrorClass::Internal,
                    message,
                },
            )
            .await?;
        }
        if self.deleting.is_some() {
            return self.finish_delete(myself).await;
        }
        if self.shutdown.is_some() {
            self.session_end_hooks().await;
            for reply in self.shutdown.iter_mut().flat_map(|w| w.drain(..)) {
                let _ = reply.send(());
            }
            return Ok(());
        }
        self.start_next(myself).await?;
        if !self.busy() {
            self.keep_log_if_budget_allows();
        }
        Ok(())
    }

    /// An append of the active turn failed in the store (full disk, I/O or redb error):
    /// later appends of the turn are refused, its stream and tools are cancelled and the
    /// TurnActor is stopped; [`Self::turn_exited`] then closes the turn `failed` with
    /// class storage. Nothing already committed is touched.
    pub(super) fn storage_failed(&mut self, error: &RuntimeError) {
        let message = match error {
            RuntimeError::Storage(m) => m.clone(),
            other => other.to_string(),
        };
        tracing::warn!(session.id = %self.fold.id, error = %message, "append failed; failing the turn");
        if let Some(turn) = &self.turn {
            self.storage_failure = Some(message);
            turn.cancel.cancel();
            turn.actor.stop(Some("storage failure".into()));
        }
    }

    /// Recovery with `QueuedOnRestart::Drop`: every queued input gets `input_dropped`.
    pub(super) async fn drop_queue_on_restart(&mut self) -> Result<(), RuntimeError> {
        if self.deps.queued_on_restart != QueuedOnRestart::Drop {
            return Ok(());
        }
        let kinds = self
            .fold
            .queue
            .iter()
            .map(|(input_id, _)| EventKind::InputDropped {
                input_id: *input_id,
                reason: DROPPED_ON_RESTART.into(),
            })
            .collect();
        self.persist(None, kinds).await.map(|_| ())
    }

    pub(super) async fn finish_delete(
        &mut self,
        myself: &ActorRef<SessionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let mut kinds: Vec<EventKind> = self
            .fold
            .queue
            .iter()
            .map(|(input_id, _)| EventKind::InputDropped {
                input_id: *input_id,
                reason: "session deleted".into(),
            })
            .collect();
        kinds.push(EventKind::SessionDeleted {});
        let result = self.persist(None, kinds).await.map(|_| ());
        if result.is_ok() {
            self.deps.hooks.forget_transcript(self.fold.id);
        }
        let notice = SessionUpdate::Notice(Notice::Closed {
            session_id: self.fold.id,
            reason: "session deleted".into(),
        });
        self.broadcast(notice);
        self.subscribers.clear();
        if let Some(reply) = self.deleting.take() {
            let _ = reply.send(result);
        }
        myself.stop(Some("session deleted".into()));
        Ok(())
    }
}

/// A `turn_complete` event.
fn completed(status: TurnStatus, reason: Option<String>, error: Option<ErrorInfo>) -> EventKind {
    EventKind::TurnComplete {
        status,
        reason,
        error,
    }
}

impl Session {
    /// The runtime shuts the session down: its `SessionEnd` hooks run (once, and only
    /// when a turn of this top-level session ran in this runtime) and their `hook_ran`
    /// events are persisted. Bounded by the hooks' timeouts; a failure is logged.
    pub(super) async fn session_end_hooks(&mut self) {
        let hooks = Arc::clone(&self.deps.hooks);
        if !std::mem::take(&mut self.hooks_started)
            || self.fold.config.parent.is_some()
            || !hooks.any(HookEvent::SessionEnd, None)
        {
            return;
        }
        let config = &self.fold.config;
        let mut input = HookInput::new(
            HookEvent::SessionEnd,
            self.fold.id,
            config.cwd.clone(),
            config.approval_mode,
        );
        input.reason = Some("other");
        if let Ok(log) = self.shared_log() {
            input.transcript_path = hooks.export_transcript(self.fold.id, &log.read());
        }
        let run = hooks.run(&input).await;
        if let Err(e) = self.persist(None, run.events).await {
            tracing::warn!(session.id = %self.fold.id, error = %e, "cannot record the SessionEnd hooks");
        }
    }
}

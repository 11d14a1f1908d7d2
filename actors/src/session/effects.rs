//! How the SessionActor carries out the machine's effects: store appends (awaited, one
//! commit each, answered back to the machine), subscriber channels, the TurnActor and
//! TitleActor, hooks, replies. No rule is decided here.

use super::actor::{Caller, RunningTurn, Session, Subscriber};
use super::machine::{Answer, Effect, SessionInput, TitleText};
use super::{SessionMsg, Subscribed, commands, title};
use crate::hooks::{HookEvent, HookInput};
use crate::kernel::{RuntimeError, now_ms};
use crate::log::SharedLog;
use crate::turn::{TurnActor, TurnArgs, TurnMode, TurnMsg};
use foya_protocol::event::{LiveDelta, Notice};
use foya_protocol::{Event, EventKind, RunId, Seq, SessionId, SessionUpdate};
use foya_storage::{AppendError, EventLog as _, LogStore};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

impl Session {
    /// Feeds `input` to the machine and carries out its effects, feeding back what they
    /// answer (a commit, a prepared input, the hooks' events) until nothing is left.
    /// `caller` gets the machine's [`Effect::Reply`].
    ///
    /// # Errors
    /// The machine asked to fail ([`Effect::Fail`]), or a child could not be spawned:
    /// the actor fails and the supervisor restarts it from the log.
    pub(super) async fn run(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input: SessionInput,
        caller: Option<Caller>,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed, so that only a message being handled holds this future: ractor keeps an
        // actor's message loop, with every handler future inlined, in one allocation for
        // the actor's whole life, and an idle session is mostly that. (It is kept small:
        // `execute` boxes its rare large effects, as this box is copied per message.)
        Box::pin(self.run_effects(myself, input, caller)).await
    }

    /// [`Self::run`]'s work, unboxed.
    async fn run_effects(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input: SessionInput,
        mut caller: Option<Caller>,
    ) -> Result<(), ActorProcessingErr> {
        let mut effects = self.machine.on(input, now_ms());
        loop {
            let mut answer = None;
            for effect in effects {
                if let Some(input) = self.execute(myself, effect, &mut caller).await? {
                    answer = Some(input);
                }
            }
            match answer {
                Some(input) => effects = self.machine.on(input, now_ms()),
                None => {
                    let fold = self.machine.fold();
                    let (turn, queued) = (fold.open_turn.is_some(), fold.queue.len());
                    let approvals = self.machine.pending_approvals();
                    self.share.set(turn, queued, approvals);
                    return Ok(());
                }
            }
        }
    }

    /// Carries out one effect; returns what it answers to the machine, if anything.
    async fn execute(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        effect: Effect,
        caller: &mut Option<Caller>,
    ) -> Result<Option<SessionInput>, ActorProcessingErr> {
        match effect {
            Effect::Append(events) => return self.append(events).await.map(Some),
            Effect::Publish(events) => self.publish(events),
            Effect::PublishDeltas { run_id, deltas } => {
                for delta in deltas {
                    let live = LiveDelta {
                        session_id: self.machine.fold().id,
                        run_id,
                        delta,
                    };
                    self.broadcast(SessionUpdate::Delta(live));
                }
            }
            Effect::PrepareInput { input_id, input } => {
                let project = self.load_project();
                let (input, plan) = commands::plan(&project, input);
                self.project = Some(project);
                return Ok(Some(SessionInput::InputPrepared {
                    input_id,
                    input,
                    plan,
                }));
            }
            // The rare effects whose futures are large (a TurnActor's spawn with its
            // `pre_start`, a title actor's, hook processes) are boxed: inlined, they made
            // this future about 20 KiB, which `run` boxes and copies for every message.
            Effect::StartTurn {
                run_id,
                mode,
                first_in_runtime,
            } => Box::pin(self.start_turn(myself, run_id, mode, first_in_runtime)).await?,
            Effect::CancelTurn { reason } => {
                if let Some(turn) = &self.turn {
                    turn.cancel.cancel();
                    let reason = reason.to_owned();
                    let _ = turn.actor.cast(TurnMsg::Cancel { reason });
                }
            }
            Effect::StopTurn => {
                if let Some(turn) = &self.turn {
                    turn.cancel.cancel();
                    turn.actor.stop(Some("storage failure".into()));
                }
            }
            Effect::StartTitle { text, expected } => {
                Box::pin(self.start_title(myself, text, expected)).await?;
            }
            Effect::AddSubscriber {
                approver,
                replay_end,
            } => {
                let (tx, rx) = mpsc::channel(self.deps.subscriber_buffer.max(1));
                self.subscribers.push(Subscriber { tx, approver });
                if let Some(Caller::Subscribe(reply)) = caller.take() {
                    let guard = super::WatchGuard(myself.clone());
                    let subscribed: Subscribed = (rx, replay_end, guard);
                    let _ = reply.send(Ok(subscribed));
                }
            }
            Effect::Reply(answer) => reply(caller.take(), answer),
            Effect::AnswerApproval { request_id, answer } => {
                if let Some(reply) = self.waiters.approvals.remove(&request_id) {
                    let _ = reply.send(answer);
                }
            }
            Effect::DropApproval { request_id } => {
                self.waiters.approvals.remove(&request_id);
            }
            Effect::DropApprovals => self.waiters.approvals.clear(),
            Effect::AnswerDelete(result) => {
                if let Some(reply) = self.waiters.delete.take() {
                    let _ = reply.send(result.map_err(RuntimeError::from));
                }
            }
            Effect::AnswerShutdown => {
                for reply in self.waiters.shutdown.drain(..) {
                    let _ = reply.send(());
                }
            }
            Effect::AnswerDrained => {
                for reply in self.waiters.drained.drain(..) {
                    let _ = reply.send(());
                }
            }
            Effect::RunSessionEndHooks => {
                let kinds = Box::pin(self.session_end_hooks()).await;
                return Ok(Some(SessionInput::SessionEndHooksRan { kinds }));
            }
            Effect::ForgetTranscript => self.deps.hooks.forget_transcript(self.machine.fold().id),
            Effect::CloseSubscribers { reason } => {
                let notice = SessionUpdate::Notice(Notice::Closed {
                    session_id: self.machine.fold().id,
                    reason: reason.into(),
                });
                self.broadcast(notice);
                self.subscribers.clear();
            }
            Effect::WentIdle => self.keep_log_if_budget_allows(),
            Effect::Stop { reason } => {
                self.stopping = true;
                myself.stop(Some(reason.into()));
            }
            Effect::Fail(message) => return Err(message.into()),
        }
        Ok(None)
    }

    /// Appends to the store (awaited: the session's appends commit one at a time, in
    /// order). The machine is told `CommitFailed` only when nothing was written: a
    /// shared store's failed statement may have committed before its answer was lost
    /// (the log is asked which), and a log that is not what this actor holds (a seq
    /// mismatch, an outcome the log cannot tell, a statement that may still commit)
    /// fails the actor, which the Supervisor restarts from the log.
    async fn append(&mut self, events: Vec<Event>) -> Result<SessionInput, ActorProcessingErr> {
        let fold = self.machine.fold();
        let id = fold.id;
        let parent = fold.config.parent.as_ref().map(|p| p.session_id);
        // A cluster node writes a session only under its shard's fence; once the shard
        // is not held here (released, lost, fenced) nothing more is written.
        let fence = match self.deps.fence_for(id, parent) {
            Ok(fence) => fence,
            Err(e) => {
                tracing::warn!(session.id = %id, error = %e, "append refused: not the owner");
                return Ok(SessionInput::CommitFailed(e.to_string()));
            }
        };
        let e = match self.deps.store.append(&events, fence).await {
            Ok(()) => return Ok(SessionInput::Committed(events)),
            Err(e) => e,
        };
        let error = e.to_string();
        tracing::warn!(session.id = %id, error = %error, "append failed");
        match e {
            // Never retried: the shard is another node's; the runtime drops every
            // loaded session of it (this one included).
            AppendError::Fenced { .. } => self.deps.report_fenced(fence),
            // The log holds events this actor does not (an earlier commit whose answer
            // was lost): it cannot go on from what it holds.
            AppendError::SeqMismatch { .. } => {
                return Err(
                    format!("the log moved on without this session actor ({error})").into(),
                );
            }
            // A shared store's failed statement may have committed before its answer
            // was lost: the log is asked. When the store could not make sure the
            // statement is over (`Unknown`), a log without it proves nothing yet.
            AppendError::Storage(_) | AppendError::Unknown(_) if self.deps.store.is_shared() => {
                let settled = !matches!(e, AppendError::Unknown(_));
                match commit_outcome(&self.deps.store, id, &events).await {
                    Outcome::Committed => {
                        tracing::warn!(session.id = %id, "the failed append was committed: its answer was lost");
                        return Ok(SessionInput::Committed(events));
                    }
                    Outcome::NotWritten if settled => {}
                    Outcome::NotWritten => {
                        return Err(format!(
                            "an append's outcome is unknown ({error}; the log does not hold it yet)"
                        )
                        .into());
                    }
                    Outcome::Unknown(why) => {
                        return Err(
                            format!("an append's outcome is unknown ({error}; {why})").into()
                        );
                    }
                }
            }
            _ => {}
        }
        Ok(SessionInput::CommitFailed(error))
    }

    /// Committed events: to subscribers, then into the in-memory log (when loaded).
    fn publish(&mut self, events: Vec<Event>) {
        if !self.subscribers.is_empty() {
            for event in &events {
                self.broadcast(SessionUpdate::Event(event.clone()));
            }
        }
        if let Some(log) = &self.log {
            log.extend(events);
        }
    }

    /// Sends to every subscriber; one whose buffer is full is dropped (its Subscription
    /// reports `Notice::Lagged`), never waited for. The last one gets `update` itself.
    /// This runtime stops serving the session (a handoff's end): every subscriber is
    /// told where to go on (`Notice::Moved`, resume from the next seq on the node that
    /// serves it now), and the actor stops without writing.
    pub(super) fn release(&mut self, myself: &ActorRef<SessionMsg>, reason: &'static str) {
        let notice = SessionUpdate::Notice(Notice::Moved {
            session_id: self.machine.fold().id,
            last_seq: Seq(self.machine.fold().last_seq),
            reason: reason.into(),
        });
        self.broadcast(notice);
        self.subscribers.clear();
        self.stopping = true;
        myself.stop(Some(reason.into()));
    }

    pub(super) fn broadcast(&mut self, update: SessionUpdate) {
        let last = self.subscribers.len();
        let mut update = Some(Box::new(update));
        let mut index = 0;
        self.subscribers.retain(|s| {
            index += 1;
            let next = if index == last {
                update.take()
            } else {
                update.clone()
            };
            next.is_some_and(|u| s.tx.try_send(u).is_ok())
        });
    }

    /// Spawns the TurnActor of `run_id` with the project its input was prepared with.
    async fn start_turn(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        run_id: RunId,
        mode: TurnMode,
        first_in_runtime: bool,
    ) -> Result<(), ActorProcessingErr> {
        let log = self.shared_log().await?;
        let project = match self.project.take() {
            Some(project) => project,
            None => self.load_project(),
        };
        let cancel = CancellationToken::new();
        let fold = self.machine.fold();
        let args = TurnArgs {
            session: Arc::new(myself.clone()),
            log,
            deps: Arc::clone(&self.deps),
            session_id: fold.id,
            config: fold.config.clone(),
            run_id,
            cancel: cancel.clone(),
            project,
            mode,
            first_in_runtime,
        };
        let (actor, _) = Actor::spawn_linked(None, TurnActor, args, myself.get_cell()).await?;
        self.turn = Some(RunningTurn { actor, cancel });
        Ok(())
    }

    /// Starts the title actor for `text`.
    async fn start_title(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: TitleText,
        expected: Option<(String, foya_protocol::TitleSource)>,
    ) -> Result<(), ActorProcessingErr> {
        let text = match text {
            TitleText::Input(text) => text,
            TitleText::FirstUserMessage => title::first_user_text(&self.shared_log().await?.read()),
        };
        let config = &self.machine.fold().config;
        title::spawn(myself, &self.deps, config, text, expected).await?;
        Ok(())
    }

    /// Going idle: keeps the log if it fits the runtime's idle budget, else releases it
    /// (the next turn reads it from the store once). Nothing to do when it already
    /// holds its share.
    fn keep_log_if_budget_allows(&mut self) {
        if self.idle_reservation.is_some() {
            return;
        }
        let events = self.log.as_ref().map_or(0, SharedLog::len);
        self.idle_reservation = self.deps.idle_logs.reserve(events);
        if self.idle_reservation.is_none() {
            self.log = None;
        }
    }

    /// The in-memory log for a turn; read from the store when it was released.
    ///
    /// # Errors
    /// A store read failure.
    pub(super) async fn shared_log(&mut self) -> Result<SharedLog, RuntimeError> {
        self.idle_reservation = None; // in use again: no longer counted as idle
        if let Some(log) = &self.log {
            return Ok(log.clone());
        }
        let events = self
            .deps
            .store
            .read_from(self.machine.fold().id, Seq::FIRST)
            .await
            .map_err(|e| RuntimeError::Storage(crate::kernel::StorageError::of(e)))?;
        let log = SharedLog::new(events);
        self.log = Some(log.clone());
        Ok(log)
    }

    /// Runs the session's `SessionEnd` hooks (the machine decided they are due); their
    /// `hook_ran` events, to be recorded. Bounded by the hooks' timeouts.
    async fn session_end_hooks(&mut self) -> Vec<EventKind> {
        let hooks = Arc::clone(&self.deps.hooks);
        if !hooks.any(HookEvent::SessionEnd, None) {
            return Vec::new();
        }
        let fold = self.machine.fold();
        let (id, config) = (fold.id, &fold.config);
        let mut input = HookInput::new(
            HookEvent::SessionEnd,
            id,
            config.cwd.clone(),
            config.approval_mode,
        );
        input.reason = Some("other");
        if let Ok(log) = self.shared_log().await {
            input.transcript_path = hooks.export_transcript(id, &log.read());
        }
        hooks.run(&input).await.events
    }
}

/// Answers the caller (an answer of another kind than the caller waits for is a bug of
/// the machine: the caller's port is dropped, which it reads as the actor failing).
fn reply(caller: Option<Caller>, answer: Answer) {
    match (caller, answer) {
        (Some(Caller::Submit(reply)), Answer::Submitted(result)) => {
            let _ = reply.send(result.map_err(RuntimeError::from));
        }
        (Some(Caller::Done(reply)), Answer::Done(result)) => {
            let _ = reply.send(result.map_err(RuntimeError::from));
        }
        (Some(Caller::Approvals(reply)), Answer::PendingApprovals(pending)) => {
            let _ = reply.send(Ok(pending));
        }
        (Some(Caller::Append(Some(reply))), Answer::Appended(result)) => {
            let _ = reply.send(result);
        }
        (Some(Caller::Title(Some(reply))), Answer::TitleApplied(applied)) => {
            let _ = reply.send(applied);
        }
        (Some(Caller::Append(None) | Caller::Title(None)), _) => {}
        (caller, answer) => {
            tracing::debug!(
                ?answer,
                waiting = caller.is_some(),
                "answer without its caller"
            );
        }
    }
}

impl Session {
    /// Loads the project context for a turn: the files the runtime options allow
    /// (project files, user dir), else only the project root.
    pub(super) fn load_project(&self) -> Arc<crate::context::ProjectContext> {
        let options = &self.deps.context;
        let cwd = &self.machine.fold().config.cwd;
        Arc::new(if options.project_files {
            crate::context::ProjectContext::load(cwd, options.user_dir.as_deref())
        } else {
            crate::context::ProjectContext::load_user_only(cwd, options.user_dir.as_deref())
        })
    }
}

/// What became of an append whose statement failed on a shared store.
enum Outcome {
    Committed,
    NotWritten,
    /// The log could not be read, or holds other events at those seqs.
    Unknown(String),
}

/// Asks the log whether `events` (one append's, dense seqs) were committed: a batch
/// commits whole or not at all, so the log holds exactly them from their first seq, or
/// nothing there. Other events there (an earlier append taken as not written that
/// committed after all) say the actor's state is not the log's.
async fn commit_outcome(store: &LogStore, id: SessionId, events: &[Event]) -> Outcome {
    let Some(first) = events.first() else {
        return Outcome::NotWritten;
    };
    match store.read_range(id, first.seq, events.len() + 1).await {
        Ok(stored) if stored.is_empty() => Outcome::NotWritten,
        Ok(stored) if stored == events => Outcome::Committed,
        Ok(_) => Outcome::Unknown(format!(
            "the log holds other events from seq {}",
            first.seq.0
        )),
        Err(e) => Outcome::Unknown(format!("the log cannot be read: {e}")),
    }
}

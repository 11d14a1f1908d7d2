//! Compaction run by the TurnActor (phase `Compacting`; the session is busy meanwhile, so
//! inputs queue): `compaction_started{trigger, tokens_before}`, a summarisation request
//! without tools ([`COMPACTION_SYSTEM_PROMPT`] + [`context::compaction_request`]) to the
//! auxiliary client, then `compaction_checkpoint{summary, covers_up_to, tokens_before,
//! tokens_after, kept}` and the step re-runs (a manual `/compact` ends its turn instead).
//!
//! Bounds: a summarisation request that overflows is retried with half the input budget
//! (oldest messages dropped first), at most [`MAX_COMPACTION_ATTEMPTS`] requests; any
//! other failure, an empty summary, or a checkpoint that saves less than
//! [`MIN_SAVING_PCT`] % of the estimated input ends the turn `failed` with reason
//! `compaction_failed` / `compaction_ineffective` (class `context_overflow`) — never a
//! loop. Cancel stops the request like any other; the log then holds a
//! `compaction_started` without checkpoint, which the history fold ignores.

use super::TurnMsg;
use super::actor::{Phase, Turn};
use super::context::Trigger;
use crate::context::{self, COMPACTION_SYSTEM_PROMPT, estimate_tokens};
use crate::provider::ModelRequest;
use foya_protocol::{
    ErrorClass, ErrorInfo, Event, EventKind, ProviderError, Seq, StreamEvent, TurnStatus,
};
use ractor::{ActorProcessingErr, ActorRef};

/// Most summarisation requests of one compaction.
pub(crate) const MAX_COMPACTION_ATTEMPTS: u32 = 3;
/// Least saving, in percent of the estimated input, for a checkpoint to be kept.
pub(crate) const MIN_SAVING_PCT: u64 = 10;

/// A compaction in progress.
#[derive(Debug)]
pub(crate) struct Compaction {
    trigger: Trigger,
    tokens_before: u64,
    history_tokens: u64,
    events: Vec<Event>,
    budget: u64,
    attempt: u32,
}

impl Turn {
    /// Starts a compaction of the committed log.
    #[tracing::instrument(
        name = "compaction",
        skip_all,
        fields(session.id = %self.args.session_id, turn.run_id = %self.args.run_id, trigger = trigger.as_str())
    )]
    pub(super) async fn begin_compaction(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        trigger: Trigger,
    ) -> Result<(), ActorProcessingErr> {
        self.compacted_in_step = true;
        let compiled = match self.compile_log().0 {
            Ok(c) => c,
            Err(e) => return self.fail_context(myself, &e).await,
        };
        let events = self.args.log.read().clone();
        if context::history(&events).is_empty() {
            return match trigger {
                Trigger::Manual => {
                    let reason = Some("nothing to compact".to_owned());
                    self.finish(myself, Vec::new(), TurnStatus::Completed, reason, None)
                        .await
                }
                Trigger::Threshold | Trigger::Overflow => {
                    let message = "the context is too large and there is no history to compact";
                    self.compaction_failed(myself, "compaction_failed", message.into())
                        .await
                }
            };
        }
        let tokens_before = compiled.budget.estimated_input_tokens;
        let history_tokens = compiled.sections.get("history").copied().unwrap_or(0);
        self.persist(vec![EventKind::CompactionStarted {
            trigger: trigger.as_str().into(),
            tokens_before,
        }])
        .await?;
        let limits = self.limits();
        let budget = limits
            .context_window
            .saturating_sub(limits.reserved_output)
            .saturating_sub(estimate_tokens(COMPACTION_SYSTEM_PROMPT));
        self.phase = Phase::Compacting(Compaction {
            trigger,
            tokens_before,
            history_tokens,
            events,
            budget,
            attempt: 1,
        });
        self.send_compaction(myself).await
    }

    async fn send_compaction(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let Phase::Compacting(c) = &self.phase else {
            return Ok(());
        };
        let request = ModelRequest {
            model: self.args.config.model.clone(),
            system: COMPACTION_SYSTEM_PROMPT.into(),
            messages: context::compaction_request(&c.events, c.budget).into(),
            ..ModelRequest::default()
        };
        let client = self.args.deps.aux_client_for(&self.args.config.provider);
        self.spawn_provider(myself, client, request, false).await
    }

    /// One stream event of the summarisation request (never relayed to clients).
    pub(super) async fn on_compaction_stream(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        request: u64,
        event: StreamEvent,
    ) -> Result<(), ActorProcessingErr> {
        if request != self.request_number {
            return Ok(());
        }
        self.aggregate.apply(&event);
        match event {
            StreamEvent::Done { .. } => {
                self.provider = None;
                self.finish_compaction(myself).await
            }
            StreamEvent::Error { error } => self.on_compaction_error(myself, error).await,
            _ => Ok(()),
        }
    }

    /// The summarisation request failed: shrink and retry on overflow, else fail.
    pub(super) async fn on_compaction_error(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        error: ProviderError,
    ) -> Result<(), ActorProcessingErr> {
        self.provider = None;
        if let Phase::Compacting(c) = &mut self.phase
            && error.class == ErrorClass::ContextOverflow
            && c.attempt < MAX_COMPACTION_ATTEMPTS
        {
            c.attempt += 1;
            c.budget /= 2;
            return self.send_compaction(myself).await;
        }
        let message = format!("the compaction request failed: {}", error.message);
        self.compaction_failed(myself, "compaction_failed", message)
            .await
    }

    async fn compaction_failed(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        reason: &str,
        message: String,
    ) -> Result<(), ActorProcessingErr> {
        let error = ErrorInfo {
            class: ErrorClass::ContextOverflow,
            message,
        };
        self.finish(
            myself,
            Vec::new(),
            TurnStatus::Failed,
            Some(reason.into()),
            Some(error),
        )
        .await
    }

    /// Builds, checks and persists the checkpoint, then re-runs the step (or ends a
    /// manual compaction's turn).
    async fn finish_compaction(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let Phase::Compacting(c) = std::mem::replace(&mut self.phase, Phase::Streaming) else {
            return Ok(());
        };
        let summary = self.aggregate.text.trim().to_owned();
        if summary.is_empty() {
            let message = "the model returned an empty summary".to_owned();
            return self
                .compaction_failed(myself, "compaction_failed", message)
                .await;
        }
        let keep_budget = (self.limits().context_window / 10).min(c.history_tokens / 4);
        let kept = context::checkpoint_kept(&c.events, keep_budget);
        let covers_up_to = c.events.last().map_or(Seq(0), |e| e.seq);
        let mut checkpoint = EventKind::CompactionCheckpoint {
            summary,
            covers_up_to,
            tokens_before: c.tokens_before,
            tokens_after: 0,
            kept,
        };
        let mut after = c.events.clone();
        after.push(Event {
            session_id: self.args.session_id,
            seq: Seq(covers_up_to.0 + 1),
            run_id: Some(self.args.run_id),
            at_ms: 0,
            kind: checkpoint.clone(),
        });
        let tokens_after = match self.compile_events(&after) {
            Ok(compiled) => compiled.budget.estimated_input_tokens,
            Err(e) => return self.fail_context(myself, &e).await,
        };
        if tokens_after * 100 > c.tokens_before * (100 - MIN_SAVING_PCT) {
            let message = format!(
                "compaction would reduce the context only from {} to {tokens_after} estimated tokens",
                c.tokens_before
            );
            return self
                .compaction_failed(myself, "compaction_ineffective", message)
                .await;
        }
        if let EventKind::CompactionCheckpoint {
            tokens_after: t, ..
        } = &mut checkpoint
        {
            *t = tokens_after;
        }
        self.persist(vec![checkpoint]).await?;
        if c.trigger == Trigger::Manual {
            return self
                .finish(myself, Vec::new(), TurnStatus::Completed, None, None)
                .await;
        }
        self.attempt = 1;
        self.start_request(myself).await
    }
}

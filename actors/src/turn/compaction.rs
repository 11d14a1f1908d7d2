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
/// `turn_complete` reason of a `/compact` that had nothing to do (completed, no
/// checkpoint); a detail follows after `: ` when there was history.
pub(crate) const NOTHING_TO_COMPACT: &str = "nothing to compact";

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

/// The messages of the summarisation request; after an overflow without image bytes.
fn summarised(c: &Compaction) -> Vec<foya_protocol::Message> {
    let messages = context::compaction_request(&c.events, c.budget);
    if c.trigger == Trigger::Overflow {
        context::without_images(messages)
    } else {
        messages
    }
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
        if !self.pre_compact(trigger).await? {
            return Ok(());
        }
        let events = self.args.log.read().clone();
        let history_tokens = compiled.sections.get("history").copied().unwrap_or(0);
        let raw_total: u64 = compiled.sections.values().sum();
        let empty = context::history(&events).is_empty();
        if empty || !context::can_shrink(raw_total, history_tokens, MIN_SAVING_PCT) {
            let note = if empty {
                NOTHING_TO_COMPACT.to_owned()
            } else {
                format!(
                    "{NOTHING_TO_COMPACT}: the history ({history_tokens} of {raw_total} estimated \
                     tokens) is too short for a summary to shrink the context"
                )
            };
            return self.cannot_compact(myself, trigger, note).await;
        }
        let tokens_before = compiled.budget.estimated_input_tokens;
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
            messages: summarised(c).into(),
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
        let trigger = match std::mem::replace(&mut self.phase, Phase::Streaming) {
            Phase::Compacting(c) => c.trigger,
            other => {
                self.phase = other;
                return Ok(());
            }
        };
        let message = format!("the compaction request failed: {}", error.message);
        let class = match error.class {
            ErrorClass::ContextOverflow => ErrorClass::ContextOverflow,
            other if trigger == Trigger::Manual => other,
            _ => ErrorClass::ContextOverflow,
        };
        self.compaction_failed(myself, trigger, "compaction_failed", class, message)
            .await
    }

    /// Compaction is impossible or pointless (no history, or too little of it to save
    /// anything): `/compact` is a no-op that says so, a threshold compaction gives way to
    /// sending the request (the provider judges whether it fits), an overflow fails.
    async fn cannot_compact(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        trigger: Trigger,
        note: String,
    ) -> Result<(), ActorProcessingErr> {
        match trigger {
            Trigger::Manual => {
                self.finish(myself, Vec::new(), TurnStatus::Completed, Some(note), None)
                    .await
            }
            Trigger::Threshold => self.send_uncompacted(myself, &note).await,
            Trigger::Overflow => {
                let message = format!("the context is too large and cannot be compacted ({note})");
                self.compaction_failed(
                    myself,
                    trigger,
                    "compaction_ineffective",
                    ErrorClass::ContextOverflow,
                    message,
                )
                .await
            }
        }
    }

    /// A threshold compaction did not happen: the request is sent as it is (the
    /// estimate crossed only the threshold, not the provider's limit, which the
    /// provider judges; an overflow it reports compacts once more or fails).
    async fn send_uncompacted(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        why: &str,
    ) -> Result<(), ActorProcessingErr> {
        tracing::info!(session.id = %self.args.session_id, turn.run_id = %self.args.run_id, why, "threshold compaction skipped; sending the request uncompacted");
        self.compacted_in_step = true;
        self.phase = Phase::Streaming;
        // Boxed: `start_request` may begin this compaction, which may come back here.
        Box::pin(self.start_request(myself)).await
    }

    /// The compaction failed: a threshold compaction sends the request uncompacted, a
    /// `/compact` that would save too little is a no-op, anything else ends the turn
    /// `failed` with `reason` and `class`.
    async fn compaction_failed(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        trigger: Trigger,
        reason: &str,
        class: ErrorClass,
        message: String,
    ) -> Result<(), ActorProcessingErr> {
        match trigger {
            Trigger::Threshold => return self.send_uncompacted(myself, &message).await,
            Trigger::Manual if reason == "compaction_ineffective" => {
                let note = format!("{NOTHING_TO_COMPACT}: {message}");
                return self
                    .finish(myself, Vec::new(), TurnStatus::Completed, Some(note), None)
                    .await;
            }
            Trigger::Manual | Trigger::Overflow => {}
        }
        let error = ErrorInfo { class, message };
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
                .compaction_failed(
                    myself,
                    c.trigger,
                    "compaction_failed",
                    ErrorClass::ContextOverflow,
                    message,
                )
                .await;
        }
        let keep_budget = (self.limits().context_window / 10).min(c.history_tokens / 4);
        let mut kept = context::checkpoint_kept(&c.events, keep_budget);
        if c.trigger == Trigger::Overflow {
            // The provider refused the request as too large (an overflow or a 413):
            // image bytes are the likeliest cause and are not re-sent; a line names each.
            kept = context::without_images(kept);
        }
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
                .compaction_failed(
                    myself,
                    c.trigger,
                    "compaction_ineffective",
                    ErrorClass::ContextOverflow,
                    message,
                )
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

//! The TurnActor's failure paths: provider errors (bounded, cancellable retries) and
//! cancellation (stop everything, write what is known, end the turn `cancelled`).

use super::TurnMsg;
use super::actor::{Phase, Turn};
use super::context::Trigger;
use crate::task::AbortOnDropHandle;
use foya_protocol::{AssistantMessage, ErrorClass, EventKind, ProviderError, TurnStatus};
use ractor::{ActorProcessingErr, ActorRef};
use std::time::Duration;

impl Turn {
    /// A model request failed: retry after a persisted `provider_retry` when the class
    /// is transient and attempts remain, else end the turn `failed` with the class.
    pub(super) async fn on_provider_error(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        error: ProviderError,
    ) -> Result<(), ActorProcessingErr> {
        if self.args.cancel.is_cancelled() {
            // The turn is being cancelled (its token fires before `Cancel` is sent) and
            // the stream ended because of it: `Cancel` follows and records the partial
            // answer; a retry recorded now would be spurious.
            return Ok(());
        }
        self.provider = None;
        if error.class == ErrorClass::ContextOverflow {
            return self.on_overflow(myself, error).await;
        }
        let policy = self.client().retry_policy().unwrap_or(self.args.deps.retry);
        let next = self.attempt + 1;
        let Some(delay) = policy.delay_for(next, &error, rand::random::<f64>()) else {
            return self.fail(myself, error.class, error.message).await;
        };
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.persist(vec![EventKind::ProviderRetry {
            attempt: next,
            max_attempts: policy.max_attempts,
            delay_ms,
            error,
        }])
        .await?;
        self.attempt = next;
        let me = myself.clone();
        let request = self.request_number;
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let _ = me.cast(TurnMsg::RetryElapsed { request });
        });
        self.phase = Phase::Backoff {
            _timer: AbortOnDropHandle::new(task),
        };
        Ok(())
    }

    /// The provider said the input is too long: compact once per turn (trigger
    /// `overflow`) and re-run the step; otherwise end the turn `failed/context_overflow`.
    async fn on_overflow(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        error: ProviderError,
    ) -> Result<(), ActorProcessingErr> {
        if !self.auto_compact() {
            let message = format!(
                "{} (automatic compaction is off; send /compact or start a new session)",
                error.message
            );
            return self.fail(myself, error.class, message).await;
        }
        if self.overflow_used {
            return self.fail(myself, error.class, error.message).await;
        }
        self.overflow_used = true;
        self.begin_compaction(myself, Trigger::Overflow).await
    }

    /// Stops everything running and writes the cancelled end of the turn.
    pub(super) async fn on_cancel(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        reason: String,
    ) -> Result<(), ActorProcessingErr> {
        self.args.cancel.cancel();
        if let Some(provider) = self.provider.take() {
            provider.kill();
        }
        let mut kinds = Vec::new();
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Streaming => {
                self.close_relay();
                let agg = &self.aggregate;
                if !agg.text.is_empty() || !agg.reasoning.is_empty() {
                    kinds.push(EventKind::AssistantMessage(AssistantMessage {
                        text: agg.text.clone(),
                        reasoning: agg.reasoning.clone(),
                        reasoning_parts: agg.reasoning_parts.clone(),
                        interrupted: true,
                        ..AssistantMessage::default()
                    }));
                }
            }
            Phase::Tools(mut run) => {
                run.kill_all();
                kinds.extend(
                    run.cancel_remaining()
                        .into_iter()
                        .map(EventKind::ToolMessage),
                );
            }
            Phase::Backoff { .. } | Phase::Compacting(_) | Phase::Hooks { .. } | Phase::Done => {}
        }
        kinds.push(EventKind::TurnCancelled { reason });
        self.finish(myself, kinds, TurnStatus::Cancelled, None, None)
            .await
    }
}

//! Per-step context of the TurnActor: compiles the committed log with the context
//! compiler before every model request, persists `context_diagnostics`, decides between
//! sending and compacting first, and keeps the calibration of the token estimate.
//!
//! A retry re-sends the request it already built (no recompilation, no new diagnostics).

use super::TurnMsg;
use super::actor::{Phase, Turn};
use crate::context::{
    self, Calibration, CompileInput, CompiledContext, ContextError, Environment, ModelLimits,
};
use crate::provider::ModelRequest;
use crate::provider::actor::{ProviderActor, ProviderArgs};
use crate::provider::relay::Relay;
use foya_protocol::{ErrorClass, Event, EventKind, StreamAggregate};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a compaction runs (the `trigger` of `compaction_started`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The estimate crossed the threshold before a step.
    Threshold,
    /// `/compact`.
    Manual,
    /// The provider reported `context_overflow`.
    Overflow,
}

impl Trigger {
    /// The persisted name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Threshold => "threshold",
            Self::Manual => "manual",
            Self::Overflow => "overflow",
        }
    }
}

/// The environment a turn shows the model: cwd, OS, `$SHELL` (file name; `sh` when
/// unset) and today's date (UTC, `YYYY-MM-DD`).
pub(super) fn environment(cwd: &std::path::Path) -> Environment {
    let shell = std::env::var("SHELL")
        .ok()
        .and_then(|s| {
            std::path::Path::new(&s)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "sh".into());
    Environment {
        cwd: cwd.to_path_buf(),
        os: std::env::consts::OS.into(),
        shell,
        date: today_utc(),
    }
}

/// Today's UTC date as `YYYY-MM-DD` (civil-from-days, proleptic Gregorian).
fn today_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

impl Turn {
    /// The model's limits with the runtime's threshold.
    pub(super) fn limits(&self) -> ModelLimits {
        let client = self.client();
        let mut limits = ModelLimits::new(client.context_window());
        limits.compact_threshold_pct = self.args.deps.context.compact_threshold_pct.clamp(1, 100);
        limits.supports_images = client.supports_images();
        limits.images = client.image_budget();
        limits
    }

    /// Whether the runtime may compact on its own: on for the runtime
    /// (`ContextOptions::auto_compact`) and for the session (`SessionConfig::auto_compact`).
    pub(super) fn auto_compact(&self) -> bool {
        self.args.deps.context.auto_compact && self.args.config.auto_compact
    }

    /// The session's model client.
    pub(super) fn client(&self) -> std::sync::Arc<dyn crate::provider::ModelClient> {
        self.args.deps.client_for(&self.args.config.provider)
    }

    /// The compile input of this step for `events` (a session log in seq order).
    fn compile_input<'a>(
        &'a self,
        events: &'a [Event],
        touched_paths: &'a std::collections::BTreeSet<std::path::PathBuf>,
    ) -> CompileInput<'a> {
        CompileInput {
            config: &self.args.config,
            project: &self.args.project,
            env: &self.env,
            history: events,
            touched_paths,
            tools: &self.tools,
            limits: self.limits(),
            calibration: self.calibration,
            attachments: self.args.deps.attachments.as_deref(),
        }
    }

    /// Compiles `events` (a session log in seq order) for this step, folding them whole.
    pub(super) fn compile_events(&self, events: &[Event]) -> Result<CompiledContext, ContextError> {
        let touched = context::touched_paths(events);
        context::compile(&self.compile_input(events, &touched))
    }

    /// Compiles the session's committed log as it is now, folding only the events
    /// appended since the last compile (the log's [`context::HistoryFold`]); also the
    /// number of events compiled (the prefix a retry rebuilds the request from).
    pub(super) fn compile_log(&self) -> (Result<CompiledContext, ContextError>, usize) {
        self.args.log.with_fold(|events, fold| {
            let input = self.compile_input(events, fold.touched_paths());
            (context::compile_folded(&input, fold), events.len())
        })
    }

    /// The model request for a compiled context: the context plus the turn-control
    /// adjustments and resolved images. Deterministic in its inputs, so a retry rebuilds
    /// exactly the request it retries instead of keeping a copy.
    fn build_request(&self, compiled: CompiledContext) -> ModelRequest {
        let mut request = ModelRequest {
            model: self.args.config.model.clone(),
            system: compiled.system,
            messages: compiled.messages,
            tools: compiled.tools,
            ..ModelRequest::default()
        };
        self.adjust_request(&mut request);
        crate::attachments::with_images(self.args.deps.attachments.as_deref(), request)
    }

    /// Ends the turn for a compile error (`invalid_request`, the error's message).
    pub(super) async fn fail_context(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        error: &ContextError,
    ) -> Result<(), ActorProcessingErr> {
        self.fail(myself, ErrorClass::InvalidRequest, error.to_string())
            .await
    }

    /// Compiles the step's context from the committed log; compacts first when the
    /// estimate is over the threshold and the history is large enough to shrink (once
    /// per step, when automatic compaction is on), else persists `context_diagnostics{decision: send}` and sends the request.
    pub(super) async fn start_request(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let (compiled, compiled_len) = self.compile_log();
        let compiled = match compiled {
            Ok(c) => c,
            Err(e) => return self.fail_context(myself, &e).await,
        };
        let history_tokens = compiled.sections.get("history").copied().unwrap_or(0);
        let raw_total: u64 = compiled.sections.values().sum();
        // Over the threshold with a history too small to shrink (the fixed part dominates
        // a small window): send; the provider judges whether it fits.
        let compact = compiled.budget.over_threshold
            && self.auto_compact()
            && !self.compacted_in_step
            && context::can_shrink(raw_total, history_tokens, super::compaction::MIN_SAVING_PCT);
        let decision = if compact { "compact" } else { "send" };
        self.persist(vec![EventKind::ContextDiagnostics {
            step: self.step,
            sections: compiled.sections.clone(),
            estimated_input_tokens: compiled.budget.estimated_input_tokens,
            window: compiled.budget.window,
            reserve: compiled.budget.reserve,
            decision: decision.into(),
        }])
        .await?;
        if compact {
            return self.begin_compaction(myself, Trigger::Threshold).await;
        }
        self.last_estimate = compiled.sections.values().sum();
        self.request_history_len = Some(compiled_len);
        let request = self.build_request(compiled);
        self.send(myself, request).await
    }

    /// Re-sends the step's last request (a retry): rebuilt from the same history prefix,
    /// so it is the request already sent (the events persisted since, such as
    /// `provider_retry`, are not part of it); compiles a new one if there is none.
    pub(super) async fn resend(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let Some(len) = self.request_history_len else {
            return self.start_request(myself).await;
        };
        let compiled = {
            let log = self.args.log.read();
            self.compile_events(&log[..len.min(log.len())])
        };
        match compiled {
            Ok(compiled) => {
                let request = self.build_request(compiled);
                self.send(myself, request).await
            }
            Err(e) => self.fail_context(myself, &e).await,
        }
    }

    /// Spawns a ProviderActor for `request` on the session's client; phase `Streaming`.
    async fn send(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        request: ModelRequest,
    ) -> Result<(), ActorProcessingErr> {
        self.phase = Phase::Streaming;
        let client = self.client();
        self.spawn_provider(myself, client, request, true).await
    }

    /// Spawns a linked ProviderActor for `request` under a new request number; with
    /// `relay` (a step's request) its deltas are published live through a fresh
    /// [`Relay`], otherwise its events come back to this actor.
    pub(super) async fn spawn_provider(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        client: std::sync::Arc<dyn crate::provider::ModelClient>,
        request: ModelRequest,
        relay: bool,
    ) -> Result<(), ActorProcessingErr> {
        self.request_number += 1;
        self.aggregate = StreamAggregate::new();
        self.relay = relay.then(|| Relay::new(self.args.session.clone(), self.args.run_id));
        let args = ProviderArgs {
            client,
            request,
            cancel: self.args.cancel.child_token(),
            turn: myself.clone(),
            request_number: self.request_number,
            relay: self.relay.clone(),
        };
        let (provider, _) =
            Actor::spawn_linked(None, ProviderActor, args, myself.get_cell()).await?;
        self.provider = Some(provider);
        Ok(())
    }

    /// Updates the calibration from the usage the provider reported for the last request.
    pub(super) fn calibrate(&mut self, reported_input_tokens: u64) {
        self.calibration = Calibration::from_usage(self.last_estimate, reported_input_tokens);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn today_is_a_date() {
        let d = super::today_utc();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
        assert_eq!((&d[4..5], &d[7..8]), ("-", "-"));
    }
}

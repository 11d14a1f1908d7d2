//! The TurnActor's context I/O: compiles the committed log with the context compiler
//! for a step (the machine gets the measures, the driver keeps the context), builds and
//! sends model requests (a retry rebuilds the same request from the same history
//! prefix), and measures the log, builds the summarisation request and the checkpoint
//! of a compaction. Keeps the calibration of the token estimate.

use super::TurnMsg;
use super::actor::Turn;
use super::machine::{Measured, Prepared, RequestShape, Trigger, TurnInput};
use super::provider::relay::Relay;
use super::provider::stream::{ProviderArgs, spawn_stream};
use crate::context::{
    self, COMPACTION_SYSTEM_PROMPT, CompileInput, CompiledContext, ContextError, ModelLimits,
    estimate_tokens,
};
use crate::provider::ModelRequest;
use foya_protocol::{Event, EventKind, Seq, StreamAggregate};
use ractor::ActorRef;

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
            env: &self.io.env,
            history: events,
            touched_paths,
            tools: &self.io.tools,
            limits: self.limits(),
            calibration: self.io.calibration,
            attachments: self
                .args
                .deps
                .attachments
                .as_deref()
                .map(|store| store as &dyn crate::context::AttachmentSizes),
        }
    }

    /// Compiles `events` (a session log in seq order) for this step, folding them whole.
    fn compile_events(&self, events: &[Event]) -> Result<CompiledContext, ContextError> {
        let touched = context::touched_paths(events);
        context::compile(&self.compile_input(events, &touched))
    }

    /// Compiles the session's committed log as it is now, folding only the events
    /// appended since the last compile (the log's [`context::HistoryFold`]); also the
    /// number of events compiled (the prefix a retry rebuilds the request from).
    fn compile_log(&self) -> (Result<CompiledContext, ContextError>, usize) {
        self.args.log.with_fold(|events, fold| {
            let input = self.compile_input(events, fold.touched_paths());
            (context::compile_folded(&input, fold), events.len())
        })
    }

    /// Compiles the step's context; the machine gets its measures, the driver keeps it
    /// for the request.
    pub(super) fn compile_step(&mut self) -> TurnInput {
        let (compiled, history_len) = self.compile_log();
        match compiled {
            Ok(c) => {
                let measured = Measured {
                    sections: c.sections.clone(),
                    estimated_input_tokens: c.budget.estimated_input_tokens,
                    window: c.budget.window,
                    reserve: c.budget.reserve,
                    over_threshold: c.budget.over_threshold,
                    history_len,
                };
                self.io.compiled = Some(c);
                TurnInput::ContextCompiled(measured)
            }
            Err(e) => TurnInput::ContextFailed(e.to_string()),
        }
    }

    /// The model request for a compiled context, shaped, with resolved images.
    /// Deterministic in its inputs, so a retry rebuilds exactly the request it retries.
    fn build_request(&self, compiled: CompiledContext, shape: &RequestShape) -> ModelRequest {
        let mut request = ModelRequest {
            model: self.args.config.model.clone(),
            system: compiled.system,
            messages: compiled.messages,
            tools: compiled.tools,
            ..ModelRequest::default()
        };
        shape.apply(&mut request);
        crate::attachments::with_images(self.args.deps.attachments.as_deref(), request)
    }

    /// Sends request `number`: the context compiled last, or (a retry) the one rebuilt
    /// from the first `rebuild_from` log events. `ContextFailed` when it cannot be built.
    pub(super) fn start_stream(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        number: u64,
        rebuild_from: Option<usize>,
        shape: &RequestShape,
    ) -> Option<TurnInput> {
        let compiled = match rebuild_from {
            None => match self.io.compiled.take() {
                Some(compiled) => {
                    self.io.last_estimate = compiled.sections.values().sum();
                    Ok(compiled)
                }
                None => Err("no compiled context to send".to_owned()),
            },
            Some(len) => {
                let log = self.args.log.read();
                self.compile_events(&log[..len.min(log.len())])
                    .map_err(|e| e.to_string())
            }
        };
        let compiled = match compiled {
            Ok(compiled) => compiled,
            Err(message) => return Some(TurnInput::ContextFailed(message)),
        };
        let request = self.build_request(compiled, shape);
        let client = self.client();
        self.spawn_provider(myself, client, request, number, true);
        None
    }

    /// Starts the stream task of request `number`; with `relay` (a step's request) its
    /// deltas are published live through a fresh [`Relay`], otherwise its events come
    /// back to this actor.
    fn spawn_provider(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        client: std::sync::Arc<dyn crate::provider::ModelClient>,
        request: ModelRequest,
        number: u64,
        relay: bool,
    ) {
        self.io.summary = StreamAggregate::new();
        self.io.relay = relay.then(|| Relay::new(self.args.session.clone(), self.args.run_id));
        let args = ProviderArgs {
            client,
            request,
            cancel: self.args.cancel.child_token(),
            turn: myself.clone(),
            request_number: number,
            relay: self.io.relay.clone(),
            step: relay.then_some(crate::provider::StepOf {
                session: self.args.session_id,
                run: self.args.run_id,
            }),
        };
        self.io.provider = Some((spawn_stream(args), number));
    }

    /// Measures the committed log for a compaction and keeps it for the summary.
    pub(super) fn prepare_compaction(&mut self, _trigger: Trigger) -> TurnInput {
        let compiled = match self.compile_log().0 {
            Ok(c) => c,
            Err(e) => return TurnInput::ContextFailed(e.to_string()),
        };
        let events = self.args.log.read().clone();
        let limits = self.limits();
        let prepared = Prepared {
            tokens_before: compiled.budget.estimated_input_tokens,
            history_tokens: compiled.sections.get("history").copied().unwrap_or(0),
            raw_total: compiled.sections.values().sum(),
            empty_history: context::history(&events).is_empty(),
            budget: limits
                .context_window
                .saturating_sub(limits.reserved_output)
                .saturating_sub(estimate_tokens(COMPACTION_SYSTEM_PROMPT)),
        };
        self.io.compaction_log = events;
        TurnInput::CompactionPrepared(prepared)
    }

    /// Sends summarisation request `number` of the prepared log within `budget`; after
    /// an overflow without image bytes. Never relayed to clients.
    pub(super) fn start_summary(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        number: u64,
        budget: u64,
        trigger: Trigger,
    ) {
        let mut messages = context::compaction_request(&self.io.compaction_log, budget);
        if trigger == Trigger::Overflow {
            messages = context::without_images(messages);
        }
        let request = ModelRequest {
            model: self.args.config.model.clone(),
            system: COMPACTION_SYSTEM_PROMPT.into(),
            messages: messages.into(),
            ..ModelRequest::default()
        };
        let client = self.args.deps.aux_client_for(&self.args.config.provider);
        self.spawn_provider(myself, client, request, number, false);
    }

    /// Builds the checkpoint of `summary` over the prepared log and measures the
    /// context it leaves.
    pub(super) fn build_checkpoint(
        &mut self,
        summary: String,
        history_tokens: u64,
        tokens_before: u64,
        trigger: Trigger,
    ) -> TurnInput {
        let events = std::mem::take(&mut self.io.compaction_log);
        let keep_budget = (self.limits().context_window / 10).min(history_tokens / 4);
        let kept = if trigger == Trigger::Overflow {
            // The provider refused the request as too large (an overflow or a 413):
            // image bytes are the likeliest cause and are not re-sent; a line names each,
            // and what is kept is measured without them.
            context::checkpoint_kept_without_images(&events, keep_budget)
        } else {
            context::checkpoint_kept(&events, keep_budget)
        };
        let covers_up_to = events.last().map_or(Seq(0), |e| e.seq);
        let checkpoint = EventKind::CompactionCheckpoint {
            summary,
            covers_up_to,
            tokens_before,
            tokens_after: 0,
            kept,
        };
        let mut after = events;
        after.push(Event {
            session_id: self.args.session_id,
            seq: Seq(covers_up_to.0 + 1),
            run_id: Some(self.args.run_id),
            at_ms: 0,
            kind: checkpoint.clone(),
        });
        match self.compile_events(&after) {
            Ok(compiled) => TurnInput::CheckpointBuilt {
                checkpoint,
                tokens_after: compiled.budget.estimated_input_tokens,
            },
            Err(e) => TurnInput::ContextFailed(e.to_string()),
        }
    }
}

/// The compiler reads the sizes of stored images from the runtime's attachment store.
impl crate::context::AttachmentSizes for crate::attachments::AttachmentStore {
    fn size(&self, id: &str) -> Option<u64> {
        Self::size(self, id)
    }
}

//! The TurnActor's handlers: step loop, provider relay, retries, cancellation.

use super::compaction::Compaction;
use super::context::Trigger;
use super::tools::ToolRun;
use super::{TurnMode, TurnMsg};
use crate::context::{Calibration, Environment, ProjectContext};
use crate::kernel::RuntimeDeps;
use crate::provider::actor::ProviderMsg;
use crate::provider::relay::Relay;
use crate::session::SessionMsg;
use crate::task::AbortOnDropHandle;
use foya_protocol::{
    ErrorClass, ErrorInfo, EventKind, FinishReason, ProviderError, RunId, SessionConfig, SessionId,
    StreamAggregate, StreamEvent, TurnStatus,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The TurnActor.
#[derive(Debug)]
pub(crate) struct TurnActor;

/// What a TurnActor is started with (by its session, after `turn_started` is committed).
#[derive(Debug)]
pub(crate) struct TurnArgs {
    pub session: ActorRef<SessionMsg>,
    /// The session's committed log (the turn compiles every step from it).
    pub log: crate::session::log::SharedLog,
    pub deps: Arc<RuntimeDeps>,
    pub session_id: SessionId,
    pub config: SessionConfig,
    pub run_id: RunId,
    pub cancel: CancellationToken,
    /// Project files, loaded once for this turn.
    pub project: Arc<ProjectContext>,
    /// Step loop or manual compaction.
    pub mode: TurnMode,
    /// The session's first turn in this runtime (its `SessionStart` hooks run).
    pub first_in_runtime: bool,
}

/// Where the turn is.
#[derive(Debug)]
pub(super) enum Phase {
    /// Waiting for the model's stream.
    Streaming,
    /// Waiting out a backoff before retrying the request.
    Backoff {
        /// The timer task; dropping it (cancel, actor gone) stops the wait.
        _timer: AbortOnDropHandle<()>,
    },
    /// Running the step's tool calls.
    Tools(ToolRun),
    /// Waiting for a summarisation request (session phase `compacting`).
    Compacting(Compaction),
    /// Waiting for the stop hooks.
    Hooks {
        /// The hook task; dropping it (cancel, actor gone) kills running hooks.
        _task: AbortOnDropHandle<()>,
    },
    /// `turn_complete` is written.
    Done,
}

/// The TurnActor's state.
#[derive(Debug)]
pub(crate) struct Turn {
    pub(super) args: TurnArgs,
    pub(super) step: u32,
    pub(super) attempt: u32,
    pub(super) request_number: u64,
    pub(super) provider: Option<ActorRef<ProviderMsg>>,
    /// The aggregate of the last finished (or cancelled) request: taken from its relay
    /// (a step) or folded here (summarisation).
    pub(super) aggregate: StreamAggregate,
    /// The relay of the step's request in flight.
    pub(super) relay: Option<Relay>,
    pub(super) phase: Phase,
    /// The turn's environment (cwd, OS, shell, date).
    pub(super) env: Environment,
    /// Calibration from the last reported usage.
    pub(super) calibration: Calibration,
    /// Uncalibrated estimate of the last request sent.
    pub(super) last_estimate: u64,
    /// Whether this turn already compacted for a `context_overflow`.
    pub(super) overflow_used: bool,
    /// Whether this step already compacted (threshold compaction runs once per step).
    pub(super) compacted_in_step: bool,
    /// How many events of the session log the step's request was compiled from; a retry
    /// rebuilds the same request from that prefix (`None`: no request in this step yet).
    pub(super) request_history_len: Option<usize>,
    /// The tool schemas this step offers (the approval mode is fixed for the turn; MCP
    /// servers may change their tools between steps, see `turn/mcp.rs`).
    pub(super) tools: crate::context::ToolSet,
    /// The tools this step validates and runs: the runtime's, plus the MCP tools of
    /// the session's servers.
    pub(super) registry: std::sync::Arc<crate::tools::ToolRegistry>,
    /// Which MCP listings `registry` was built from (see `McpTools::key`).
    pub(super) mcp_key: Option<crate::mcp::ListingKey>,
    pub(super) control: super::control::Control,
    /// Events not written yet (the step's `step_started`): [`Turn::persist`] puts them
    /// before the events it writes next, one append instead of two. The compiler does
    /// not read them.
    pub(super) pending: Vec<EventKind>,
}

impl Turn {
    /// Persists events of this turn through the session (waits for the commit). The
    /// [`Turn::pending`] events go first, in the same append.
    pub(super) async fn persist(
        &mut self,
        mut kinds: Vec<EventKind>,
    ) -> Result<(), ActorProcessingErr> {
        if !self.pending.is_empty() {
            let mut all = std::mem::take(&mut self.pending);
            all.append(&mut kinds);
            kinds = all;
        }
        if kinds.is_empty() {
            return Ok(());
        }
        let run_id = self.args.run_id;
        let result = self
            .args
            .session
            .call(
                |reply| SessionMsg::Append {
                    run_id,
                    kinds,
                    reply: Some(reply),
                },
                None,
            )
            .await?;
        match result {
            ractor::rpc::CallResult::Success(Ok(())) => Ok(()),
            ractor::rpc::CallResult::Success(Err(e)) => Err(e.into()),
            ractor::rpc::CallResult::Timeout | ractor::rpc::CallResult::SenderError => {
                Err("the session did not answer an append".into())
            }
        }
    }

    pub(super) async fn finish(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        mut kinds: Vec<EventKind>,
        status: TurnStatus,
        reason: Option<String>,
        error: Option<ErrorInfo>,
    ) -> Result<(), ActorProcessingErr> {
        self.phase = Phase::Done;
        self.end_sub_agent_scope();
        kinds.push(EventKind::TurnComplete {
            status,
            reason,
            error,
        });
        self.persist(kinds).await?;
        myself.stop(None);
        Ok(())
    }

    pub(super) async fn fail(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        class: ErrorClass,
        message: String,
    ) -> Result<(), ActorProcessingErr> {
        let error = ErrorInfo { class, message };
        self.finish(
            myself,
            Vec::new(),
            TurnStatus::Failed,
            Some(class.as_str().into()),
            Some(error),
        )
        .await
    }

    /// Starts the next step, or ends the turn at `max_steps`.
    #[tracing::instrument(
        name = "step",
        skip_all,
        fields(session.id = %self.args.session_id, turn.run_id = %self.args.run_id, step = self.step + 1)
    )]
    pub(super) async fn start_step(
        &mut self,
        myself: &ActorRef<TurnMsg>,
    ) -> Result<(), ActorProcessingErr> {
        if self.before_step(myself).await? {
            return Ok(());
        }
        self.refresh_mcp_tools().await;
        self.step += 1;
        self.attempt = 1;
        self.compacted_in_step = false;
        self.request_history_len = None;
        // `step_started` is written with the step's next event (its
        // `context_diagnostics`, or `compaction_started`), one append instead of two.
        self.pending
            .push(EventKind::StepStarted { step: self.step });
        self.start_request(myself).await
    }

    /// Closes the relay of the request in flight (if any): its aggregate becomes
    /// [`Turn::aggregate`], and it folds and publishes nothing more.
    pub(super) fn close_relay(&mut self) {
        if let Some(relay) = self.relay.take() {
            self.aggregate = relay.close();
        }
    }

    /// The relayed stream of request `request` ended with `event`: the response, or the
    /// provider's error.
    async fn on_stream_end(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        request: u64,
        event: StreamEvent,
    ) -> Result<(), ActorProcessingErr> {
        if request != self.request_number || !matches!(self.phase, Phase::Streaming) {
            return Ok(());
        }
        self.close_relay();
        match event {
            StreamEvent::Error { error } => self.on_provider_error(myself, error).await,
            _ => self.on_response(myself).await,
        }
    }

    /// Commits the assistant message (before any tool starts), then tools or the end.
    async fn on_response(&mut self, myself: &ActorRef<TurnMsg>) -> Result<(), ActorProcessingErr> {
        self.provider = None;
        let mut message = self.aggregate.to_message();
        self.adjust_message(&mut message);
        let last_text = message.text.clone();
        let calls = message.tool_calls.clone();
        let wants_tools =
            message.finish_reason == Some(FinishReason::ToolCalls) && !calls.is_empty();
        let mut kinds = vec![EventKind::AssistantMessage(message)];
        if let Some(usage) = self.aggregate.usage {
            self.calibrate(usage.input_tokens);
            kinds.push(EventKind::Usage(usage));
        }
        if !wants_tools {
            return self.on_stop(myself, kinds, last_text).await;
        }
        self.run_calls(myself, kinds, calls).await
    }
}

impl Actor for TurnActor {
    type Msg = TurnMsg;
    type State = Turn;
    type Arguments = TurnArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TurnMsg>,
        args: TurnArgs,
    ) -> Result<Turn, ActorProcessingErr> {
        myself.cast(TurnMsg::Begin)?;
        let env = super::context::environment(&args.config.cwd);
        let args_limits = args.deps.control.protection;
        Ok(Turn {
            env,
            calibration: Calibration::default(),
            last_estimate: 0,
            overflow_used: false,
            compacted_in_step: false,
            request_history_len: None,
            tools: args.deps.tools.tool_set(args.config.approval_mode),
            registry: std::sync::Arc::clone(&args.deps.tools),
            mcp_key: None,
            args,
            step: 0,
            attempt: 1,
            request_number: 0,
            provider: None,
            aggregate: StreamAggregate::new(),
            relay: None,
            phase: Phase::Streaming,
            control: super::control::Control::new(args_limits),
            pending: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TurnMsg>,
        msg: TurnMsg,
        state: &mut Turn,
    ) -> Result<(), ActorProcessingErr> {
        if matches!(state.phase, Phase::Done) {
            return Ok(());
        }
        match msg {
            TurnMsg::Begin => {
                if state.args.cancel.is_cancelled() {
                    return state.on_cancel(&myself, "user".into()).await;
                }
                match state.args.mode {
                    TurnMode::Model => state.begin(&myself).await,
                    TurnMode::Compact => state.begin_compaction(&myself, Trigger::Manual).await,
                }
            }
            TurnMsg::Stream { request, events } => {
                if matches!(state.phase, Phase::Compacting(_)) {
                    for event in events {
                        state.on_compaction_stream(&myself, request, event).await?;
                    }
                }
                Ok(())
            }
            TurnMsg::StreamEnded { request, event } => {
                state.on_stream_end(&myself, request, event).await
            }
            TurnMsg::RetryElapsed { request } => {
                if request == state.request_number && matches!(state.phase, Phase::Backoff { .. }) {
                    state.resend(&myself).await?;
                }
                Ok(())
            }
            TurnMsg::ToolDone {
                index,
                result,
                duration_ms,
            } => state.tool_done(&myself, index, result, duration_ms).await,
            TurnMsg::Cancel { reason } => state.on_cancel(&myself, reason).await,
            TurnMsg::HookDone { run } => state.hook_done(&myself, run).await,
            TurnMsg::HookStopped { reason } => {
                state.hook_stopped(reason);
                Ok(())
            }
            #[cfg(test)]
            TurnMsg::Panic => panic!("test-induced TurnActor panic"),
        }
    }

    /// Policy: a ProviderActor crash is a `stream_interrupted` failure of the request
    /// (retried like one); a ToolActor crash is an `is_error` "tool crashed" result;
    /// normal exits are expected (results arrive by message). The turn never stops
    /// because a child did.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<TurnMsg>,
        event: SupervisionEvent,
        state: &mut Turn,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, err) => {
                let is_provider = state
                    .provider
                    .as_ref()
                    .is_some_and(|p| p.get_id() == cell.get_id());
                if is_provider && matches!(state.phase, Phase::Streaming) {
                    state.close_relay();
                    let error = ProviderError::new(
                        ErrorClass::StreamInterrupted,
                        format!("the provider actor crashed: {err}"),
                    );
                    return state.on_provider_error(&myself, error).await;
                }
                if is_provider && matches!(state.phase, Phase::Compacting(_)) {
                    let error = ProviderError::new(
                        ErrorClass::StreamInterrupted,
                        format!("the provider actor crashed: {err}"),
                    );
                    return state.on_compaction_error(&myself, error).await;
                }
                if let Phase::Tools(run) = &mut state.phase
                    && let Some(index) = run.index_of(cell.get_id())
                {
                    let result = run.crashed(index);
                    return state.tool_done(&myself, index, result, None).await;
                }
                Ok(())
            }
            SupervisionEvent::ActorTerminated(..)
            | SupervisionEvent::ActorStarted(_)
            | SupervisionEvent::ProcessGroupChanged(_)
            | SupervisionEvent::PidLifecycleEvent(_) => Ok(()),
        }
    }
}

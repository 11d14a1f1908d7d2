//! The TurnActor: a thin driver of the turn machine (`machine/`). It owns the I/O —
//! session appends, model streams (a task each) and their relays, ToolActors, the
//! backoff timer, hook tasks, context compilation (which reads the session's log) —
//! carries out the machine's effects and feeds their results back as inputs. It
//! decides nothing.
//!
//! Appends are merged: back-to-back [`TurnEffect::Append`]s (with the `tool_started` of
//! the calls a [`TurnEffect::CheckCalls`] lets run at once) go into one commit, written
//! before the next effect that needs it (anything but an append or a check) or at the
//! end of the message. The mailbox never waits on a stream, a tool, a backoff or a hook (children
//! or tasks that report by message), so `Cancel` is handled at once. Once the turn's
//! token fired, the driver starts nothing new (the `Cancel` that follows writes the
//! end) and tells the machine ([`TurnInput::CancelRequested`]).

use super::machine::{HookPoints, StreamOutcome, TurnConfig, TurnEffect, TurnInput, TurnMachine};
use super::port::Port;
use super::provider::relay::Relay;
use super::tool::ToolMsg;
use super::tool::actor::PartialOutput;
use super::{TurnMode, TurnMsg};
use crate::context::{Calibration, Environment, ProjectContext};
use crate::kernel::RuntimeDeps;
use crate::task::AbortOnDropHandle;
use foya_protocol::{
    ErrorClass, Event, EventKind, ProviderError, RunId, SessionConfig, SessionId, StreamAggregate,
    StreamEvent,
};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The TurnActor.
#[derive(Debug)]
pub(crate) struct TurnActor;

/// What a TurnActor is started with (by its session, after `turn_started` is committed).
#[derive(Debug)]
pub(crate) struct TurnArgs {
    /// The session that runs the turn.
    pub session: Port,
    /// The session's committed log (the turn compiles every step from it).
    pub log: crate::log::SharedLog,
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

/// The TurnActor's state: the machine and the I/O it drives.
#[derive(Debug)]
pub(crate) struct Turn {
    pub(super) args: TurnArgs,
    machine: TurnMachine,
    pub(super) io: Io,
}

/// What the driver holds for the machine's effects.
#[derive(Debug)]
pub(crate) struct Io {
    /// The turn's environment (cwd, OS, shell, date).
    pub(super) env: Environment,
    /// Calibration from the last reported usage.
    pub(super) calibration: Calibration,
    /// Uncalibrated estimate of the last request sent.
    pub(super) last_estimate: u64,
    /// The tool schemas this step offers (the approval mode is fixed for the turn; MCP
    /// servers may change their tools between steps, see `turn/mcp.rs`).
    pub(super) tools: crate::context::ToolSet,
    /// The tools this step validates and runs: the runtime's plus the MCP tools.
    pub(super) registry: Arc<crate::tools::ToolRegistry>,
    /// Which MCP listings `registry` was built from (see `McpTools::key`).
    #[cfg(feature = "mcp")]
    pub(super) mcp_key: Option<crate::mcp::ListingKey>,
    /// Appends not committed yet: written in the next commit.
    pending: Vec<EventKind>,
    /// The stream task of the request in flight, with the request's number.
    pub(super) provider: Option<(AbortOnDropHandle<()>, u64)>,
    /// The relay of the step's request in flight.
    pub(super) relay: Option<Relay>,
    /// The summarisation request's stream so far.
    pub(super) summary: StreamAggregate,
    /// The context compiled last (sent by the next `StartStream` without rebuild).
    pub(super) compiled: Option<crate::context::CompiledContext>,
    /// The log a compaction summarises (as it was when prepared).
    pub(super) compaction_log: Vec<Event>,
    /// Running ToolActors: call index and actor.
    pub(super) running: HashMap<ActorId, (usize, ActorRef<ToolMsg>)>,
    /// The pool's idle ToolActors (each finished its last call; none crashed or killed).
    pub(super) idle_tools: Vec<ActorRef<ToolMsg>>,
    /// The step's checked calls, by call index.
    pub(super) calls: Vec<Option<super::tools::StepCall>>,
    /// A call's hooks or approval question in flight, by call index.
    pub(super) call_tasks: HashMap<usize, AbortOnDropHandle<()>>,
    /// The session's log exported for this batch's tool hooks (empty: not exported).
    pub(super) transcript_path: std::path::PathBuf,
    /// The working directory's protected paths, as the last check saw them.
    pub(super) protected: Option<crate::tools::protected::Protected>,
    /// Live output of the step's started calls, by call index (kept for a cancel).
    pub(super) partials: Vec<Option<PartialOutput>>,
    /// The step `partials` belong to.
    pub(super) partials_step: u32,
    /// The backoff timer task.
    timer: Option<AbortOnDropHandle<()>>,
    /// The running hooks' task.
    pub(super) hooks: Option<AbortOnDropHandle<()>>,
    /// Keeps the `agent` tool's counters of this turn (from the first tool step until
    /// the turn ends).
    pub(super) sub_agents: Option<crate::tools::builtin::agent::TurnScope>,
}

impl Turn {
    /// Commits the pending appends through the session (waits for the commit).
    pub(super) async fn flush(&mut self) -> Result<(), ActorProcessingErr> {
        if self.io.pending.is_empty() {
            return Ok(());
        }
        let kinds = std::mem::take(&mut self.io.pending);
        let run_id = self.args.run_id;
        self.args.session.append(run_id, kinds).await
    }

    /// Feeds `input` to the machine and carries out its effects, feeding the results
    /// of synchronous effects back, until nothing is left; then commits what is pending.
    async fn feed(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        input: TurnInput,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed, so that only a message being handled holds this (large) future: ractor
        // keeps an actor's message loop, with every handler future inlined, in one
        // allocation for the actor's whole life.
        Box::pin(self.feed_effects(myself, input)).await
    }

    /// [`Self::feed`]'s work, unboxed.
    async fn feed_effects(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        input: TurnInput,
    ) -> Result<(), ActorProcessingErr> {
        let mut next = Some(input);
        while let Some(input) = next.take() {
            for effect in self.machine.on(input) {
                if let Some(result) = self.execute(myself, effect).await? {
                    next = Some(result);
                }
            }
        }
        self.flush().await
    }

    /// Carries out one effect; the input it answers with at once, if any.
    async fn execute(
        &mut self,
        myself: &ActorRef<TurnMsg>,
        effect: TurnEffect,
    ) -> Result<Option<TurnInput>, ActorProcessingErr> {
        if let TurnEffect::Append(kinds) = effect {
            self.io.pending.extend(kinds);
            return Ok(None);
        }
        if let TurnEffect::CheckCalls { step, calls } = effect {
            // Answered at once; the `tool_started` it leads to join the pending appends.
            return Ok(Some(self.check_calls(step, calls)));
        }
        if matches!(effect, TurnEffect::Finish) {
            // Forget the turn's sub-agent counters before its end is visible (dropping
            // the turn would too, but later).
            self.io.sub_agents = None;
        }
        match self.flush().await {
            // The session refuses a cancelled turn's tool activity (`tool_started`):
            // the `Cancel` that follows writes the call's "cancelled" result.
            Err(_)
                if self.args.cancel.is_cancelled()
                    && matches!(effect, TurnEffect::RunTool { .. }) =>
            {
                return Ok(None);
            }
            result => result?,
        }
        let starts = matches!(
            effect,
            TurnEffect::RunHooks(_)
                | TurnEffect::StartStream { .. }
                | TurnEffect::StartTimer { .. }
                | TurnEffect::StartSummary { .. }
                | TurnEffect::RunToolHook { .. }
                | TurnEffect::AskApproval { .. }
                | TurnEffect::RunTool { .. }
        );
        if starts && self.args.cancel.is_cancelled() {
            // The `Cancel` that follows ends the turn.
            return Ok(None);
        }
        Ok(match effect {
            TurnEffect::Append(_) | TurnEffect::CheckCalls { .. } => None,
            TurnEffect::RunToolHook { index, hook } => {
                self.run_tool_hook(myself, index, hook);
                None
            }
            TurnEffect::AskApproval {
                index,
                action,
                reason,
                grant_key,
            } => {
                self.ask_approval(myself, index, action, reason, grant_key);
                None
            }
            TurnEffect::RunTool { index, sandbox } => {
                self.run_tool(myself, index, sandbox).await?;
                None
            }
            TurnEffect::RunHooks(point) => {
                self.spawn_hooks(myself, point);
                None
            }
            TurnEffect::CompileContext { refresh_tools } => {
                #[cfg(not(feature = "mcp"))]
                let _ = refresh_tools;
                #[cfg(feature = "mcp")]
                if refresh_tools {
                    self.refresh_mcp_tools().await;
                }
                Some(self.compile_step())
            }
            TurnEffect::StartStream {
                request,
                rebuild_from,
                shape,
            } => self.start_stream(myself, request, rebuild_from, &shape),
            TurnEffect::StartTimer { request, delay_ms } => {
                let me = myself.clone();
                let task = tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
                    let _ = me.cast(TurnMsg::RetryElapsed { request });
                });
                self.io.timer = Some(AbortOnDropHandle::new(task));
                None
            }
            TurnEffect::PrepareCompaction(trigger) => Some(self.prepare_compaction(trigger)),
            TurnEffect::StartSummary {
                request,
                budget,
                trigger,
            } => {
                self.start_summary(myself, request, budget, trigger);
                None
            }
            TurnEffect::BuildCheckpoint {
                summary,
                history_tokens,
                tokens_before,
                trigger,
            } => Some(self.build_checkpoint(summary, history_tokens, tokens_before, trigger)),
            TurnEffect::StopStream => {
                // Dropping the task's handle aborts it.
                self.io.provider = None;
                if let Some(relay) = self.io.relay.take() {
                    relay.close();
                }
                None
            }
            TurnEffect::StopTools => {
                for (_, (_, actor)) in self.io.running.drain() {
                    actor.kill();
                }
                self.io.call_tasks.clear();
                None
            }
            TurnEffect::StopTimer => {
                self.io.timer = None;
                None
            }
            TurnEffect::StopHooks => {
                self.io.hooks = None;
                None
            }
            TurnEffect::Finish => {
                myself.stop(None);
                None
            }
        })
    }

    /// The relayed stream of request `request` ended with `event`; `None` when the
    /// driver no longer holds that request (its stream was stopped).
    fn stream_ended(&mut self, request: u64, event: StreamEvent) -> Option<TurnInput> {
        // The task ends after its terminal event; dropping its handle costs nothing more.
        drop(self.io.provider.take_if(|(_, number)| *number == request)?);
        let aggregate = self.io.relay.take().map(|r| r.close()).unwrap_or_default();
        let outcome = match event {
            StreamEvent::Error { error } => StreamOutcome::Failed(error),
            _ => {
                let message = aggregate.to_message();
                if let Some(usage) = aggregate.usage {
                    self.io.calibration =
                        Calibration::from_usage(self.io.last_estimate, usage.input_tokens);
                }
                let parallel_safe = message
                    .tool_calls
                    .iter()
                    .map(|c| {
                        self.io
                            .registry
                            .get(&c.name)
                            .is_none_or(|t| t.spec().parallel_safe)
                    })
                    .collect();
                StreamOutcome::Done {
                    message,
                    usage: aggregate.usage,
                    parallel_safe,
                }
            }
        };
        Some(TurnInput::StreamEnded { request, outcome })
    }

    /// Events of the summarisation request `request`; its end once it ended.
    fn summary_events(&mut self, request: u64, events: Vec<StreamEvent>) -> Option<TurnInput> {
        if self.io.provider.as_ref().is_none_or(|(_, n)| *n != request) {
            return None;
        }
        let mut ended = None;
        for event in events {
            self.io.summary.apply(&event);
            match event {
                StreamEvent::Error { error } => ended = Some(StreamOutcome::Failed(error)),
                StreamEvent::Done { .. } => {
                    ended = Some(StreamOutcome::Done {
                        message: self.io.summary.to_message(),
                        usage: None,
                        parallel_safe: Vec::new(),
                    });
                }
                _ => {}
            }
        }
        let outcome = ended?;
        self.io.provider = None;
        Some(TurnInput::StreamEnded { request, outcome })
    }

    /// The stream task of request `request` panicked: a `stream_interrupted` failure of
    /// the request (retried like one), if it is still the request in flight.
    fn stream_panicked(&mut self, request: u64, why: &str) -> Option<TurnInput> {
        drop(self.io.provider.take_if(|(_, number)| *number == request)?);
        if let Some(relay) = self.io.relay.take() {
            relay.close();
        }
        let error = ProviderError::new(
            ErrorClass::StreamInterrupted,
            format!("the model stream task panicked: {why}"),
        );
        Some(TurnInput::StreamEnded {
            request,
            outcome: StreamOutcome::Failed(error),
        })
    }

    /// What a `Cancel` needs: the stream so far and each started call's output.
    fn cancel_input(&mut self, reason: String) -> TurnInput {
        self.args.cancel.cancel();
        let streamed = self.io.relay.take().map(|r| r.close()).unwrap_or_default();
        let tool_output = self
            .io
            .partials
            .iter()
            .map(|p| {
                p.as_ref().map(|p| {
                    p.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .render()
                })
            })
            .collect();
        TurnInput::Cancel {
            reason,
            streamed,
            tool_output,
        }
    }

    /// The machine's setup for this turn.
    fn machine_config(args: &TurnArgs) -> TurnConfig {
        let hooks = &args.deps.hooks;
        let top_level = args.config.parent.is_none();
        let client = args.deps.client_for(&args.config.provider);
        let session_start = top_level
            && args.first_in_runtime
            && hooks.any(
                crate::hooks::HookEvent::SessionStart,
                Some(session_source(&args.log)),
            );
        TurnConfig {
            mode: args.mode,
            max_steps: args.config.max_steps,
            auto_compact: args.deps.context.auto_compact && args.config.auto_compact,
            protection: args.deps.control.protection,
            max_hook_continuations: args.deps.control.max_hook_continuations,
            retry: client.retry_policy().unwrap_or(args.deps.retry),
            hooks: HookPoints {
                session_start,
                prompt_submit: top_level
                    && hooks.any(crate::hooks::HookEvent::UserPromptSubmit, None),
                stop: hooks.any(crate::hooks::HookEvent::stop_of(&args.config), None),
                pre_compact_manual: hooks.any(crate::hooks::HookEvent::PreCompact, Some("manual")),
                pre_compact_auto: hooks.any(crate::hooks::HookEvent::PreCompact, Some("auto")),
            },
            jitter_seed: rand::random(),
        }
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
        let io = Io {
            env: super::env::environment(&args.config.cwd),
            calibration: Calibration::default(),
            last_estimate: 0,
            tools: args.deps.tools.tool_set(args.config.approval_mode),
            registry: Arc::clone(&args.deps.tools),
            #[cfg(feature = "mcp")]
            mcp_key: None,
            pending: Vec::new(),
            provider: None,
            relay: None,
            summary: StreamAggregate::new(),
            compiled: None,
            compaction_log: Vec::new(),
            running: HashMap::new(),
            idle_tools: Vec::new(),
            calls: Vec::new(),
            call_tasks: HashMap::new(),
            transcript_path: std::path::PathBuf::new(),
            protected: None,
            partials: Vec::new(),
            partials_step: 0,
            timer: None,
            hooks: None,
            sub_agents: None,
        };
        Ok(Turn {
            machine: TurnMachine::new(Turn::machine_config(&args)),
            args,
            io,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TurnMsg>,
        msg: TurnMsg,
        state: &mut Turn,
    ) -> Result<(), ActorProcessingErr> {
        if state.machine.is_done() {
            return Ok(());
        }
        if state.args.cancel.is_cancelled() && !matches!(msg, TurnMsg::Cancel { .. }) {
            state.feed(&myself, TurnInput::CancelRequested).await?;
        }
        let input = match msg {
            TurnMsg::Begin => Some(TurnInput::Begin),
            TurnMsg::Stream { request, events } => state.summary_events(request, events),
            TurnMsg::StreamEnded { request, event } => state.stream_ended(request, event),
            TurnMsg::StreamPanicked { request, why } => state.stream_panicked(request, &why),
            TurnMsg::RetryElapsed { request } => {
                state.io.timer = None;
                Some(TurnInput::RetryElapsed { request })
            }
            TurnMsg::ToolDone {
                index,
                result,
                duration_ms,
            } => {
                state.tool_done(index);
                Some(TurnInput::ToolFinished {
                    index,
                    result,
                    duration_ms,
                })
            }
            TurnMsg::Cancel { reason } => Some(state.cancel_input(reason)),
            TurnMsg::HookDone { run } => {
                state.io.hooks = None;
                Some(TurnInput::HooksAnswered(run))
            }
            TurnMsg::ToolHookDone { index, run } => {
                state.io.call_tasks.remove(&index);
                Some(match run {
                    Some(run) => TurnInput::ToolHookAnswered { index, run },
                    None => TurnInput::ToolCrashed { index },
                })
            }
            TurnMsg::ApprovalDone { index, answer } => {
                state.io.call_tasks.remove(&index);
                Some(TurnInput::ApprovalAnswered { index, answer })
            }
            #[cfg(test)]
            TurnMsg::Panic => panic!("test-induced TurnActor panic"),
        };
        match input {
            Some(input) => state.feed(&myself, input).await,
            None => Ok(()),
        }
    }

    /// A ToolActor crash is its call's "tool crashed" result; normal exits are expected
    /// (results arrive by message). The turn never stops because a child did. (A
    /// stream task's panic arrives as `TurnMsg::StreamPanicked`.)
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<TurnMsg>,
        event: SupervisionEvent,
        state: &mut Turn,
    ) -> Result<(), ActorProcessingErr> {
        let SupervisionEvent::ActorFailed(cell, _) = event else {
            return Ok(());
        };
        let id = cell.get_id();
        let input = if let Some((index, _)) = state.io.running.remove(&id) {
            TurnInput::ToolCrashed { index }
        } else {
            return Ok(());
        };
        state.feed(&myself, input).await
    }
}

/// `startup` for the session's first turn, `resume` otherwise.
pub(super) fn session_source(log: &crate::log::SharedLog) -> &'static str {
    let turns = log
        .read()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::TurnStarted { .. }))
        .count();
    if turns <= 1 { "startup" } else { "resume" }
}

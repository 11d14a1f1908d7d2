//! The turn's rules as a pure state machine: inputs in (what happened), effects out
//! (what to do). No I/O, no async, no actors: the TurnActor (`turn/actor.rs`) carries
//! out the effects and feeds their results back as inputs, merging back-to-back
//! [`TurnEffect::Append`]s into one commit.
//!
//! A turn, read top to bottom:
//! - **Begin**: `/compact` compacts and ends. A model turn runs its `SessionStart`
//!   hooks (the session's first turn in this runtime) and `UserPromptSubmit` hooks (top-
//!   level sessions); a stop, or a prompt block (`prompt blocked by hook`), ends it
//!   `completed` before the model is asked; the blocked prompt's hook context is
//!   dropped. Then the first step.
//! - **Step**: before it, a tool hook's stop ends the turn (`end_by_hook`); the finished
//!   tool step goes through run protection (`Guard::end_step`: a step cycle ends the
//!   turn `failed/loop_detected`); at `max_steps` the step becomes the final one (no
//!   tools, `MAX_STEPS_INSTRUCTION` appended; its answer ends the turn
//!   `failed/max_steps`). The context is compiled; `step_started` is written with
//!   `context_diagnostics`; over the threshold (automatic compaction on, once per step,
//!   a history large enough to shrink) the step compacts first, else the request goes.
//! - **Response**: `assistant_message` (+ `usage`) is written before any tool starts.
//!   Tool calls: repeated ids are renamed and answered "not run" (`duplicates.rs`);
//!   run protection blocks duplicates and withdrawn tools (a blocked call repeated ends
//!   the turn `loop_detected`, after "not run" results); the others run in batches
//!   (`plan_batches`, at most `MAX_PARALLEL` at once), each through its lifecycle
//!   (`call.rs`: checked, `PreToolUse`, approval, run, `PostToolUse`); results are
//!   written in call order, a call that ran with its `tool_finished` in the same append.
//!   No tool calls:
//!   the stop hooks run (a block continues the turn with `hook_continued{reason, count}`,
//!   at most `max_hook_continuations`, then `stop_hook_limit`; a stop ends it with the
//!   hook's reason), or the turn ends `completed`.
//! - **Failures**: a transient provider class retries after `provider_retry` and a
//!   backoff ([`RetryPolicy::delay_for`]; the retry re-sends the same request, built
//!   from the same history prefix); `context_overflow` compacts once per turn (trigger
//!   `overflow`) and re-runs the step, a second one fails; other classes end the turn
//!   `failed` with the class. A compile error ends it `failed/invalid_request`.
//! - **Compaction** (`compaction.rs`): `PreCompact` hooks, `compaction_started`, a
//!   summarisation request (an overflow of it halves the budget, at most
//!   `MAX_COMPACTION_ATTEMPTS` requests), `compaction_checkpoint`, then the step's
//!   request (a `/compact` ends its turn instead). What cannot be compacted: a
//!   `/compact` says `nothing to compact`, a threshold compaction sends uncompacted, an
//!   overflow fails `compaction_ineffective`.
//! - **Cancel**: the session fires the turn's token, then sends `Cancel`. When the
//!   token fires ([`TurnInput::CancelRequested`]) the machine stops acting on results
//!   (tool results are still written, nothing new starts); `Cancel` stops what runs,
//!   writes the partial assistant message (`interrupted`) if anything streamed, a
//!   "cancelled" result for every call of the step without one (after the output it
//!   printed), then `turn_cancelled` and `turn_complete{cancelled}`. A result that
//!   arrives later is an input of phase `Done`: ignored.

mod call;
mod compaction;
pub mod run;
#[cfg(test)]
mod tests;

use super::TurnMode;
use super::protection::{CallVerdict, Guard, Limits, LoopDetected};
use crate::approval::{ApprovalAnswer, SandboxPolicy};
use crate::hooks::HookRun;
use crate::request::ModelRequest;
use crate::retry::RetryPolicy;
pub use call::{CallCheck, ToolHook};
pub use compaction::{Compaction, Prepared, Trigger};
use foya_protocol::{
    AssistantMessage, ErrorClass, ErrorInfo, EventKind, FinishReason, HookDecision, Input, Message,
    ProviderError, StreamAggregate, ToolCall, ToolMessage, TurnStatus, Usage,
};
use run::ToolRun;
use std::collections::BTreeMap;

/// The instruction appended to the final request when the step limit is reached.
pub(crate) const MAX_STEPS_INSTRUCTION: &str = "The step limit of this turn was reached: no \
     more tools can be called. Summarise what was done, what remains, and stop.";
/// `turn_complete` reason of a turn whose prompt a hook blocked.
pub(crate) const PROMPT_BLOCKED: &str = "prompt blocked by hook";
/// Reason given to the model when a stop hook blocks without one.
const CONTINUE: &str = "a stop hook asked to continue";
/// `turn_complete` reason of a hook's stop without a reason.
const STOPPED_BY_HOOK: &str = "stopped by hook";
/// `turn_complete` reason when stop hooks blocked more than allowed.
const STOP_HOOK_LIMIT: &str = "stop_hook_limit";

/// What a turn is set up with (fixed for the turn).
#[derive(Debug, Clone)]
pub struct TurnConfig {
    pub mode: TurnMode,
    pub max_steps: Option<u32>,
    /// Automatic compaction is on (runtime and session).
    pub auto_compact: bool,
    pub protection: Limits,
    pub max_hook_continuations: u32,
    /// The session client's retry policy.
    pub retry: RetryPolicy,
    /// Which hook points have hooks for this turn.
    pub hooks: HookPoints,
    /// Seed of the backoff jitter (random in the runtime, fixed in tests).
    pub jitter_seed: u64,
}

/// Which hook points have hooks (the driver asks the runtime's hooks once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookPoints {
    /// `SessionStart` runs (top-level session, first turn in this runtime, a hook).
    pub session_start: bool,
    /// `UserPromptSubmit` runs (top-level session, a hook).
    pub prompt_submit: bool,
    /// `Stop` (or `SubagentStop`) has hooks.
    pub stop: bool,
    /// `PreCompact` has hooks for a `/compact`.
    pub pre_compact_manual: bool,
    /// `PreCompact` has hooks for an automatic compaction.
    pub pre_compact_auto: bool,
}

/// A hook point the turn runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookPoint {
    SessionStart,
    PromptSubmit,
    PreCompact(Trigger),
    /// The model stopped; `active`: the turn continues because of a stop hook.
    Stop {
        active: bool,
        last_text: String,
    },
}

/// A compiled context, measured (the driver keeps the context itself).
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub sections: BTreeMap<String, u64>,
    pub estimated_input_tokens: u64,
    pub window: u64,
    pub reserve: u64,
    pub over_threshold: bool,
    /// How many log events it was compiled from (a retry rebuilds from that prefix).
    pub history_len: usize,
}

impl Measured {
    fn history_tokens(&self) -> u64 {
        self.sections.get("history").copied().unwrap_or(0)
    }

    fn raw_total(&self) -> u64 {
        self.sections.values().sum()
    }
}

/// How a model request ended.
#[derive(Debug, Clone)]
pub enum StreamOutcome {
    /// `Done`: the response, its usage, and for each tool call whether its tool is
    /// parallel-safe.
    Done {
        message: AssistantMessage,
        usage: Option<Usage>,
        parallel_safe: Vec<bool>,
    },
    /// An error (or the model stream task panicked, or the stream broke off).
    Failed(ProviderError),
}

/// What happened.
#[derive(Debug, Clone)]
pub enum TurnInput {
    /// The turn starts.
    Begin,
    /// The hooks of the current hook point answered.
    HooksAnswered(HookRun),
    /// The step's context was compiled.
    ContextCompiled(Measured),
    /// The context could not be compiled (or a retry's request rebuilt).
    ContextFailed(String),
    /// Model request `request` ended.
    StreamEnded {
        request: u64,
        outcome: StreamOutcome,
    },
    /// The backoff before retrying request `request` elapsed.
    RetryElapsed { request: u64 },
    /// The calls of a `CheckCalls` were checked (call index, what was found).
    CallsChecked(Vec<(usize, CallCheck)>),
    /// The tool hooks a `RunToolHook` ran for call `index` answered.
    ToolHookAnswered { index: usize, run: HookRun },
    /// The approval question of call `index` was answered.
    ApprovalAnswered {
        index: usize,
        answer: ApprovalAnswer,
    },
    /// Call `index` ran for `duration_ms` (measured by the driver) and returned `result`.
    ToolFinished {
        index: usize,
        result: ToolMessage,
        duration_ms: u64,
    },
    /// The ToolActor (or the tool hooks' task) of call `index` crashed.
    ToolCrashed { index: usize },
    /// The compaction's log was measured.
    CompactionPrepared(Prepared),
    /// The checkpoint was built (its `tokens_after` measured).
    CheckpointBuilt {
        checkpoint: EventKind,
        tokens_after: u64,
    },
    /// The turn's cancellation token fired (a `Cancel` follows).
    CancelRequested,
    /// Cancel the turn: what streamed so far and each call's output so far.
    Cancel {
        reason: String,
        streamed: StreamAggregate,
        tool_output: Vec<Option<String>>,
    },
}

/// What a model request looks like beyond the compiled context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestShape {
    /// The final step at `max_steps`: no tools, `MAX_STEPS_INSTRUCTION` appended.
    pub final_step: bool,
    /// Tools run protection withdrew (not offered).
    pub withdrawn: Vec<String>,
}

impl RequestShape {
    /// Applies the shape to a request built from the compiled context.
    pub fn apply(&self, request: &mut ModelRequest) {
        if !self.withdrawn.is_empty() {
            request.tools = request
                .tools
                .iter()
                .filter(|t| !self.withdrawn.contains(&t.name))
                .cloned()
                .collect();
        }
        if self.final_step {
            request.tools = std::sync::Arc::default();
            request
                .messages
                .push(Message::User(Input::text(MAX_STEPS_INSTRUCTION)));
        }
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEffect {
    /// Write these events (the driver merges back-to-back appends into one commit).
    Append(Vec<EventKind>),
    /// Run the hooks of this point; answer with [`TurnInput::HooksAnswered`].
    RunHooks(HookPoint),
    /// Compile the step's context from the committed log (first refreshing the step's
    /// MCP tools when `refresh_tools`); answer with `ContextCompiled`/`ContextFailed`.
    CompileContext { refresh_tools: bool },
    /// Send request `request`: the context just compiled, or the one rebuilt from the
    /// first `rebuild_from` log events (a retry), shaped by `shape`.
    StartStream {
        request: u64,
        rebuild_from: Option<usize>,
        shape: RequestShape,
    },
    /// Answer `RetryElapsed { request }` after `delay_ms`.
    StartTimer { request: u64, delay_ms: u64 },
    /// Check these calls of the step (validate their arguments, the Approval Gateway's
    /// verdict, which tool hooks select them); answer at once with `CallsChecked`,
    /// keeping the validated calls for `RunToolHook`/`RunTool`.
    CheckCalls {
        step: u32,
        calls: Vec<(usize, ToolCall)>,
    },
    /// Run `hook` for call `index`; answer with `ToolHookAnswered`.
    RunToolHook { index: usize, hook: ToolHook },
    /// Ask the session whether call `index` may run (a grant, an approver, or the
    /// answer when nobody can); answer with `ApprovalAnswered`.
    AskApproval {
        index: usize,
        action: String,
        reason: String,
        grant_key: String,
    },
    /// Run call `index` (its `tool_started` is in the appends before) under `sandbox`;
    /// answer with `ToolFinished` (or `ToolCrashed`).
    RunTool {
        index: usize,
        sandbox: SandboxPolicy,
    },
    /// Measure the committed log for a compaction.
    PrepareCompaction(Trigger),
    /// Send summarisation request `request` within `budget` input tokens.
    StartSummary {
        request: u64,
        budget: u64,
        trigger: Trigger,
    },
    /// Build the checkpoint of `summary` from the prepared log.
    BuildCheckpoint {
        summary: String,
        history_tokens: u64,
        tokens_before: u64,
        trigger: Trigger,
    },
    /// Stop the model stream in flight.
    StopStream,
    /// Stop every call in flight: its hooks, its question, its tool.
    StopTools,
    /// Stop the backoff timer.
    StopTimer,
    /// Stop the running hooks.
    StopHooks,
    /// The turn ended (`turn_complete` is in the last append): stop.
    Finish,
}

/// Where the turn is.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Not begun.
    Idle,
    /// `SessionStart` or `UserPromptSubmit` hooks run.
    BeginHooks(HookPoint),
    /// The step's context is being compiled.
    Compiling,
    /// Request `request` streams.
    Streaming { request: u64 },
    /// Waiting out a backoff before retrying request `request`.
    Backoff { request: u64 },
    /// The step's tool calls run.
    Tools(ToolRun),
    /// The stop hooks run.
    StopHooks,
    /// A compaction runs.
    Compacting(Compaction),
    /// The token fired; `Cancel` follows. The phase that was interrupted.
    Cancelling(Box<Phase>),
    /// `turn_complete` is written.
    Done,
}

/// The current step.
#[derive(Debug, Default)]
struct Step {
    number: u32,
    /// Attempt of the step's request (1 = first).
    attempt: u32,
    /// The final no-tools step at `max_steps` (stays set).
    final_step: bool,
    /// This step compacted already (threshold compaction runs once per step).
    compacted: bool,
    /// `step_started` is written.
    announced: bool,
    /// The history prefix the step's request was compiled from.
    history_len: Option<usize>,
    /// The step's calls and their results, for run protection's end of step.
    finished_calls: Option<(Vec<ToolCall>, Vec<ToolMessage>)>,
}

/// What lasts for the whole turn.
#[derive(Debug)]
struct Counters {
    guard: Guard,
    /// Number of the last model request.
    request: u64,
    /// Compacted for a `context_overflow` already (once per turn).
    overflow_compacted: bool,
    /// Stop-hook continuations (tool steps in between do not reset it).
    hook_continuations: u32,
    /// A tool hook's stop: the turn ends before the next step, with this reason.
    hook_stop: Option<String>,
    /// Backoff jitter state (xorshift).
    jitter: u64,
}

/// The turn machine.
#[derive(Debug)]
pub struct TurnMachine {
    config: TurnConfig,
    phase: Phase,
    step: Step,
    turn: Counters,
    out: Vec<TurnEffect>,
}

impl TurnMachine {
    /// A machine for a turn set up with `config`.
    pub fn new(config: TurnConfig) -> Self {
        let turn = Counters {
            guard: Guard::new(config.protection),
            request: 0,
            overflow_compacted: false,
            hook_continuations: 0,
            hook_stop: None,
            jitter: config.jitter_seed | 1,
        };
        Self {
            config,
            phase: Phase::Idle,
            step: Step::default(),
            turn,
            out: Vec::new(),
        }
    }

    /// Whether the turn ended.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Takes in what happened; returns what to do, in order.
    pub fn on(&mut self, input: TurnInput) -> Vec<TurnEffect> {
        match input {
            TurnInput::CancelRequested => self.cancel_requested(),
            TurnInput::Cancel {
                reason,
                streamed,
                tool_output,
            } => self.cancel(reason, &streamed, &tool_output),
            TurnInput::CallsChecked(checks) => self.calls_checked(checks),
            TurnInput::ToolHookAnswered { index, run } => self.tool_hook_answered(index, run),
            TurnInput::ApprovalAnswered { index, answer } => {
                self.approval_answered(index, answer);
            }
            TurnInput::ToolFinished {
                index,
                result,
                duration_ms,
            } => self.tool_ran(index, result, duration_ms),
            TurnInput::ToolCrashed { index } => self.tool_crashed(index),
            other => self.on_result(other),
        }
        std::mem::take(&mut self.out)
    }

    /// Inputs acted on only while the turn is not cancelling.
    fn on_result(&mut self, input: TurnInput) {
        match (&self.phase, input) {
            (Phase::Idle, TurnInput::Begin) => self.begin(),
            (Phase::BeginHooks(_) | Phase::StopHooks, TurnInput::HooksAnswered(run)) => {
                self.hooks_answered(run);
            }
            (Phase::Compiling, TurnInput::ContextCompiled(measured)) => self.compiled(measured),
            (
                Phase::Compiling | Phase::Streaming { .. } | Phase::Compacting(_),
                TurnInput::ContextFailed(message),
            ) => self.fail(ErrorClass::InvalidRequest, message),
            (Phase::Streaming { request: r }, TurnInput::StreamEnded { request, outcome })
                if *r == request =>
            {
                self.stream_ended(outcome);
            }
            (Phase::Backoff { request: r }, TurnInput::RetryElapsed { request })
                if *r == request =>
            {
                self.resend();
            }
            (Phase::Compacting(_), input) => self.on_compaction(input),
            _ => {}
        }
    }

    // ---- writing and ending ----------------------------------------------------------

    /// Writes `kinds`; the step's `step_started` goes first when it is not written yet.
    fn write(&mut self, mut kinds: Vec<EventKind>) {
        if self.step.number > 0 && !self.step.announced {
            self.step.announced = true;
            kinds.insert(
                0,
                EventKind::StepStarted {
                    step: self.step.number,
                },
            );
        }
        if kinds.is_empty() {
            return;
        }
        if let Some(TurnEffect::Append(last)) = self.out.last_mut() {
            last.append(&mut kinds);
        } else {
            self.out.push(TurnEffect::Append(kinds));
        }
    }

    fn emit(&mut self, effect: TurnEffect) {
        self.out.push(effect);
    }

    fn finish(&mut self, status: TurnStatus, reason: Option<String>, error: Option<ErrorInfo>) {
        self.write(vec![EventKind::TurnComplete {
            status,
            reason,
            error,
        }]);
        self.phase = Phase::Done;
        self.emit(TurnEffect::Finish);
    }

    fn fail(&mut self, class: ErrorClass, message: String) {
        let error = ErrorInfo { class, message };
        self.finish(TurnStatus::Failed, Some(class.as_str().into()), Some(error));
    }

    fn fail_with(&mut self, reason: &str, class: ErrorClass, message: String) {
        let error = ErrorInfo { class, message };
        self.finish(TurnStatus::Failed, Some(reason.into()), Some(error));
    }

    /// Ends the turn `completed` because of a hook.
    fn end_by_hook(&mut self, reason: Option<String>) {
        let reason = reason.unwrap_or_else(|| STOPPED_BY_HOOK.into());
        self.finish(TurnStatus::Completed, Some(reason), None);
    }

    fn max_steps_failure(&mut self) {
        let max = self.config.max_steps.unwrap_or_default();
        let steps = if max == 1 { "step" } else { "steps" };
        let message = format!("the turn reached its maximum of {max} {steps}");
        self.fail(ErrorClass::MaxSteps, message);
    }

    // ---- begin and hooks ---------------------------------------------------------------

    fn begin(&mut self) {
        if self.config.mode == TurnMode::Compact {
            self.begin_compaction(Trigger::Manual);
        } else if self.config.hooks.session_start {
            self.run_hooks(HookPoint::SessionStart);
        } else {
            self.after_session_start();
        }
    }

    /// Runs the hooks of `point`; the phase waits for them (`PreCompact` waits inside
    /// the compaction's phase).
    fn run_hooks(&mut self, point: HookPoint) {
        match &point {
            HookPoint::SessionStart | HookPoint::PromptSubmit => {
                self.phase = Phase::BeginHooks(point.clone());
            }
            HookPoint::Stop { .. } => self.phase = Phase::StopHooks,
            HookPoint::PreCompact(_) => {}
        }
        self.emit(TurnEffect::RunHooks(point));
    }

    fn after_session_start(&mut self) {
        if self.config.hooks.prompt_submit {
            self.run_hooks(HookPoint::PromptSubmit);
        } else {
            self.start_step();
        }
    }

    fn hooks_answered(&mut self, mut run: HookRun) {
        let point = match std::mem::replace(&mut self.phase, Phase::Compiling) {
            Phase::BeginHooks(point) => Some(point),
            _ => None,
        };
        if point == Some(HookPoint::PromptSubmit) {
            forget_context_of_blocked_prompt(&mut run);
        }
        self.write(run.events);
        let decision = run.merged.decision();
        match point {
            Some(HookPoint::SessionStart) if decision == HookDecision::Stop => {
                self.end_by_hook(run.merged.reason);
            }
            Some(HookPoint::SessionStart) => self.after_session_start(),
            Some(_) => match decision {
                HookDecision::Stop => self.end_by_hook(run.merged.reason),
                HookDecision::Block => self.end_by_hook(Some(PROMPT_BLOCKED.into())),
                _ => self.start_step(),
            },
            None => self.stop_hooks_answered(decision, run.merged.reason),
        }
    }

    /// The stop hooks answered: end the turn, or continue it (up to
    /// `max_hook_continuations`).
    fn stop_hooks_answered(&mut self, decision: HookDecision, reason: Option<String>) {
        match decision {
            HookDecision::Stop => self.end_by_hook(reason),
            HookDecision::Block => {
                if self.turn.hook_continuations >= self.config.max_hook_continuations {
                    return self.end_by_hook(Some(STOP_HOOK_LIMIT.into()));
                }
                self.turn.hook_continuations += 1;
                let count = self.turn.hook_continuations;
                let reason = reason.unwrap_or_else(|| CONTINUE.into());
                self.write(vec![EventKind::HookContinued { reason, count }]);
                self.start_step();
            }
            _ => self.finish(TurnStatus::Completed, None, None),
        }
    }

    // ---- the step loop -----------------------------------------------------------------

    /// Starts the next step, or ends the turn (tool hook stop, step cycle, `max_steps`).
    fn start_step(&mut self) {
        if let Some(reason) = self.turn.hook_stop.take() {
            return self.end_by_hook(Some(reason));
        }
        if let Some((calls, results)) = self.step.finished_calls.take()
            && let Err(LoopDetected(message)) = self.turn.guard.end_step(&calls, &results)
        {
            return self.fail(ErrorClass::LoopDetected, message);
        }
        if let Some(max) = self.config.max_steps
            && self.step.number >= max
        {
            if self.step.final_step {
                return self.max_steps_failure();
            }
            self.step.final_step = true;
        }
        self.step = Step {
            number: self.step.number + 1,
            attempt: 1,
            final_step: self.step.final_step,
            ..Step::default()
        };
        self.phase = Phase::Compiling;
        self.emit(TurnEffect::CompileContext {
            refresh_tools: true,
        });
    }

    /// The context is compiled: compact first, or send.
    fn compiled(&mut self, m: Measured) {
        let compact = m.over_threshold
            && self.config.auto_compact
            && !self.step.compacted
            && super::can_shrink(
                m.raw_total(),
                m.history_tokens(),
                compaction::MIN_SAVING_PCT,
            );
        let decision = if compact { "compact" } else { "send" };
        let history_len = m.history_len;
        self.write(vec![EventKind::ContextDiagnostics {
            step: self.step.number,
            sections: m.sections,
            estimated_input_tokens: m.estimated_input_tokens,
            window: m.window,
            reserve: m.reserve,
            decision: decision.into(),
        }]);
        if compact {
            return self.begin_compaction(Trigger::Threshold);
        }
        self.step.history_len = Some(history_len);
        self.send(None);
    }

    fn send(&mut self, rebuild_from: Option<usize>) {
        self.turn.request += 1;
        let request = self.turn.request;
        self.phase = Phase::Streaming { request };
        let shape = RequestShape {
            final_step: self.step.final_step,
            withdrawn: self
                .turn
                .guard
                .withdrawn()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        self.emit(TurnEffect::StartStream {
            request,
            rebuild_from,
            shape,
        });
    }

    /// A retry: the same request again (rebuilt from the same history prefix).
    fn resend(&mut self) {
        match self.step.history_len {
            Some(len) => self.send(Some(len)),
            None => {
                self.phase = Phase::Compiling;
                self.emit(TurnEffect::CompileContext {
                    refresh_tools: false,
                });
            }
        }
    }

    fn stream_ended(&mut self, outcome: StreamOutcome) {
        match outcome {
            StreamOutcome::Done {
                message,
                usage,
                parallel_safe,
            } => self.responded(message, usage, &parallel_safe),
            StreamOutcome::Failed(error) => self.provider_failed(error),
        }
    }

    /// The response is written before any tool starts; then tools or the stop.
    fn responded(
        &mut self,
        mut message: AssistantMessage,
        usage: Option<Usage>,
        parallel_safe: &[bool],
    ) {
        if self.step.final_step {
            // The final step's answer keeps no tool calls (none could run).
            message.tool_calls.clear();
            if message.finish_reason == Some(FinishReason::ToolCalls) {
                message.finish_reason = Some(FinishReason::Stop);
            }
        }
        let wants_tools = message.finish_reason == Some(FinishReason::ToolCalls)
            && !message.tool_calls.is_empty();
        let repeated = if wants_tools {
            super::duplicates::rename_repeated_ids(&mut message.tool_calls)
        } else {
            Vec::new()
        };
        let calls = if wants_tools {
            message.tool_calls.clone()
        } else {
            Vec::new()
        };
        let last_text = if wants_tools || !self.config.hooks.stop {
            String::new()
        } else {
            message.text.clone()
        };
        let mut kinds = vec![EventKind::AssistantMessage(message)];
        kinds.extend(usage.map(EventKind::Usage));
        if wants_tools {
            self.run_calls(kinds, calls, &repeated, parallel_safe);
        } else {
            self.stopped(kinds, last_text);
        }
    }

    /// The model stopped without tool calls.
    fn stopped(&mut self, kinds: Vec<EventKind>, last_text: String) {
        self.write(kinds);
        if self.step.final_step {
            return self.max_steps_failure();
        }
        if !self.config.hooks.stop {
            return self.finish(TurnStatus::Completed, None, None);
        }
        let active = self.turn.hook_continuations > 0;
        self.run_hooks(HookPoint::Stop { active, last_text });
    }

    /// The response asked for tools: blocked calls get their "not run" result, the
    /// others run; a repeated blocked call ends the turn `loop_detected`.
    fn run_calls(
        &mut self,
        mut kinds: Vec<EventKind>,
        calls: Vec<ToolCall>,
        repeated: &[super::duplicates::Renamed],
        parallel_safe: &[bool],
    ) {
        let verdicts = match self.turn.guard.check_calls(&calls, parallel_safe) {
            Ok(verdicts) => verdicts,
            Err(LoopDetected(message)) => {
                let text = format!("not run: {message}");
                kinds.extend(
                    calls
                        .iter()
                        .map(|c| EventKind::ToolMessage(run::error_result(c, text.clone()))),
                );
                self.write(kinds);
                return self.fail(ErrorClass::LoopDetected, message);
            }
        };
        self.write(kinds);
        let mut run = ToolRun::new(calls, parallel_safe);
        for (index, verdict) in verdicts.into_iter().enumerate() {
            let verdict = super::duplicates::verdict_for(repeated, index, verdict);
            if let CallVerdict::Block(text) = verdict
                && let Some(call) = run.calls.get(index)
            {
                let result = run::error_result(call, text);
                run.preset(index, result);
            }
        }
        self.phase = Phase::Tools(run);
        if !self.start_tools() {
            // Else the blocked calls' results are written once the others are checked,
            // after their `tool_started`.
            self.commit_tools(Vec::new());
        }
    }

    /// Starts the calls that may start now (`CheckCalls`); whether any did.
    fn start_tools(&mut self) -> bool {
        let Phase::Tools(run) = &mut self.phase else {
            return false;
        };
        let ready: Vec<(usize, ToolCall)> = run
            .start_ready()
            .into_iter()
            .map(|i| (i, run.calls[i].clone()))
            .collect();
        if ready.is_empty() {
            return false;
        }
        let step = self.step.number;
        self.emit(TurnEffect::CheckCalls { step, calls: ready });
        true
    }

    /// Writes what became committable (after `finished`, the `tool_finished` of the
    /// calls that just ran); then the next step when every result is written.
    fn commit_tools(&mut self, finished: Vec<EventKind>) {
        let Phase::Tools(run) = &mut self.phase else {
            return;
        };
        let ready = run.take_committable();
        let done = run.all_committed();
        let kinds: Vec<EventKind> = finished
            .into_iter()
            .chain(ready.into_iter().map(EventKind::ToolMessage))
            .collect();
        self.write(kinds);
        if done && let Phase::Tools(run) = std::mem::replace(&mut self.phase, Phase::Compiling) {
            self.step.finished_calls = Some((run.calls, run.written));
            self.start_step();
        }
    }

    // ---- failures ----------------------------------------------------------------------

    /// A model request failed: retry after `provider_retry` when the class is transient
    /// and attempts remain, compact once on an overflow, else fail with the class.
    fn provider_failed(&mut self, error: ProviderError) {
        if error.class == ErrorClass::ContextOverflow {
            return self.overflowed(error);
        }
        let next = self.step.attempt + 1;
        let jitter = self.next_jitter();
        let policy = self.config.retry;
        let Some(delay) = policy.delay_for(next, &error, jitter) else {
            return self.fail(error.class, error.message);
        };
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.write(vec![EventKind::ProviderRetry {
            attempt: next,
            max_attempts: policy.max_attempts,
            delay_ms,
            error,
        }]);
        self.step.attempt = next;
        let request = self.turn.request;
        self.phase = Phase::Backoff { request };
        self.emit(TurnEffect::StartTimer { request, delay_ms });
    }

    /// The provider said the input is too long: compact once per turn (trigger
    /// `overflow`) and re-run the step; otherwise fail `context_overflow`.
    fn overflowed(&mut self, error: ProviderError) {
        if !self.config.auto_compact {
            let message = format!(
                "{} (automatic compaction is off; send /compact or start a new session)",
                error.message
            );
            return self.fail(error.class, message);
        }
        if self.turn.overflow_compacted {
            return self.fail(error.class, error.message);
        }
        self.turn.overflow_compacted = true;
        self.begin_compaction(Trigger::Overflow);
    }

    /// A number in `[0, 1)` for the backoff jitter (xorshift64).
    fn next_jitter(&mut self) -> f64 {
        let mut x = self.turn.jitter;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.turn.jitter = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    // ---- cancellation ------------------------------------------------------------------

    fn cancel_requested(&mut self) {
        if matches!(self.phase, Phase::Done | Phase::Cancelling(_)) {
            return;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        self.phase = Phase::Cancelling(Box::new(phase));
    }

    /// Stops what runs and writes the cancelled end of the turn.
    fn cancel(&mut self, reason: String, streamed: &StreamAggregate, outputs: &[Option<String>]) {
        let phase = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Done => return,
            Phase::Cancelling(inner) => *inner,
            other => other,
        };
        let mut kinds = Vec::new();
        match phase {
            Phase::Streaming { .. } => {
                self.emit(TurnEffect::StopStream);
                if !streamed.text.is_empty() || !streamed.reasoning.is_empty() {
                    kinds.push(EventKind::AssistantMessage(AssistantMessage {
                        text: streamed.text.clone(),
                        reasoning: streamed.reasoning.clone(),
                        reasoning_parts: streamed.reasoning_parts.clone(),
                        interrupted: true,
                        ..AssistantMessage::default()
                    }));
                }
            }
            Phase::Tools(mut run) => {
                self.emit(TurnEffect::StopTools);
                kinds.extend(
                    run.cancel_remaining(outputs)
                        .into_iter()
                        .map(EventKind::ToolMessage),
                );
            }
            Phase::Backoff { .. } => self.emit(TurnEffect::StopTimer),
            Phase::BeginHooks(_) | Phase::StopHooks => self.emit(TurnEffect::StopHooks),
            Phase::Compacting(c) => self.emit(c.stop_effect()),
            Phase::Idle | Phase::Compiling | Phase::Cancelling(_) | Phase::Done => {}
        }
        kinds.push(EventKind::TurnCancelled { reason });
        self.write(kinds);
        self.finish(TurnStatus::Cancelled, None, None);
    }
}

/// A prompt that `UserPromptSubmit` hooks block or stop takes the context the other
/// hooks gave for it out of the log too: that context may quote the blocked prompt, and
/// the history would otherwise hand it to the model in a later turn.
fn forget_context_of_blocked_prompt(run: &mut HookRun) {
    if !matches!(
        run.merged.decision(),
        HookDecision::Block | HookDecision::Stop
    ) {
        return;
    }
    run.merged.context.clear();
    for event in &mut run.events {
        if let EventKind::HookRan {
            additional_context, ..
        } = event
        {
            *additional_context = None;
        }
    }
}

//! Scenario tests of the turn machine: inputs in, a transcript of effects out (`>` an
//! input, `<` an effect), compared with inline snapshots (`UPDATE_EXPECT=1` rewrites
//! them). No runtime: each scenario is the turn's whole behaviour for its inputs. The
//! scenario answers `CheckCalls` at once, as the driver does (each call allowed under
//! `workspace-write` without hooks unless the test set another check for its id).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod calls;
mod cancel;
mod compaction;
mod failures;
mod hooks;
mod protection;
mod steps;

use super::*;
use crate::approval::Verdict;
use crate::hooks::decision::Merged;
use expect_test::Expect;
use foya_protocol::{ToolCallId, ToolMessage};
use std::fmt::Write;

/// A turn under test and its transcript.
struct Scenario {
    machine: TurnMachine,
    transcript: String,
    /// Every effect so far, in order.
    effects: Vec<TurnEffect>,
    /// How `CheckCalls` answers for a call id (default: [`allowed`]).
    checks: BTreeMap<String, CallCheck>,
}

/// The default setup: a model turn, no limits, automatic compaction on, no hooks,
/// three attempts per request.
fn config() -> TurnConfig {
    TurnConfig {
        mode: TurnMode::Model,
        max_steps: None,
        auto_compact: true,
        protection: Limits::default(),
        max_hook_continuations: 2,
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay_ms: 1_000,
            max_delay_ms: 60_000,
        },
        hooks: HookPoints::default(),
        jitter_seed: 7,
    }
}

/// [`config`] with the hook points `hooks`.
fn with_hooks(hooks: HookPoints) -> TurnConfig {
    TurnConfig { hooks, ..config() }
}

/// [`config`] with a `Stop` hook.
fn stop_hook() -> TurnConfig {
    with_hooks(HookPoints {
        stop: true,
        ..HookPoints::default()
    })
}

/// [`config`] as a manual compaction (`/compact`).
fn compact() -> TurnConfig {
    TurnConfig {
        mode: TurnMode::Compact,
        ..config()
    }
}

impl Scenario {
    fn new(config: TurnConfig) -> Self {
        Self {
            machine: TurnMachine::new(config),
            transcript: String::new(),
            effects: Vec::new(),
            checks: BTreeMap::new(),
        }
    }

    /// A default model turn.
    fn model() -> Self {
        Self::new(config())
    }

    fn on(&mut self, input: TurnInput) -> &mut Self {
        let _ = writeln!(self.transcript, "> {}", input_line(&input));
        let mut answer = None;
        for effect in self.machine.on(input) {
            let _ = writeln!(self.transcript, "< {}", effect_line(&effect));
            if let TurnEffect::CheckCalls { calls, .. } = &effect {
                let checks = calls
                    .iter()
                    .map(|(i, c)| {
                        let check = self.checks.get(&c.id.0).cloned();
                        (*i, check.unwrap_or_else(allowed))
                    })
                    .collect();
                answer = Some(TurnInput::CallsChecked(checks));
            }
            self.effects.push(effect);
        }
        if let Some(answer) = answer {
            self.on(answer);
        }
        self
    }

    /// `CheckCalls` answers `check` for call `id`.
    fn check_as(&mut self, id: &str, check: CallCheck) -> &mut Self {
        self.checks.insert(id.into(), check);
        self
    }

    /// How many results call `id` got in the appends so far.
    fn results_of(&self, id: &str) -> usize {
        self.effects
            .iter()
            .filter_map(|e| match e {
                TurnEffect::Append(kinds) => Some(kinds),
                _ => None,
            })
            .flatten()
            .filter(|k| matches!(k, EventKind::ToolMessage(m) if m.tool_call_id.0 == id))
            .count()
    }

    /// Begin, then step 1's context compiled.
    fn started(config: TurnConfig) -> Self {
        let mut s = Self::new(config);
        s.on(TurnInput::Begin).on(compiled());
        s
    }

    fn check(&self, expect: Expect) {
        expect.assert_eq(&self.transcript);
    }
}

// ---- inputs ------------------------------------------------------------------------------

/// A valid call the gateway allows under `workspace-write`, no tool hooks.
fn allowed() -> CallCheck {
    CallCheck::Valid {
        verdict: Verdict::Allow {
            sandbox: SandboxPolicy::WorkspaceWrite { network: false },
        },
        pre_hooks: None,
        post_hooks: false,
    }
}

fn compiled() -> TurnInput {
    TurnInput::ContextCompiled(measured(1_000, false))
}

fn measured(history: u64, over_threshold: bool) -> Measured {
    let sections = BTreeMap::from([("history".to_owned(), history), ("kernel".to_owned(), 500)]);
    Measured {
        estimated_input_tokens: history + 500,
        sections,
        window: 10_000,
        reserve: 1_000,
        over_threshold,
        history_len: 3,
    }
}

fn call(id: &str, name: &str, arg: u32) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: name.into(),
        arguments: serde_json::json!({ "n": arg }),
        extra: None,
    }
}

/// Request `request` answered with text.
fn answer(request: u64, text: &str) -> TurnInput {
    TurnInput::StreamEnded {
        request,
        outcome: StreamOutcome::Done {
            message: AssistantMessage {
                text: text.into(),
                finish_reason: Some(FinishReason::Stop),
                ..AssistantMessage::default()
            },
            usage: Some(Usage {
                input_tokens: 1_500,
                output_tokens: 20,
                ..Usage::default()
            }),
            parallel_safe: Vec::new(),
        },
    }
}

/// Request `request` answered with parallel-safe tool calls.
fn tools(request: u64, calls: Vec<ToolCall>) -> TurnInput {
    let parallel = vec![true; calls.len()];
    tools_with(request, calls, parallel)
}

fn tools_with(request: u64, calls: Vec<ToolCall>, parallel_safe: Vec<bool>) -> TurnInput {
    TurnInput::StreamEnded {
        request,
        outcome: StreamOutcome::Done {
            message: AssistantMessage {
                tool_calls: calls,
                finish_reason: Some(FinishReason::ToolCalls),
                ..AssistantMessage::default()
            },
            usage: None,
            parallel_safe,
        },
    }
}

fn failed(request: u64, class: ErrorClass) -> TurnInput {
    TurnInput::StreamEnded {
        request,
        outcome: StreamOutcome::Failed(ProviderError::new(class, format!("{class:?}"))),
    }
}

fn result(id: &str, content: &str, is_error: bool) -> ToolMessage {
    ToolMessage {
        tool_call_id: ToolCallId::new(id),
        content: content.into(),
        is_error,
        images: Vec::new(),
    }
}

/// Call `index` (id `id`) ran and returned `content`.
fn ran(index: usize, id: &str, content: &str) -> TurnInput {
    TurnInput::ToolFinished {
        index,
        result: result(id, content, false),
        duration_ms: 5,
    }
}

/// Call `index` (id `id`) ran and failed with `content`.
fn ran_error(index: usize, id: &str, content: &str) -> TurnInput {
    TurnInput::ToolFinished {
        index,
        result: result(id, content, true),
        duration_ms: 5,
    }
}

fn hooks_answered(decision: HookDecision, reason: Option<&str>) -> TurnInput {
    TurnInput::HooksAnswered(HookRun {
        merged: Merged {
            decision: Some(decision),
            reason: reason.map(str::to_owned),
            context: Vec::new(),
        },
        events: Vec::new(),
    })
}

/// Call `index`'s tool hooks answered `decision` (one `hook_ran` event, no context).
fn tool_hook(index: usize, decision: HookDecision, reason: Option<&str>) -> TurnInput {
    tool_hook_with(index, decision, reason, &[])
}

/// Call `index`'s tool hooks answered `decision` with `context` for the model.
fn tool_hook_with(
    index: usize,
    decision: HookDecision,
    reason: Option<&str>,
    context: &[&str],
) -> TurnInput {
    let event = EventKind::HookRan {
        hook_event: "PreToolUse".into(),
        matcher: None,
        hook: "check.sh".into(),
        tool_call_id: None,
        duration_ms: 1,
        decision,
        reason: reason.map(str::to_owned),
        additional_context: None,
    };
    TurnInput::ToolHookAnswered {
        index,
        run: HookRun {
            merged: Merged {
                decision: Some(decision),
                reason: reason.map(str::to_owned),
                context: context.iter().map(|c| (*c).to_owned()).collect(),
            },
            events: vec![event],
        },
    }
}

/// The user's cancel, nothing streamed, no call's output.
fn cancel() -> TurnInput {
    cancel_with_output(Vec::new())
}

/// The user's cancel with what each call printed so far (by index; `None`: no output).
fn cancel_with_output(tool_output: Vec<Option<String>>) -> TurnInput {
    TurnInput::Cancel {
        reason: "user".into(),
        streamed: StreamAggregate::new(),
        tool_output,
    }
}

/// The compaction prepared: 9 000 tokens before, `history` of them history (500 more
/// raw), a budget of 8 000; `empty`: nothing to compact.
fn prepared(history: u64, empty: bool) -> TurnInput {
    TurnInput::CompactionPrepared(Prepared {
        tokens_before: 9_000,
        history_tokens: history,
        raw_total: history + 500,
        empty_history: empty,
        budget: 8_000,
    })
}

// ---- the transcript ----------------------------------------------------------------------

fn input_line(input: &TurnInput) -> String {
    match input {
        TurnInput::Begin => "Begin".into(),
        TurnInput::HooksAnswered(run) => format!(
            "HooksAnswered({:?}{})",
            run.merged.decision(),
            opt(run.merged.reason.as_deref())
        ),
        TurnInput::ContextCompiled(m) => format!(
            "ContextCompiled(tokens={}{})",
            m.estimated_input_tokens,
            if m.over_threshold {
                ", over threshold"
            } else {
                ""
            }
        ),
        TurnInput::ContextFailed(m) => format!("ContextFailed({m})"),
        TurnInput::StreamEnded { request, outcome } => match outcome {
            StreamOutcome::Done { message, .. } if message.tool_calls.is_empty() => {
                format!("StreamEnded#{request}(done, {:?})", message.text)
            }
            StreamOutcome::Done { message, .. } => {
                format!(
                    "StreamEnded#{request}(done, calls {})",
                    calls(&message.tool_calls)
                )
            }
            StreamOutcome::Failed(e) => {
                format!("StreamEnded#{request}(error {})", e.class.as_str())
            }
        },
        TurnInput::RetryElapsed { request } => format!("RetryElapsed#{request}"),
        TurnInput::CallsChecked(checks) => {
            let checks: Vec<String> = checks
                .iter()
                .map(|(i, check)| format!("{i}:{}", check_line(check)))
                .collect();
            format!("CallsChecked({})", checks.join(", "))
        }
        TurnInput::ToolHookAnswered { index, run } => format!(
            "ToolHookAnswered({index}, {:?}{}{})",
            run.merged.decision(),
            opt(run.merged.reason.as_deref()),
            if run.merged.context.is_empty() {
                String::new()
            } else {
                format!(", context {:?}", run.merged.context)
            }
        ),
        TurnInput::ApprovalAnswered { index, answer } => format!(
            "ApprovalAnswered({index}, {}{})",
            if answer.allowed { "allowed" } else { "denied" },
            opt(answer.message.as_deref())
        ),
        TurnInput::ToolFinished {
            index,
            result,
            duration_ms,
        } => format!(
            "ToolFinished({index}, {}, {duration_ms} ms)",
            tool_result(result)
        ),
        TurnInput::ToolCrashed { index } => format!("ToolCrashed({index})"),
        TurnInput::CompactionPrepared(p) => format!(
            "CompactionPrepared(before={}, history={}/{}, budget={}{})",
            p.tokens_before,
            p.history_tokens,
            p.raw_total,
            p.budget,
            if p.empty_history { ", empty" } else { "" }
        ),
        TurnInput::CheckpointBuilt { tokens_after, .. } => {
            format!("CheckpointBuilt(after={tokens_after})")
        }
        TurnInput::CancelRequested => "CancelRequested".into(),
        TurnInput::Cancel {
            reason,
            streamed,
            tool_output,
        } => format!(
            "Cancel({reason}{}{})",
            if streamed.text.is_empty() {
                String::new()
            } else {
                format!(", streamed {:?}", streamed.text)
            },
            if tool_output.iter().any(Option::is_some) {
                format!(", output {tool_output:?}")
            } else {
                String::new()
            }
        ),
    }
}

fn check_line(check: &CallCheck) -> String {
    match check {
        CallCheck::Invalid(text) => format!("invalid {text:?}"),
        CallCheck::Valid {
            verdict,
            pre_hooks,
            post_hooks,
        } => {
            let verdict = match verdict {
                Verdict::Allow { sandbox } => format!("allow {}", sandbox_name(*sandbox)),
                Verdict::Ask { grant_key, .. } => format!("ask {grant_key:?}"),
                Verdict::Deny { reason } => format!("deny {reason:?}"),
            };
            let pre = if pre_hooks.is_some() { " +pre" } else { "" };
            let post = if *post_hooks { " +post" } else { "" };
            format!("{verdict}{pre}{post}")
        }
    }
}

fn sandbox_name(sandbox: SandboxPolicy) -> &'static str {
    match sandbox {
        SandboxPolicy::None => "none",
        SandboxPolicy::ReadOnly => "read-only",
        SandboxPolicy::WorkspaceWrite { .. } => "workspace-write",
        SandboxPolicy::WorkspaceAndProtected { .. } => "workspace-and-protected",
    }
}

fn opt(text: Option<&str>) -> String {
    text.map_or_else(String::new, |t| format!(", {t:?}"))
}

fn calls(calls: &[ToolCall]) -> String {
    let ids: Vec<String> = calls
        .iter()
        .map(|c| format!("{}:{}", c.id.0, c.name))
        .collect();
    format!("[{}]", ids.join(" "))
}

fn tool_result(m: &ToolMessage) -> String {
    let mark = if m.is_error { "error " } else { "" };
    format!("{} {mark}{:?}", m.tool_call_id.0, m.content)
}

fn effect_line(effect: &TurnEffect) -> String {
    match effect {
        TurnEffect::Append(kinds) => {
            let kinds: Vec<String> = kinds.iter().map(event).collect();
            format!("Append[{}]", kinds.join(", "))
        }
        TurnEffect::RunHooks(point) => format!("RunHooks({point:?})"),
        TurnEffect::CompileContext { refresh_tools } => format!(
            "CompileContext{}",
            if *refresh_tools {
                "(refresh tools)"
            } else {
                ""
            }
        ),
        TurnEffect::StartStream {
            request,
            rebuild_from,
            shape,
        } => {
            let mut notes = Vec::new();
            if let Some(len) = rebuild_from {
                notes.push(format!("rebuilt from {len} events"));
            }
            if shape.final_step {
                notes.push("final: no tools".into());
            }
            if !shape.withdrawn.is_empty() {
                notes.push(format!("withdrawn {:?}", shape.withdrawn));
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!("({})", notes.join(", "))
            };
            format!("StartStream#{request}{notes}")
        }
        TurnEffect::StartTimer { request, delay_ms } => {
            format!("StartTimer#{request}({delay_ms} ms)")
        }
        TurnEffect::CheckCalls { step, calls } => {
            let calls: Vec<String> = calls
                .iter()
                .map(|(i, c)| format!("{i}:{}", c.id.0))
                .collect();
            format!("CheckCalls(step {step}: {})", calls.join(" "))
        }
        TurnEffect::RunToolHook { index, hook } => match hook {
            ToolHook::Pre => format!("RunToolHook({index}, PreToolUse)"),
            ToolHook::Post { content, is_error } => format!(
                "RunToolHook({index}, PostToolUse {}{content:?})",
                if *is_error { "error " } else { "" }
            ),
        },
        TurnEffect::AskApproval {
            index, grant_key, ..
        } => format!("AskApproval({index}, grant {grant_key:?})"),
        TurnEffect::RunTool { index, sandbox } => {
            format!("RunTool({index}, {})", sandbox_name(*sandbox))
        }
        TurnEffect::PrepareCompaction(trigger) => {
            format!("PrepareCompaction({})", trigger.as_str())
        }
        TurnEffect::StartSummary {
            request,
            budget,
            trigger,
        } => format!(
            "StartSummary#{request}({}, budget {budget})",
            trigger.as_str()
        ),
        TurnEffect::BuildCheckpoint {
            summary, trigger, ..
        } => format!("BuildCheckpoint({}, {summary:?})", trigger.as_str()),
        other => format!("{other:?}"),
    }
}

/// One event, short: its type and what a reader checks.
fn event(kind: &EventKind) -> String {
    let name = kind.type_name();
    match kind {
        EventKind::StepStarted { step } => format!("{name}({step})"),
        EventKind::ContextDiagnostics { decision, .. } => format!("{name}({decision})"),
        EventKind::AssistantMessage(m) => {
            let mut parts = Vec::new();
            if !m.text.is_empty() {
                parts.push(format!("{:?}", m.text));
            }
            if !m.tool_calls.is_empty() {
                parts.push(calls(&m.tool_calls));
            }
            if m.interrupted {
                parts.push("interrupted".into());
            }
            format!("{name}({})", parts.join(", "))
        }
        EventKind::ToolStarted { tool_call_id, .. } => format!("{name}({})", tool_call_id.0),
        EventKind::ToolFinished { tool_call_id, .. } => format!("{name}({})", tool_call_id.0),
        EventKind::ToolMessage(m) => format!("{name}({})", tool_result(m)),
        EventKind::ProviderRetry {
            attempt,
            max_attempts,
            delay_ms,
            error,
        } => format!(
            "{name}({attempt}/{max_attempts}, {delay_ms} ms, {})",
            error.class.as_str()
        ),
        EventKind::HookContinued { reason, count } => format!("{name}({count}, {reason:?})"),
        EventKind::CompactionStarted {
            trigger,
            tokens_before,
        } => format!("{name}({trigger}, {tokens_before})"),
        EventKind::CompactionCheckpoint {
            tokens_before,
            tokens_after,
            ..
        } => format!("{name}({tokens_before} -> {tokens_after})"),
        EventKind::TurnCancelled { reason } => format!("{name}({reason})"),
        EventKind::TurnComplete {
            status,
            reason,
            error,
        } => {
            let mut parts = vec![format!("{status:?}").to_lowercase()];
            parts.extend(reason.as_ref().map(|r| format!("{r:?}")));
            parts.extend(
                error
                    .as_ref()
                    .map(|e| format!("{}: {}", e.class.as_str(), e.message)),
            );
            format!("{name}({})", parts.join(", "))
        }
        _ => name.to_owned(),
    }
}

//! One tool call's lifecycle (`call.rs`): checked → `PreToolUse` → approval → run →
//! `PostToolUse` → result, each state's transitions, cancel in each state, and answers
//! that do not belong to the call's state (ignored: a call is paired exactly once).

use super::*;
use crate::approval::{ApprovalAnswer, NO_APPROVER};
use expect_test::expect;

fn sandbox() -> SandboxPolicy {
    SandboxPolicy::WorkspaceWrite { network: false }
}

/// A valid call the gateway decides `verdict` for, with the tool hooks given.
fn valid(verdict: Verdict, pre_hooks: bool, post_hooks: bool) -> CallCheck {
    CallCheck::Valid {
        verdict,
        pre_hooks: pre_hooks.then(|| "shell {\"n\":0}".to_owned()),
        post_hooks,
    }
}

fn allow() -> Verdict {
    Verdict::Allow { sandbox: sandbox() }
}

fn ask(grant_key: &str, if_no_approver: Option<SandboxPolicy>) -> Verdict {
    Verdict::Ask {
        action: "rm -rf build".into(),
        reason: "deletes files".into(),
        grant_key: grant_key.into(),
        sandbox_if_allowed: SandboxPolicy::None,
        if_no_approver,
    }
}

fn answered(index: usize, allowed: bool, message: Option<&str>) -> TurnInput {
    TurnInput::ApprovalAnswered {
        index,
        answer: ApprovalAnswer {
            allowed,
            message: message.map(str::to_owned),
        },
    }
}

/// One shell call `c0` of step 1, checked as `check`.
fn one_call(check: CallCheck) -> Scenario {
    let mut s = Scenario::started(config());
    s.check_as("c0", check)
        .on(tools(1, vec![call("c0", "shell", 0)]));
    s
}

/// Step 1's model asks for two shell calls, `c0` and `c1`.
fn two_shell_calls() -> TurnInput {
    tools(1, vec![call("c0", "shell", 0), call("c1", "shell", 1)])
}

#[test]
fn pre_tool_use_allows_then_the_call_runs_with_the_hooks_context_in_its_result() {
    let mut s = one_call(valid(allow(), true, false));
    s.on(tool_hook_with(
        0,
        HookDecision::Allow,
        None,
        &["lint passed"],
    ))
    .on(ran(0, "c0", "built"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:allow workspace-write +pre)
        < RunToolHook(0, PreToolUse)
        > ToolHookAnswered(0, Allow, context ["lint passed"])
        < Append[hook_ran, tool_started(c0)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c0 "built", 5 ms)
        < Append[tool_finished(c0), tool_message(c0 "built\n\n[hook] lint passed")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn an_invalid_call_gets_the_registrys_message_while_the_others_start() {
    let mut s = Scenario::started(config());
    s.check_as("c0", CallCheck::Invalid("unknown tool \"nope\"".into()))
        .on(tools(
            1,
            vec![call("c0", "nope", 0), call("c1", "shell", 1)],
        ))
        .on(ran(1, "c1", "ok"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:nope c1:shell])
        < Append[assistant_message([c0:nope c1:shell])]
        < CheckCalls(step 1: 0:c0 1:c1)
        > CallsChecked(0:invalid "unknown tool \"nope\"", 1:allow workspace-write)
        < Append[tool_started(c1), tool_message(c0 error "unknown tool \"nope\"")]
        < RunTool(1, workspace-write)
        > ToolFinished(1, c1 "ok", 5 ms)
        < Append[tool_finished(c1), tool_message(c1 "ok")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn a_denied_call_gets_the_reason_without_running() {
    let deny = Verdict::Deny {
        reason: "writes outside the workspace".into(),
    };
    let s = one_call(valid(deny, false, false));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:deny "writes outside the workspace")
        < Append[tool_message(c0 error "writes outside the workspace")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn pre_tool_use_ask_waits_for_the_approval_then_runs_under_the_approved_sandbox() {
    let mut s = one_call(valid(allow(), true, false));
    s.on(tool_hook(0, HookDecision::Ask, Some("a person checks")))
        .on(answered(0, true, None))
        .on(ran(0, "c0", "ok"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:allow workspace-write +pre)
        < RunToolHook(0, PreToolUse)
        > ToolHookAnswered(0, Ask, "a person checks")
        < Append[hook_ran]
        < AskApproval(0, grant "")
        > ApprovalAnswered(0, allowed)
        < Append[tool_started(c0)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c0 "ok", 5 ms)
        < Append[tool_finished(c0), tool_message(c0 "ok")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn a_denied_approval_is_the_result_with_the_pre_tool_use_context() {
    let mut s = one_call(valid(ask("shell:rm", None), true, false));
    s.on(tool_hook_with(0, HookDecision::Allow, None, &["careful"]))
        .on(answered(0, false, Some("not now")));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:ask "shell:rm" +pre)
        < RunToolHook(0, PreToolUse)
        > ToolHookAnswered(0, Allow, context ["careful"])
        < Append[hook_ran]
        < AskApproval(0, grant "shell:rm")
        > ApprovalAnswered(0, denied, "not now")
        < Append[tool_message(c0 error "not now\n\n[hook] careful")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn nobody_to_ask_runs_the_fallback_sandbox_or_denies() {
    let mut s = Scenario::started(config());
    s.check_as(
        "c0",
        valid(ask("", Some(SandboxPolicy::ReadOnly)), false, false),
    )
    .check_as("c1", valid(ask("", None), false, false))
    .on(two_shell_calls())
    .on(answered(0, false, Some(NO_APPROVER)))
    .on(answered(1, false, Some(NO_APPROVER)))
    .on(ran(0, "c0", "read"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell c1:shell])
        < Append[assistant_message([c0:shell c1:shell])]
        < CheckCalls(step 1: 0:c0 1:c1)
        > CallsChecked(0:ask "", 1:ask "")
        < AskApproval(0, grant "")
        < AskApproval(1, grant "")
        > ApprovalAnswered(0, denied, "denied: this call needs approval and no approver is attached to the session")
        < Append[tool_started(c0)]
        < RunTool(0, read-only)
        > ApprovalAnswered(1, denied, "denied: this call needs approval and no approver is attached to the session")
        > ToolFinished(0, c0 "read", 5 ms)
        < Append[tool_finished(c0), tool_message(c0 "read"), tool_message(c1 error "denied: this call needs approval and no approver is attached to the session")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn a_pre_tool_use_stop_denies_the_call_and_ends_the_turn_after_the_step() {
    let mut s = Scenario::started(config());
    s.check_as("c0", valid(allow(), true, false))
        .on(two_shell_calls())
        .on(tool_hook(0, HookDecision::Stop, Some("frozen")))
        .on(ran(1, "c1", "ok"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell c1:shell])
        < Append[assistant_message([c0:shell c1:shell])]
        < CheckCalls(step 1: 0:c0 1:c1)
        > CallsChecked(0:allow workspace-write +pre, 1:allow workspace-write)
        < Append[tool_started(c1)]
        < RunToolHook(0, PreToolUse)
        < RunTool(1, workspace-write)
        > ToolHookAnswered(0, Stop, "frozen")
        < Append[hook_ran, tool_message(c0 error "denied by a PreToolUse hook: frozen")]
        > ToolFinished(1, c1 "ok", 5 ms)
        < Append[tool_finished(c1), tool_message(c1 "ok"), turn_complete(completed, "frozen")]
        < Finish
    "#]]);
}

#[test]
fn a_post_tool_use_block_adds_its_reason_to_the_result_after_tool_finished() {
    let mut s = one_call(valid(allow(), false, true));
    s.on(ran(0, "c0", "out")).on(tool_hook_with(
        0,
        HookDecision::Block,
        Some("too long"),
        &["see docs"],
    ));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:allow workspace-write +post)
        < Append[tool_started(c0)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c0 "out", 5 ms)
        < RunToolHook(0, PostToolUse "out")
        > ToolHookAnswered(0, Block, "too long", context ["see docs"])
        < Append[hook_ran, tool_finished(c0), tool_message(c0 "out\n\n[hook] PostToolUse hook feedback: too long\n\n[hook] see docs")]
        < CompileContext(refresh tools)
    "#]]);
    assert!(
        s.transcript
            .contains("PostToolUse hook feedback: too long\\n\\n[hook] see docs"),
        "the block's reason, then the context"
    );
}

#[test]
fn cancel_during_pre_tool_use_writes_the_hook_run_and_a_cancelled_result() {
    let mut s = one_call(valid(allow(), true, false));
    s.on(TurnInput::CancelRequested)
        .on(tool_hook(0, HookDecision::Allow, None))
        .on(cancel())
        .on(tool_hook(0, HookDecision::Allow, None));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:allow workspace-write +pre)
        < RunToolHook(0, PreToolUse)
        > CancelRequested
        > ToolHookAnswered(0, Allow)
        < Append[hook_ran]
        > Cancel(user)
        < StopTools
        < Append[tool_message(c0 error "cancelled"), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > ToolHookAnswered(0, Allow)
    "#]]);
    assert_eq!(s.results_of("c0"), 1);
}

#[test]
fn cancel_during_an_approval_wait_ignores_the_late_answer() {
    let mut s = one_call(valid(ask("shell:rm", None), false, false));
    s.on(TurnInput::CancelRequested)
        .on(answered(0, true, None))
        .on(cancel())
        .on(answered(0, true, None));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:ask "shell:rm")
        < AskApproval(0, grant "shell:rm")
        > CancelRequested
        > ApprovalAnswered(0, allowed)
        > Cancel(user)
        < StopTools
        < Append[tool_message(c0 error "cancelled"), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > ApprovalAnswered(0, allowed)
    "#]]);
    assert_eq!(s.results_of("c0"), 1);
    assert!(
        !s.effects
            .iter()
            .any(|e| matches!(e, TurnEffect::RunTool { .. })),
        "a call asked about never runs once the turn is cancelling"
    );
}

#[test]
fn cancel_during_a_run_keeps_the_output_so_far_and_skips_post_tool_use() {
    let mut s = Scenario::started(config());
    s.check_as("c1", valid(allow(), false, true))
        .on(two_shell_calls())
        .on(TurnInput::CancelRequested)
        // c0 ended just before the token fired: written; c1's PostToolUse does not run.
        .on(ran(0, "c0", "done"))
        .on(ran(1, "c1", "late"))
        .on(cancel_with_output(vec![None, Some("half".into())]));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell c1:shell])
        < Append[assistant_message([c0:shell c1:shell])]
        < CheckCalls(step 1: 0:c0 1:c1)
        > CallsChecked(0:allow workspace-write, 1:allow workspace-write +post)
        < Append[tool_started(c0), tool_started(c1)]
        < RunTool(0, workspace-write)
        < RunTool(1, workspace-write)
        > CancelRequested
        > ToolFinished(0, c0 "done", 5 ms)
        < Append[tool_message(c0 "done")]
        > ToolFinished(1, c1 "late", 5 ms)
        > Cancel(user, output [None, Some("half")])
        < StopTools
        < Append[tool_message(c1 error "half\n[cancelled; the output above is what the call printed before it was stopped]"), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
    "#]]);
    assert_eq!((s.results_of("c0"), s.results_of("c1")), (1, 1));
}

#[test]
fn cancel_during_post_tool_use_writes_a_cancelled_result() {
    let mut s = one_call(valid(allow(), false, true));
    s.on(ran(0, "c0", "out"))
        .on(cancel())
        .on(tool_hook(0, HookDecision::Block, Some("late")));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:allow workspace-write +post)
        < Append[tool_started(c0)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c0 "out", 5 ms)
        < RunToolHook(0, PostToolUse "out")
        > Cancel(user)
        < StopTools
        < Append[tool_message(c0 error "cancelled"), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > ToolHookAnswered(0, Block, "late")
    "#]]);
    assert_eq!(s.results_of("c0"), 1);
}

#[test]
fn answers_that_do_not_belong_to_the_calls_state_are_ignored() {
    let mut s = one_call(valid(ask("shell:rm", None), true, true));
    // Waiting for its PreToolUse hooks: neither an approval nor a result moves it.
    s.on(answered(0, true, None)).on(ran(0, "c0", "too early"));
    let before = s.effects.len();
    assert_eq!(s.results_of("c0"), 0, "no result before the hooks answered");
    s.on(tool_hook(0, HookDecision::Allow, None))
        // Waiting for a person: a result or a second hook answer does not move it.
        .on(ran(0, "c0", "too early"))
        .on(tool_hook(0, HookDecision::Allow, None));
    assert!(
        !s.effects[before..]
            .iter()
            .any(|e| matches!(e, TurnEffect::RunTool { .. })),
        "it does not run before the person answered"
    );
    s.on(answered(0, true, None))
        .on(ran(0, "c0", "out"))
        .on(answered(0, true, None))
        .on(tool_hook(0, HookDecision::None, None))
        .on(ran(0, "c0", "twice"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:shell])
        < Append[assistant_message([c0:shell])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:ask "shell:rm" +pre +post)
        < RunToolHook(0, PreToolUse)
        > ApprovalAnswered(0, allowed)
        > ToolFinished(0, c0 "too early", 5 ms)
        > ToolHookAnswered(0, Allow)
        < Append[hook_ran]
        < AskApproval(0, grant "shell:rm")
        > ToolFinished(0, c0 "too early", 5 ms)
        > ToolHookAnswered(0, Allow)
        > ApprovalAnswered(0, allowed)
        < Append[tool_started(c0)]
        < RunTool(0, none)
        > ToolFinished(0, c0 "out", 5 ms)
        < RunToolHook(0, PostToolUse "out")
        > ApprovalAnswered(0, allowed)
        > ToolHookAnswered(0, None)
        < Append[hook_ran, tool_finished(c0), tool_message(c0 "out")]
        < CompileContext(refresh tools)
        > ToolFinished(0, c0 "twice", 5 ms)
    "#]]);
    assert_eq!(s.results_of("c0"), 1);
}

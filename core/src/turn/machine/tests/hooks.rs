//! Hook decisions. Replaces, as rules, `turn_control_support/hook_tests.rs` scenarios
//! (the hook processes and their inputs stay end-to-end there and in `foya-tests`'s
//! `hooks`).

use super::*;
use expect_test::expect;

/// `SessionStart` and `UserPromptSubmit` hooks.
fn start_and_prompt_hooks() -> TurnConfig {
    with_hooks(HookPoints {
        session_start: true,
        prompt_submit: true,
        ..HookPoints::default()
    })
}

#[test]
fn a_stop_hook_block_continues_the_turn_until_a_stop() {
    let mut s = Scenario::started(stop_hook());
    s.on(answer(1, "first"))
        .on(hooks_answered(HookDecision::Block, Some("run the tests")))
        .on(compiled())
        .on(answer(2, "second"))
        .on(hooks_answered(HookDecision::Stop, Some("enough")));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, "first")
        < Append[assistant_message("first"), usage]
        < RunHooks(Stop { active: false, last_text: "first" })
        > HooksAnswered(Block, "run the tests")
        < Append[hook_continued(1, "run the tests")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, "second")
        < Append[assistant_message("second"), usage]
        < RunHooks(Stop { active: true, last_text: "second" })
        > HooksAnswered(Stop, "enough")
        < Append[turn_complete(completed, "enough")]
        < Finish
    "#]]);
}

#[test]
fn stop_hook_blocks_beyond_the_limit_end_the_turn() {
    let mut s = Scenario::started(TurnConfig {
        max_hook_continuations: 1,
        ..stop_hook()
    });
    s.on(answer(1, "first"))
        .on(hooks_answered(HookDecision::Block, None))
        .on(compiled())
        .on(answer(2, "second"))
        .on(hooks_answered(HookDecision::Block, None));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, "first")
        < Append[assistant_message("first"), usage]
        < RunHooks(Stop { active: false, last_text: "first" })
        > HooksAnswered(Block)
        < Append[hook_continued(1, "a stop hook asked to continue")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, "second")
        < Append[assistant_message("second"), usage]
        < RunHooks(Stop { active: true, last_text: "second" })
        > HooksAnswered(Block)
        < Append[turn_complete(completed, "stop_hook_limit")]
        < Finish
    "#]]);
}

#[test]
fn a_tool_hook_stop_ends_the_turn_once_the_steps_results_are_in() {
    let mut s = Scenario::started(config());
    let hooked = CallCheck::Valid {
        verdict: Verdict::Allow {
            sandbox: SandboxPolicy::WorkspaceWrite { network: false },
        },
        pre_hooks: None,
        post_hooks: true,
    };
    s.check_as("c1", hooked)
        .on(tools(1, vec![call("c1", "echo", 1), call("c2", "echo", 2)]))
        .on(ran(0, "c1", "one"))
        .on(tool_hook(0, HookDecision::Stop, Some("policy")))
        .on(ran(1, "c2", "two"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c1:echo c2:echo])
        < Append[assistant_message([c1:echo c2:echo])]
        < CheckCalls(step 1: 0:c1 1:c2)
        > CallsChecked(0:allow workspace-write +post, 1:allow workspace-write)
        < Append[tool_started(c1), tool_started(c2)]
        < RunTool(0, workspace-write)
        < RunTool(1, workspace-write)
        > ToolFinished(0, c1 "one", 5 ms)
        < RunToolHook(0, PostToolUse "one")
        > ToolHookAnswered(0, Stop, "policy")
        < Append[hook_ran, tool_finished(c1), tool_message(c1 "one")]
        > ToolFinished(1, c2 "two", 5 ms)
        < Append[tool_finished(c2), tool_message(c2 "two"), turn_complete(completed, "policy")]
        < Finish
    "#]]);
}

#[test]
fn session_start_then_a_blocked_prompt_ends_the_turn_before_the_model() {
    let mut s = Scenario::new(start_and_prompt_hooks());
    s.on(TurnInput::Begin)
        .on(hooks_answered(HookDecision::None, None))
        .on(hooks_answered(HookDecision::Block, Some("secret")));
    s.check(expect![[r#"
        > Begin
        < RunHooks(SessionStart)
        > HooksAnswered(None)
        < RunHooks(PromptSubmit)
        > HooksAnswered(Block, "secret")
        < Append[turn_complete(completed, "prompt blocked by hook")]
        < Finish
    "#]]);
}

#[test]
fn a_session_start_stop_ends_the_turn_with_its_reason() {
    let mut s = Scenario::new(start_and_prompt_hooks());
    s.on(TurnInput::Begin)
        .on(hooks_answered(HookDecision::Stop, None));
    s.check(expect![[r#"
        > Begin
        < RunHooks(SessionStart)
        > HooksAnswered(Stop)
        < Append[turn_complete(completed, "stopped by hook")]
        < Finish
    "#]]);
}

#[test]
fn a_blocked_prompt_keeps_no_hook_context_in_the_log() {
    let mut m = TurnMachine::new(with_hooks(HookPoints {
        prompt_submit: true,
        ..HookPoints::default()
    }));
    m.on(TurnInput::Begin);
    let ran = EventKind::HookRan {
        hook_event: "UserPromptSubmit".into(),
        matcher: None,
        hook: "in-process:quote".into(),
        tool_call_id: None,
        duration_ms: 1,
        decision: HookDecision::Block,
        reason: Some("no".into()),
        additional_context: Some("the prompt was: secret".into()),
    };
    let effects = m.on(TurnInput::HooksAnswered(HookRun {
        merged: Merged {
            decision: Some(HookDecision::Block),
            reason: Some("no".into()),
            context: vec!["the prompt was: secret".into()],
        },
        events: vec![ran],
    }));
    let Some(TurnEffect::Append(kinds)) = effects.first() else {
        panic!("no append: {effects:?}");
    };
    assert!(
        matches!(
            &kinds[0],
            EventKind::HookRan {
                additional_context: None,
                ..
            }
        ),
        "{kinds:?}"
    );
}

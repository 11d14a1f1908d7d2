//! The step loop: answers, tool steps, batching and call order, `max_steps`.
//! Replaces `session::tests::{multi_step_turn_runs_a_tool_and_completes,
//! a_steps_allowed_calls_are_marked_started_with_its_assistant_message}` as rules,
//! the old `turn::tools` unit tests, and `turn_tools`'s ordering checks (those stay
//! end-to-end for the ToolActor wiring).

use super::*;
use expect_test::expect;

#[test]
fn a_text_answer_completes_the_turn() {
    let mut s = Scenario::model();
    s.on(TurnInput::Begin).on(compiled()).on(answer(1, "hello"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, "hello")
        < Append[assistant_message("hello"), usage, turn_complete(completed)]
        < Finish
    "#]]);
}

#[test]
fn a_tool_step_then_an_answer() {
    let mut s = Scenario::started(config());
    s.on(tools(1, vec![call("c1", "echo", 1)]))
        .on(ran(0, "c1", "one"))
        .on(compiled())
        .on(answer(2, "done"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c1:echo])
        < Append[assistant_message([c1:echo])]
        < CheckCalls(step 1: 0:c1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(c1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c1 "one", 5 ms)
        < Append[tool_finished(c1), tool_message(c1 "one")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, "done")
        < Append[assistant_message("done"), usage, turn_complete(completed)]
        < Finish
    "#]]);
}

#[test]
fn parallel_safe_calls_batch_up_to_five_and_others_run_alone_in_call_order() {
    let mut s = Scenario::started(config());
    let mut names = vec!["read"; 7];
    names.extend(["write", "read"]);
    let calls: Vec<ToolCall> = names
        .iter()
        .enumerate()
        .map(|(i, n)| call(&format!("c{i}"), n, i as u32))
        .collect();
    let parallel = names.iter().map(|n| *n == "read").collect();
    s.on(tools_with(1, calls, parallel));
    // Results arrive out of order; they are written in call order.
    s.on(ran(1, "c1", "r1")).on(ran(0, "c0", "r0"));
    for i in [2, 3, 4, 5] {
        s.on(ran(i, &format!("c{i}"), &format!("r{i}")));
    }
    s.on(ran(6, "c6", "r6"))
        .on(ran(7, "c7", "w7"))
        .on(ran(8, "c8", "r8"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:read c1:read c2:read c3:read c4:read c5:read c6:read c7:write c8:read])
        < Append[assistant_message([c0:read c1:read c2:read c3:read c4:read c5:read c6:read c7:write c8:read])]
        < CheckCalls(step 1: 0:c0 1:c1 2:c2 3:c3 4:c4)
        > CallsChecked(0:allow workspace-write, 1:allow workspace-write, 2:allow workspace-write, 3:allow workspace-write, 4:allow workspace-write)
        < Append[tool_started(c0), tool_started(c1), tool_started(c2), tool_started(c3), tool_started(c4)]
        < RunTool(0, workspace-write)
        < RunTool(1, workspace-write)
        < RunTool(2, workspace-write)
        < RunTool(3, workspace-write)
        < RunTool(4, workspace-write)
        > ToolFinished(1, c1 "r1", 5 ms)
        < Append[tool_finished(c1)]
        < CheckCalls(step 1: 5:c5)
        > CallsChecked(5:allow workspace-write)
        < Append[tool_started(c5)]
        < RunTool(5, workspace-write)
        > ToolFinished(0, c0 "r0", 5 ms)
        < Append[tool_finished(c0), tool_message(c0 "r0"), tool_message(c1 "r1")]
        < CheckCalls(step 1: 6:c6)
        > CallsChecked(6:allow workspace-write)
        < Append[tool_started(c6)]
        < RunTool(6, workspace-write)
        > ToolFinished(2, c2 "r2", 5 ms)
        < Append[tool_finished(c2), tool_message(c2 "r2")]
        > ToolFinished(3, c3 "r3", 5 ms)
        < Append[tool_finished(c3), tool_message(c3 "r3")]
        > ToolFinished(4, c4 "r4", 5 ms)
        < Append[tool_finished(c4), tool_message(c4 "r4")]
        > ToolFinished(5, c5 "r5", 5 ms)
        < Append[tool_finished(c5), tool_message(c5 "r5")]
        > ToolFinished(6, c6 "r6", 5 ms)
        < Append[tool_finished(c6), tool_message(c6 "r6")]
        < CheckCalls(step 1: 7:c7)
        > CallsChecked(7:allow workspace-write)
        < Append[tool_started(c7)]
        < RunTool(7, workspace-write)
        > ToolFinished(7, c7 "w7", 5 ms)
        < Append[tool_finished(c7), tool_message(c7 "w7")]
        < CheckCalls(step 1: 8:c8)
        > CallsChecked(8:allow workspace-write)
        < Append[tool_started(c8)]
        < RunTool(8, workspace-write)
        > ToolFinished(8, c8 "r8", 5 ms)
        < Append[tool_finished(c8), tool_message(c8 "r8")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn a_crashed_tool_is_an_error_result_and_the_turn_goes_on() {
    let mut s = Scenario::started(config());
    s.on(tools(1, vec![call("c1", "boom", 1), call("c2", "echo", 2)]))
        .on(ran(1, "c2", "two"))
        .on(TurnInput::ToolCrashed { index: 0 });
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c1:boom c2:echo])
        < Append[assistant_message([c1:boom c2:echo])]
        < CheckCalls(step 1: 0:c1 1:c2)
        > CallsChecked(0:allow workspace-write, 1:allow workspace-write)
        < Append[tool_started(c1), tool_started(c2)]
        < RunTool(0, workspace-write)
        < RunTool(1, workspace-write)
        > ToolFinished(1, c2 "two", 5 ms)
        < Append[tool_finished(c2)]
        > ToolCrashed(0)
        < Append[tool_message(c1 error "tool crashed"), tool_message(c2 "two")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn a_repeated_call_id_is_renamed_and_not_run() {
    let mut s = Scenario::started(config());
    s.on(tools(1, vec![call("a", "echo", 1), call("a", "echo", 2)]))
        .on(ran(0, "a", "one"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [a:echo a:echo])
        < Append[assistant_message([a:echo a_dup2:echo])]
        < CheckCalls(step 1: 0:a)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(a)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, a "one", 5 ms)
        < Append[tool_finished(a), tool_message(a "one"), tool_message(a_dup2 error "not run: this response already has a tool call with id \"a\"; call the tool again if this call is needed")]
        < CompileContext(refresh tools)
    "#]]);
}

#[test]
fn max_steps_ends_with_a_final_request_without_tools() {
    let mut s = Scenario::started(TurnConfig {
        max_steps: Some(1),
        ..config()
    });
    s.on(tools(1, vec![call("c1", "echo", 1)]))
        .on(ran(0, "c1", "one"))
        .on(compiled())
        .on(tools(2, vec![call("c2", "echo", 2)]));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c1:echo])
        < Append[assistant_message([c1:echo])]
        < CheckCalls(step 1: 0:c1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(c1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c1 "one", 5 ms)
        < Append[tool_finished(c1), tool_message(c1 "one")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2(final: no tools)
        > StreamEnded#2(done, calls [c2:echo])
        < Append[assistant_message(), turn_complete(failed, "max_steps", max_steps: the turn reached its maximum of 1 step)]
        < Finish
    "#]]);
}

#[test]
fn a_compile_error_fails_the_turn_invalid_request() {
    let mut s = Scenario::model();
    s.on(TurnInput::Begin)
        .on(TurnInput::ContextFailed("an image is missing".into()));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextFailed(an image is missing)
        < Append[step_started(1), turn_complete(failed, "invalid_request", invalid_request: an image is missing)]
        < Finish
    "#]]);
}

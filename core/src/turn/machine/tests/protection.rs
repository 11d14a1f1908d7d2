//! Run protection driven by the machine. Replaces, as rules, `turn_control`'s
//! `a_repeated_call_is_blocked_at_the_threshold_then_the_turn_fails` and
//! `an_a_b_a_b_cycle_ends_the_turn`, and `turn_control_support/withdrawn_tests.rs`
//! (the guard's own table tests stay in `protection_tests.rs`).

use super::*;
use expect_test::expect;

/// One tool step of `calls` whose results are `results` (index, id, content, error).
fn step(
    s: &mut Scenario,
    request: u64,
    calls: Vec<ToolCall>,
    results: &[(usize, &str, &str, bool)],
) {
    s.on(tools(request, calls));
    for (index, id, content, error) in results {
        if *error {
            s.on(ran_error(*index, id, content));
        } else {
            s.on(ran(*index, id, content));
        }
    }
    s.on(compiled());
}

#[test]
fn a_repeated_call_is_blocked_at_the_threshold_then_the_turn_fails() {
    let mut s = Scenario::started(config());
    step(
        &mut s,
        1,
        vec![call("c1", "read", 1)],
        &[(0, "c1", "same", false)],
    );
    step(
        &mut s,
        2,
        vec![call("c2", "read", 1)],
        &[(0, "c2", "same", false)],
    );
    step(&mut s, 3, vec![call("c3", "read", 1)], &[]);
    s.on(tools(4, vec![call("c4", "read", 1)]));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c1:read])
        < Append[assistant_message([c1:read])]
        < CheckCalls(step 1: 0:c1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(c1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c1 "same", 5 ms)
        < Append[tool_finished(c1), tool_message(c1 "same")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, calls [c2:read])
        < Append[assistant_message([c2:read])]
        < CheckCalls(step 2: 0:c2)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(c2)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c2 "same", 5 ms)
        < Append[tool_finished(c2), tool_message(c2 "same")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(3), context_diagnostics(send)]
        < StartStream#3
        > StreamEnded#3(done, calls [c3:read])
        < Append[assistant_message([c3:read]), tool_message(c3 error "not run: this exact call (`read` with the same arguments) was already made 2 times in this turn, and the 3rd identical call of a turn is not run; repeating it will not give a different result. Change the arguments, try another approach, or finish.")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(4), context_diagnostics(send)]
        < StartStream#4
        > StreamEnded#4(done, calls [c4:read])
        < Append[assistant_message([c4:read]), tool_message(c4 error "not run: the model kept repeating the blocked call `read` with the same arguments"), turn_complete(failed, "loop_detected", loop_detected: the model kept repeating the blocked call `read` with the same arguments)]
        < Finish
    "#]]);
}

#[test]
fn identical_calls_within_one_step_count_too() {
    // Four identical calls in one response: two run, the 3rd and 4th are refused; the
    // same call in the next step ends the turn.
    let mut s = Scenario::started(config());
    let four = |step: u32| -> Vec<ToolCall> {
        (1..=4)
            .map(|k| call(&format!("s{step}c{k}"), "shell", 1))
            .collect()
    };
    // `shell` has side effects (not parallel-safe): each copy counts.
    s.on(tools_with(1, four(1), vec![false; 4]))
        .on(ran(0, "s1c1", "ok"))
        .on(ran(1, "s1c2", "ok"))
        .on(compiled());
    s.on(tools_with(2, four(2), vec![false; 4]));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [s1c1:shell s1c2:shell s1c3:shell s1c4:shell])
        < Append[assistant_message([s1c1:shell s1c2:shell s1c3:shell s1c4:shell])]
        < CheckCalls(step 1: 0:s1c1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(s1c1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, s1c1 "ok", 5 ms)
        < Append[tool_finished(s1c1), tool_message(s1c1 "ok")]
        < CheckCalls(step 1: 1:s1c2)
        > CallsChecked(1:allow workspace-write)
        < Append[tool_started(s1c2)]
        < RunTool(1, workspace-write)
        > ToolFinished(1, s1c2 "ok", 5 ms)
        < Append[tool_finished(s1c2), tool_message(s1c2 "ok"), tool_message(s1c3 error "not run: this exact call (`shell` with the same arguments) was already made 2 times in this turn, and the 3rd identical call of a turn is not run; repeating it will not give a different result. Change the arguments, try another approach, or finish."), tool_message(s1c4 error "not run: this exact call (`shell` with the same arguments) was already made 3 times in this turn, and the 3rd identical call of a turn is not run; repeating it will not give a different result. Change the arguments, try another approach, or finish.")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, calls [s2c1:shell s2c2:shell s2c3:shell s2c4:shell])
        < Append[assistant_message([s2c1:shell s2c2:shell s2c3:shell s2c4:shell]), tool_message(s2c1 error "not run: the model kept repeating the blocked call `shell` with the same arguments"), tool_message(s2c2 error "not run: the model kept repeating the blocked call `shell` with the same arguments"), tool_message(s2c3 error "not run: the model kept repeating the blocked call `shell` with the same arguments"), tool_message(s2c4 error "not run: the model kept repeating the blocked call `shell` with the same arguments"), turn_complete(failed, "loop_detected", loop_detected: the model kept repeating the blocked call `shell` with the same arguments)]
        < Finish
    "#]]);
}

#[test]
fn an_a_b_a_b_cycle_ends_the_turn() {
    let mut s = Scenario::started(config());
    step(
        &mut s,
        1,
        vec![call("a1", "a", 1)],
        &[(0, "a1", "x", false)],
    );
    step(
        &mut s,
        2,
        vec![call("b1", "b", 1)],
        &[(0, "b1", "y", false)],
    );
    step(
        &mut s,
        3,
        vec![call("a2", "a", 1)],
        &[(0, "a2", "x", false)],
    );
    s.on(tools(4, vec![call("b2", "b", 1)]))
        .on(ran(0, "b2", "y"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [a1:a])
        < Append[assistant_message([a1:a])]
        < CheckCalls(step 1: 0:a1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(a1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, a1 "x", 5 ms)
        < Append[tool_finished(a1), tool_message(a1 "x")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, calls [b1:b])
        < Append[assistant_message([b1:b])]
        < CheckCalls(step 2: 0:b1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(b1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, b1 "y", 5 ms)
        < Append[tool_finished(b1), tool_message(b1 "y")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(3), context_diagnostics(send)]
        < StartStream#3
        > StreamEnded#3(done, calls [a2:a])
        < Append[assistant_message([a2:a])]
        < CheckCalls(step 3: 0:a2)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(a2)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, a2 "x", 5 ms)
        < Append[tool_finished(a2), tool_message(a2 "x")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(4), context_diagnostics(send)]
        < StartStream#4
        > StreamEnded#4(done, calls [b2:b])
        < Append[assistant_message([b2:b])]
        < CheckCalls(step 4: 0:b2)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(b2)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, b2 "y", 5 ms)
        < Append[tool_finished(b2), tool_message(b2 "y"), turn_complete(failed, "loop_detected", loop_detected: the last 4 steps repeat a cycle of 2 steps with the same calls and results, making no progress: [a -> b] twice)]
        < Finish
    "#]]);
}

#[test]
fn a_tool_failing_the_same_way_is_withdrawn_then_insisting_on_it_ends_the_turn() {
    let mut s = Scenario::started(config());
    step(
        &mut s,
        1,
        vec![call("f1", "flaky", 1)],
        &[(0, "f1", "disk full", true)],
    );
    step(
        &mut s,
        2,
        vec![call("f2", "flaky", 2)],
        &[(0, "f2", "disk full", true)],
    );
    step(
        &mut s,
        3,
        vec![call("f3", "flaky", 3)],
        &[(0, "f3", "disk full", true)],
    );
    step(&mut s, 4, vec![call("f4", "flaky", 4)], &[]);
    s.on(tools(5, vec![call("f5", "flaky", 5)]));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [f1:flaky])
        < Append[assistant_message([f1:flaky])]
        < CheckCalls(step 1: 0:f1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(f1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, f1 error "disk full", 5 ms)
        < Append[tool_finished(f1), tool_message(f1 error "disk full")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(2), context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, calls [f2:flaky])
        < Append[assistant_message([f2:flaky])]
        < CheckCalls(step 2: 0:f2)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(f2)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, f2 error "disk full", 5 ms)
        < Append[tool_finished(f2), tool_message(f2 error "disk full")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(3), context_diagnostics(send)]
        < StartStream#3
        > StreamEnded#3(done, calls [f3:flaky])
        < Append[assistant_message([f3:flaky])]
        < CheckCalls(step 3: 0:f3)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(f3)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, f3 error "disk full", 5 ms)
        < Append[tool_finished(f3), tool_message(f3 error "disk full")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(4), context_diagnostics(send)]
        < StartStream#4(withdrawn ["flaky"])
        > StreamEnded#4(done, calls [f4:flaky])
        < Append[assistant_message([f4:flaky]), tool_message(f4 error "not run: `flaky` failed 3 times in a row with the same error (disk full); it is no longer offered in this turn. Try another approach.")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(5), context_diagnostics(send)]
        < StartStream#5(withdrawn ["flaky"])
        > StreamEnded#5(done, calls [f5:flaky])
        < Append[assistant_message([f5:flaky]), tool_message(f5 error "not run: the model kept calling `flaky`, which was withdrawn after failing 3 times in a row with the same error and is no longer offered"), turn_complete(failed, "loop_detected", loop_detected: the model kept calling `flaky`, which was withdrawn after failing 3 times in a row with the same error and is no longer offered)]
        < Finish
    "#]]);
}

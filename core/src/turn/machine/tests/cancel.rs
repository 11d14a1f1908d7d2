//! Cancellation in every phase, and results that arrive after it. Replaces, as rules,
//! `turn_control`'s cancel scenarios and `session::tests`'s cancel cases (the
//! end-to-end ones stay for timing, process kills and the session's queue).

use super::*;
use expect_test::expect;

#[test]
fn cancel_while_streaming_keeps_the_partial_text_as_interrupted() {
    let mut s = Scenario::started(config());
    let mut streamed = StreamAggregate::new();
    streamed.text = "half an ans".into();
    s.on(TurnInput::CancelRequested).on(TurnInput::Cancel {
        reason: "user".into(),
        streamed,
        tool_output: Vec::new(),
    });
    s.on(answer(1, "late"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > CancelRequested
        > Cancel(user, streamed "half an ans")
        < StopStream
        < Append[assistant_message("half an ans", interrupted), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > StreamEnded#1(done, "late")
    "#]]);
}

#[test]
fn cancel_during_a_backoff_stops_the_timer() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::RateLimited))
        .on(cancel())
        .on(TurnInput::RetryElapsed { request: 1 });
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error rate_limited)
        < Append[provider_retry(2/3, 500 ms, rate_limited)]
        < StartTimer#1(500 ms)
        > Cancel(user)
        < StopTimer
        < Append[turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > RetryElapsed#1
    "#]]);
}

#[test]
fn cancel_during_tools_writes_a_cancelled_result_for_every_call_without_one() {
    let mut s = Scenario::started(config());
    s.on(tools(
        1,
        vec![
            call("c0", "sleep", 0),
            call("c1", "shell", 1),
            call("c2", "sleep", 2),
        ],
    ))
    .on(ran(0, "c0", "slept"))
    .on(TurnInput::CancelRequested)
    .on(cancel_with_output(vec![
        None,
        Some("line one\nline tw".into()),
        Some(String::new()),
    ]))
    .on(ran(2, "c2", "late"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:sleep c1:shell c2:sleep])
        < Append[assistant_message([c0:sleep c1:shell c2:sleep])]
        < CheckCalls(step 1: 0:c0 1:c1 2:c2)
        > CallsChecked(0:allow workspace-write, 1:allow workspace-write, 2:allow workspace-write)
        < Append[tool_started(c0), tool_started(c1), tool_started(c2)]
        < RunTool(0, workspace-write)
        < RunTool(1, workspace-write)
        < RunTool(2, workspace-write)
        > ToolFinished(0, c0 "slept", 5 ms)
        < Append[tool_finished(c0), tool_message(c0 "slept")]
        > CancelRequested
        > Cancel(user, output [None, Some("line one\nline tw"), Some("")])
        < StopTools
        < Append[tool_message(c1 error "line one\nline tw\n[cancelled; the output above is what the call printed before it was stopped]"), tool_message(c2 error "cancelled"), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > ToolFinished(2, c2 "late", 5 ms)
    "#]]);
}

#[test]
fn a_result_between_the_token_and_the_cancel_is_written_without_starting_more() {
    let mut s = Scenario::started(config());
    s.on(tools_with(
        1,
        vec![call("c0", "write", 0), call("c1", "write", 1)],
        vec![false, false],
    ))
    .on(TurnInput::CancelRequested)
    .on(ran(0, "c0", "written"))
    .on(cancel());
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, calls [c0:write c1:write])
        < Append[assistant_message([c0:write c1:write])]
        < CheckCalls(step 1: 0:c0)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(c0)]
        < RunTool(0, workspace-write)
        > CancelRequested
        > ToolFinished(0, c0 "written", 5 ms)
        < Append[tool_message(c0 "written")]
        > Cancel(user)
        < StopTools
        < Append[tool_message(c1 error "cancelled"), turn_cancelled(user), turn_complete(cancelled)]
        < Finish
    "#]]);
}

#[test]
fn a_stream_error_racing_the_cancel_is_not_retried() {
    let mut s = Scenario::started(config());
    s.on(TurnInput::CancelRequested)
        .on(failed(1, ErrorClass::Network))
        .on(cancel());
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > CancelRequested
        > StreamEnded#1(error network)
        > Cancel(user)
        < StopStream
        < Append[turn_cancelled(user), turn_complete(cancelled)]
        < Finish
    "#]]);
}

#[test]
fn cancel_during_stop_hooks_stops_them() {
    let mut s = Scenario::started(stop_hook());
    s.on(answer(1, "done"))
        .on(cancel())
        .on(hooks_answered(HookDecision::Block, None));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(done, "done")
        < Append[assistant_message("done"), usage]
        < RunHooks(Stop { active: false, last_text: "done" })
        > Cancel(user)
        < StopHooks
        < Append[turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > HooksAnswered(Block)
    "#]]);
}

#[test]
fn cancel_during_compaction_stops_the_summary() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::ContextOverflow))
        .on(prepared(8_000, false))
        .on(cancel())
        .on(answer(2, "summary"));
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=1500)
        < Append[step_started(1), context_diagnostics(send)]
        < StartStream#1
        > StreamEnded#1(error context_overflow)
        < PrepareCompaction(overflow)
        > CompactionPrepared(before=9000, history=8000/8500, budget=8000)
        < Append[compaction_started(overflow, 9000)]
        < StartSummary#2(overflow, budget 8000)
        > Cancel(user)
        < StopStream
        < Append[turn_cancelled(user), turn_complete(cancelled)]
        < Finish
        > StreamEnded#2(done, "summary")
    "#]]);
}

#[test]
fn cancel_before_begin_ends_the_turn_without_a_step() {
    let mut s = Scenario::model();
    s.on(TurnInput::CancelRequested)
        .on(TurnInput::Begin)
        .on(TurnInput::Cancel {
            reason: "shutdown".into(),
            streamed: StreamAggregate::new(),
            tool_output: Vec::new(),
        });
    s.check(expect![[r#"
        > CancelRequested
        > Begin
        > Cancel(shutdown)
        < Append[turn_cancelled(shutdown), turn_complete(cancelled)]
        < Finish
    "#]]);
}

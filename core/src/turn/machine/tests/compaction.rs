//! Compaction phases. Replaces, as rules, `compaction.rs`, `compaction_bounds.rs` and
//! `compaction_threshold.rs` scenarios (the summary contents and budgets stay
//! end-to-end, with the context compiler).

use super::*;
use expect_test::expect;

/// Step 1's context, compiled over the compaction threshold.
fn over_threshold() -> TurnInput {
    TurnInput::ContextCompiled(measured(8_000, true))
}

fn summary(request: u64, text: &str) -> TurnInput {
    answer(request, text)
}

fn checkpoint(tokens_after: u64) -> TurnInput {
    TurnInput::CheckpointBuilt {
        checkpoint: EventKind::CompactionCheckpoint {
            summary: "summary".into(),
            covers_up_to: foya_protocol::Seq(9),
            tokens_before: 9_000,
            tokens_after: 0,
            kept: Vec::new(),
        },
        tokens_after,
    }
}

#[test]
fn an_overflow_compacts_once_and_a_second_one_fails_the_turn() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::ContextOverflow))
        .on(prepared(8_000, false))
        .on(summary(2, "the story so far"))
        .on(checkpoint(2_000))
        .on(compiled())
        .on(failed(3, ErrorClass::ContextOverflow));
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
        > StreamEnded#2(done, "the story so far")
        < BuildCheckpoint(overflow, "the story so far")
        > CheckpointBuilt(after=2000)
        < Append[compaction_checkpoint(9000 -> 2000)]
        < CompileContext
        > ContextCompiled(tokens=1500)
        < Append[context_diagnostics(send)]
        < StartStream#3
        > StreamEnded#3(error context_overflow)
        < Append[turn_complete(failed, "context_overflow", context_overflow: ContextOverflow)]
        < Finish
    "#]]);
}

#[test]
fn threshold_compaction_runs_once_per_step() {
    let mut s = Scenario::model();
    s.on(TurnInput::Begin)
        .on(over_threshold())
        .on(prepared(8_000, false))
        .on(summary(1, "summary"))
        .on(checkpoint(2_000))
        .on(over_threshold())
        .on(tools(2, vec![call("c1", "echo", 1)]))
        .on(ran(0, "c1", "one"))
        .on(over_threshold());
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=8500, over threshold)
        < Append[step_started(1), context_diagnostics(compact)]
        < PrepareCompaction(threshold)
        > CompactionPrepared(before=9000, history=8000/8500, budget=8000)
        < Append[compaction_started(threshold, 9000)]
        < StartSummary#1(threshold, budget 8000)
        > StreamEnded#1(done, "summary")
        < BuildCheckpoint(threshold, "summary")
        > CheckpointBuilt(after=2000)
        < Append[compaction_checkpoint(9000 -> 2000)]
        < CompileContext
        > ContextCompiled(tokens=8500, over threshold)
        < Append[context_diagnostics(send)]
        < StartStream#2
        > StreamEnded#2(done, calls [c1:echo])
        < Append[assistant_message([c1:echo])]
        < CheckCalls(step 1: 0:c1)
        > CallsChecked(0:allow workspace-write)
        < Append[tool_started(c1)]
        < RunTool(0, workspace-write)
        > ToolFinished(0, c1 "one", 5 ms)
        < Append[tool_finished(c1), tool_message(c1 "one")]
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=8500, over threshold)
        < Append[step_started(2), context_diagnostics(compact)]
        < PrepareCompaction(threshold)
    "#]]);
}

#[test]
fn a_history_too_short_to_shrink_is_sent_uncompacted() {
    let mut s = Scenario::model();
    s.on(TurnInput::Begin)
        .on(over_threshold())
        .on(prepared(10, false))
        .on(over_threshold());
    s.check(expect![[r#"
        > Begin
        < CompileContext(refresh tools)
        > ContextCompiled(tokens=8500, over threshold)
        < Append[step_started(1), context_diagnostics(compact)]
        < PrepareCompaction(threshold)
        > CompactionPrepared(before=9000, history=10/510, budget=8000)
        < CompileContext
        > ContextCompiled(tokens=8500, over threshold)
        < Append[context_diagnostics(send)]
        < StartStream#1
    "#]]);
}

#[test]
fn an_overflowing_summary_halves_its_budget_then_fails_after_three_requests() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::ContextOverflow))
        .on(prepared(8_000, false))
        .on(failed(2, ErrorClass::ContextOverflow))
        .on(failed(3, ErrorClass::ContextOverflow))
        .on(failed(4, ErrorClass::ContextOverflow));
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
        > StreamEnded#2(error context_overflow)
        < StartSummary#3(overflow, budget 4000)
        > StreamEnded#3(error context_overflow)
        < StartSummary#4(overflow, budget 2000)
        > StreamEnded#4(error context_overflow)
        < Append[turn_complete(failed, "compaction_failed", context_overflow: the compaction request failed: ContextOverflow)]
        < Finish
    "#]]);
}

#[test]
fn a_checkpoint_that_saves_too_little_fails_an_overflow_compaction() {
    let mut s = Scenario::started(config());
    s.on(failed(1, ErrorClass::ContextOverflow))
        .on(prepared(8_000, false))
        .on(summary(2, "summary"))
        .on(checkpoint(8_500));
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
        > StreamEnded#2(done, "summary")
        < BuildCheckpoint(overflow, "summary")
        > CheckpointBuilt(after=8500)
        < Append[turn_complete(failed, "compaction_ineffective", context_overflow: compaction would reduce the context only from 9000 to 8500 estimated tokens (less than 10 %))]
        < Finish
    "#]]);
}

#[test]
fn manual_compaction_writes_a_checkpoint_and_ends_the_turn() {
    let mut s = Scenario::new(compact());
    s.on(TurnInput::Begin)
        .on(prepared(8_000, false))
        .on(summary(1, "  summary  "))
        .on(checkpoint(1_000));
    s.check(expect![[r#"
        > Begin
        < PrepareCompaction(manual)
        > CompactionPrepared(before=9000, history=8000/8500, budget=8000)
        < Append[compaction_started(manual, 9000)]
        < StartSummary#1(manual, budget 8000)
        > StreamEnded#1(done, "  summary  ")
        < BuildCheckpoint(manual, "summary")
        > CheckpointBuilt(after=1000)
        < Append[compaction_checkpoint(9000 -> 1000), turn_complete(completed)]
        < Finish
    "#]]);
}

#[test]
fn manual_compaction_with_nothing_to_compact_is_a_no_op_that_says_so() {
    let mut s = Scenario::new(TurnConfig {
        hooks: HookPoints {
            pre_compact_manual: true,
            ..HookPoints::default()
        },
        ..compact()
    });
    s.on(TurnInput::Begin)
        .on(hooks_answered(HookDecision::None, None))
        .on(prepared(0, true));
    s.check(expect![[r#"
        > Begin
        < RunHooks(PreCompact(Manual))
        > HooksAnswered(None)
        < PrepareCompaction(manual)
        > CompactionPrepared(before=9000, history=0/500, budget=8000, empty)
        < Append[turn_complete(completed, "nothing to compact")]
        < Finish
    "#]]);
}

#[test]
fn an_empty_summary_fails_a_manual_compaction() {
    let mut s = Scenario::new(compact());
    s.on(TurnInput::Begin)
        .on(prepared(8_000, false))
        .on(summary(1, "   "));
    s.check(expect![[r#"
        > Begin
        < PrepareCompaction(manual)
        > CompactionPrepared(before=9000, history=8000/8500, budget=8000)
        < Append[compaction_started(manual, 9000)]
        < StartSummary#1(manual, budget 8000)
        > StreamEnded#1(done, "   ")
        < Append[turn_complete(failed, "compaction_failed", context_overflow: the model returned an empty summary)]
        < Finish
    "#]]);
}

//! Inputs, the queue, cancel and late appends.

use super::*;
use expect_test::expect;

#[test]
fn inputs_arriving_while_busy_queue_and_run_in_fifo_order() {
    let mut h = Harness::new();
    h.submit("a");
    h.submit("b");
    h.submit("c");
    let first = h.run(1);
    h.turn_completes(first);
    let second = h.run(2);
    h.turn_completes(second);
    let third = h.run(3);
    h.turn_completes(third);
    h.check(expect![[r#"
        > submit i1 "a"
        < append r1 2..3: user_message(i1 "a"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "b"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > submit i3 "c"
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > turn_append r1 [turn_complete]
        < append r1 6..6: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < append r2 7..8: user_message(i2 "b"), turn_started(i2)
        < start_turn r2 Model
        > turn_append r2 [turn_complete]
        < append r2 9..9: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < append r3 10..11: user_message(i3 "c"), turn_started(i3)
        < start_turn r3 Model
        > turn_append r3 [turn_complete]
        < append r3 12..12: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
    "#]]);
}

#[test]
fn an_input_id_is_applied_once_and_bad_inputs_are_refused_before_anything_is_written() {
    let mut h = Harness::new();
    let id = h.submit("hi");
    h.submit_as(id, Input::text("hi"));
    let blank = h.input_id();
    h.submit_as(blank, Input::text("  "));
    let with_image = Input {
        images: vec![foya_protocol::AttachmentRef {
            id: "01930000-0000-7000-8000-000000000001".into(),
            media_type: Some("image/png".into()),
        }],
        ..Input::text("what is this?")
    };
    let image = h.input_id();
    h.submit_as(image, with_image);
    h.check(expect![[r#"
        > submit i1 "hi"
        < append r1 2..3: user_message(i1 "hi"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i1 "hi"
        < reply submitted i1
        > submit i2 "  "
        < reply error: the input is empty
        > submit i3 "what is this?"
        < reply error: model "" does not accept images (its provider profile has no vision); send the input without images
    "#]]);
}

#[test]
fn a_subscriber_replays_up_to_the_last_committed_seq() {
    let mut h = Harness::new();
    h.on("subscribe", SessionInput::Subscribe { approver: true });
    h.submit("go");
    h.on("subscribe", SessionInput::Subscribe { approver: false });
    h.check(expect![[r#"
        > subscribe
        < subscriber approver=true replay_end=1
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > subscribe
        < subscriber approver=false replay_end=3
    "#]]);
}

#[test]
fn cancel_is_a_no_op_when_idle_and_cancels_the_turn_when_busy() {
    let mut h = Harness::new();
    h.on("cancel", SessionInput::Cancel);
    h.submit("first");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1", "c2"]), tool_started("c1")]);
    h.on("cancel", SessionInput::Cancel);
    assert_eq!(
        h.machine.phase(),
        &Phase::Turn(ActiveTurn {
            run_id: run,
            stage: TurnStage::Cancelling
        })
    );
    // Tool activity after the cancel is no longer recorded; the turn's own events are.
    h.turn_append(run, vec![tool_started("c2")]);
    h.turn_append(run, vec![tool_result("c1"), tool_started("c2")]);
    h.turn_append(
        run,
        vec![
            EventKind::TurnCancelled {
                reason: "user".into(),
            },
            completed(TurnStatus::Cancelled, None, None),
        ],
    );
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    h.check(expect![[r#"
        > cancel
        < reply ok
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message, tool_started]
        < append r1 4..5: assistant_message, tool_started
        < reply ok
        > cancel
        < cancel_turn "user"
        < reply ok
        > turn_append r1 [tool_started]
        < reply refused: the turn is being cancelled
        > turn_append r1 [tool_message, tool_started]
        < append r1 6..6: tool_message(c1 "done")
        < reply ok
        > turn_append r1 [turn_cancelled, turn_complete]
        < append r1 7..8: turn_cancelled, turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
    "#]]);
}

#[test]
fn clear_queue_drops_the_waiting_inputs_in_order() {
    let mut h = Harness::new();
    h.on("clear_queue", SessionInput::ClearQueue);
    h.submit("running");
    h.submit("b");
    h.submit("c");
    h.on("clear_queue", SessionInput::ClearQueue);
    let run = h.run(1);
    h.turn_completes(run);
    h.check(expect![[r#"
        > clear_queue
        < reply ok
        > submit i1 "running"
        < append r1 2..3: user_message(i1 "running"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "b"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > submit i3 "c"
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > clear_queue
        < append - 6..7: input_dropped(i2 "queue cleared"), input_dropped(i3 "queue cleared")
        < reply ok
        > turn_append r1 [turn_complete]
        < append r1 8..8: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
    "#]]);
}

#[test]
fn nothing_is_written_or_published_for_a_run_after_its_turn_complete() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.on(
        "deltas r1",
        SessionInput::Deltas {
            run_id: run,
            deltas: vec![Delta::TextDelta { text: "a".into() }],
        },
    );
    h.turn_append(run, vec![completed(TurnStatus::Completed, None, None)]);
    // The actor has not exited yet: a late append, deltas and approvals of its run.
    h.turn_append(run, vec![tool_result("c1")]);
    h.on(
        "deltas r1",
        SessionInput::Deltas {
            run_id: run,
            deltas: vec![Delta::TextDelta { text: "b".into() }],
        },
    );
    h.ask_approval(run, "c1", "k", true);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    h.turn_append(run, vec![tool_result("c1")]);
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > deltas r1
        < deltas r1 x1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_append r1 [tool_message]
        < reply refused: run r1 is not the session's open turn
        > deltas r1
        > approval_requested a1 c1 approver=true
        < drop_approval a1
        > turn_ended
        < drop_approvals
        < idle
        > turn_append r1 [tool_message]
        < reply refused: run r1 is not the session's open turn
    "#]]);
}

#[test]
fn a_cancel_between_a_turns_end_and_the_next_input_cancels_that_input_as_it_starts() {
    let mut h = Harness::new();
    h.submit("quick");
    let first = h.run(1);
    h.turn_append(first, vec![completed(TurnStatus::Completed, None, None)]);
    // The first turn's actor has not exited yet: the next input queues, and the cancel
    // the caller sends for it must not be lost on the finished turn.
    h.submit("slow");
    h.on("cancel", SessionInput::Cancel);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    // Once nothing is left to start, a cancel is a no-op again and is not carried over.
    let second = h.run(2);
    h.turn_append(
        second,
        vec![
            EventKind::TurnCancelled {
                reason: "user".into(),
            },
            completed(TurnStatus::Cancelled, None, None),
        ],
    );
    h.on("cancel", SessionInput::Cancel);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    h.submit("next");
    h.check(expect![[r#"
        > submit i1 "quick"
        < append r1 2..3: user_message(i1 "quick"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > submit i2 "slow"
        < append - 5..5: input_queued(i2)
        < reply submitted i2
        > cancel
        < reply ok
        > turn_ended
        < drop_approvals
        < append r2 6..7: user_message(i2 "slow"), turn_started(i2)
        < start_turn r2 Model
        < cancel_turn "user"
        > turn_append r2 [turn_cancelled, turn_complete]
        < append r2 8..9: turn_cancelled, turn_complete(Cancelled)
        < reply ok
        > cancel
        < cancel_turn "user"
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i3 "next"
        < append r3 10..11: user_message(i3 "next"), turn_started(i3)
        < start_turn r3 Model
        < reply submitted i3
    "#]]);
}

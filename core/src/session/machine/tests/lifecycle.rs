//! A turn's end (crash, storage failure), recovery on load, shutdown and delete.

use super::*;
use expect_test::expect;

#[test]
fn a_crashed_turn_is_closed_failed_internal_and_the_queue_goes_on() {
    let mut h = Harness::new();
    h.submit("first");
    h.submit("second");
    let run = h.run(1);
    h.turn_append(
        run,
        vec![assistant(&["ran", "waited"]), tool_started("ran")],
    );
    h.on(
        "turn_ended (panicked)",
        SessionInput::TurnEnded {
            failure: Some("turn failed: boom".into()),
        },
    );
    let second = h.run(2);
    // A turn that stops without a word is closed too.
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    let _ = second;
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "second"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > turn_append r1 [assistant_message, tool_started]
        < append r1 5..6: assistant_message, tool_started
        < reply ok
        > turn_ended (panicked)
        < drop_approvals
        < append r1 7..9: tool_message(ran "the turn crashed before this call finished"), tool_message(waited "not run: the turn stopped before this call started; nothing was executed"), turn_complete(Failed "turn crashed" internal: "turn failed: boom")
        < append r2 10..11: user_message(i2 "second"), turn_started(i2)
        < start_turn r2 Model
        > turn_ended
        < drop_approvals
        < append r2 12..12: turn_complete(Failed "turn crashed" internal: "the turn stopped without completing")
        < idle
    "#]]);
}

#[test]
fn a_failed_append_of_the_turn_fails_it_with_class_storage_and_the_session_goes_on() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1"]), tool_started("c1")]);
    h.failing = Some("disk full".into());
    h.turn_append(run, vec![tool_result("c1")]);
    h.failing = None;
    assert_eq!(
        h.machine.phase(),
        &Phase::Turn(ActiveTurn {
            run_id: run,
            stage: TurnStage::StorageFailed("disk full".into())
        })
    );
    h.turn_append(run, vec![completed(TurnStatus::Completed, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    // A submit whose append fails is reported, and nothing changed.
    h.failing = Some("disk full".into());
    h.submit("lost");
    h.failing = None;
    h.submit("kept");
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message, tool_started]
        < append r1 4..5: assistant_message, tool_started
        < reply ok
        > turn_append r1 [tool_message]
        < append r1 6..6: tool_message(c1 "done")
        > commit failed
        < stop_turn
        < reply refused: storage: disk full
        > turn_append r1 [turn_complete]
        < reply refused: the turn failed on a storage error: disk full
        > turn_ended
        < drop_approvals
        < append r1 6..7: tool_message(c1 "outcome unknown: the turn failed on a storage error before this result was saved"), turn_complete(Failed "storage" storage: "disk full")
        < idle
        > submit i2 "lost"
        < append r2 8..9: user_message(i2 "lost"), turn_started(i2)
        > commit failed
        < reply error: storage: disk full
        > submit i3 "kept"
        < append r3 8..9: user_message(i3 "kept"), turn_started(i3)
        < start_turn r3 Model
        < reply submitted i3
    "#]]);
}

/// A log cut by a restart: a turn with a started and a waiting call, then two queued
/// inputs.
fn interrupted_log() -> Vec<Event> {
    let id = SessionId::new();
    let run = Some(RunId::new());
    let (first, second, third) = (InputId::new(), InputId::new(), InputId::new());
    let kinds = vec![
        (None, EventKind::SessionCreated { config: config() }),
        (
            run,
            EventKind::UserMessage {
                input_id: first,
                input: Input::text("one"),
            },
        ),
        (run, EventKind::TurnStarted { input_id: first }),
        (run, assistant(&["ran", "waited"])),
        (run, tool_started("ran")),
        (
            None,
            EventKind::InputQueued {
                input_id: second,
                input: Input::text("two"),
            },
        ),
        (
            None,
            EventKind::InputQueued {
                input_id: third,
                input: Input::text("three"),
            },
        ),
    ];
    kinds
        .into_iter()
        .zip(1..)
        .map(|((run_id, kind), seq)| Event {
            session_id: id,
            seq: Seq(seq),
            run_id,
            at_ms: 5_000,
            kind,
        })
        .collect()
}

#[test]
fn on_load_an_interrupted_turn_is_closed_and_the_queue_runs_or_is_dropped() {
    for queued_on_restart in [QueuedOnRestart::Run, QueuedOnRestart::Drop] {
        let settings = Settings {
            queued_on_restart,
            ..settings()
        };
        let mut h = Harness::from_log(settings, &interrupted_log());
        h.on("loaded", SessionInput::Loaded);
        h.check(match queued_on_restart {
            QueuedOnRestart::Run => expect![[r#"
                > loaded
                < append r1 8..10: tool_message(ran "outcome unknown: the runtime stopped while this ran; it was not re-run"), tool_message(waited "not run: the turn stopped before this call started; nothing was executed"), turn_complete(Failed "interrupted by restart" internal: "the runtime stopped while this turn ran")
                < append r2 11..12: user_message(i2 "two"), turn_started(i2)
                < start_turn r2 Model first
            "#]],
            QueuedOnRestart::Drop => expect![[r#"
                > loaded
                < append r1 8..10: tool_message(ran "outcome unknown: the runtime stopped while this ran; it was not re-run"), tool_message(waited "not run: the turn stopped before this call started; nothing was executed"), turn_complete(Failed "interrupted by restart" internal: "the runtime stopped while this turn ran")
                < append - 11..12: input_dropped(i2 "dropped on restart"), input_dropped(i3 "dropped on restart")
                < idle
            "#]],
        });
    }
}

#[test]
fn shutdown_cancels_the_turn_refuses_inputs_and_answers_once_the_turn_ended() {
    let mut h = Harness::new();
    h.submit("first");
    h.submit("queued");
    let run = h.run(1);
    h.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::Shutdown,
        },
    );
    h.submit("refused");
    h.turn_append(run, vec![completed(TurnStatus::Cancelled, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    // Idle: answered at once (the hooks ran already).
    h.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::Shutdown,
        },
    );
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "queued"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > shutdown
        < cancel_turn "runtime shutdown"
        > submit i3 "refused"
        < reply error: the runtime is shutting down
        > turn_append r1 [turn_complete]
        < append r1 5..5: turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < run SessionEnd hooks
        < answer_shutdown
        > shutdown
        < answer_shutdown
    "#]]);
}

#[test]
fn a_sub_agent_or_a_session_without_a_turn_runs_no_session_end_hooks() {
    let mut h = Harness::new();
    h.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::Shutdown,
        },
    );
    let child = SessionConfig {
        parent: Some(foya_protocol::command::ParentRef {
            session_id: SessionId::new(),
            run_id: RunId::new(),
            tool_call_id: ToolCallId::new("agent"),
        }),
        ..config()
    };
    let mut c = Harness::with(settings(), child);
    c.submit("go");
    let run = c.run(1);
    c.turn_completes(run);
    c.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::Shutdown,
        },
    );
    h.out.push_str(&c.take());
    h.check(expect![[r#"
        > shutdown
        < answer_shutdown
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > shutdown
        < answer_shutdown
    "#]]);
}

#[test]
fn delete_during_a_turn_cancels_it_then_drops_the_queue_and_writes_session_deleted() {
    let mut h = Harness::new();
    h.submit("first");
    h.submit("queued");
    let run = h.run(1);
    h.on("delete", SessionInput::Delete);
    h.submit("refused");
    h.turn_append(run, vec![completed(TurnStatus::Cancelled, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    assert_eq!(h.machine.phase(), &Phase::Deleted);
    // Deleted: nothing more happens.
    h.submit("after");
    h.on("subscribe", SessionInput::Subscribe { approver: false });
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "queued"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > delete
        < cancel_turn "session deleted"
        > submit i3 "refused"
        < reply error: session s1 was deleted
        > turn_append r1 [turn_complete]
        < append r1 5..5: turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < append - 6..7: input_dropped(i2 "session deleted"), session_deleted
        < forget_transcript
        < close_subscribers "session deleted"
        < answer_delete Ok(())
        < stop "session deleted"
        > submit i4 "after"
        > subscribe
    "#]]);
}

#[test]
fn delete_when_idle_is_at_once_and_a_failed_delete_still_stops_the_actor() {
    let mut h = Harness::new();
    h.on("delete", SessionInput::Delete);
    let mut failing = Harness::new();
    failing.failing = Some("disk full".into());
    failing.on("delete", SessionInput::Delete);
    assert_eq!(failing.machine.phase(), &Phase::Deleting(None));
    h.out.push_str(&failing.take());
    h.check(expect![[r#"
        > delete
        < append - 2..2: session_deleted
        < forget_transcript
        < close_subscribers "session deleted"
        < answer_delete Ok(())
        < stop "session deleted"
        > delete
        < append - 2..2: session_deleted
        > commit failed
        < close_subscribers "session deleted"
        < answer_delete Err(Storage("disk full"))
        < stop "session deleted"
    "#]]);
}

#[test]
fn a_drained_session_lets_its_turn_finish_starts_nothing_and_queues_new_inputs() {
    let mut h = Harness::new();
    // Idle: answered at once.
    h.on("drain", SessionInput::Drain);
    let mut h2 = Harness::new();
    h2.submit("first");
    h2.submit("queued");
    let run = h2.run(1);
    h2.on("drain", SessionInput::Drain);
    // Taken meanwhile: queued for the next owner, not started.
    h2.submit("during the drain");
    h2.turn_completes(run);
    h2.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::HandedOff,
        },
    );
    h.out.push_str(&h2.take());
    h.check(expect![[r#"
        > drain
        < answer_drained
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "queued"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > drain
        > submit i3 "during the drain"
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > turn_append r1 [turn_complete]
        < append r1 6..6: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < answer_drained
        > shutdown
        < run SessionEnd hooks
        < answer_shutdown
    "#]]);
}

#[test]
fn a_turn_that_outlives_the_drain_is_cancelled_with_the_handoff_named() {
    let mut h = Harness::new();
    h.submit("long");
    let run = h.run(1);
    h.on("drain", SessionInput::Drain);
    h.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::HandedOff,
        },
    );
    h.turn_append(run, vec![completed(TurnStatus::Cancelled, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    let mut stopping = Harness::new();
    stopping.submit("long");
    stopping.run(1);
    stopping.on(
        "shutdown",
        SessionInput::Shutdown {
            cause: StopCause::NodeStopping,
        },
    );
    h.out.push_str(&stopping.take());
    h.check(expect![[r#"
        > submit i1 "long"
        < append r1 2..3: user_message(i1 "long"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > drain
        > shutdown
        < cancel_turn "shard handed off to another node"
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < run SessionEnd hooks
        < answer_shutdown
        > submit i1 "long"
        < append r1 2..3: user_message(i1 "long"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > shutdown
        < cancel_turn "node stopping: shard handed off to another node"
    "#]]);
}

//! Titles, commands, the model, hibernation, the phase and event times.

use super::*;
use expect_test::expect;

#[test]
fn the_first_input_starts_title_generation_once_when_enabled_and_untitled() {
    let titled = |generate_titles, title: Option<&str>| {
        let mut h = Harness::with(
            Settings {
                generate_titles,
                ..settings()
            },
            SessionConfig {
                title: title.map(str::to_owned),
                ..config()
            },
        );
        h.submit("fix the parser");
        let run = h.run(1);
        h.turn_completes(run);
        h.submit("and the lexer");
        h.take()
    };
    let mut out = titled(true, None);
    out += "---\n";
    out += &titled(false, None);
    out += "---\n";
    out += &titled(true, Some("mine"));
    expect![[r#"
        > submit i1 "fix the parser"
        < append r1 2..3: user_message(i1 "fix the parser"), turn_started(i1)
        < start_title Input("fix the parser") expected=None
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i2 "and the lexer"
        < append r2 5..6: user_message(i2 "and the lexer"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
        ---
        > submit i1 "fix the parser"
        < append r1 2..3: user_message(i1 "fix the parser"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i2 "and the lexer"
        < append r2 5..6: user_message(i2 "and the lexer"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
        ---
        > submit i1 "fix the parser"
        < append r1 2..3: user_message(i1 "fix the parser"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i2 "and the lexer"
        < append r2 5..6: user_message(i2 "and the lexer"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
    "#]]
    .assert_eq(&out);
}

#[test]
fn a_generated_title_lands_only_if_the_title_did_not_change_meanwhile() {
    let mut h = Harness::new();
    let generated =
        |title: &str, expected: Option<(&str, TitleSource)>| SessionInput::TitleGenerated {
            title: title.into(),
            expected: expected.map(|(t, s)| (t.to_owned(), s)),
        };
    h.on(
        "title_generated \"Parser\" expected=None",
        generated("Parser", None),
    );
    h.on(
        "set_title \"Mine\"",
        SessionInput::SetTitle {
            title: "Mine".into(),
        },
    );
    h.on(
        "title_generated \"Later\" expected=Parser",
        generated("Later", Some(("Parser", TitleSource::Generated))),
    );
    h.check(expect![[r#"
        > title_generated "Parser" expected=None
        < append - 2..2: title_set("Parser" Generated)
        < reply title applied=true
        > set_title "Mine"
        < append - 3..3: title_set("Mine" User)
        < reply ok
        > title_generated "Later" expected=Parser
        < reply title applied=false
    "#]]);
}

#[test]
fn commands_that_complete_at_once_record_their_turn_and_the_queue_goes_on() {
    let mut h = Harness::new();
    h.submit("first");
    let run = h.run(1);
    for input in [
        Input::command("title", " Parser "),
        Input::command("title", ""),
        Input::command("nope", ""),
        Input::command("compact", ""),
    ] {
        let id = h.input_id();
        h.submit_as(id, input);
    }
    h.turn_completes(run);
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 /title " Parser "
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > submit i3 /title ""
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > submit i4 /nope ""
        < append - 6..6: input_queued(i4)
        < reply submitted i4
        > submit i5 /compact ""
        < append - 7..7: input_queued(i5)
        < reply submitted i5
        > turn_append r1 [turn_complete]
        < append r1 8..8: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < append r2 9..12: user_message(i2 ""), turn_started(i2), title_set("Parser" User), turn_complete(Completed)
        < append r3 13..15: user_message(i3 ""), turn_started(i3), turn_complete(Completed)
        < start_title FirstUserMessage expected=Some(("Parser", User))
        < append r4 16..18: user_message(i4 ""), turn_started(i4), turn_complete(Failed "unknown_command" invalid_request: "unknown command /nope; available commands: /compact, /title")
        < append r5 19..20: user_message(i5 ""), turn_started(i5)
        < start_turn r5 Compact
    "#]]);
}

#[test]
fn set_model_writes_config_changed_only_when_it_differs() {
    let mut h = Harness::new();
    let (provider, model) = (config().provider, config().model);
    h.on(
        "set_model (same)",
        SessionInput::SetModel {
            provider: provider.clone(),
            model,
        },
    );
    h.on(
        "set_model other",
        SessionInput::SetModel {
            provider,
            model: "other".into(),
        },
    );
    h.check(expect![[r#"
        > set_model (same)
        < reply ok
        > set_model other
        < append - 2..2: config_changed(/other)
        < reply ok
    "#]]);
}

#[test]
fn only_an_idle_unwatched_session_hibernates() {
    let mut h = Harness::new();
    let check = |quiet, watched| SessionInput::HibernateCheck { quiet, watched };
    h.on("hibernate_check quiet watched", check(true, true));
    h.on("hibernate_check not quiet", check(false, false));
    h.submit("go");
    h.on("hibernate_check quiet unwatched (busy)", check(true, false));
    let run = h.run(1);
    h.turn_completes(run);
    assert!(h.machine.is_idle());
    h.on("hibernate_check quiet unwatched", check(true, false));
    h.check(expect![[r#"
        > hibernate_check quiet watched
        > hibernate_check not quiet
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > hibernate_check quiet unwatched (busy)
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > hibernate_check quiet unwatched
        < stop "hibernated"
    "#]]);
}

#[test]
fn the_phase_follows_the_turns_compaction() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    let stage = |h: &Harness| match h.machine.phase() {
        Phase::Turn(turn) => turn.stage.clone(),
        other => panic!("{other:?}"),
    };
    h.turn_append(
        run,
        vec![EventKind::CompactionStarted {
            trigger: "threshold".into(),
            tokens_before: 10,
        }],
    );
    assert_eq!(stage(&h), TurnStage::Compacting);
    h.turn_append(run, vec![EventKind::StepStarted { step: 2 }]);
    assert_eq!(stage(&h), TurnStage::Running);
}

#[test]
fn event_times_never_go_backwards_when_the_clock_does() {
    let mut h = Harness::new();
    h.now_ms = 10;
    let effects = h
        .machine
        .on(SessionInput::SetTitle { title: "t".into() }, h.now_ms);
    let Some(Effect::Append(events)) = effects.into_iter().next() else {
        panic!("no append")
    };
    assert_eq!(events[0].at_ms, 1_000, "not before session_created");
}

/// The machine is part of every loaded session (tens of thousands at once): beyond the
/// fold it always held, its own state (phase, settings, approvals, the waiting slot)
/// stays small; rarely used parts are boxed or allocated on use.
#[test]
fn the_machine_adds_little_to_a_sessions_memory() {
    let (machine, fold) = (
        std::mem::size_of::<SessionMachine>(),
        std::mem::size_of::<SessionState>(),
    );
    println!("SessionMachine: {machine} bytes (fold {fold})");
    assert!(machine - fold <= 192, "{machine} - {fold}");
}

#[test]
fn a_session_woken_after_a_turn_does_not_start_its_hooks_again() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_completes(run);
    assert!(h.machine.hooks_started());
    // Hibernated, then woken from its log with what the supervisor kept.
    let fold = h.machine.fold().clone();
    h.machine = SessionMachine::new(fold.clone(), settings()).woken(true);
    h.out.clear();
    h.submit("again");
    h.check(expect![[r#"
        > submit i2 "again"
        < append r2 5..6: user_message(i2 "again"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
    "#]]);
    // Woken without a turn having started: its first turn here starts them.
    h.machine = SessionMachine::new(fold, settings()).woken(false);
    h.out.clear();
    h.submit("more");
    h.check(expect![[r#"
        > submit i3 "more"
        < append r3 5..6: user_message(i3 "more"), turn_started(i3)
        < start_turn r3 Model first
        < reply submitted i3
    "#]]);
}

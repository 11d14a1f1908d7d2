//! Table tests of the run-protection state machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use foya_protocol::ToolCallId;
use serde_json::json;

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: name.into(),
        arguments: args,
        extra: None,
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

fn runs(verdicts: &[CallVerdict]) -> Vec<bool> {
    verdicts.iter().map(|v| *v == CallVerdict::Run).collect()
}

#[test]
fn canonical_json_ignores_key_order() {
    let a = json!({"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "s"}});
    let b = json!({"a": {"x": "s", "y": [1, {"c": 3, "d": 2}]}, "b": 1});
    assert_eq!(canonical_json(&a), canonical_json(&b));
    assert_eq!(
        canonical_json(&a),
        r#"{"a":{"x":"s","y":[1,{"c":3,"d":2}]},"b":1}"#
    );
    assert_ne!(
        call_key(&call("1", "t", json!({"a": 1}))),
        call_key(&call("1", "u", json!({"a": 1})))
    );
}

#[test]
fn duplicate_calls_are_blocked_at_the_threshold_then_fail_the_turn() {
    // (arguments of the step's single call, expected verdict: run? / Err)
    let table: Vec<(serde_json::Value, Option<bool>)> = vec![
        (json!({"p": 1, "q": 2}), Some(true)),
        (json!({"q": 2, "p": 1}), Some(true)),
        (json!({"p": 1, "q": 2}), Some(false)),
        (json!({"p": 1, "q": 2}), None),
    ];
    let mut guard = Guard::new(Limits::default());
    for (i, (args, expected)) in table.into_iter().enumerate() {
        let calls = vec![call(&format!("c{i}"), "read", args)];
        let verdict = guard.check_calls(&calls, &[]);
        match expected {
            Some(run) => {
                let verdicts = verdict.unwrap();
                assert_eq!(runs(&verdicts), vec![run], "step {i}");
                if !run {
                    let CallVerdict::Block(text) = &verdicts[0] else {
                        unreachable!()
                    };
                    assert!(text.contains("already made 2 times"), "{text}");
                }
            }
            None => assert_eq!(
                verdict,
                Err(LoopDetected(
                    "the model kept repeating the blocked call `read` with the same arguments"
                        .into()
                ))
            ),
        }
    }
}

#[test]
fn different_arguments_are_not_duplicates_and_threshold_is_configurable() {
    let mut guard = Guard::new(Limits {
        duplicate_threshold: 2,
        ..Limits::default()
    });
    let step = |i: u32| vec![call("x", "read", json!({"path": i}))];
    for i in 0..5 {
        assert_eq!(runs(&guard.check_calls(&step(i), &[]).unwrap()), vec![true]);
    }
    assert_eq!(
        runs(&guard.check_calls(&step(0), &[]).unwrap()),
        vec![false]
    );
    // Within one step every occurrence counts as well: the 3rd identical call of the turn
    // is not run even when all come in one response (and neither is a 4th copy, the
    // model not having seen the refusal yet); sending it in a later step is a loop.
    let mut guard = Guard::new(Limits::default());
    let same: Vec<ToolCall> = ["a", "b", "c", "d"]
        .iter()
        .map(|id| call(id, "shell", json!({"command": "ls"})))
        .collect();
    let verdicts = guard.check_calls(&same, &[]).unwrap();
    assert_eq!(runs(&verdicts), vec![true, true, false, false]);
    let texts: Vec<&str> = verdicts
        .iter()
        .filter_map(|v| match v {
            CallVerdict::Block(text) => Some(text.as_str()),
            CallVerdict::Run => None,
        })
        .collect();
    assert!(
        texts[0].contains(
            "was already made 2 times in this turn, and the 3rd identical call of a turn is not run"
        ),
        "{texts:?}"
    );
    assert!(texts[1].contains("was already made 3 times"), "{texts:?}");
    assert_eq!(
        guard.check_calls(&same, &[]),
        Err(LoopDetected(
            "the model kept repeating the blocked call `shell` with the same arguments".into()
        ))
    );
    // Identical reads in one step (around a write) count once: progress, not repetition.
    let mut guard = Guard::new(Limits::default());
    let read = || call("r", "read_file", json!({"path": "x"}));
    let step = vec![
        read(),
        read(),
        call("w", "write_file", json!({"path": "x", "content": "y"})),
        read(),
        read(),
    ];
    let read_only = [true, true, false, true, true];
    assert_eq!(
        runs(&guard.check_calls(&step, &read_only).unwrap()),
        vec![true; 5]
    );
    // Across steps they count: the third step's read is refused.
    assert_eq!(
        runs(&guard.check_calls(&[read()], &[true]).unwrap()),
        vec![true]
    );
    assert_eq!(
        runs(&guard.check_calls(&[read()], &[true]).unwrap()),
        vec![false]
    );
}

#[test]
fn a_tool_failing_the_same_way_repeatedly_is_no_longer_run() {
    let mut guard = Guard::new(Limits::default());
    // Three different calls of `shell`, all failing with the same error.
    for i in 0..3 {
        let calls = vec![call(&format!("c{i}"), "shell", json!({"command": i}))];
        assert_eq!(runs(&guard.check_calls(&calls, &[]).unwrap()), vec![true]);
        guard
            .end_step(&calls, &[result(&format!("c{i}"), "bash: nope", true)])
            .unwrap();
    }
    let calls = vec![
        call("d", "shell", json!({"command": 9})),
        call("e", "read", json!({})),
    ];
    let verdicts = guard.check_calls(&calls, &[]).unwrap();
    assert_eq!(runs(&verdicts), vec![false, true]);
    assert_eq!(
        verdicts[0],
        CallVerdict::Block(
            "not run: `shell` failed 3 times in a row with the same error (bash: nope); it is \
             no longer offered in this turn. Try another approach."
                .into()
        )
    );
    assert_eq!(guard.withdrawn(), vec!["shell"]);
    // A call of the withdrawn tool after its refusal is a loop, whatever the arguments.
    let again = vec![call("f", "shell", json!({"command": 10}))];
    assert!(guard.check_calls(&again, &[]).is_err());
}

#[test]
fn failures_with_changing_errors_or_a_success_reset_the_count() {
    let mut guard = Guard::new(Limits::default());
    let outcomes = [
        ("e1", true),
        ("e1", true),
        ("e2", true),
        ("e2", true),
        ("ok", false),
        ("e2", true),
        ("e2", true),
    ];
    for (i, (content, is_error)) in outcomes.iter().enumerate() {
        let calls = vec![call(&format!("c{i}"), "shell", json!({"n": i}))];
        assert_eq!(
            runs(&guard.check_calls(&calls, &[]).unwrap()),
            vec![true],
            "{i}"
        );
        guard
            .end_step(&calls, &[result(&format!("c{i}"), content, *is_error)])
            .unwrap();
    }
    let calls = vec![call("z", "shell", json!({"n": 99}))];
    assert_eq!(runs(&guard.check_calls(&calls, &[]).unwrap()), vec![true]);
}

#[test]
fn an_a_b_a_b_cycle_is_detected_on_the_fourth_step() {
    let a = (
        call("a", "read", json!({"path": "x"})),
        result("a", "X", false),
    );
    let b = (
        call("b", "list", json!({"dir": "."})),
        result("b", "x", false),
    );
    let mut guard = Guard::new(Limits::default());
    let steps = [&a, &b, &a];
    for (c, r) in steps {
        guard
            .end_step(std::slice::from_ref(c), std::slice::from_ref(r))
            .unwrap();
    }
    assert_eq!(
        guard.end_step(std::slice::from_ref(&b.0), std::slice::from_ref(&b.1)),
        Err(LoopDetected(
            "the last 4 steps repeat a cycle of 2 steps with the same calls and results, \
             making no progress: [read -> list] twice"
                .into()
        ))
    );
}

#[test]
fn steps_with_changing_results_or_repeated_single_steps_are_not_cycles() {
    let mut guard = Guard::new(Limits::default());
    // A-B-A'-B where A' has a different result: progress, no cycle.
    let table = [
        ("read", "X", "a"),
        ("list", "x", "b"),
        ("read", "Y", "a"),
        ("list", "x", "b"),
        // A-A-A-A: period 1, left to duplicate detection.
        ("read", "Z", "a"),
        ("read", "Z", "a"),
        ("read", "Z", "a"),
        ("read", "Z", "a"),
    ];
    for (i, (name, content, id)) in table.iter().enumerate() {
        let calls = vec![call(id, name, json!({}))];
        assert_eq!(
            guard.end_step(&calls, &[result(id, content, false)]),
            Ok(()),
            "step {i}"
        );
    }
}

#[test]
fn a_three_step_cycle_names_its_steps_in_order() {
    let mut guard = Guard::new(Limits::default());
    let names = ["a", "b", "c", "a", "b"];
    for name in names {
        let calls = vec![call(name, name, json!({}))];
        guard
            .end_step(&calls, &[result(name, "same", false)])
            .unwrap();
    }
    let calls = vec![call("c", "c", json!({}))];
    assert_eq!(
        guard.end_step(&calls, &[result("c", "same", false)]),
        Err(LoopDetected(
            "the last 6 steps repeat a cycle of 3 steps with the same calls and results, \
             making no progress: [a -> b -> c] twice"
                .into()
        ))
    );
}

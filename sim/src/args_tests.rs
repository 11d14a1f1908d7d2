//! Tests of the tool-call argument template and of the distinct calls it gives a plan.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::ToolArgs;
use crate::{HistorySummary, SimConfig, SimModel, SimOutcome};
use foya_protocol::{StreamAggregate, ToolCall};
use serde_json::json;
use std::collections::BTreeSet;

#[test]
fn placeholders_are_filled_in_string_values_at_any_depth_and_nowhere_else() {
    let config = SimConfig {
        tool_args: json!({
            "path": "docs/step-{step}-call-{call}.md",
            "nested": {"list": ["{call}{call}", 7, true, null, "s{step}"], "{step}": "x"},
            "n": 1
        }),
        ..SimConfig::default()
    };
    assert_eq!(
        config.tool_call_args(12, 3),
        json!({
            "path": "docs/step-12-call-3.md",
            "nested": {"list": ["33", 7, true, null, "s12"], "{step}": "x"},
            "n": 1
        })
    );
}

#[test]
fn arguments_without_placeholders_are_the_same_text_for_every_call() {
    let args = ToolArgs::new(&SimConfig::default().tool_args);
    assert!(matches!(args, ToolArgs::Fixed(_)));
    assert_eq!(args.render(1, 0), r#"{"path":"README.md"}"#);
    assert_eq!(args.render(9, 4), r#"{"path":"README.md"}"#);
    // A key that looks like a placeholder is not one.
    let args = ToolArgs::new(&json!({"{call}": 1}));
    assert_eq!(args.render(2, 1), r#"{"{call}":1}"#);
}

#[test]
fn tool_steps_are_every_step_before_the_last() {
    let steps = |steps_per_turn, tool_calls_per_step| {
        let config = SimConfig {
            steps_per_turn,
            tool_calls_per_step,
            ..SimConfig::default()
        };
        config.tool_steps().collect::<Vec<u32>>()
    };
    assert_eq!(steps(5, 2), [1, 2, 3, 4]);
    assert_eq!(steps(1, 2), Vec::<u32>::new());
    assert_eq!(steps(0, 2), Vec::<u32>::new());
    assert_eq!(steps(5, 0), Vec::<u32>::new());
}

/// The calls the model asks for in each step of one turn (`history` at each step).
fn turn_calls(model: &SimModel, steps: u32) -> Vec<Vec<ToolCall>> {
    (1..=steps)
        .map(|step| {
            let history = HistorySummary {
                // user message, then an assistant message and 2 results per step.
                messages: 1 + 3 * u64::from(step - 1),
                step,
                last_user_text: "go".into(),
                input_chars: 100,
                model: None,
                tools_offered: true,
            };
            let SimOutcome::Streamed { events, cut: false } = model.plan(&history, 0).outcome
            else {
                panic!("step {step} not streamed in full");
            };
            let mut aggregate = StreamAggregate::new();
            events.iter().for_each(|e| aggregate.apply(&e.event));
            aggregate.tool_calls()
        })
        .collect()
}

#[test]
fn a_five_step_plan_with_two_calls_per_step_asks_for_distinct_calls_deterministically() {
    let config = SimConfig {
        steps_per_turn: 5,
        tool_calls_per_step: 2,
        seed: 42,
        tool_args: json!({"path": "docs/step-{step}-call-{call}.md"}),
        ..SimConfig::default()
    };
    let calls = turn_calls(&SimModel::new(config.clone()), 5);
    // Run protection's key: tool name and arguments.
    let keys: Vec<(String, String)> = calls
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.arguments.to_string()))
        .collect();
    let expected: Vec<(String, String)> = (1..=4)
        .flat_map(|step| {
            (0..2).map(move |call| {
                let path = format!("docs/step-{step}-call-{call}.md");
                ("read_file".to_owned(), json!({"path": path}).to_string())
            })
        })
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(
        keys.iter().collect::<BTreeSet<_>>().len(),
        8,
        "all distinct"
    );
    // Step 5 is the final text step.
    assert_eq!(calls[4], Vec::<ToolCall>::new());
    // The same seed repeats the plan (ids included); the arguments never depend on it.
    assert_eq!(turn_calls(&SimModel::new(config.clone()), 5), calls);
    let other = turn_calls(&SimModel::new(SimConfig { seed: 43, ..config }), 5);
    assert_ne!(other, calls);
    let args = |calls: &[Vec<ToolCall>]| -> Vec<serde_json::Value> {
        calls
            .iter()
            .flatten()
            .map(|c| c.arguments.clone())
            .collect()
    };
    assert_eq!(args(&other), args(&calls));
}

#[test]
fn the_default_arguments_repeat_the_same_call_in_every_step() {
    let config = SimConfig {
        steps_per_turn: 3,
        tool_calls_per_step: 2,
        ..SimConfig::default()
    };
    let calls = turn_calls(&SimModel::new(config), 3);
    let args: BTreeSet<String> = calls
        .iter()
        .flatten()
        .map(|c| c.arguments.to_string())
        .collect();
    assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 0]);
    assert_eq!(args, BTreeSet::from([r#"{"path":"README.md"}"#.to_owned()]));
}

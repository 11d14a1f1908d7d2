#![allow(clippy::unwrap_used)]
use super::*;
use foya_protocol::{
    AssistantMessage, Input, InputId, RunId, Seq, SessionConfig, SessionId, ToolCallId,
    ToolMessage, TurnStatus,
};

/// Events of one session with these kinds, seqs from 1.
fn log(kinds: Vec<EventKind>) -> Vec<Event> {
    let session_id = SessionId::new();
    let run_id = Some(RunId::new());
    kinds
        .into_iter()
        .zip(1..)
        .map(|(kind, seq)| Event {
            session_id,
            seq: Seq(seq),
            run_id,
            at_ms: 0,
            kind,
        })
        .collect()
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: "read_file".into(),
        arguments: serde_json::json!({"path": "README.md"}),
        extra: None,
    }
}

/// One turn: a step calling two tools (the second finishing first), then a retried
/// request and a final step.
fn turn() -> Vec<EventKind> {
    let input_id = InputId::new();
    let asked = AssistantMessage {
        tool_calls: vec![call("a"), call("b")],
        ..AssistantMessage::default()
    };
    let started = |id: &str| EventKind::ToolStarted {
        tool_call_id: ToolCallId::new(id),
        name: "read_file".into(),
    };
    let finished = |id: &str| EventKind::ToolFinished {
        tool_call_id: ToolCallId::new(id),
        is_error: false,
        duration_ms: 1,
    };
    let result =
        |id: &str| EventKind::ToolMessage(ToolMessage::text(ToolCallId::new(id), "x", false));
    vec![
        EventKind::SessionCreated {
            config: SessionConfig::new("/"),
        },
        EventKind::UserMessage {
            input_id,
            input: Input::text("hello"),
        },
        EventKind::TurnStarted { input_id },
        EventKind::StepStarted { step: 1 },
        EventKind::AssistantMessage(asked),
        started("a"),
        started("b"),
        finished("b"),
        finished("a"),
        result("a"),
        result("b"),
        EventKind::StepStarted { step: 2 },
        EventKind::ProviderRetry {
            attempt: 2,
            max_attempts: 3,
            delay_ms: 1,
            error: foya_protocol::ProviderError::new(foya_protocol::ErrorClass::RateLimited, "429"),
        },
        EventKind::AssistantMessage(AssistantMessage::default()),
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None,
        },
    ]
}

#[test]
fn a_log_is_cut_where_the_session_commits() {
    let log = log(turn());
    let cut: Vec<Vec<u64>> = groups(&log)
        .iter()
        .map(|group| group.iter().map(|e| e.seq.0).collect())
        .collect();
    assert_eq!(
        cut,
        [
            vec![1],
            vec![2, 3],
            vec![4],
            vec![5, 6, 7],
            vec![8],
            vec![9, 10, 11],
            vec![12, 13],
            vec![14, 15],
        ]
    );
}

#[test]
fn the_started_calls_of_a_group_are_the_ones_the_model_asked_for() {
    let log = log(turn());
    let groups = groups(&log);
    let mut calls = HashMap::new();
    let started: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            started_calls(g, &mut calls)
                .iter()
                .map(|c| c.id.as_str().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(started[3], ["a", "b"]);
    assert!(
        started
            .iter()
            .enumerate()
            .all(|(i, s)| i == 3 || s.is_empty())
    );
    // Two requests in the last step: the retried attempt and the answer.
    let requests: Vec<usize> = groups
        .iter()
        .map(|g| g.iter().filter(|e| is_model_request(&e.kind)).count())
        .collect();
    assert_eq!(requests, [0, 0, 0, 1, 0, 0, 1, 1]);
}

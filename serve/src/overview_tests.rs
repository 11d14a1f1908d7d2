//! The session-state fold of `GET /overview`: a log in, the state after each event out.

use super::Activity;
use foya_protocol::{
    ApprovalDecision, ApprovalRequestId, Event, EventKind, Input, InputId, Seq, SessionId,
    ToolCallId, TurnStatus,
};

fn states(kinds: Vec<EventKind>) -> Vec<(&'static str, usize)> {
    let session_id = SessionId::new();
    let mut fold = Activity::default();
    kinds
        .into_iter()
        .zip(1..)
        .map(|(kind, seq)| {
            fold.apply(&Event {
                session_id,
                seq: Seq(seq),
                run_id: None,
                at_ms: 1000 + seq,
                kind,
            });
            assert_eq!(fold.last_seq, seq);
            assert_eq!(fold.last_at_ms, 1000 + seq);
            (fold.state(), fold.queued.len())
        })
        .collect()
}

#[test]
fn a_turn_with_a_queued_input_an_approval_and_a_compaction() {
    let first = InputId::new();
    let second = InputId::new();
    let dropped = InputId::new();
    let request_id = ApprovalRequestId::new();
    let call = ToolCallId::new("c1");
    let input = Input::text("hi");
    let log = vec![
        EventKind::UserMessage {
            input_id: first,
            input: input.clone(),
        },
        EventKind::TurnStarted { input_id: first },
        EventKind::InputQueued {
            input_id: second,
            input: input.clone(),
        },
        EventKind::InputQueued {
            input_id: dropped,
            input: input.clone(),
        },
        EventKind::ApprovalRequested {
            request_id,
            tool_call_id: call.clone(),
            tool_name: "shell".into(),
            action: "ls".into(),
            reason: "exec".into(),
            grant: Some("shell:ls".into()),
        },
        EventKind::ApprovalDecided {
            request_id,
            tool_call_id: call,
            decision: ApprovalDecision::AllowOnce,
            message: None,
            grant: None,
        },
        EventKind::CompactionStarted {
            trigger: "threshold".into(),
            tokens_before: 10,
        },
        EventKind::CompactionCheckpoint {
            summary: "s".into(),
            covers_up_to: Seq(3),
            tokens_before: 10,
            tokens_after: 2,
            kept: Vec::new(),
        },
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None,
        },
        EventKind::InputDropped {
            input_id: dropped,
            reason: "queue cleared".into(),
        },
        EventKind::UserMessage {
            input_id: second,
            input,
        },
        EventKind::TurnStarted { input_id: second },
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            reason: None,
            error: None,
        },
        EventKind::SessionDeleted {},
    ];
    assert_eq!(
        states(log),
        vec![
            ("idle", 0),
            ("running", 0),
            ("running", 1),
            ("running", 2),
            ("waiting_for_approval", 2),
            ("running", 2),
            ("compacting", 2),
            ("running", 2),
            ("idle", 2),
            ("idle", 1),
            ("idle", 0),
            ("running", 0),
            ("idle", 0),
            ("deleted", 0),
        ]
    );
}

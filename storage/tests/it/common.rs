//! Shared test data: event builders and one example of every `EventKind` variant.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use foya_protocol::command::ParentRef;
use foya_protocol::{
    ApprovalDecision, ApprovalMode, ApprovalRequestId, AssistantMessage, ErrorClass, ErrorInfo,
    Event, EventKind, FinishReason, Input, InputId, Message, ProviderError, ReasoningPart, RunId,
    Seq, SessionConfig, SessionId, TitleSource, ToolCall, ToolCallId, ToolMessage, TurnStatus,
    Usage,
};
use serde_json::json;
use std::collections::BTreeMap;

/// A session id from a fixed number (stable across runs, for golden files).
pub fn fixed_session(n: u8) -> SessionId {
    SessionId::from_bytes([0x01, 0x93, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, n])
}

/// A run id from a fixed number.
pub fn fixed_run(n: u8) -> RunId {
    RunId::from_bytes([0x01, 0x93, 0, 0, 0, 1, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, n])
}

/// The configuration used by `created`.
pub fn config(title: Option<&str>) -> SessionConfig {
    SessionConfig {
        title: title.map(str::to_owned),
        model: "gpt-test".into(),
        provider: "scripted".into(),
        ..SessionConfig::new("/work/project")
    }
}

/// An event of `session` at `seq`, timestamped `1000 + seq`.
pub fn event(session: SessionId, seq: u64, kind: EventKind) -> Event {
    Event {
        session_id: session,
        seq: Seq(seq),
        run_id: None,
        at_ms: 1000 + seq,
        kind,
    }
}

/// The `session_created` event (seq 1) of `session`.
pub fn created(session: SessionId) -> Event {
    event(
        session,
        1,
        EventKind::SessionCreated {
            config: config(Some("first title")),
        },
    )
}

/// A small filler event at `seq`.
pub fn step(session: SessionId, seq: u64) -> Event {
    event(
        session,
        seq,
        EventKind::StepStarted {
            step: u32::try_from(seq).unwrap(),
        },
    )
}

/// Events `from..=to` of a session whose seq 1 is `session_created` and the rest steps.
pub fn log(session: SessionId, from: u64, to: u64) -> Vec<Event> {
    (from..=to)
        .map(|seq| {
            if seq == 1 {
                created(session)
            } else {
                step(session, seq)
            }
        })
        .collect()
}

/// One example of every `EventKind` variant, with optional fields filled in.
pub fn all_kinds() -> Vec<EventKind> {
    let call = ToolCallId::new("call_1");
    let input = Input {
        text: "hello ünïcode 🚀".into(),
        command: Some(foya_protocol::CommandInvocation {
            name: "review".into(),
            arguments: "src/main.rs".into(),
        }),
        images: vec![foya_protocol::AttachmentRef {
            id: "att_1".into(),
            media_type: Some("image/png".into()),
        }],
        selected_elements: vec![foya_protocol::PageElement {
            selector: "#main > p".into(),
            text: "para".into(),
            url: "https://example.invalid/".into(),
        }],
    };
    let assistant = AssistantMessage {
        text: "answer".into(),
        reasoning: "thinking".into(),
        reasoning_parts: vec![
            ReasoningPart::Thinking {
                text: "t".into(),
                signature: Some("sig".into()),
            },
            ReasoningPart::Redacted {
                data: "opaque".into(),
            },
        ],
        tool_calls: vec![ToolCall {
            id: call.clone(),
            name: "shell".into(),
            arguments: json!({"command": "ls -la", "timeout": 1.5, "n": -3, "big": u64::MAX,
                              "list": [1, "two", null, true], "nested": {"a": {}}}),
            extra: Some(json!({"thought_signature": "abc"})),
        }],
        finish_reason: Some(FinishReason::ToolCalls),
        interrupted: true,
    };
    let tool_message = ToolMessage {
        tool_call_id: call.clone(),
        content: "total 0".into(),
        is_error: true,
        images: Vec::new(),
    };
    let mut config = config(Some("t"));
    config.approval_mode = ApprovalMode::AutoEdit;
    config.project_id = Some("proj".into());
    config.max_steps = Some(25);
    config.parent = Some(ParentRef {
        session_id: fixed_session(9),
        run_id: fixed_run(9),
        tool_call_id: ToolCallId::new("toolu_9"),
    });
    let request_id = ApprovalRequestId::from_bytes([7; 16]);
    let input_id = InputId::from_bytes([3; 16]);
    vec![
        EventKind::SessionCreated { config },
        EventKind::InputQueued {
            input_id,
            input: input.clone(),
        },
        EventKind::InputDropped {
            input_id,
            reason: "queue cleared".into(),
        },
        EventKind::UserMessage {
            input_id,
            input: input.clone(),
        },
        EventKind::TurnStarted { input_id },
        EventKind::StepStarted { step: 1 },
        EventKind::AssistantMessage(assistant.clone()),
        EventKind::ToolStarted {
            tool_call_id: call.clone(),
            name: "shell".into(),
        },
        EventKind::ToolUpdate {
            tool_call_id: call.clone(),
            message: "50%".into(),
        },
        EventKind::ToolFinished {
            tool_call_id: call.clone(),
            is_error: false,
            duration_ms: 12,
        },
        EventKind::ToolMessage(tool_message.clone()),
        EventKind::Usage(Usage {
            input_tokens: 100,
            output_tokens: 20,
            cached_input_tokens: Some(50),
            reasoning_tokens: Some(5),
        }),
        EventKind::ProviderRetry {
            attempt: 2,
            max_attempts: 5,
            delay_ms: 500,
            error: ProviderError {
                class: ErrorClass::RateLimited,
                message: "slow down".into(),
                retry_after_ms: Some(500),
                status: Some(429),
            },
        },
        EventKind::ApprovalRequested {
            request_id,
            tool_call_id: call.clone(),
            tool_name: "shell".into(),
            action: "rm -rf build".into(),
            reason: "exec".into(),
            grant: None,
        },
        EventKind::ApprovalDecided {
            request_id,
            tool_call_id: call.clone(),
            decision: ApprovalDecision::AllowForSession,
            message: Some("ok".into()),
            grant: Some("shell:rm".into()),
        },
        EventKind::TurnCancelled {
            reason: "user".into(),
        },
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("quota".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::QuotaExhausted,
                message: "m".into(),
            }),
        },
        EventKind::TitleSet {
            title: "New title".into(),
            source: TitleSource::Generated,
        },
        EventKind::CompactionStarted {
            trigger: "threshold".into(),
            tokens_before: 90_000,
        },
        EventKind::CompactionCheckpoint {
            summary: "so far".into(),
            covers_up_to: Seq(40),
            tokens_before: 90_000,
            tokens_after: 3_000,
            kept: vec![
                Message::System { text: "sys".into() },
                Message::User(input),
                Message::Assistant(assistant),
                Message::Tool(tool_message),
            ],
        },
        EventKind::ContextDiagnostics {
            step: 3,
            sections: BTreeMap::from([("history".into(), 800), ("system".into(), 200)]),
            estimated_input_tokens: 1000,
            window: 128_000,
            reserve: 8_000,
            decision: "send".into(),
        },
        EventKind::HookContinued {
            reason: "tests fail".into(),
            count: 2,
        },
        EventKind::SessionDeleted {},
        EventKind::ConfigChanged {
            provider: "openai-chat".into(),
            model: "m-2".into(),
        },
        EventKind::HookRan {
            hook_event: "PreToolUse".into(),
            matcher: Some("Bash|shell".into()),
            hook: "./validate.sh".into(),
            tool_call_id: Some(ToolCallId::new("call_1")),
            duration_ms: 12,
            decision: foya_protocol::HookDecision::Deny,
            reason: Some("rm -rf refused".into()),
            additional_context: None,
        },
    ]
}

/// The position of a kind in the declaration order. Exhaustive on purpose: a new
/// `EventKind` variant fails to compile here until it gets an example in `all_kinds`.
pub fn variant_index(kind: &EventKind) -> usize {
    match kind {
        EventKind::SessionCreated { .. } => 0,
        EventKind::InputQueued { .. } => 1,
        EventKind::InputDropped { .. } => 2,
        EventKind::UserMessage { .. } => 3,
        EventKind::TurnStarted { .. } => 4,
        EventKind::StepStarted { .. } => 5,
        EventKind::AssistantMessage(_) => 6,
        EventKind::ToolStarted { .. } => 7,
        EventKind::ToolUpdate { .. } => 8,
        EventKind::ToolFinished { .. } => 9,
        EventKind::ToolMessage(_) => 10,
        EventKind::Usage(_) => 11,
        EventKind::ProviderRetry { .. } => 12,
        EventKind::ApprovalRequested { .. } => 13,
        EventKind::ApprovalDecided { .. } => 14,
        EventKind::TurnCancelled { .. } => 15,
        EventKind::TurnComplete { .. } => 16,
        EventKind::TitleSet { .. } => 17,
        EventKind::CompactionStarted { .. } => 18,
        EventKind::CompactionCheckpoint { .. } => 19,
        EventKind::ContextDiagnostics { .. } => 20,
        EventKind::HookContinued { .. } => 21,
        EventKind::SessionDeleted {} => 22,
        EventKind::ConfigChanged { .. } => 23,
        EventKind::HookRan { .. } => 24,
    }
}

/// Number of `EventKind` variants (`variant_index` + 1 of the last).
pub const VARIANTS: usize = 25;

//! Unit tests of the history fold, compile errors and the compaction helpers, plus the
//! event builders the snapshot tests share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod compile;
mod snapshot;

use super::*;
use foya_protocol::{
    AssistantMessage, AttachmentRef, CommandInvocation, EventKind, FinishReason, Input, InputId,
    Message, PageElement, Seq, SessionId, ToolCall, ToolCallId, ToolMessage,
};
use serde_json::json;

/// Builds events with dense seqs for one session.
#[derive(Debug, Default)]
pub(super) struct Log {
    pub(super) events: Vec<Event>,
}

impl Log {
    pub(super) fn push(&mut self, kind: EventKind) -> &mut Self {
        let seq = Seq(self.events.len() as u64 + 1);
        let session_id = SessionId::from_bytes([7; 16]);
        self.events.push(Event {
            session_id,
            seq,
            run_id: None,
            at_ms: seq.0 * 1000,
            kind,
        });
        self
    }
    pub(super) fn user(&mut self, text: &str) -> &mut Self {
        self.push(EventKind::UserMessage {
            input_id: InputId::from_bytes([1; 16]),
            input: Input::text(text),
        })
    }
    pub(super) fn assistant(
        &mut self,
        text: &str,
        calls: &[(&str, &str, serde_json::Value)],
    ) -> &mut Self {
        self.push(EventKind::AssistantMessage(assistant(text, calls)))
    }
    pub(super) fn tool(&mut self, id: &str, content: &str) -> &mut Self {
        self.push(EventKind::ToolMessage(result(id, content, false)))
    }
}

pub(super) fn assistant(text: &str, calls: &[(&str, &str, serde_json::Value)]) -> AssistantMessage {
    AssistantMessage {
        text: text.into(),
        tool_calls: calls
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: ToolCallId::new(*id),
                name: (*name).into(),
                arguments: args.clone(),
                extra: None,
            })
            .collect(),
        finish_reason: Some(if calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        }),
        ..AssistantMessage::default()
    }
}

pub(super) fn result(id: &str, content: &str, is_error: bool) -> ToolMessage {
    ToolMessage {
        tool_call_id: ToolCallId::new(id),
        content: content.into(),
        is_error,
        images: Vec::new(),
    }
}

pub(super) fn user(text: &str) -> Message {
    Message::User(Input::text(text))
}

#[test]
fn fold_repairs_missing_duplicate_and_orphan_results() {
    let mut log = Log::default();
    log.user("go")
        .tool("x0", "orphan before any call")
        .assistant(
            "",
            &[("c1", "shell", json!({})), ("c2", "shell", json!({}))],
        )
        .tool("c2", "second")
        .tool("c1", "first")
        .tool("c1", "duplicate")
        .tool("zz", "unknown id")
        .push(EventKind::StepStarted { step: 2 })
        .assistant("", &[("c3", "shell", json!({}))])
        .user("next")
        .tool("c3", "too late: after a user message");
    assert_eq!(
        history(&log.events),
        vec![
            user("go"),
            Message::Assistant(assistant(
                "",
                &[("c1", "shell", json!({})), ("c2", "shell", json!({}))]
            )),
            Message::Tool(result("c1", "first", false)),
            Message::Tool(result("c2", "second", false)),
            Message::Assistant(assistant("", &[("c3", "shell", json!({}))])),
            Message::Tool(result("c3", MISSING_RESULT, true)),
            user("next"),
        ]
    );
}

#[test]
fn fold_drops_completed_reasoning_and_keeps_interrupted_reasoning_once() {
    let with_reasoning = |text: &str, reasoning: &str, interrupted: bool| AssistantMessage {
        reasoning: reasoning.into(),
        interrupted,
        finish_reason: (!interrupted).then_some(FinishReason::Stop),
        ..assistant(text, &[])
    };
    let mut log = Log::default();
    log.user("a")
        .push(EventKind::AssistantMessage(with_reasoning(
            "done",
            "thought 1",
            false,
        )))
        .user("b")
        .push(EventKind::AssistantMessage(with_reasoning(
            "partial",
            "thought 2",
            true,
        )))
        .user("no, do it differently");
    let block = "<interrupted_context>\nThe user interrupted this response. Reasoning so far:\nthought 2\n</interrupted_context>";
    let folded = history(&log.events);
    assert_eq!(
        folded,
        vec![
            user("a"),
            Message::Assistant(with_reasoning("done", "", false)),
            user("b"),
            Message::Assistant(with_reasoning(&format!("{block}\n\npartial"), "", true)),
            user("no, do it differently"),
        ]
    );
    // A later completed message means the interrupted reasoning is not sent again.
    log.push(EventKind::AssistantMessage(with_reasoning(
        "better",
        "thought 3",
        false,
    )));
    let folded = history(&log.events);
    assert_eq!(
        folded[3],
        Message::Assistant(with_reasoning("partial", "", true))
    );
    assert_eq!(
        folded[5],
        Message::Assistant(with_reasoning("better", "", false))
    );
    // An interrupted message with reasoning only still reaches the model once.
    let mut log = Log::default();
    log.user("a")
        .push(EventKind::AssistantMessage(with_reasoning(
            "",
            "thought 2",
            true,
        )));
    assert_eq!(
        history(&log.events)[1],
        Message::Assistant(with_reasoning(block, "", true))
    );
}

#[test]
fn fold_starts_at_the_latest_checkpoint_and_renders_page_elements() {
    let mut log = Log::default();
    log.user("old").assistant("old answer", &[]);
    log.push(EventKind::CompactionCheckpoint {
        summary: "S".into(),
        covers_up_to: Seq(2),
        tokens_before: 100,
        tokens_after: 10,
        kept: vec![user("old")],
    });
    log.push(EventKind::UserMessage {
        input_id: InputId::from_bytes([2; 16]),
        input: Input {
            text: "Fix this".into(),
            command: Some(CommandInvocation {
                name: "x".into(),
                arguments: String::new(),
            }),
            images: vec![AttachmentRef {
                id: "img1".into(),
                media_type: None,
            }],
            selected_elements: vec![PageElement {
                selector: "#buy".into(),
                text: "Buy".into(),
                url: "http://a/".into(),
            }],
        },
    });
    assert_eq!(
        history(&log.events),
        vec![
            user(&format!("{CHECKPOINT_PREFIX}\n\nS")),
            user("old"),
            Message::User(Input {
                text: "Fix this\n\n<selected_elements>\n<element>\nurl: http://a/\nselector: #buy\ntext: Buy\n</element>\n</selected_elements>".into(),
                images: vec![AttachmentRef { id: "img1".into(), media_type: None }],
                ..Input::default()
            }),
        ]
    );
}

#[test]
fn touched_paths_come_from_file_tool_calls() {
    let mut log = Log::default();
    log.assistant(
        "",
        &[
            ("1", "read_file", json!({"path": "src/a.rs"})),
            ("2", "shell", json!({"path": "ignored", "command": "ls"})),
            ("3", "edit_file", json!({"path": "/abs/b.rs"})),
            ("4", "write_file", json!({"content": "no path"})),
        ],
    );
    let expected: BTreeSet<PathBuf> = ["/abs/b.rs", "src/a.rs"]
        .into_iter()
        .map(PathBuf::from)
        .collect();
    assert_eq!(touched_paths(&log.events), expected);
}

/// Checks the well-formedness invariant of a folded history.
pub(super) fn assert_well_formed(messages: &[Message]) {
    let mut i = 0;
    while i < messages.len() {
        match &messages[i] {
            Message::Assistant(a) => {
                for (k, call) in a.tool_calls.iter().enumerate() {
                    let Some(Message::Tool(t)) = messages.get(i + 1 + k) else {
                        panic!("call {} has no result right after it", call.id);
                    };
                    assert_eq!(t.tool_call_id, call.id);
                }
                i += 1 + a.tool_calls.len();
            }
            Message::Tool(t) => panic!("orphan result {}", t.tool_call_id),
            _ => i += 1,
        }
    }
}

proptest::proptest! {
    #[test]
    fn fold_is_always_well_formed(ops in proptest::collection::vec((0u8..4, 0u8..4, 0u8..3), 0..40)) {
        let mut log = Log::default();
        for (kind, a, b) in ops {
            match kind {
                0 => { log.user("u"); }
                1 => {
                    let calls: Vec<(String, &str, serde_json::Value)> =
                        (0..b).map(|k| (format!("c{}", a + k), "shell", json!({}))).collect();
                    let calls: Vec<(&str, &str, serde_json::Value)> =
                        calls.iter().map(|(id, n, v)| (id.as_str(), *n, v.clone())).collect();
                    log.assistant("a", &calls);
                }
                2 => { log.tool(&format!("c{a}"), "r"); }
                _ => { log.push(EventKind::StepStarted { step: u32::from(a) }); }
            }
        }
        let folded = history(&log.events);
        assert_well_formed(&folded);
        // Folding the folded history again changes nothing.
        let mut again = Log::default();
        again.push(EventKind::CompactionCheckpoint {
            summary: "s".into(), covers_up_to: Seq(1), tokens_before: 0, tokens_after: 0, kept: folded.clone(),
        });
        proptest::prop_assert_eq!(&history(&again.events)[1..], &folded[..]);
    }
}

fn hook_ran(
    point: &str,
    decision: foya_protocol::HookDecision,
    context: Option<&str>,
) -> EventKind {
    EventKind::HookRan {
        hook_event: point.into(),
        matcher: None,
        hook: "h".into(),
        tool_call_id: None,
        duration_ms: 1,
        decision,
        reason: Some("why".into()),
        additional_context: context.map(Into::into),
    }
}

#[test]
fn hook_context_is_a_user_message_and_a_blocked_prompt_leaves_the_context() {
    use foya_protocol::HookDecision::{Block, None as NoDecision};
    let mut log = Log::default();
    log.user("first")
        .push(hook_ran("SessionStart", NoDecision, Some("branch main")))
        .push(hook_ran("UserPromptSubmit", NoDecision, Some("sprint 3")))
        .push(hook_ran(
            "PreToolUse",
            NoDecision,
            Some("in the tool result instead"),
        ))
        .assistant("ok", &[])
        .user("my password")
        .push(hook_ran("UserPromptSubmit", Block, None))
        .user("hello");
    let expected = vec![
        user("first"),
        user("[hook context: SessionStart]\nbranch main"),
        user("[hook context: UserPromptSubmit]\nsprint 3"),
        Message::Assistant(assistant("ok", &[])),
        user("hello"),
    ];
    assert_eq!(history(&log.events), expected);
    let mut fold = HistoryFold::new();
    fold.update(&log.events);
    assert_eq!(fold.messages().0.to_vec(), expected);
}

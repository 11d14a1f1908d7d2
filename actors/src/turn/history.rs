//! A small history builder: the model-visible messages of a session from its log.
//!
//! Rules: only events after the latest compaction checkpoint (the checkpoint's summary
//! and kept messages stand for what came before); reasoning of completed assistant
//! messages is not sent (an interrupted message keeps it, sent once as interrupted
//! context); every tool call is answered exactly once, in call order (a missing result
//! becomes an `is_error` placeholder, a duplicate or orphan result is dropped).
//! The context engineer's compiler replaces this at merge.

use foya_protocol::{Event, EventKind, Input, Message, ToolCallId, ToolMessage};

/// Placeholder for a tool call whose result is not in the log.
const NO_RESULT: &str = "no result was recorded for this tool call";

/// Model-visible messages of `events` (a session's log in seq order).
pub(crate) fn build_messages(events: &[Event]) -> Vec<Message> {
    let start = events
        .iter()
        .rposition(|e| matches!(e.kind, EventKind::CompactionCheckpoint { .. }))
        .unwrap_or(0);
    let mut out = Vec::new();
    let mut open: Vec<ToolCallId> = Vec::new();
    for event in &events[start..] {
        match &event.kind {
            EventKind::CompactionCheckpoint { summary, kept, .. } => {
                out.push(Message::User(Input::text(format!(
                    "Summary of the earlier conversation:\n{summary}"
                ))));
                out.extend(kept.iter().cloned());
            }
            EventKind::UserMessage { input, .. } => {
                close_open(&mut out, &mut open);
                out.push(Message::User(input.clone()));
            }
            EventKind::HookContinued { reason, .. } => {
                close_open(&mut out, &mut open);
                out.push(Message::User(Input::text(reason.clone())));
            }
            EventKind::AssistantMessage(message) => {
                close_open(&mut out, &mut open);
                let mut message = message.clone();
                if !message.interrupted {
                    message.reasoning.clear();
                }
                open = message.tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(Message::Assistant(message));
            }
            EventKind::ToolMessage(result) => {
                // Results must follow their assistant message in call order.
                if let Some(pos) = open.iter().position(|id| *id == result.tool_call_id) {
                    for id in open.drain(..pos) {
                        out.push(placeholder(id));
                    }
                    open.remove(0);
                    out.push(Message::Tool(result.clone()));
                }
            }
            _ => {}
        }
    }
    close_open(&mut out, &mut open);
    out
}

fn placeholder(id: ToolCallId) -> Message {
    Message::Tool(ToolMessage {
        tool_call_id: id,
        content: NO_RESULT.into(),
        is_error: true,
    })
}

fn close_open(out: &mut Vec<Message>, open: &mut Vec<ToolCallId>) {
    for id in open.drain(..) {
        out.push(placeholder(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foya_protocol::{AssistantMessage, InputId, Seq, SessionId, ToolCall};

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            session_id: SessionId::new(),
            seq: Seq(seq),
            run_id: None,
            at_ms: 0,
            kind,
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: ToolCallId::new(id),
            name: "t".into(),
            arguments: serde_json::json!({}),
            extra: None,
        }
    }

    fn result(id: &str, content: &str, is_error: bool) -> ToolMessage {
        ToolMessage {
            tool_call_id: ToolCallId::new(id),
            content: content.into(),
            is_error,
        }
    }

    #[test]
    fn answers_every_call_once_and_drops_completed_reasoning() {
        let assistant = AssistantMessage {
            text: "x".into(),
            reasoning: "secret".into(),
            tool_calls: vec![call("a"), call("b")],
            ..AssistantMessage::default()
        };
        let events = vec![
            ev(
                1,
                EventKind::UserMessage {
                    input_id: InputId::new(),
                    input: Input::text("hi"),
                },
            ),
            ev(2, EventKind::AssistantMessage(assistant.clone())),
            ev(3, EventKind::ToolMessage(result("b", "B", false))),
            ev(4, EventKind::ToolMessage(result("b", "again", false))),
        ];
        let mut sent = assistant;
        sent.reasoning.clear();
        assert_eq!(
            build_messages(&events),
            vec![
                Message::User(Input::text("hi")),
                Message::Assistant(sent),
                Message::Tool(result("a", NO_RESULT, true)),
                Message::Tool(result("b", "B", false)),
            ]
        );
    }
}

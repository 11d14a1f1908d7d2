//! Unit tests of the history fold, compile errors and the compaction helpers, plus the
//! event builders the snapshot tests share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use foya_protocol::{
    AssistantMessage, AttachmentRef, CommandInvocation, EventKind, FinishReason, Input, InputId,
    PageElement, Seq, SessionId, ToolCall, ToolCallId, ToolMessage,
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
    }
}

fn user(text: &str) -> Message {
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
    let folded = history(&log.events);
    assert_eq!(
        folded,
        vec![
            user("a"),
            Message::Assistant(with_reasoning("done", "", false)),
            user("b"),
            Message::Assistant(with_reasoning("partial", "thought 2", true)),
            user("no, do it differently"),
        ]
    );
    let Message::Assistant(interrupted) = &folded[3] else {
        unreachable!()
    };
    assert_eq!(
        interrupted_context_text(interrupted).unwrap(),
        "[Interrupted context: this response was cut off by the user; reasoning so far]\nthought 2"
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

#[test]
fn images_without_vision_are_an_error() {
    let mut log = Log::default();
    for id in ["a1", "a2", "a1"] {
        log.push(EventKind::UserMessage {
            input_id: InputId::from_bytes([3; 16]),
            input: Input {
                images: vec![AttachmentRef {
                    id: id.into(),
                    media_type: Some("image/png".into()),
                }],
                ..Input::default()
            },
        });
    }
    let config = SessionConfig::new("/p");
    let project = ProjectContext::default();
    let env = Environment {
        cwd: "/p".into(),
        os: "linux".into(),
        shell: "bash".into(),
        date: "2026-01-01".into(),
    };
    let touched = BTreeSet::new();
    let mut input = CompileInput {
        config: &config,
        project: &project,
        env: &env,
        history: &log.events,
        touched_paths: &touched,
        tools: &[],
        limits: ModelLimits::new(100_000),
        calibration: Calibration::default(),
    };
    let err = compile(&input).unwrap_err();
    assert_eq!(
        err,
        ContextError::ImagesNotSupported {
            attachment_ids: vec!["a1".into(), "a2".into()]
        }
    );
    assert_eq!(
        err.to_string(),
        "the model does not accept images, but the conversation references image attachments a1, a2; use a model with vision or start a session without the images"
    );
    input.limits.supports_images = true;
    let ok = compile(&input).unwrap();
    assert_eq!(
        ok.sections["history"],
        3 * (compile::IMAGE_TOKENS + compile::MESSAGE_OVERHEAD_TOKENS)
    );
}

#[test]
fn budget_applies_calibration_and_threshold() {
    let mut log = Log::default();
    log.user(&"word ".repeat(2000));
    let config = SessionConfig::new("/p");
    let project = ProjectContext::default();
    let env = Environment {
        cwd: "/p".into(),
        os: "linux".into(),
        shell: "bash".into(),
        date: "d".into(),
    };
    let touched = BTreeSet::new();
    let limits = ModelLimits {
        context_window: 3000,
        reserved_output: 500,
        compact_threshold_pct: 85,
        supports_images: false,
    };
    let input = CompileInput {
        config: &config,
        project: &project,
        env: &env,
        history: &log.events,
        touched_paths: &touched,
        tools: &[],
        limits,
        calibration: Calibration::default(),
    };
    let plain = compile(&input).unwrap();
    let raw: u64 = plain.sections.values().sum();
    assert_eq!(
        plain.budget,
        Budget {
            estimated_input_tokens: raw,
            window: 3000,
            reserve: 500,
            threshold_tokens: 2550,
            over_threshold: raw > 2550,
            fits: raw + 500 <= 3000,
        }
    );
    let doubled = compile(&CompileInput {
        calibration: Calibration { ratio: 2.0 },
        ..input
    })
    .unwrap();
    assert_eq!(doubled.budget.estimated_input_tokens, 2 * raw);
    assert!(doubled.budget.over_threshold);
    assert!(!doubled.budget.fits);
}

fn big_log() -> Log {
    let mut log = Log::default();
    for i in 0..6 {
        log.user(&format!("request {i} {}", "x".repeat(400)))
            .assistant(
                "",
                &[(
                    &format!("c{i}"),
                    "read_file",
                    json!({"path": format!("f{i}.rs")}),
                )],
            )
            .tool(&format!("c{i}"), &"y".repeat(400))
            .assistant(&format!("answer {i}"), &[]);
    }
    log
}

#[test]
fn compaction_request_drops_oldest_units_first() {
    let log = big_log();
    let full = history(&log.events);
    let everything = compaction_request(&log.events, u64::MAX);
    assert_eq!(everything.len(), full.len() + 1);
    assert_eq!(everything[..full.len()], full[..]);
    assert_eq!(everything.last(), Some(&user(COMPACTION_INSTRUCTION)));

    let small = compaction_request(&log.events, 500);
    let total: u64 = small.iter().map(compile::message_tokens).sum();
    assert!(total <= 500, "{total}");
    // Newest kept, oldest dropped, a note first, instruction last, still well-formed.
    assert_eq!(small.first(), Some(&user(OMITTED_NOTE)));
    assert_eq!(small.last(), Some(&user(COMPACTION_INSTRUCTION)));
    let kept = &small[1..small.len() - 1];
    assert_eq!(kept, &full[full.len() - kept.len()..]);
    assert!(!kept.is_empty());
    assert_eq!(history_of(kept), kept);

    let nothing = compaction_request(&log.events, 0);
    assert_eq!(
        nothing,
        vec![user(OMITTED_NOTE), user(COMPACTION_INSTRUCTION)]
    );
}

/// Re-folds messages (through a checkpoint's `kept`) to check they are well-formed.
fn history_of(messages: &[Message]) -> Vec<Message> {
    let mut log = Log::default();
    log.push(EventKind::CompactionCheckpoint {
        summary: String::new(),
        covers_up_to: Seq(1),
        tokens_before: 0,
        tokens_after: 0,
        kept: messages.to_vec(),
    });
    history(&log.events)[1..].to_vec()
}

#[test]
fn checkpoint_kept_keeps_recent_users_and_latest_file_results_without_dangling_calls() {
    let mut log = big_log();
    // A later failed read of f5 and a later successful edit of f4, plus a shell call.
    log.user("last request")
        .assistant(
            "",
            &[
                ("e1", "read_file", json!({"path": "f5.rs"})),
                ("e2", "edit_file", json!({"path": "f4.rs"})),
                ("e3", "shell", json!({"command": "ls"})),
            ],
        )
        .push(EventKind::ToolMessage(result("e1", "no such file", true)))
        .tool("e2", "edited f4.rs")
        .tool("e3", "listing");
    let pair = |id: &str, name: &str, path: &str, content: &str| {
        vec![
            Message::Assistant(assistant("", &[(id, name, json!({"path": path}))])),
            Message::Tool(result(id, content, false)),
        ]
    };
    let request5 = vec![user(&format!("request 5 {}", "x".repeat(400)))];
    let read5 = pair("c5", "read_file", "f5.rs", &"y".repeat(400));
    let last = vec![user("last request")];
    let edit4 = pair("e2", "edit_file", "f4.rs", "edited f4.rs");
    let expected: Vec<Message> = [request5, read5, last, edit4].concat();
    let budget: u64 = expected.iter().map(compile::message_tokens).sum();
    // Exactly enough for: the two newest user messages, the latest successful result per
    // file path (f4's edit; f5's read, since the newer f5 read failed); not request 4 or
    // the older reads, and never the shell result.
    let kept = checkpoint_kept(&log.events, budget);
    assert_eq!(kept, expected);
    assert_eq!(history_of(&kept), kept);
    assert_eq!(checkpoint_kept(&log.events, 0), Vec::<Message>::new());
}

//! Unit tests of the budget, the image check and the compaction helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Log, assert_well_formed, assistant, result, user};
use crate::*;
use foya_protocol::{AttachmentRef, EventKind, Input, InputId, Message, Seq};
use serde_json::json;

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
        tools: &crate::ToolSet::default(),
        limits: ModelLimits::new(100_000),
        calibration: Calibration::default(),
        attachments: None,
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
        3 * (compile::IMAGE_TOKENS + estimate::MESSAGE_OVERHEAD_TOKENS)
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
        images: ImageBudget::default(),
    };
    let input = CompileInput {
        config: &config,
        project: &project,
        env: &env,
        history: &log.events,
        touched_paths: &touched,
        tools: &crate::ToolSet::default(),
        limits,
        calibration: Calibration::default(),
        attachments: None,
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
fn compaction_request_cuts_every_item_to_fit_before_dropping_any() {
    let log = big_log();
    let full = history(&log.events);
    let everything = compaction_request(&log.events, u64::MAX);
    assert_eq!(everything.len(), full.len() + 1);
    assert_eq!(everything[..full.len()], full[..]);
    assert_eq!(everything.last(), Some(&user(COMPACTION_INSTRUCTION)));

    // Too large whole: every message is still there, the long texts cut in the middle.
    let cut = compaction_request(&log.events, 1_400);
    let total: u64 = cut.iter().map(compile::message_tokens).sum();
    assert!(total <= 1_400, "{total}");
    assert_eq!(cut.len(), full.len() + 1, "{cut:?}");
    assert_eq!(cut.last(), Some(&user(COMPACTION_INSTRUCTION)));
    assert_well_formed(&cut);
    for (sent, original) in cut.iter().zip(&full) {
        match (sent, original) {
            (Message::Tool(s), Message::Tool(o)) => {
                assert!(s.content.contains(CUT_NOTE), "{}", s.content);
                assert!(o.content.starts_with(&s.content[..50]));
                assert!(o.content.ends_with(&s.content[s.content.len() - 50..]));
            }
            (Message::User(s), Message::User(o)) => {
                assert!(s.text.contains(CUT_NOTE) && o.text.starts_with(&s.text[..20]));
            }
            (s, o) => assert_eq!(s, o),
        }
    }

    // Even cut to the least, too large: the oldest units go, a note first.
    let small = compaction_request(&log.events, 500);
    let total: u64 = small.iter().map(compile::message_tokens).sum();
    assert!(total <= 500, "{total}");
    assert_eq!(small.first(), Some(&user(OMITTED_NOTE)));
    assert_eq!(small.last(), Some(&user(COMPACTION_INSTRUCTION)));
    assert!(small.len() > 2);
    assert_well_formed(&small[1..small.len() - 1]);

    let nothing = compaction_request(&log.events, 0);
    assert_eq!(
        nothing,
        vec![user(OMITTED_NOTE), user(COMPACTION_INSTRUCTION)]
    );
}

#[test]
fn one_large_tool_result_reaches_the_summariser_cut_not_dropped() {
    let mut log = Log::default();
    let output: String = (1..=6_000).map(|n| format!("line {n}\n")).collect();
    log.user("count the lines")
        .assistant("", &[("c1", "shell", json!({"command": "seq"}))])
        .tool("c1", &output);
    let request = compaction_request(&log.events, 2_000);
    let total: u64 = request.iter().map(compile::message_tokens).sum();
    assert!(total <= 2_000, "{total}");
    assert_eq!(request.len(), 4, "{request:?}");
    assert_eq!(request[0], user("count the lines"));
    let Message::Tool(result) = &request[2] else {
        panic!("{request:?}")
    };
    assert!(
        result.content.starts_with("line 1\nline 2\n"),
        "{}",
        result.content
    );
    assert!(
        result.content.ends_with("line 6000\n"),
        "{}",
        result.content
    );
    assert!(result.content.contains(CUT_NOTE));
    assert!(!request.contains(&user(OMITTED_NOTE)));
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
fn checkpoint_kept_keeps_the_turn_and_the_latest_tool_exchanges_verbatim() {
    let mut log = big_log();
    // The current turn: a failed read of f5, an edit of f4 and a shell call.
    let calls = [
        ("e1", "read_file", json!({"path": "f5.rs"})),
        ("e2", "edit_file", json!({"path": "f4.rs"})),
        ("e3", "shell", json!({"command": "cargo test"})),
    ];
    log.user("last request")
        .assistant("", &calls)
        .push(EventKind::ToolMessage(result("e1", "no such file", true)))
        .tool("e2", "edited f4.rs")
        .tool("e3", "test result: ok. 3 passed");
    let last = vec![user("last request")];
    let exchange = vec![
        Message::Assistant(assistant("", &calls)),
        Message::Tool(result("e1", "no such file", true)),
        Message::Tool(result("e2", "edited f4.rs", false)),
        Message::Tool(result("e3", "test result: ok. 3 passed", false)),
    ];
    let read5 = vec![
        Message::Assistant(assistant(
            "",
            &[("c5", "read_file", json!({"path": "f5.rs"}))],
        )),
        Message::Tool(result("c5", &"y".repeat(400), false)),
    ];
    let cost = |m: &[Message]| m.iter().map(compile::message_tokens).sum::<u64>();
    // Room for the turn, the two newest exchanges, and 100 tokens of the next one.
    let budget = cost(&last) + cost(&exchange) + cost(&read5) + 100;
    let kept = checkpoint_kept(&log.events, budget);
    assert_eq!(history_of(&kept), kept);
    assert!(cost(&kept) <= budget);
    // The exchange of c4 is kept with the tail of its result; older ones are left to the
    // summary, and so are earlier requests.
    let Message::Assistant(a4) = &kept[0] else {
        panic!("{kept:?}")
    };
    assert_eq!(a4.tool_calls[0].id.as_str(), "c4");
    let Message::Tool(r4) = &kept[1] else {
        panic!("{kept:?}")
    };
    assert!(r4.content.starts_with(TRUNCATED_NOTE) && r4.content.ends_with("yyyy"));
    assert!(r4.content.len() < 400);
    assert_eq!(kept[2..], [read5, last, exchange].concat()[..]);
    assert_eq!(checkpoint_kept(&log.events, 0), Vec::<Message>::new());
}

#[test]
fn checkpoint_kept_spends_no_budget_on_a_tail_too_short_to_help() {
    let log = big_log();
    let read5 = vec![
        Message::Assistant(assistant(
            "",
            &[("c5", "read_file", json!({"path": "f5.rs"}))],
        )),
        Message::Tool(result("c5", &"y".repeat(400), false)),
    ];
    let request5 = vec![user(&format!("request 5 {}", "x".repeat(400)))];
    let cost = |m: &[Message]| m.iter().map(compile::message_tokens).sum::<u64>();
    // The current turn (request 5), the newest exchange (c5), too little left for c4.
    let budget = cost(&request5) + cost(&read5) + MIN_TRUNCATED_TOKENS - 1;
    let kept = checkpoint_kept(&log.events, budget);
    assert_eq!(kept, [request5, read5].concat());
}

#[test]
fn after_an_overflow_the_turns_user_message_is_kept_without_its_image() {
    let mut log = Log::default();
    log.user(&"earlier work ".repeat(400));
    log.push(EventKind::UserMessage {
        input_id: InputId::from_bytes([3; 16]),
        input: Input {
            text: "what is wrong in this screenshot?".into(),
            images: vec![AttachmentRef {
                id: "att-1".into(),
                media_type: Some("image/png".into()),
            }],
            ..Input::default()
        },
    });
    // The image alone costs more than the whole keep budget.
    let budget = 400;
    let with_image = checkpoint_kept(&log.events, budget);
    assert!(
        with_image
            .iter()
            .all(|m| !matches!(m, Message::User(u) if u.text.contains("screenshot")))
    );
    let kept = checkpoint_kept_without_images(&log.events, budget);
    let Some(Message::User(input)) = kept.first() else {
        panic!("{kept:?}")
    };
    assert!(input.images.is_empty());
    assert!(
        input
            .text
            .starts_with("what is wrong in this screenshot?\n[image left out"),
        "{}",
        input.text
    );
    assert!(input.text.contains("att-1 (image/png)"), "{}", input.text);
}

#[test]
fn the_turns_input_too_large_for_the_keep_budget_is_kept_cut() {
    let mut log = Log::default();
    let prompt = format!("BEGIN {}END", "lorem ".repeat(2_000));
    log.user(&prompt);
    let kept = checkpoint_kept(&log.events, 300);
    let [Message::User(input)] = kept.as_slice() else {
        panic!("{kept:?}")
    };
    assert!(input.text.starts_with("BEGIN lorem") && input.text.ends_with("lorem END"));
    assert!(input.text.contains(KEPT_CUT_NOTE), "{}", input.text);
    assert!(compile::message_tokens(&kept[0]) <= 300);
}

proptest::proptest! {
    #[test]
    fn compaction_outputs_never_dangle(
        ops in proptest::collection::vec((0u8..3, 0u8..4, 0u8..3), 0..40),
        budget in 0u64..400,
    ) {
        let mut log = Log::default();
        for (kind, a, b) in ops {
            match kind {
                0 => { log.user(&"u".repeat(usize::from(a) * 20)); }
                1 => {
                    let ids: Vec<String> = (0..b).map(|k| format!("c{}", a + k)).collect();
                    let calls: Vec<(&str, &str, serde_json::Value)> = ids
                        .iter()
                        .map(|id| (id.as_str(), "read_file", json!({"path": format!("{}.rs", &id[1..])})))
                        .collect();
                    log.assistant("a", &calls);
                }
                _ => { log.tool(&format!("c{a}"), &"r".repeat(usize::from(b) * 30)); }
            }
        }
        let kept = checkpoint_kept(&log.events, budget);
        assert_well_formed(&kept);
        proptest::prop_assert!(kept.iter().map(compile::message_tokens).sum::<u64>() <= budget);
        let request = compaction_request(&log.events, budget);
        assert_well_formed(&request);
        proptest::prop_assert_eq!(request.last(), Some(&user(COMPACTION_INSTRUCTION)));
    }
}

#[test]
fn without_images_names_each_image_in_its_place() {
    let input = Input {
        text: "look".into(),
        images: vec![
            AttachmentRef {
                id: "a1".into(),
                media_type: Some("image/png".into()),
            },
            AttachmentRef {
                id: "a2".into(),
                media_type: None,
            },
        ],
        ..Input::default()
    };
    let out = without_images(vec![Message::User(input), user("plain")]);
    assert_eq!(
        out,
        vec![
            user(&format!(
                "look\n[{IMAGE_LEFT_OUT} a1 (image/png)]\n[{IMAGE_LEFT_OUT} a2 (image)]"
            )),
            user("plain"),
        ]
    );
}

/// A tool result `c1` carrying the image `t1`.
fn result_with_image() -> foya_protocol::ToolMessage {
    let mut with_image = result("c1", "[image: image/png, 3 bytes]", false);
    with_image.images = vec![AttachmentRef {
        id: "t1".into(),
        media_type: Some("image/png".into()),
    }];
    with_image
}

#[test]
fn without_images_names_a_tool_results_images_too() {
    let out = without_images(vec![Message::Tool(result_with_image())]);
    assert_eq!(
        out,
        vec![Message::Tool(result(
            "c1",
            &format!("[image: image/png, 3 bytes]\n[{IMAGE_LEFT_OUT} t1 (image/png)]"),
            false
        ))]
    );
}

#[test]
fn tool_result_images_go_to_a_model_with_vision_only() {
    let mut log = Log::default();
    log.user("show me")
        .assistant("", &[("c1", "mcp__s__shot", json!({}))])
        .push(EventKind::ToolMessage(result_with_image()));
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
        tools: &crate::ToolSet::default(),
        limits: ModelLimits::new(100_000),
        calibration: Calibration::default(),
        attachments: None,
    };
    // Without vision: no error (unlike a user's image), the result's text only.
    let blind = compile(&input).unwrap();
    assert_eq!(
        blind.messages.last(),
        Some(&Message::Tool(result(
            "c1",
            "[image: image/png, 3 bytes]",
            false
        )))
    );
    input.limits.supports_images = true;
    let seeing = compile(&input).unwrap();
    assert_eq!(
        seeing.messages.last(),
        Some(&Message::Tool(result_with_image()))
    );
    assert_eq!(
        seeing.sections["history"] - blind.sections["history"],
        compile::IMAGE_TOKENS
    );
}

/// A log of `n` tool results, one image each (`i0`, `i1`, … oldest first).
fn log_of_images(n: usize) -> Log {
    let mut log = Log::default();
    log.user("shots");
    for i in 0..n {
        let id = format!("c{i}");
        log.assistant("", &[(id.as_str(), "mcp__s__shot", json!({}))]);
        let mut r = result(&id, "[image: image/png, 3 bytes]", false);
        r.images = vec![AttachmentRef {
            id: format!("i{i}"),
            media_type: Some("image/png".into()),
        }];
        log.push(EventKind::ToolMessage(r));
    }
    log
}

fn compile_images(
    log: &Log,
    images: ImageBudget,
    store: Option<&dyn AttachmentSizes>,
) -> CompiledContext {
    let config = SessionConfig::new("/p");
    let project = ProjectContext::default();
    let env = Environment {
        cwd: "/p".into(),
        os: "linux".into(),
        shell: "bash".into(),
        date: "d".into(),
    };
    let touched = BTreeSet::new();
    let mut limits = ModelLimits::new(100_000);
    limits.supports_images = true;
    limits.images = images;
    compile(&CompileInput {
        config: &config,
        project: &project,
        env: &env,
        history: &log.events,
        touched_paths: &touched,
        tools: &crate::ToolSet::default(),
        limits,
        calibration: Calibration::default(),
        attachments: store,
    })
    .unwrap()
}

fn image_ids(c: &CompiledContext) -> Vec<String> {
    c.messages
        .iter()
        .flat_map(|m| match m {
            Message::Tool(t) => t.images.clone(),
            Message::User(u) => u.images.clone(),
            _ => Vec::new(),
        })
        .map(|r| r.id)
        .collect()
}

#[test]
fn the_image_budget_keeps_the_newest_images_by_count() {
    let log = log_of_images(4);
    let all = compile_images(&log, ImageBudget::default(), None);
    assert_eq!(image_ids(&all), ["i0", "i1", "i2", "i3"]);
    let two = ImageBudget {
        max_images: 2,
        max_bytes: u64::MAX,
    };
    let kept = compile_images(&log, two, None);
    assert_eq!(image_ids(&kept), ["i2", "i3"]);
    // The oldest result names its image as left out, with the compaction's line.
    let Some(Message::Tool(first)) = kept.messages.get(2) else {
        panic!("no tool result: {:?}", kept.messages);
    };
    assert_eq!(
        first.content,
        format!("[image: image/png, 3 bytes]\n[{IMAGE_LEFT_OUT} i0 (image/png)]")
    );
    // The estimate counts the images sent and the lines naming the others.
    let sum = |c: &CompiledContext| c.messages.iter().map(compile::message_tokens).sum::<u64>();
    assert_eq!(kept.sections["history"], sum(&kept));
    assert_eq!(all.sections["history"], sum(&all));
    assert!(kept.sections["history"] + compile::IMAGE_TOKENS < all.sections["history"]);
}

/// An attachment store as the compiler sees it: the sizes of the images it holds.
#[derive(Debug, Default)]
struct Sizes(std::collections::HashMap<String, u64>);

impl AttachmentSizes for Sizes {
    fn size(&self, id: &str) -> Option<u64> {
        self.0.get(id).copied()
    }
}

#[test]
fn the_image_budget_counts_base64_bytes_of_stored_images() {
    // Three stored images of 68 bytes (a 1×1 PNG).
    let ids: Vec<String> = (0..3).map(|i| format!("stored-{i}")).collect();
    let store = Sizes(ids.iter().map(|id| (id.clone(), 68)).collect());
    let mut log = log_of_images(3);
    for (event, id) in log
        .events
        .iter_mut()
        .filter_map(|e| match &mut e.kind {
            EventKind::ToolMessage(t) => Some(t),
            _ => None,
        })
        .zip(&ids)
    {
        event.images[0].id.clone_from(id);
    }
    // 68 bytes are 92 in base64: two fit in 200 bytes, three do not.
    let budget = ImageBudget {
        max_images: 100,
        max_bytes: 200,
    };
    let kept = compile_images(&log, budget, Some(&store));
    assert_eq!(image_ids(&kept), ids[1..]);
    let no_sizes = compile_images(&log, budget, None);
    assert_eq!(image_ids(&no_sizes), ids, "unknown sizes count as 0 bytes");
}

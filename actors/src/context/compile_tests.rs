//! Unit tests of the budget, the image check and the compaction helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::tests::{Log, assert_well_formed, assistant, result, user};
use super::*;
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
        tools: &crate::context::ToolSet::default(),
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
        images: ImageBudget::default(),
    };
    let input = CompileInput {
        config: &config,
        project: &project,
        env: &env,
        history: &log.events,
        touched_paths: &touched,
        tools: &crate::context::ToolSet::default(),
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
        tools: &crate::context::ToolSet::default(),
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
    store: Option<&crate::attachments::AttachmentStore>,
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
        tools: &crate::context::ToolSet::default(),
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

#[test]
fn the_image_budget_counts_base64_bytes_of_stored_images() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::attachments::AttachmentStore::new(dir.path());
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x04\0\0\0\xb5\x1c\x0c\x02\0\0\0\x0bIDATx\xdacd`\0\0\0\x06\0\x020\x81\xd0/\0\0\0\0IEND\xaeB`\x82";
    let ids: Vec<String> = (0..3)
        .map(|_| store.put(png, "image/png").unwrap())
        .collect();
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

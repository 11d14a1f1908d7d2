//! Snapshot tests of compiled contexts: a real project in a tempdir (with `.git`),
//! instructions at two levels, an `always` and a path-triggered rule, project and user
//! memory, two skills, and a history with a checkpoint, a tool call and an interrupted
//! message. The tempdir path is normalised to `[TMP]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Log, assistant};
use crate::*;
use foya_protocol::{AssistantMessage, EventKind, Input, Message, Seq};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `[tmp]/project` (cwd `[tmp]/project/app`) and `[tmp]/user`.
fn fixture(tmp: &Path) -> (PathBuf, PathBuf) {
    let root = tmp.join("project");
    let user = tmp.join("user");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    write(
        &root.join("AGENTS.md"),
        "# Project\nUse `cargo test` to check changes.\n",
    );
    write(
        &root.join("app/FOYA.md"),
        "The app crate is a CLI; keep its output stable.\n",
    );
    write(
        &root.join(".foya/rules/style.md"),
        "---\nalways: true\n---\nWrite comments in English.\n",
    );
    write(
        &root.join(".foya/rules/rust.md"),
        "---\npaths: [\"src/**/*.rs\"]\ndescription: Rust code\n---\nNo `unwrap` outside tests.\n",
    );
    write(&root.join(".foya/rules/broken.md"), "---\nalways: true\n");
    write(&root.join(".foya/memory.md"), "The CI runs on two cores.\n");
    write(&user.join("memory.md"), "The user prefers short answers.\n");
    write(
        &root.join(".foya/skills/release/SKILL.md"),
        "---\nname: release\ndescription: Cut a release: bump versions, tag, write notes.\n---\nSteps...\n",
    );
    write(
        &user.join("skills/pdf/SKILL.md"),
        "---\nname: pdf\ndescription: Read and fill PDF forms.\n---\nUse the pdf tool.\n",
    );
    (root.clone(), root.join("app"))
}

fn base_history() -> Log {
    let mut log = Log::default();
    log.user("old request").assistant("old answer", &[]);
    log.push(EventKind::CompactionCheckpoint {
        summary: "## Task\nAdd a --json flag to the CLI.".into(),
        covers_up_to: Seq(2),
        tokens_before: 1200,
        tokens_after: 80,
        kept: vec![Message::User(Input::text("Add a --json flag, please."))],
    });
    log.user("Where is the flag parsed?")
        .push(EventKind::AssistantMessage(AssistantMessage {
            reasoning: "I should list the directory first.".into(),
            ..assistant(
                "Let me look.",
                &[("call_1", "list_dir", json!({"path": "."}))],
            )
        }))
        .tool("call_1", "Cargo.toml\nsrc/")
        .push(EventKind::AssistantMessage(AssistantMessage {
            text: "The flag is parsed in".into(),
            reasoning: "Probably src/cli.rs, via clap derive".into(),
            interrupted: true,
            ..AssistantMessage::default()
        }))
        .user("Look in ../src/lib.rs instead.");
    log
}

fn render(tmp: &Path, project: &ProjectContext, log: &Log) -> String {
    let (_, cwd) = (project.root.clone(), project.root.join("app"));
    let config = SessionConfig {
        approval_mode: foya_protocol::ApprovalMode::AutoEdit,
        ..SessionConfig::new(&cwd)
    };
    let env = Environment {
        cwd,
        os: "linux".into(),
        shell: "bash".into(),
        date: "2026-11-29".into(),
    };
    let touched = touched_paths(&log.events);
    let tools = vec![foya_core::request::ToolSchema {
        name: "read_file".into(),
        description: "Read a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }];
    let input = CompileInput {
        config: &config,
        project,
        env: &env,
        history: &log.events,
        touched_paths: &touched,
        tools: &crate::ToolSet::new(tools),
        limits: ModelLimits {
            context_window: 8_000,
            reserved_output: 1_000,
            compact_threshold_pct: 85,
            supports_images: false,
            images: crate::ImageBudget::default(),
        },
        calibration: Calibration { ratio: 1.1 },
        attachments: None,
    };
    let compiled = compile(&input).unwrap();
    let mut out = String::new();
    writeln!(out, "=== diagnostics\n{}", project.diagnostics.join("\n")).unwrap();
    writeln!(out, "=== touched paths\n{touched:?}").unwrap();
    writeln!(out, "=== system\n{}", compiled.system).unwrap();
    writeln!(
        out,
        "=== messages\n{}",
        serde_json::to_string_pretty(&compiled.messages).unwrap()
    )
    .unwrap();
    let names: Vec<&str> = compiled.tools.iter().map(|t| t.name.as_str()).collect();
    writeln!(out, "=== tools\n{names:?}").unwrap();
    writeln!(out, "=== sections\n{:#?}", compiled.sections).unwrap();
    writeln!(out, "=== budget\n{:#?}", compiled.budget).unwrap();
    out.replace(&tmp.display().to_string(), "[TMP]")
}

#[test]
fn compiled_context_before_and_after_a_path_triggered_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, cwd) = fixture(tmp.path());
    let project = ProjectContext::load(&cwd, Some(&tmp.path().join("user")));

    let mut log = base_history();
    insta::assert_snapshot!(
        "before_rust_file_touched",
        render(tmp.path(), &project, &log)
    );

    log.assistant(
        "",
        &[("call_2", "read_file", json!({"path": "../src/lib.rs"}))],
    )
    .tool("call_2", "pub fn parse() {}\n");
    insta::assert_snapshot!(
        "after_rust_file_touched",
        render(tmp.path(), &project, &log)
    );
}

//! The embedding surface as a Rust developer meets it (issue 39): the tools an
//! `Agent::builder` agent gets (explicit; the read-only built-ins on request), a
//! session's persisted history read through its handle after the store is reopened
//! (redb, and a store behind the `EventLog` seam as PostgreSQL's is), and instructions
//! that are the whole system prompt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::context::KERNEL_INSTRUCTIONS;
use foya_actors::testkit::{RecordingClient, memory_store, types, within};
use foya_actors::tools::{SideEffect, Tool, ToolContext, TypedTool};
use foya_actors::{Agent, ContextOptions, Runtime, RuntimeError};
use foya_protocol::{ApprovalMode, EventKind, Input, Instructions, Seq};
use foya_storage::{LogStore, Store};
use serde_json::json;
use std::sync::Arc;

#[derive(serde::Deserialize, foya_actors::schemars::JsonSchema)]
#[schemars(crate = "foya_actors::schemars")]
struct Sku {
    /// The product's SKU.
    sku: String,
}

fn stock_tool() -> Arc<dyn Tool> {
    Arc::new(TypedTool::new(
        "stock",
        "Units in stock",
        SideEffect::None,
        |args: Sku, _ctx: ToolContext| async move { Ok::<_, String>(format!("12 {}", args.sku)) },
    ))
}

/// The tool names offered to the model in the first request `model` got.
fn offered(model: &RecordingClient) -> Vec<String> {
    model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

#[tokio::test]
async fn a_builder_agent_is_offered_only_the_tools_it_was_given() {
    let model = RecordingClient::new(json!({"responses": [{"text": "ok"}]}));
    let agent = Agent::builder(Arc::new(model.clone()))
        .tool(stock_tool())
        .unwrap()
        .start(memory_store())
        .await
        .unwrap();
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    within(session.run(Input::text("hi")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(offered(&model), ["stock"]);
    agent.shutdown().await;
}

#[tokio::test]
async fn read_only_builtin_tools_adds_the_file_tools_beside_the_agent_s_own() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let model = RecordingClient::new(json!({"responses": [
        {"tool_calls": [{"id": "r", "name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"text": "42"}
    ]}));
    let agent = Agent::builder(Arc::new(model.clone()))
        .tool(stock_tool())
        .unwrap()
        .read_only_builtin_tools()
        .approval_mode(ApprovalMode::ReadOnly)
        .start(memory_store())
        .await
        .unwrap();
    let session = agent.session(dir.path()).await.unwrap();
    let outcome = within(session.run(Input::text("what is the answer?")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        offered(&model),
        ["stock", "read_file", "list_dir", "glob", "grep"]
    );
    let result = outcome.tool_calls[0].result.clone().unwrap();
    assert!(
        !result.is_error && result.content.contains("the answer is 42"),
        "{result:?}"
    );
    assert_eq!(outcome.text, "42");
    agent.shutdown().await;
}

/// Runs two turns of an agent on the redb file `path` (each store made by `open`),
/// shuts it down, starts a new runtime on the reopened file and reads the session's
/// history through its handle.
async fn history_after_reopening(open: fn(Store) -> LogStore) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.redb");
    let model = Arc::new(RecordingClient::new(
        json!({"responses": [{"text": "first"}, {"text": "second"}]}),
    ));
    let builder = Agent::builder(model).instructions("Count the turns.");
    let store = || open(Store::open(&path, Default::default()).unwrap());

    let agent = builder.start(store()).await.unwrap();
    let session = agent.session(dir.path()).await.unwrap();
    let id = session.id();
    within(session.run(Input::text("one")))
        .await
        .unwrap()
        .unwrap();
    let second = within(session.run(Input::text("two")))
        .await
        .unwrap()
        .unwrap();
    let before = within(session.history(Seq::FIRST)).await.unwrap().unwrap();
    agent.shutdown().await;
    // The old handle holds no store any more.
    assert!(matches!(
        session.history(Seq::FIRST).await,
        Err(RuntimeError::ShuttingDown)
    ));

    let runtime = Runtime::start(foya_actors::RuntimeConfig::new(
        store(),
        Arc::new(RecordingClient::new(json!({"responses": []}))),
    ))
    .await
    .unwrap();
    let session = runtime.session(id).await.unwrap();
    let history = within(session.history(Seq::FIRST)).await.unwrap().unwrap();
    assert_eq!(history, before);
    let seqs: Vec<u64> = history.iter().map(|e| e.seq.0).collect();
    assert_eq!(seqs, (1..=history.len() as u64).collect::<Vec<_>>());
    assert_eq!(types(&history)[0], "session_created");
    let answers: Vec<&str> = history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) => Some(m.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["first", "second"]);

    // From a seq on: the second turn's events exactly.
    let from = *second.seqs.start();
    let tail = session.history(from).await.unwrap();
    assert_eq!(tail.first().map(|e| e.seq), Some(from));
    assert_eq!(tail.last().map(|e| e.seq), Some(*second.seqs.end()));
    assert_eq!(tail, history[(from.0 - 1) as usize..]);

    // In pages.
    let mut paged = Vec::new();
    let mut next = Seq::FIRST;
    loop {
        let page = session.history_page(next, 3).await.unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        next = Seq(last.seq.0 + 1);
        let short = page.len() < 3;
        paged.extend(page);
        if short {
            break;
        }
    }
    assert_eq!(paged, history);
    runtime.shutdown().await;
}

#[tokio::test]
async fn a_handle_reads_the_history_after_the_redb_store_is_reopened() {
    history_after_reopening(LogStore::from).await;
}

/// A store behind `LogStore::shared` is reached only through the `EventLog` trait, as
/// the PostgreSQL store (`foya_storage_pg::PgLog`) is.
#[tokio::test]
async fn a_handle_reads_the_history_through_the_storage_seam() {
    history_after_reopening(LogStore::shared).await;
}

#[tokio::test]
async fn instructions_only_are_the_whole_system_prompt_and_are_kept_in_the_log() {
    let model = RecordingClient::new(json!({"responses": [{"text": "Paris."}]}));
    let agent = Agent::builder(Arc::new(model.clone()))
        .instructions_only("You answer geography questions in one word.")
        .start(memory_store())
        .await
        .unwrap();
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    within(session.run(Input::text("Capital of France?")))
        .await
        .unwrap()
        .unwrap();
    let system = model.requests()[0].system.clone();
    assert_eq!(system, "You answer geography questions in one word.");
    let history = session.history(Seq::FIRST).await.unwrap();
    let EventKind::SessionCreated { config } = &history[0].kind else {
        panic!("{history:?}")
    };
    assert_eq!(
        config.instructions,
        Some(Instructions::only(
            "You answer geography questions in one word."
        ))
    );
    agent.shutdown().await;
}

#[tokio::test]
async fn instructions_only_are_followed_by_the_project_s_files_when_they_are_read() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::write(project.path().join("AGENTS.md"), "Project rule: be terse.").unwrap();
    let user = tempfile::tempdir().unwrap();
    let model = RecordingClient::new(json!({"responses": [{"text": "ok"}]}));
    let agent = Agent::builder(Arc::new(model.clone()))
        .instructions_only("You review pull requests.")
        .context(ContextOptions {
            user_dir: Some(user.path().to_path_buf()),
            ..ContextOptions::with_files()
        })
        .start(memory_store())
        .await
        .unwrap();
    let session = agent.session(project.path()).await.unwrap();
    within(session.run(Input::text("hi")))
        .await
        .unwrap()
        .unwrap();
    let system = model.requests()[0].system.clone();
    assert!(
        system.starts_with("You review pull requests.\n\n# Project instructions\n"),
        "{system}"
    );
    assert!(system.contains("Project rule: be terse."), "{system}");
    assert!(
        !system.contains("# Environment")
            && !system.contains("# Approval mode")
            && !system.contains(KERNEL_INSTRUCTIONS),
        "{system}"
    );
    agent.shutdown().await;
}

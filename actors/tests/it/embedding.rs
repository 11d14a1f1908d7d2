//! The embedding API as an embedder uses it (public items only): an agent's
//! instructions from code, project files opt-in, and `SessionHandle::run` /
//! `run_streamed` / `run_with_id` (outcome, typed events, cancel safety, lag). Typed
//! tools and safe defaults: `embedding_tools.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{RecordingClient, script};
use foya_actors::context::KERNEL_INSTRUCTIONS;
use foya_actors::testkit::{events_until, is_turn_complete, kinds_of, memory_store, types, within};
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
use foya_actors::{Agent, ContextOptions, RuntimeConfig, RuntimeError, TurnEvent};
use foya_protocol::{
    EventKind, Input, InputId, Instructions, Seq, SessionConfig, TurnStatus, Usage,
};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

fn recording() -> Arc<RecordingClient> {
    Arc::new(RecordingClient {
        requests: Mutex::new(Vec::new()),
        window: 100_000,
        answer: |n| format!("answer {n}"),
    })
}

/// The system prompt of the one request a turn of a session from `agent` sent.
async fn system_prompt_of(agent: &Agent, cwd: &std::path::Path, model: &RecordingClient) -> String {
    let session = agent.session(cwd).await.unwrap();
    let outcome = within(session.run(Input::text("hi")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.text, "answer 1");
    model.requests.lock().unwrap()[0].system.clone()
}

#[tokio::test]
async fn instructions_from_code_replace_the_built_in_prompt() {
    let model = recording();
    let agent = Agent::builder(model.clone())
        .instructions("You are Billy, who answers billing questions.")
        .start(memory_store())
        .await
        .unwrap();
    let system = system_prompt_of(&agent, &std::env::temp_dir(), &model).await;
    assert!(system.starts_with("You are Billy, who answers billing questions.\n\n# Environment"));
    assert!(!system.contains(KERNEL_INSTRUCTIONS), "{system}");
    agent.shutdown().await;
}

#[tokio::test]
async fn appended_instructions_follow_the_built_in_prompt() {
    let model = recording();
    let agent = Agent::builder(model.clone())
        .append_instructions("Answer in French.")
        .start(memory_store())
        .await
        .unwrap();
    let system = system_prompt_of(&agent, &std::env::temp_dir(), &model).await;
    let expected = format!("{KERNEL_INSTRUCTIONS}\n\nAnswer in French.\n\n# Environment");
    assert!(system.starts_with(&expected), "{system}");
    agent.shutdown().await;
}

#[tokio::test]
async fn a_session_s_own_instructions_win_and_are_recorded_in_its_log() {
    let model = recording();
    let config = RuntimeConfig {
        instructions: Some(Instructions::replace("runtime default")),
        ..RuntimeConfig::new(memory_store(), model.clone())
    };
    let runtime = foya_actors::Runtime::start(config).await.unwrap();
    let own = Instructions::append("only this session");
    let session = runtime
        .create_session(SessionConfig {
            instructions: Some(own.clone()),
            ..SessionConfig::new(std::env::temp_dir())
        })
        .await
        .unwrap();
    within(session.run(Input::text("hi")))
        .await
        .unwrap()
        .unwrap();
    let system = model.requests.lock().unwrap()[0].system.clone();
    assert!(system.starts_with(&format!("{KERNEL_INSTRUCTIONS}\n\nonly this session")));
    assert!(!system.contains("runtime default"));
    // Recorded in `session_created`: a restarted session keeps them.
    let mut sub = common::subscribe(&session).await;
    let created = events_until(&mut sub, |_| true).await;
    let [EventKind::SessionCreated { config }] = kinds_of(&created, "session_created")[..] else {
        panic!("the session's first event is session_created: {created:?}")
    };
    assert_eq!(config.instructions, Some(own));
    runtime.shutdown().await;
}

#[tokio::test]
async fn project_and_user_files_are_read_only_when_asked_for() {
    let project = tempfile::tempdir().unwrap();
    std::fs::create_dir(project.path().join(".git")).unwrap();
    std::fs::write(project.path().join("AGENTS.md"), "Project rule: be terse.").unwrap();
    let user = tempfile::tempdir().unwrap();
    std::fs::write(user.path().join("memory.md"), "User memory: likes tea.").unwrap();

    let model = recording();
    let agent = Agent::builder(model.clone())
        .start(memory_store())
        .await
        .unwrap();
    let system = system_prompt_of(&agent, project.path(), &model).await;
    assert!(
        !system.contains("be terse") && !system.contains("likes tea"),
        "{system}"
    );
    agent.shutdown().await;

    let model = recording();
    let with_files = ContextOptions {
        user_dir: Some(user.path().to_path_buf()),
        ..ContextOptions::with_files()
    };
    let agent = Agent::builder(model.clone())
        .context(with_files)
        .start(memory_store())
        .await
        .unwrap();
    let system = system_prompt_of(&agent, project.path(), &model).await;
    assert!(system.contains("Project rule: be terse."), "{system}");
    assert!(system.contains("User memory: likes tea."), "{system}");
    agent.shutdown().await;
}

/// A read-only tool that answers once it gets a permit of `release` (so a test holds a
/// turn open without sleeping).
#[derive(Debug)]
struct Gate {
    spec: ToolSpec,
    release: Arc<Semaphore>,
}

#[async_trait::async_trait]
impl Tool for Gate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        _ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        tokio::select! {
            permit = self.release.acquire() => {
                if let Ok(permit) = permit {
                    permit.forget();
                }
            }
            () = cancel.cancelled() => return ToolOutput::error("cancelled"),
        }
        ToolOutput::ok(format!("opened {args}"))
    }
}

fn gate(release: &Arc<Semaphore>) -> Arc<dyn Tool> {
    Arc::new(Gate {
        spec: ToolSpec {
            name: "gate".into(),
            description: "waits for the test".into(),
            parameters: json!({"type": "object"}),
            parallel_safe: true,
            side_effect: SideEffect::None,
            cancellable: true,
            default_timeout_ms: 60_000,
        },
        release: Arc::clone(release),
    })
}

/// A model that calls `gate` twice in one response, then answers "all open".
fn gate_script() -> Arc<foya_actors::provider::scripted::ScriptedClient> {
    let usage = json!({"input_tokens": 10, "output_tokens": 3});
    Arc::new(script(json!({"responses": [
        {"tool_calls": [
            {"id": "c1", "name": "gate", "arguments": {"n": 1}},
            {"id": "c2", "name": "gate", "arguments": {"n": 2}}
        ], "usage": usage},
        {"text": "all open, both gates answered", "usage": usage}
    ]})))
}

async fn gate_agent(release: &Arc<Semaphore>, subscriber_buffer: usize) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register(gate(release)).unwrap();
    let builder = Agent::builder(gate_script()).tools(tools);
    let config = RuntimeConfig {
        subscriber_buffer,
        ..builder.runtime_config(memory_store())
    };
    let runtime = foya_actors::Runtime::start(config).await.unwrap();
    Agent::from_runtime(runtime, builder.session_config(std::env::temp_dir()))
}

#[tokio::test]
async fn run_returns_the_final_text_status_usage_tool_calls_and_seqs() {
    let release = Arc::new(Semaphore::new(0));
    release.add_permits(2);
    let agent = gate_agent(&release, 1024).await;
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let outcome = within(session.run(Input::text("open the gates")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.text, "all open, both gates answered");
    assert_eq!(
        outcome.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 6,
            ..Usage::default()
        }
    );
    let calls: Vec<(&str, String)> = outcome
        .tool_calls
        .iter()
        .map(|r| (r.call.id.as_str(), r.result.clone().unwrap().content))
        .collect();
    assert_eq!(
        calls,
        [
            ("c1", r#"opened {"n":1}"#.into()),
            ("c2", r#"opened {"n":2}"#.into())
        ]
    );
    // Seq 1 is session_created; the turn is user_message (2) .. turn_complete.
    let mut sub = common::subscribe(&session).await;
    let log = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(outcome.seqs, Seq(2)..=log.last().unwrap().seq);
    assert_eq!(types(&log)[..2], ["session_created", "user_message"]);
    agent.shutdown().await;
}

#[tokio::test]
async fn run_streamed_yields_the_turn_s_typed_events_in_order() {
    let release = Arc::new(Semaphore::new(0));
    let agent = gate_agent(&release, 1024).await;
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let mut turn = session.run_streamed(Input::text("open")).await.unwrap();
    let mut seen = Vec::new();
    let outcome = within(async {
        while let Some(event) = turn.next().await {
            match event.unwrap() {
                TurnEvent::Text(t) => seen.push(format!("text:{t}")),
                TurnEvent::ToolCall(c) => {
                    seen.push(format!("call:{}", c.id.as_str()));
                    release.add_permits(1);
                }
                TurnEvent::ToolResult(r) => {
                    seen.push(format!("result:{}", r.tool_call_id.as_str()))
                }
                TurnEvent::Done(outcome) => return outcome,
                other => seen.push(format!("{other:?}")),
            }
        }
        panic!("the stream ended without Done: {seen:?}")
    })
    .await
    .unwrap();
    let text: String = seen
        .iter()
        .filter_map(|s| s.strip_prefix("text:"))
        .collect();
    assert_eq!(text, outcome.text);
    let structure: Vec<&String> = seen.iter().filter(|s| !s.starts_with("text:")).collect();
    assert_eq!(structure, ["call:c1", "call:c2", "result:c1", "result:c2"]);
    assert!(turn.next().await.is_none());
    assert_eq!(turn.outcome().await, Err(RuntimeError::TurnStreamEnded));
    agent.shutdown().await;
}

#[tokio::test]
async fn a_dropped_run_loses_nothing_and_run_with_id_follows_the_same_turn() {
    let release = Arc::new(Semaphore::new(0));
    let agent = gate_agent(&release, 1024).await;
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let input_id = InputId::new();
    let mut watch = common::subscribe(&session).await;
    {
        let run = session.run_with_id(input_id, Input::text("open"));
        tokio::pin!(run);
        // Drop the run once the turn's first tool call started.
        tokio::select! {
            _ = &mut run => panic!("the turn cannot end while the gate is shut"),
            _ = events_until(&mut watch, |e| matches!(e.kind, EventKind::ToolStarted { .. })) => {}
        }
    }
    release.add_permits(2);
    let again = within(session.run_with_id(input_id, Input::text("open")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.status, TurnStatus::Completed);
    assert_eq!(again.text, "all open, both gates answered");
    assert_eq!(again.input_id, input_id);
    let mut sub = common::subscribe(&session).await;
    let log = events_until(&mut sub, is_turn_complete).await;
    let user_messages = log
        .iter()
        .filter(|e| matches!(e.kind, EventKind::UserMessage { .. }))
        .count();
    assert_eq!(user_messages, 1, "the input ran once");
    agent.shutdown().await;
}

#[tokio::test]
async fn run_survives_being_cut_off_as_a_slow_subscriber() {
    // A one-slot subscriber channel: every burst of deltas cuts `run`'s subscription off
    // (`Lagged`); it resubscribes from the last seq it saw and still gets the outcome.
    let model = Arc::new(script(json!({"responses": [
        {"text": "a long answer streamed in many small fragments", "chunk_chars": 1}
    ]})));
    let builder = Agent::builder(model);
    let config = RuntimeConfig {
        subscriber_buffer: 1,
        ..builder.runtime_config(memory_store())
    };
    let runtime = foya_actors::Runtime::start(config).await.unwrap();
    let session = runtime
        .create_session(builder.session_config(std::env::temp_dir()))
        .await
        .unwrap();
    let outcome = within(session.run(Input::text("talk")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.text,
        "a long answer streamed in many small fragments"
    );
    assert_eq!(outcome.status, TurnStatus::Completed);
    runtime.shutdown().await;
}

#[tokio::test]
async fn run_of_an_input_dropped_from_the_queue_says_so() {
    let release = Arc::new(Semaphore::new(0));
    let agent = gate_agent(&release, 1024).await;
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let mut watch = common::subscribe(&session).await;
    session.submit(Input::text("first")).await.unwrap();
    events_until(&mut watch, |e| {
        matches!(e.kind, EventKind::ToolStarted { .. })
    })
    .await;
    let mut second = session.run_streamed(Input::text("second")).await.unwrap();
    let queued = second.input_id();
    session.clear_queue().await.unwrap();
    let result = within(second.next()).await.unwrap().unwrap();
    assert_eq!(
        result,
        Err(RuntimeError::InputDropped {
            input_id: queued,
            reason: "queue cleared".into()
        })
    );
    agent.shutdown().await;
}

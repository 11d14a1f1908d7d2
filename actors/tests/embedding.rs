//! The embedding API as an embedder uses it (public items only): an agent's
//! instructions from code, project files opt-in, and `SessionHandle::run` /
//! `run_streamed` / `run_with_id` (outcome, typed events, cancel safety, lag).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{RecordingClient, events_until, is_turn_complete, script, within};
use foya_actors::context::KERNEL_INSTRUCTIONS;
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec, ToolState,
    TypedTool,
};
use foya_actors::{Agent, ContextOptions, RuntimeConfig, RuntimeError, TurnEvent};
use foya_protocol::{
    EventKind, Input, InputId, Instructions, Seq, SessionConfig, TurnStatus, Usage,
};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

fn store() -> Store {
    Store::open_in_memory(StoreOptions::default()).unwrap()
}

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
    let outcome = within(session.run(Input::text("hi"))).await.unwrap();
    assert_eq!(outcome.text, "answer 1");
    model.requests.lock().unwrap()[0].system.clone()
}

#[tokio::test]
async fn instructions_from_code_replace_the_built_in_prompt() {
    let model = recording();
    let agent = Agent::builder(model.clone())
        .instructions("You are Billy, who answers billing questions.")
        .start(store())
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
        .start(store())
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
        ..RuntimeConfig::new(store(), model.clone())
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
    within(session.run(Input::text("hi"))).await.unwrap();
    let system = model.requests.lock().unwrap()[0].system.clone();
    assert!(system.starts_with(&format!("{KERNEL_INSTRUCTIONS}\n\nonly this session")));
    assert!(!system.contains("runtime default"));
    // Recorded in `session_created`: a restarted session keeps them.
    let mut sub = common::subscribe(&session).await;
    let created = events_until(&mut sub, |_| true).await;
    match &created[0].kind {
        EventKind::SessionCreated { config } => assert_eq!(config.instructions, Some(own)),
        other => panic!("first event {other:?}"),
    }
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
    let agent = Agent::builder(model.clone()).start(store()).await.unwrap();
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
        .start(store())
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
        ..builder.runtime_config(store())
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
    assert!(matches!(log[1].kind, EventKind::UserMessage { .. }));
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
    .await;
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
        ..builder.runtime_config(store())
    };
    let runtime = foya_actors::Runtime::start(config).await.unwrap();
    let session = runtime
        .create_session(builder.session_config(std::env::temp_dir()))
        .await
        .unwrap();
    let outcome = within(session.run(Input::text("talk"))).await.unwrap();
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
    let result = within(second.next()).await.unwrap();
    assert_eq!(
        result,
        Err(RuntimeError::InputDropped {
            input_id: queued,
            reason: "queue cleared".into()
        })
    );
    agent.shutdown().await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Charge {
    /// The customer.
    customer: String,
    /// Amount in cents.
    cents: u32,
}

/// The embedder's own state: a ledger its tool writes to.
#[derive(Debug, Default)]
struct Ledger(Mutex<Vec<(String, u32)>>);

fn charge_tool() -> Arc<dyn Tool> {
    Arc::new(TypedTool::new(
        "charge",
        "Charges a customer",
        SideEffect::Write,
        |args: Charge, ctx: ToolContext| async move {
            if args.cents == 0 {
                return Err(format!("nothing to charge {}", args.customer));
            }
            let ledger = ctx.state::<Ledger>().ok_or("no ledger")?;
            ledger
                .0
                .lock()
                .unwrap()
                .push((args.customer.clone(), args.cents));
            Ok(format!("charged {} {} cents", args.customer, args.cents))
        },
    ))
}

#[tokio::test]
async fn a_typed_tool_gets_its_arguments_deserialised_and_the_runtime_s_state() {
    let model = Arc::new(script(json!({"responses": [
        {"tool_calls": [
            {"id": "ok", "name": "charge", "arguments": {"customer": "ada", "cents": 250}},
            {"id": "zero", "name": "charge", "arguments": {"customer": "bob", "cents": 0}},
            {"id": "bad", "name": "charge", "arguments": {"customer": "eve", "cents": -5}}
        ]},
        {"text": "done"}
    ]})));
    let agent = Agent::builder(model)
        .instructions("You charge customers.")
        .approval_mode(foya_protocol::ApprovalMode::Bypass)
        .state(Ledger::default())
        .tool(charge_tool())
        .unwrap()
        .start(store())
        .await
        .unwrap();
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let outcome = within(session.run(Input::text("charge them")))
        .await
        .unwrap();
    let results: Vec<(&str, bool, String)> = outcome
        .tool_calls
        .iter()
        .map(|r| {
            let result = r.result.clone().unwrap();
            (r.call.id.as_str(), result.is_error, result.content)
        })
        .collect();
    assert_eq!(results[0], ("ok", false, "charged ada 250 cents".into()));
    assert_eq!(results[1], ("zero", true, "nothing to charge bob".into()));
    // Refused by the schema generated from `Charge` (`cents` is a u32).
    assert_eq!((results[2].0, results[2].1), ("bad", true));
    assert!(results[2].2.contains("cents"), "{}", results[2].2);
    agent.shutdown().await;
}

#[test]
fn a_typed_tool_s_schema_is_generated_from_its_argument_type() {
    let tool = charge_tool();
    let parameters = &tool.spec().parameters;
    assert_eq!(parameters["type"], "object");
    assert_eq!(parameters["required"], json!(["customer", "cents"]));
    assert_eq!(
        parameters["properties"]["customer"]["description"],
        "The customer."
    );
    assert!(parameters.get("$schema").is_none());
}

#[tokio::test]
async fn arguments_that_do_not_deserialise_become_an_error_result() {
    let tool = charge_tool();
    let ctx = ToolContext {
        shared: ToolState::new().with(Ledger::default()),
        ..tools_ctx()
    };
    let output = tool
        .call(
            &ctx,
            json!({"customer": 7}),
            CancellationToken::new(),
            &NoProgress,
        )
        .await;
    assert!(output.is_error);
    assert!(
        output.content.starts_with("invalid arguments for `charge`"),
        "{}",
        output.content
    );
}

#[test]
fn register_refuses_an_invalid_schema() {
    let mut spec = gate(&Arc::new(Semaphore::new(0))).spec().clone();
    for (parameters, why) in [
        (
            json!({"type": "object", "properties": {"n": {"type": "integr"}}}),
            "integr",
        ),
        (json!({"type": "string"}), "\"type\": \"object\""),
    ] {
        spec.parameters = parameters;
        let tool = Arc::new(Gate {
            spec: spec.clone(),
            release: Arc::new(Semaphore::new(0)),
        });
        let mut registry = ToolRegistry::new();
        let error = registry.register(tool).unwrap_err();
        assert_eq!(error.name, "gate");
        assert!(error.reason.contains(why), "{error}");
        assert!(registry.names().is_empty());
    }
}

#[derive(Debug)]
struct NoProgress;

impl ProgressSink for NoProgress {
    fn update(&self, _message: String) {}
    fn output(&self, _chunk: String) {}
}

fn tools_ctx() -> ToolContext {
    let cwd = std::env::temp_dir();
    ToolContext {
        protected: foya_actors::tools::protected::Protected::new(&cwd, &[]),
        cwd,
        project_id: None,
        approval_mode: foya_protocol::ApprovalMode::Bypass,
        session_id: foya_protocol::SessionId::new(),
        run_id: foya_protocol::RunId::new(),
        step: 1,
        tool_call_id: foya_protocol::ToolCallId::new("c"),
        sandbox: foya_actors::tools::SandboxPolicy::None,
        shared: ToolState::new(),
    }
}

#[test]
fn runtime_config_new_registers_no_side_effecting_built_in() {
    let config = RuntimeConfig::new(store(), recording());
    assert_eq!(
        config.tools.names(),
        ["read_file", "list_dir", "glob", "grep"]
    );
    for name in config.tools.names() {
        let tool = config.tools.get(&name).unwrap();
        assert_eq!(tool.spec().side_effect, SideEffect::None, "{name}");
    }
}

#[tokio::test]
async fn a_sandboxed_command_without_a_helper_says_how_to_set_one() {
    use foya_actors::tools::builtin::Shell;
    use foya_actors::tools::sandbox::{NO_HELPER, SandboxRunner};
    let shell = Shell::new(SandboxRunner::unset());
    let ctx = ToolContext {
        sandbox: foya_actors::tools::SandboxPolicy::WorkspaceWrite { network: false },
        ..tools_ctx()
    };
    let output = shell
        .call(
            &ctx,
            json!({"command": "echo hi"}),
            CancellationToken::new(),
            &NoProgress,
        )
        .await;
    assert!(output.is_error);
    assert!(output.content.contains(NO_HELPER), "{}", output.content);
}

#[tokio::test]
async fn an_approval_nobody_is_attached_for_waits_and_is_listed() {
    let model = Arc::new(script(json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "charge", "arguments": {"customer": "ada", "cents": 9}}]},
        {"text": "charged"}
    ]})));
    let agent = Agent::builder(model)
        .approval_mode(foya_protocol::ApprovalMode::Ask)
        .state(Ledger::default())
        .tool(charge_tool())
        .unwrap()
        .start(store())
        .await
        .unwrap();
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let mut turn = session
        .run_streamed(Input::text("charge ada"))
        .await
        .unwrap();
    let request_id = within(async {
        loop {
            if let TurnEvent::ApprovalRequested { request_id, .. } =
                turn.next().await.unwrap().unwrap()
            {
                return request_id;
            }
        }
    })
    .await;
    let pending = session.pending_approvals().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].request_id, pending[0].tool_name.as_str()),
        (request_id, "charge")
    );
    session
        .decide_approval(request_id, foya_protocol::ApprovalDecision::AllowOnce, None)
        .await
        .unwrap();
    let outcome = within(turn.outcome()).await.unwrap();
    assert_eq!(outcome.text, "charged");
    let result = outcome.tool_calls[0].result.clone().unwrap();
    assert_eq!(
        (result.is_error, result.content.as_str()),
        (false, "charged ada 9 cents")
    );
    assert!(session.pending_approvals().await.unwrap().is_empty());
    agent.shutdown().await;
}

#[tokio::test]
async fn after_shutdown_a_cloned_handle_says_shutting_down_and_holds_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foya.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let runtime = foya_actors::Runtime::start(RuntimeConfig::new(store, recording()))
        .await
        .unwrap();
    let session = runtime
        .create_session(SessionConfig::new(std::env::temp_dir()))
        .await
        .unwrap();
    let kept = session.clone();
    runtime.shutdown().await;
    assert_eq!(
        kept.submit(Input::text("hello?")).await,
        Err(RuntimeError::ShuttingDown)
    );
    assert_eq!(kept.cancel().await, Err(RuntimeError::ShuttingDown));
    // The redb file's lock was released although the handle is alive.
    let reopened = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(reopened.list_sessions().unwrap().len(), 1);
    drop(kept);
}

//! The embedding API as an embedder uses it (public items only): typed tools and their
//! state, safe defaults (read-only built-ins, no implicit sandbox helper, approvals that
//! wait for a decision), and a shutdown that invalidates outstanding handles.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{RecordingClient, script};
use foya_actors::testkit::{call_tool, memory_store, tool_context, within};
use foya_actors::tools::SandboxPolicy;
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec, ToolState,
    TypedTool,
};
use foya_actors::{Agent, RuntimeConfig, RuntimeError, TurnEvent};
use foya_protocol::ApprovalMode;
use foya_protocol::{Input, SessionConfig};
use foya_storage::{Store, StoreOptions};
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

fn recording() -> Arc<RecordingClient> {
    Arc::new(RecordingClient {
        requests: Mutex::new(Vec::new()),
        window: 100_000,
        answer: |n| format!("answer {n}"),
    })
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
        .start(memory_store())
        .await
        .unwrap();
    let session = agent.session(std::env::temp_dir()).await.unwrap();
    let outcome = within(session.run(Input::text("charge them")))
        .await
        .unwrap()
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
    let output = call_tool(tool.as_ref(), &ctx, json!({"customer": 7})).await;
    assert!(output.is_error);
    assert!(
        output.content.starts_with("invalid arguments for `charge`"),
        "{}",
        output.content
    );
}

/// A tool whose spec is given (its call is never made).
#[derive(Debug)]
struct Fixed(ToolSpec);

#[async_trait::async_trait]
impl Tool for Fixed {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn call(
        &self,
        _ctx: &ToolContext,
        _args: serde_json::Value,
        _cancel: CancellationToken,
        _progress: &dyn ProgressSink,
    ) -> ToolOutput {
        ToolOutput::error("not called")
    }
}

#[test]
fn register_refuses_an_invalid_schema() {
    let mut spec = charge_tool().spec().clone();
    for (parameters, why) in [
        (
            json!({"type": "object", "properties": {"n": {"type": "integr"}}}),
            "integr",
        ),
        (json!({"type": "string"}), "\"type\": \"object\""),
    ] {
        spec.parameters = parameters;
        let mut registry = ToolRegistry::new();
        let error = registry
            .register(Arc::new(Fixed(spec.clone())))
            .unwrap_err();
        assert_eq!(error.name, "charge");
        assert!(error.reason.contains(why), "{error}");
        assert!(registry.names().is_empty());
    }
}

/// A direct call's context in the temp dir, mode `bypass`, no sandbox.
fn tools_ctx() -> ToolContext {
    tool_context(
        &std::env::temp_dir(),
        ApprovalMode::Bypass,
        SandboxPolicy::None,
    )
}

#[test]
fn runtime_config_new_registers_no_side_effecting_built_in() {
    let config = RuntimeConfig::new(memory_store(), recording());
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
    let output = call_tool(&shell, &ctx, json!({"command": "echo hi"})).await;
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
        .start(memory_store())
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
    .await
    .unwrap();
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
    let outcome = within(turn.outcome()).await.unwrap().unwrap();
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

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Export {
    /// Where to write.
    path: String,
}

/// A typed tool whose handler hands its write to a blocking thread (which outlives the
/// handler's dropped future), and the thread checks `ctx.cancel` before it writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_typed_tool_that_checks_its_token_never_writes() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("landed.txt");
    // The thread says it started, waits for the test to open `gate` (after the cancel
    // was reported) and then says whether it wrote.
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (gate, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate_rx = Arc::new(Mutex::new(gate_rx));
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let export = TypedTool::new(
        "export",
        "Writes a file from a blocking thread",
        SideEffect::Write,
        move |args: Export, ctx: ToolContext| {
            let (started_tx, gate_rx, done_tx) =
                (started_tx.clone(), Arc::clone(&gate_rx), done_tx.clone());
            async move {
                let work = tokio::task::spawn_blocking(move || {
                    let _ = started_tx.send(());
                    let _ = gate_rx.lock().unwrap().recv();
                    let wrote =
                        !ctx.cancel.is_cancelled() && std::fs::write(&args.path, "x").is_ok();
                    let _ = done_tx.send(wrote);
                    wrote
                });
                match work.await {
                    Ok(true) => Ok("written"),
                    Ok(false) => Err("not written".to_owned()),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    );
    let model = Arc::new(script(json!({"responses": [
        {"tool_calls": [{"id": "c1", "name": "export", "arguments": {"path": target}}]},
        {"text": "exported"}
    ]})));
    let agent = Agent::builder(model)
        .approval_mode(ApprovalMode::Bypass)
        .tool(Arc::new(export))
        .unwrap()
        .start(memory_store())
        .await
        .unwrap();
    let session = agent.session(dir.path()).await.unwrap();
    let mut turn = session.run_streamed(Input::text("export")).await.unwrap();
    within(started.recv()).await.unwrap().unwrap();
    session.cancel().await.unwrap();
    let outcome = within(turn.outcome()).await.unwrap().unwrap();
    assert_eq!(outcome.status, foya_protocol::TurnStatus::Cancelled);
    // The call was reported cancelled; now the thread goes on, sees the token fired and
    // does not write.
    gate.send(()).unwrap();
    assert_eq!(within(done.recv()).await.unwrap(), Some(false));
    assert!(!target.exists(), "the cancelled call's write landed");
    agent.shutdown().await;
}

//! Pins what the model is told about each built-in tool (name, description, the JSON
//! Schema of its arguments), so a change to an argument struct that changes the schema
//! shows up as a snapshot change.

use super::all;
use crate::protected::Protected;
use crate::sandbox::SandboxRunner;
use crate::{ProgressSink, ToolContext, ToolState};
use foya_protocol::{RunId, SessionId, ToolCallId};

/// Drops what a tool reports while it runs.
struct Quiet;

impl ProgressSink for Quiet {
    fn update(&self, _message: String) {}
    fn output(&self, _chunk: String) {}
}

#[test]
fn the_model_sees_the_same_built_in_tool_schemas() {
    let specs: Vec<serde_json::Value> = all(SandboxRunner::unset())
        .iter()
        .map(|tool| {
            let spec = tool.spec();
            serde_json::json!({
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            })
        })
        .collect();
    insta::assert_json_snapshot!(specs);
}

#[tokio::test]
async fn arguments_that_do_not_fit_a_built_in_tool_are_an_error_result_naming_it() {
    let cwd = std::env::temp_dir();
    let ctx = ToolContext {
        cwd: cwd.clone(),
        project_id: None,
        approval_mode: foya_protocol::ApprovalMode::Bypass,
        session_id: SessionId::new(),
        run_id: RunId::new(),
        step: 1,
        tool_call_id: ToolCallId::new("call_1"),
        sandbox: crate::SandboxPolicy::None,
        protected: Protected::new(&cwd, &[]),
        shared: ToolState::new(),
        cancel: tokio_util::sync::CancellationToken::new(),
    };
    for tool in all(SandboxRunner::unset()) {
        let name = tool.spec().name.clone();
        let output = tool
            .call(
                &ctx,
                serde_json::json!({"path": 7, "pattern": 7, "command": 7, "unknown": true}),
                tokio_util::sync::CancellationToken::new(),
                &Quiet,
            )
            .await;
        assert!(output.is_error, "{name}: {output:?}");
        let expected = format!("invalid arguments for `{name}`: ");
        assert!(
            output.content.starts_with(&expected),
            "{name}: {}",
            output.content
        );
        assert!(
            output.content.contains("expected parameters: {"),
            "{}",
            output.content
        );
    }
}

mod agent {
    use crate::builtin::agent::{AgentTool, NoRuntime, SubAgentLimits};

    #[test]
    fn the_per_turn_limit_is_named_in_singular_and_plural() {
        for (max, expected) in [
            (
                1,
                "not run: this turn already started its maximum of 1 sub-agent",
            ),
            (
                2,
                "not run: this turn already started its maximum of 2 sub-agents",
            ),
        ] {
            let limits = SubAgentLimits {
                max_per_turn: max,
                ..SubAgentLimits::default()
            };
            let agent = AgentTool::new(limits, std::sync::Arc::new(NoRuntime));
            let run_id = foya_protocol::RunId::new();
            for _ in 0..max {
                assert!(agent.slot(run_id).is_ok());
            }
            assert_eq!(agent.slot(run_id).err().as_deref(), Some(expected));
        }
    }
}

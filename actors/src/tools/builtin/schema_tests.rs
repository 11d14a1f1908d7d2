//! Pins what the model is told about each built-in tool (name, description, the JSON
//! Schema of its arguments), so a change to an argument struct that changes the schema
//! shows up as a snapshot change.

use super::all;
use crate::tools::sandbox::SandboxRunner;

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
    let ctx = crate::testkit::tool_context(
        &cwd,
        foya_protocol::ApprovalMode::Bypass,
        crate::tools::SandboxPolicy::None,
    );
    for tool in all(SandboxRunner::unset()) {
        let name = tool.spec().name.clone();
        let output = crate::testkit::call_tool(
            tool.as_ref(),
            &ctx,
            serde_json::json!({"path": 7, "pattern": 7, "command": 7, "unknown": true}),
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

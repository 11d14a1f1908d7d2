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

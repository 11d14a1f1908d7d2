//! The tool registry: exposed schemas per approval mode, and `prepare`'s messages for
//! calls the model cannot make.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::testkit::sandbox_runner as runner;
use foya_actors::tools::ToolRegistry;
use foya_protocol::ApprovalMode;
use serde_json::json;

fn registry() -> ToolRegistry {
    ToolRegistry::builtin_with_sandbox(runner())
}

fn names(mode: ApprovalMode) -> Vec<String> {
    registry()
        .schemas(mode)
        .into_iter()
        .map(|s| s.name)
        .collect()
}

#[test]
fn schemas_are_in_registration_order_and_read_only_hides_side_effects() {
    let all = [
        "read_file",
        "list_dir",
        "glob",
        "grep",
        "write_file",
        "edit_file",
        "shell",
    ];
    for mode in [
        ApprovalMode::Ask,
        ApprovalMode::AutoEdit,
        ApprovalMode::Auto,
        ApprovalMode::Bypass,
    ] {
        assert_eq!(names(mode), all);
    }
    assert_eq!(
        names(ApprovalMode::ReadOnly),
        ["read_file", "list_dir", "glob", "grep"]
    );
    let registry = registry();
    let shell = registry.get("shell").unwrap();
    assert_eq!(
        (shell.spec().parallel_safe, shell.spec().cancellable),
        (false, true)
    );
    let parallel: Vec<bool> = all
        .iter()
        .map(|n| registry.get(n).unwrap().spec().parallel_safe)
        .collect();
    assert_eq!(parallel, [true, true, true, true, false, false, false]);
    assert!(registry.get("nope").is_none());
}

#[test]
fn prepare_accepts_valid_arguments() {
    let prepared = registry()
        .prepare("read_file", &json!({"path": "a.txt", "limit": 3}))
        .unwrap();
    assert_eq!(prepared.tool.spec().name, "read_file");
    assert_eq!(prepared.args, json!({"path": "a.txt", "limit": 3}));
}

#[test]
fn prepare_names_the_available_tools_for_an_unknown_one() {
    let error = registry().prepare("read", &json!({})).unwrap_err();
    assert!(error.is_error);
    assert_eq!(
        error.content,
        "unknown tool \"read\"; available tools: read_file, list_dir, glob, grep, write_file, edit_file, shell"
    );
}

#[test]
fn prepare_reports_invalid_json_arguments() {
    // `StreamAggregate` keeps argument text that is not JSON as a JSON string.
    let error = registry()
        .prepare("read_file", &json!("{\"path\": \"a.txt\""))
        .unwrap_err();
    assert!(error.is_error);
    assert_eq!(
        error.content,
        "arguments are not valid JSON: EOF while parsing an object at line 1 column 16; call \
         `read_file` again with a JSON object as arguments. Received: {\"path\": \"a.txt\""
    );
    let error = registry().prepare("shell", &json!([1, 2])).unwrap_err();
    assert_eq!(
        error.content,
        "arguments for `shell` must be a JSON object, got an array: [1,2]"
    );
}

#[test]
fn prepare_reports_each_schema_violation_with_its_field() {
    let error = registry()
        .prepare(
            "read_file",
            &json!({"offset": "ten", "limit": 0, "extra": true}),
        )
        .unwrap_err();
    assert!(error.is_error);
    let spec = registry()
        .get("read_file")
        .unwrap()
        .spec()
        .parameters
        .clone();
    assert_eq!(
        error.content,
        format!(
            "invalid arguments for `read_file`:\n\
             - at /limit: 0 is less than the minimum of 1\n\
             - at /offset: \"ten\" is not of type \"integer\"\n\
             - at (root): Additional properties are not allowed ('extra' was unexpected)\n\
             - at (root): \"path\" is a required property\n\
             expected parameters: {spec}"
        )
    );
}

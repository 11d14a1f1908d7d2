//! Pins what the model is told about each built-in tool (name, description, the JSON
//! Schema of its arguments), so a change to an argument struct that changes the schema
//! shows up as a snapshot change.

use super::{all, edit_file, list_dir, read_file, search, write_file};
use crate::protected::Protected;
use crate::sandbox::SandboxRunner;
use crate::typed::builtin_parameters_of;
use crate::{ProgressSink, SideEffect, Tool, ToolContext, ToolSpec, ToolState, TypedTool};
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

/// The spec `tool` advertises, after checking that its parameters are the schema of the
/// argument type `A` it reads each call into (`A` is the tool's own type parameter, not
/// named here): the same properties, descriptions and required set as
/// `schemars::schema_for!(A)`, in the built-ins' form (`builtin_parameters_of`).
fn typed_spec<A: schemars::JsonSchema, F>(tool: &TypedTool<A, F>) -> ToolSpec
where
    TypedTool<A, F>: Tool,
{
    let spec = tool.spec().clone();
    assert_eq!(
        spec.parameters,
        builtin_parameters_of::<A>(),
        "{}",
        spec.name
    );
    let derived = schemars::schema_for!(A).to_value();
    assert_eq!(
        spec.parameters["required"], derived["required"],
        "{}",
        spec.name
    );
    let (Some(advertised), Some(derived)) = (
        spec.parameters["properties"].as_object(),
        derived["properties"].as_object(),
    ) else {
        panic!("{}: no properties in {}", spec.name, spec.parameters);
    };
    assert_eq!(
        advertised.keys().collect::<Vec<_>>(),
        derived.keys().collect::<Vec<_>>(),
        "{}",
        spec.name
    );
    for (name, property) in advertised {
        assert_eq!(
            property["description"], derived[name]["description"],
            "{}.{name}",
            spec.name
        );
    }
    spec
}

#[test]
fn every_built_in_file_tool_is_a_typed_tool_advertising_its_argument_type() {
    let typed = [
        typed_spec(&read_file::typed()),
        typed_spec(&list_dir::typed()),
        typed_spec(&search::typed_glob()),
        typed_spec(&search::typed_grep()),
        typed_spec(&write_file::typed()),
        typed_spec(&edit_file::typed()),
    ];
    // What the registry exposes is exactly these tools' specs (`shell` and `agent` are
    // not file tools).
    let registered: Vec<ToolSpec> = all(SandboxRunner::unset())
        .iter()
        .map(|tool| tool.spec().clone())
        .filter(|spec| spec.name != "shell")
        .collect();
    assert_eq!(registered, typed);
    for spec in &typed {
        assert_eq!(
            (
                spec.parallel_safe,
                spec.cancellable,
                spec.default_timeout_ms
            ),
            (spec.side_effect == SideEffect::None, true, 30_000),
            "{}",
            spec.name
        );
    }
}

/// Calls the built-in `name` of `tools` with `args`, its progress dropped.
async fn call(
    tools: &[std::sync::Arc<dyn Tool>],
    name: &str,
    ctx: &ToolContext,
    args: serde_json::Value,
) -> crate::ToolOutput {
    let Some(tool) = tools.iter().find(|tool| tool.spec().name == name) else {
        panic!("{name} is not a built-in");
    };
    tool.call(
        ctx,
        args,
        tokio_util::sync::CancellationToken::new(),
        &Quiet,
    )
    .await
}

fn context(cwd: &std::path::Path) -> ToolContext {
    ToolContext {
        cwd: cwd.to_path_buf(),
        project_id: None,
        approval_mode: foya_protocol::ApprovalMode::Bypass,
        session_id: SessionId::new(),
        run_id: RunId::new(),
        step: 1,
        tool_call_id: ToolCallId::new("call_1"),
        sandbox: crate::SandboxPolicy::None,
        protected: Protected::new(cwd, &[]),
        shared: ToolState::new(),
        cancel: tokio_util::sync::CancellationToken::new(),
    }
}

#[tokio::test]
async fn a_wrong_typed_argument_to_a_built_in_file_tool_gets_the_typed_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));
    let ctx = context(dir.path());
    let cases = [
        (
            read_file::typed().spec().clone(),
            serde_json::json!({"path": "a.txt", "offset": "3"}),
            "invalid type: string \"3\", expected u64",
        ),
        (
            edit_file::typed().spec().clone(),
            serde_json::json!({"path": "a.txt", "old_string": "one", "new_string": "two", "replace_all": "yes"}),
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            search::typed_grep().spec().clone(),
            serde_json::json!({"pattern": ["one"]}),
            "invalid type: sequence, expected a string",
        ),
    ];
    let registered = all(SandboxRunner::unset());
    for (spec, args, error) in cases {
        let output = call(&registered, &spec.name, &ctx, args).await;
        assert!(output.is_error, "{}: {output:?}", spec.name);
        assert_eq!(
            output.content,
            format!(
                "invalid arguments for `{}`: {error}; expected parameters: {}",
                spec.name, spec.parameters
            )
        );
    }
    // Nothing was changed by the refused `edit_file`.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt"))
            .ok()
            .as_deref(),
        Some("one\n")
    );
}

#[tokio::test]
async fn arguments_that_do_not_fit_a_built_in_tool_are_an_error_result_naming_it() {
    let ctx = context(&std::env::temp_dir());
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

/// A set-ID program in the workspace keeps its bits when root writes it (`CAP_FSETID`):
/// `write_file` and `edit_file`, run by the runtime, clear them first, as the kernel does
/// for any other writer, and keep the rest of the mode.
#[tokio::test]
async fn writing_a_set_id_file_clears_its_set_id_bits() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let ctx = context(dir.path());
    let registered = all(SandboxRunner::unset());
    for (name, args) in [
        (
            "write_file",
            serde_json::json!({"path": "prog", "content": "#!/bin/sh\necho two\n"}),
        ),
        (
            "edit_file",
            serde_json::json!({"path": "prog", "old_string": "one", "new_string": "two"}),
        ),
    ] {
        let path = dir.path().join("prog");
        std::fs::write(&path, "#!/bin/sh\necho one\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6755))
            .unwrap_or_else(|e| panic!("{e}"));
        let output = call(&registered, name, &ctx, args).await;
        assert!(!output.is_error, "{name}: {output:?}");
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755, "{name} left mode {mode:o}");
        assert_eq!(
            std::fs::read_to_string(&path).ok().as_deref(),
            Some("#!/bin/sh\necho two\n"),
            "{name}"
        );
    }
}

/// Opening a FIFO waits for its other end: a `write_file` or `edit_file` on one a
/// sandboxed `mkfifo` made hung the runtime. Anything but a regular file is refused at
/// once, and nothing is written through it.
#[tokio::test]
async fn writing_over_a_fifo_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
        .unwrap_or_else(|e| panic!("{e}"));
    let ctx = context(dir.path());
    let registered = all(SandboxRunner::unset());
    for name in ["write_file", "edit_file"] {
        let args = if name == "write_file" {
            serde_json::json!({"path": "fifo", "content": "x"})
        } else {
            serde_json::json!({"path": "fifo", "old_string": "a", "new_string": "b"})
        };
        let output = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            call(&registered, name, &ctx, args),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} waited on the FIFO"));
        assert!(output.is_error, "{name}: {output:?}");
        assert!(output.content.contains("cannot "), "{name}: {output:?}");
    }
}

/// The file tools that write list the working directory for nested protected paths
/// before their first write there (`sandbox::remembered`): what they write (a
/// `CACHEDIR.TAG`, folders) then cannot hide those paths from the commands' shield.
/// Those that only read do not list it.
#[tokio::test]
async fn the_writing_file_tools_remember_the_protected_paths_before_they_write() {
    use crate::sandbox::protected_paths_remembered as remembered;
    let registered = all(SandboxRunner::unset());
    for (tool, args) in [
        ("read_file", serde_json::json!({"path": "a.txt"})),
        (
            "write_file",
            serde_json::json!({"path": "b.txt", "content": "x"}),
        ),
        (
            "edit_file",
            serde_json::json!({"path": "a.txt", "old_string": "one", "new_string": "two"}),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(!remembered(dir.path()));
        let output = call(&registered, tool, &context(dir.path()), args).await;
        assert!(!output.is_error, "{tool}: {output:?}");
        assert_eq!(remembered(dir.path()), tool != "read_file", "{tool}");
    }
}

//! Table-driven tests of the Approval Gateway policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Verdict, evaluate};
use crate::protected::Protected;
use crate::{SandboxPolicy, SideEffect, ToolSpec};
use foya_protocol::ApprovalMode::{self, Ask, Auto, AutoEdit, Bypass, ReadOnly};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;

const WW: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

fn spec(name: &str, side_effect: SideEffect) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: String::new(),
        parameters: json!({"type": "object"}),
        parallel_safe: side_effect == SideEffect::None,
        side_effect,
        cancellable: true,
        default_timeout_ms: 1_000,
    }
}

/// [`evaluate`] with the protected paths of `cwd` (no hook scripts).
fn eval(
    mode: ApprovalMode,
    spec: &ToolSpec,
    args: &serde_json::Value,
    cwd: &Path,
    grants: &BTreeSet<String>,
) -> Verdict {
    evaluate(
        mode,
        spec,
        args,
        cwd,
        &Protected::new(cwd, &[]),
        grants,
        true,
    )
}

fn allow(sandbox: SandboxPolicy) -> Verdict {
    Verdict::Allow { sandbox }
}

fn ask(action: &str, reason: &str, grant_key: &str, sandbox: SandboxPolicy) -> Verdict {
    Verdict::Ask {
        action: action.to_owned(),
        reason: reason.to_owned(),
        grant_key: grant_key.to_owned(),
        sandbox_if_allowed: sandbox,
        if_no_approver: None,
    }
}

fn deny(name: &str, effect: &str) -> Verdict {
    Verdict::Deny {
        reason: format!(
            "`{name}` has side effects ({effect}) and the session's approval mode is read-only; \
             only side-effect-free tools run"
        ),
    }
}

const EXEC_REASON: &str = "`shell` wants to run a command (sandboxed: writes only in the working directory, no network); \
     \"allow for this session\" allows `git status` with any further arguments";
const INSIDE_REASON: &str = "`write_file` wants to write a file in the working directory";
const OUTSIDE_REASON: &str = "`write_file` wants to write outside the working directory /work/p";
const NET_REASON: &str = "`fetch` wants to access the network";

#[test]
fn decision_table() {
    let read = spec("read_file", SideEffect::None);
    let write = spec("write_file", SideEffect::Write);
    let shell = spec("shell", SideEffect::Exec);
    let fetch = spec("fetch", SideEffect::Network);
    let inside = json!({"path": "src/a.rs", "content": ""});
    let outside = json!({"path": "../other/b.rs", "content": ""});
    let git = json!({"command": "git status"});
    let url = json!({"url": "https://example.com:443/x"});

    let ask_inside = ask("/work/p/src/a.rs", INSIDE_REASON, "write_file:*", WW);
    let ask_outside = ask(
        "/work/other/b.rs",
        OUTSIDE_REASON,
        "write_file:/work/other",
        SandboxPolicy::None,
    );
    let ask_exec = ask("git status", EXEC_REASON, "shell:git status", WW);
    let ask_net = ask(
        "https://example.com:443/x",
        NET_REASON,
        "fetch:example.com",
        SandboxPolicy::None,
    );

    let cases: Vec<(ApprovalMode, &ToolSpec, &serde_json::Value, Verdict)> = vec![
        (ReadOnly, &read, &inside, allow(SandboxPolicy::ReadOnly)),
        (ReadOnly, &write, &inside, deny("write_file", "write")),
        (ReadOnly, &shell, &git, deny("shell", "exec")),
        (ReadOnly, &fetch, &url, deny("fetch", "network")),
        (Ask, &read, &inside, allow(SandboxPolicy::ReadOnly)),
        (Ask, &write, &inside, ask_inside.clone()),
        (Ask, &write, &outside, ask_outside.clone()),
        (Ask, &shell, &git, ask_exec.clone()),
        (Ask, &fetch, &url, ask_net.clone()),
        (AutoEdit, &read, &inside, allow(SandboxPolicy::ReadOnly)),
        (AutoEdit, &write, &inside, allow(WW)),
        (AutoEdit, &write, &outside, ask_outside.clone()),
        (AutoEdit, &shell, &git, ask_exec.clone()),
        (AutoEdit, &fetch, &url, ask_net.clone()),
        (Auto, &read, &inside, allow(SandboxPolicy::ReadOnly)),
        (Auto, &write, &inside, allow(WW)),
        (Auto, &write, &outside, ask_outside),
        (Auto, &shell, &git, allow(WW)),
        (Auto, &fetch, &url, ask_net),
        (Bypass, &read, &inside, allow(SandboxPolicy::None)),
        (Bypass, &write, &outside, allow(SandboxPolicy::None)),
        (Bypass, &shell, &git, allow(SandboxPolicy::None)),
        (Bypass, &fetch, &url, allow(SandboxPolicy::None)),
    ];
    let no_grants = BTreeSet::new();
    for (mode, spec, args, expected) in cases {
        let verdict = eval(mode, spec, args, Path::new("/work/p"), &no_grants);
        assert_eq!(verdict, expected, "{mode:?} {} {args}", spec.name);
    }
}

#[test]
fn grants_allow_with_the_sandbox_they_would_have_had() {
    let write = spec("write_file", SideEffect::Write);
    let shell = spec("shell", SideEffect::Exec);
    let grants: BTreeSet<String> = [
        "shell:git log",
        "shell:git diff",
        "write_file:*",
        "write_file:/work/other",
    ]
    .map(String::from)
    .into();
    let cwd = Path::new("/work/p");
    let cases: Vec<(&ToolSpec, serde_json::Value, Verdict)> = vec![
        (&shell, json!({"command": "git log -1"}), allow(WW)),
        (&shell, json!({"command": "  git   diff"}), allow(WW)),
        (
            &shell,
            json!({"command": "rm -rf x"}),
            ask(
                "rm -rf x",
                &exec_reason("allows exactly `rm -rf x` again"),
                "shell:=rm -rf x",
                WW,
            ),
        ),
        // A grant of `git log` is not one of `git -c …` (runs other code: no grant).
        (
            &shell,
            json!({"command": "git -c core.pager=evil -p log"}),
            ask(
                "git -c core.pager=evil -p log",
                &exec_reason_none("`git -c` runs other code or programs"),
                "",
                WW,
            ),
        ),
        // A compound command gets no grant, so `shell:git log` does not cover it.
        (
            &shell,
            json!({"command": "git log && curl x"}),
            ask(
                "git log && curl x",
                &exec_reason_none(
                    "the command uses shell operators, substitutions or globs, so its words \
                     do not say what runs",
                ),
                "",
                WW,
            ),
        ),
        (&write, json!({"path": "a.txt"}), allow(WW)),
        (
            &write,
            json!({"path": "/work/other/c.txt"}),
            allow(SandboxPolicy::None),
        ),
        (
            &write,
            json!({"path": "/etc/passwd"}),
            Verdict::Ask {
                action: "/etc/passwd".to_owned(),
                reason: OUTSIDE_REASON.to_owned(),
                grant_key: "write_file:/etc".to_owned(),
                sandbox_if_allowed: SandboxPolicy::None,
                if_no_approver: None,
            },
        ),
    ];
    for (spec, args, expected) in cases {
        assert_eq!(eval(Ask, spec, &args, cwd, &grants), expected, "{args}");
    }
}

fn exec_reason(covers: &str) -> String {
    format!(
        "`shell` wants to run a command (sandboxed: writes only in the working directory, no \
         network); \"allow for this session\" {covers}"
    )
}

fn exec_reason_none(why: &str) -> String {
    exec_reason(&format!("is not offered ({why}); it is asked every time"))
}

#[test]
fn exec_that_needs_the_network_asks_even_in_auto() {
    let shell = spec("shell", SideEffect::Exec);
    let args = json!({"command": "cargo fetch", "network": true});
    let net = SandboxPolicy::WorkspaceWrite { network: true };
    let expected = ask(
        "cargo fetch",
        "`shell` wants to run a command with network access (sandboxed: writes only in the \
         working directory); \"allow for this session\" allows `cargo fetch` with any further \
         arguments",
        "shell:network:cargo fetch",
        net,
    );
    for mode in [Ask, AutoEdit, Auto] {
        assert_eq!(
            eval(mode, &shell, &args, Path::new("/w"), &BTreeSet::new()),
            expected
        );
    }
    let grants: BTreeSet<String> = ["shell:network:cargo fetch".to_owned()].into();
    assert_eq!(
        eval(Auto, &shell, &args, Path::new("/w"), &grants),
        allow(net)
    );
    assert_eq!(
        eval(Bypass, &shell, &args, Path::new("/w"), &grants),
        allow(SandboxPolicy::None)
    );
    assert_eq!(
        eval(ReadOnly, &shell, &args, Path::new("/w"), &grants),
        deny("shell", "exec")
    );
}

#[test]
fn dot_dot_inside_the_working_directory_stays_inside() {
    let write = spec("edit_file", SideEffect::Write);
    let verdict = eval(
        AutoEdit,
        &write,
        &json!({"path": "a/../b/./c.txt"}),
        Path::new("/w"),
        &BTreeSet::new(),
    );
    assert_eq!(verdict, allow(WW));
    let verdict = eval(
        AutoEdit,
        &write,
        &json!({"path": "a/../../w2/c.txt"}),
        Path::new("/w"),
        &BTreeSet::new(),
    );
    assert_eq!(
        verdict,
        ask(
            "/w2/c.txt",
            "`edit_file` wants to write outside the working directory /w",
            "edit_file:/w2",
            SandboxPolicy::None
        )
    );
}

#[test]
fn protected_paths_are_asked_in_every_mode_but_bypass_whichever_tool_writes_them() {
    let write = spec("write_file", SideEffect::Write);
    let edit = spec("edit_file", SideEffect::Write);
    let shell = spec("shell", SideEffect::Exec);
    let cwd = Path::new("/w");
    let protected = Protected::new(cwd, &["./hooks/stop.sh".to_owned()]);
    let all: BTreeSet<String> = [
        "write_file:*",
        "edit_file:*",
        "shell:=echo",
        "shell:git commit",
    ]
    .map(String::from)
    .into();
    let attempts: Vec<(&ToolSpec, serde_json::Value)> = vec![
        (&write, json!({"path": ".foya/config.toml", "content": "x"})),
        (
            &edit,
            json!({"path": "AGENTS.md", "old_string": "a", "new_string": "b"}),
        ),
        (&write, json!({"path": "sub/FOYA.md", "content": "x"})),
        (
            &write,
            json!({"path": ".git/hooks/pre-commit", "content": "x"}),
        ),
        (&write, json!({"path": "hooks/stop.sh", "content": "x"})),
        (&shell, json!({"command": "echo x > .foya/config.toml"})),
        (&shell, json!({"command": "sh -c 'echo x >> AGENTS.md'"})),
        (
            &shell,
            json!({"command": "bash -c 'echo x | tee .git/config'"}),
        ),
        (&shell, json!({"command": "env sh -c 'printf x > FOYA.md'"})),
        (
            &shell,
            json!({"command": "python3 -c \"open('.foya/config.toml','w')\""}),
        ),
        (&shell, json!({"command": "cp /tmp/x hooks/stop.sh"})),
        (&shell, json!({"command": "git commit -m x"})),
    ];
    for (spec, args) in &attempts {
        for mode in [Ask, AutoEdit, Auto] {
            let verdict = evaluate(mode, spec, args, cwd, &protected, &all, true);
            let Verdict::Ask {
                grant_key,
                sandbox_if_allowed,
                reason,
                ..
            } = verdict
            else {
                panic!("{mode:?} {args}: {verdict:?}");
            };
            assert_eq!(grant_key, "", "{args}");
            assert!(reason.contains("protected path"), "{reason}");
            assert!(
                matches!(
                    sandbox_if_allowed,
                    SandboxPolicy::WorkspaceAndProtected { .. }
                ),
                "{args}"
            );
        }
        assert_eq!(
            evaluate(ReadOnly, spec, args, cwd, &protected, &all, true),
            deny(
                &spec.name,
                if spec.name == "shell" {
                    "exec"
                } else {
                    "write"
                }
            )
        );
        assert_eq!(
            evaluate(Bypass, spec, args, cwd, &protected, &all, true),
            allow(SandboxPolicy::None)
        );
    }
}

#[test]
fn mcp_tools_ask_in_every_mode_but_bypass_and_grant_per_server_and_tool() {
    let tool = spec("mcp__fs__write", SideEffect::External);
    let args = json!({"path": "a.txt"});
    let cwd = Path::new("/w");
    let none = BTreeSet::new();
    let asked = ask(
        "mcp__fs__write {\"path\":\"a.txt\"}",
        "`mcp__fs__write` is a tool of an MCP server: its effects are not known to Foya",
        "mcp__fs__write",
        SandboxPolicy::None,
    );
    for mode in [Ask, AutoEdit, Auto] {
        assert_eq!(eval(mode, &tool, &args, cwd, &none), asked, "{mode:?}");
    }
    assert_eq!(
        eval(ReadOnly, &tool, &args, cwd, &none),
        deny("mcp__fs__write", "external")
    );
    assert_eq!(
        eval(Bypass, &tool, &args, cwd, &none),
        allow(SandboxPolicy::None)
    );
    let granted: BTreeSet<String> = ["mcp__fs__write".to_owned()].into();
    assert_eq!(
        eval(Auto, &tool, &args, cwd, &granted),
        allow(SandboxPolicy::None)
    );
    let other = spec("mcp__fs__delete", SideEffect::External);
    assert_eq!(
        eval(Auto, &other, &args, cwd, &granted),
        ask(
            "mcp__fs__delete {\"path\":\"a.txt\"}",
            "`mcp__fs__delete` is a tool of an MCP server: its effects are not known to Foya",
            "mcp__fs__delete",
            SandboxPolicy::None,
        ),
        "a grant covers one server's one tool"
    );
}

#[test]
fn an_mcp_tool_naming_a_protected_path_is_asked_every_time_and_shows_every_key() {
    let tool = spec("mcp__fs__write_file", SideEffect::External);
    let cwd = Path::new("/w");
    let granted: BTreeSet<String> = ["mcp__fs__write_file".to_owned()].into();
    // A grant of the tool does not cover a call naming a protected path.
    for path in [
        ".foya/config.toml",
        "AGENTS.md",
        "/w/.mcp.json",
        "sub/.git/config",
    ] {
        let args = json!({"path": path, "content": "x"});
        for mode in [Ask, AutoEdit, Auto] {
            let Verdict::Ask {
                grant_key, reason, ..
            } = eval(mode, &tool, &args, cwd, &granted)
            else {
                panic!("{mode:?} {path}: not asked");
            };
            assert_eq!(grant_key, "", "{path}");
            assert!(reason.contains("protected path"), "{reason}");
        }
    }
    // An ordinary path stays granted.
    let args = json!({"path": "src/a.rs", "content": "x"});
    assert_eq!(
        eval(Auto, &tool, &args, cwd, &granted),
        allow(SandboxPolicy::None)
    );
    // A long value cannot push another key out of the question.
    let args = json!({"content": "y".repeat(5_000), "path": "notes.txt"});
    let Verdict::Ask { action, .. } = eval(Auto, &tool, &args, cwd, &BTreeSet::new()) else {
        panic!("not asked");
    };
    assert!(action.contains("\"path\":\"notes.txt\""), "{action}");
    assert!(action.contains("(4800 more characters)"), "{action}");
    assert!(action.len() < 400, "{}", action.len());
}

#[test]
fn without_the_shield_commands_are_asked_every_time_and_run_with_the_workspace_writable() {
    use super::NO_SHIELD;
    let shell = spec("shell", SideEffect::Exec);
    let write = spec("write_file", SideEffect::Write);
    let read = spec("read_file", SideEffect::None);
    let cwd = Path::new("/w");
    let protected = Protected::new(cwd, &[]);
    // Even a grant the session holds does not skip the question.
    let grants: BTreeSet<String> = ["shell:touch".to_owned()].into();
    let unshielded = |mode, spec, args: &serde_json::Value| {
        evaluate(mode, spec, args, cwd, &protected, &grants, false)
    };
    let touch = json!({"command": "touch top.txt"});
    for mode in [Ask, AutoEdit, Auto] {
        let Verdict::Ask {
            reason,
            grant_key,
            sandbox_if_allowed,
            if_no_approver,
            ..
        } = unshielded(mode, &shell, &touch)
        else {
            panic!("{mode:?}: not asked");
        };
        assert!(reason.ends_with(NO_SHIELD), "{reason}");
        assert_eq!(grant_key, "");
        assert_eq!(
            sandbox_if_allowed,
            SandboxPolicy::WorkspaceAndProtected { network: false }
        );
        // Only what `auto` runs unasked still runs (restricted) when nobody can answer.
        let expected = (mode == Auto).then_some(WW);
        assert_eq!(if_no_approver, expected, "{mode:?}");
    }
    // With network: asked in `auto` already; allowed, network stays on.
    let net = json!({"command": "curl x", "network": true});
    let Verdict::Ask {
        sandbox_if_allowed,
        if_no_approver,
        ..
    } = unshielded(Auto, &shell, &net)
    else {
        panic!("not asked");
    };
    assert_eq!(
        sandbox_if_allowed,
        SandboxPolicy::WorkspaceAndProtected { network: true }
    );
    assert_eq!(if_no_approver, None);
    // File tools and side-effect-free tools are not affected, nor bypass.
    assert_eq!(
        unshielded(Auto, &write, &json!({"path": "a.txt"})),
        allow(WW)
    );
    assert_eq!(
        unshielded(Auto, &read, &json!({"path": "a.txt"})),
        allow(SandboxPolicy::ReadOnly)
    );
    assert_eq!(
        unshielded(Bypass, &shell, &touch),
        allow(SandboxPolicy::None)
    );
    // With the shield, `auto` runs it unasked as before.
    assert_eq!(
        evaluate(Auto, &shell, &touch, cwd, &protected, &grants, true),
        allow(WW)
    );
}

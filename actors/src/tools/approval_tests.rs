//! Table-driven tests of the Approval Gateway policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{Verdict, evaluate};
use crate::tools::{SandboxPolicy, SideEffect, ToolSpec};
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

fn allow(sandbox: SandboxPolicy) -> Verdict {
    Verdict::Allow { sandbox }
}

fn ask(action: &str, reason: &str, grant_key: &str, sandbox: SandboxPolicy) -> Verdict {
    Verdict::Ask {
        action: action.to_owned(),
        reason: reason.to_owned(),
        grant_key: grant_key.to_owned(),
        sandbox_if_allowed: sandbox,
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

const EXEC_REASON: &str =
    "`shell` wants to run a command (sandboxed: writes only in the working directory, no network)";
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
    let ask_exec = ask("git status", EXEC_REASON, "shell:git", WW);
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
        let verdict = evaluate(mode, spec, args, Path::new("/work/p"), &no_grants);
        assert_eq!(verdict, expected, "{mode:?} {} {args}", spec.name);
    }
}

#[test]
fn grants_allow_with_the_sandbox_they_would_have_had() {
    let write = spec("write_file", SideEffect::Write);
    let shell = spec("shell", SideEffect::Exec);
    let grants: BTreeSet<String> = ["shell:git", "write_file:*", "write_file:/work/other"]
        .map(String::from)
        .into();
    let cwd = Path::new("/work/p");
    let cases: Vec<(&ToolSpec, serde_json::Value, Verdict)> = vec![
        (&shell, json!({"command": "git log -1"}), allow(WW)),
        (&shell, json!({"command": "  git   diff"}), allow(WW)),
        (
            &shell,
            json!({"command": "rm -rf x"}),
            ask("rm -rf x", EXEC_REASON, "shell:rm", WW),
        ),
        // A compound command is keyed by its whole text, so `shell:git` does not cover it.
        (
            &shell,
            json!({"command": "git status && rm -rf /"}),
            ask(
                "git status && rm -rf /",
                EXEC_REASON,
                "shell:git status && rm -rf /",
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
            },
        ),
    ];
    for (spec, args, expected) in cases {
        assert_eq!(evaluate(Ask, spec, &args, cwd, &grants), expected, "{args}");
    }
}

#[test]
fn exec_that_needs_the_network_asks_even_in_auto() {
    let shell = spec("shell", SideEffect::Exec);
    let args = json!({"command": "cargo fetch", "network": true});
    let net = SandboxPolicy::WorkspaceWrite { network: true };
    let expected = ask(
        "cargo fetch",
        "`shell` wants to run a command with network access (sandboxed: writes only in the working directory)",
        "shell:network:cargo",
        net,
    );
    for mode in [Ask, AutoEdit, Auto] {
        assert_eq!(
            evaluate(mode, &shell, &args, Path::new("/w"), &BTreeSet::new()),
            expected
        );
    }
    let grants: BTreeSet<String> = ["shell:network:cargo".to_owned()].into();
    assert_eq!(
        evaluate(Auto, &shell, &args, Path::new("/w"), &grants),
        allow(net)
    );
    assert_eq!(
        evaluate(Bypass, &shell, &args, Path::new("/w"), &grants),
        allow(SandboxPolicy::None)
    );
    assert_eq!(
        evaluate(ReadOnly, &shell, &args, Path::new("/w"), &grants),
        deny("shell", "exec")
    );
}

#[test]
fn dot_dot_inside_the_working_directory_stays_inside() {
    let write = spec("edit_file", SideEffect::Write);
    let verdict = evaluate(
        AutoEdit,
        &write,
        &json!({"path": "a/../b/./c.txt"}),
        Path::new("/w"),
        &BTreeSet::new(),
    );
    assert_eq!(verdict, allow(WW));
    let verdict = evaluate(
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
        assert_eq!(evaluate(mode, &tool, &args, cwd, &none), asked, "{mode:?}");
    }
    assert_eq!(
        evaluate(ReadOnly, &tool, &args, cwd, &none),
        deny("mcp__fs__write", "external")
    );
    assert_eq!(
        evaluate(Bypass, &tool, &args, cwd, &none),
        allow(SandboxPolicy::None)
    );
    let granted: BTreeSet<String> = ["mcp__fs__write".to_owned()].into();
    assert_eq!(
        evaluate(Auto, &tool, &args, cwd, &granted),
        allow(SandboxPolicy::None)
    );
    let other = spec("mcp__fs__delete", SideEffect::External);
    assert_eq!(
        evaluate(Auto, &other, &args, cwd, &granted),
        ask(
            "mcp__fs__delete {\"path\":\"a.txt\"}",
            "`mcp__fs__delete` is a tool of an MCP server: its effects are not known to Foya",
            "mcp__fs__delete",
            SandboxPolicy::None,
        ),
        "a grant covers one server's one tool"
    );
}

//! Lifecycle hooks: code that runs at eight points of a session and may only tighten
//! what happens — Claude Code's hook contract, so existing hook scripts work.
//!
//! Points ([`HookEvent`]): `SessionStart` (first turn of a session in this runtime),
//! `UserPromptSubmit`, `PreToolUse`, `PostToolUse`, `PreCompact`, `Stop`, `SubagentStop`,
//! `SessionEnd`. Two kinds, run in this order: in-process hooks of an embedder (the
//! [`Hook`] trait, and the older [`StopHook`]) and command hooks (`config.rs`, run by
//! `command.rs`: `bash -c` in the session's cwd, JSON on stdin, a timeout each).
//!
//! Hooks only tighten (`decision.rs`): a `PreToolUse` hook may deny a call or demand a
//! person's approval; its `allow` never skips a question the policy asks nor a refusal
//! it makes (protected paths included); no hook output changes the approval mode, the
//! sandbox or the grants. Every run is a `hook_ran` event (`runner.rs`). A hook that
//! fails (timeout, crash, invalid JSON, output flood) is logged as `failed` and counts
//! as no decision. Details and the differences from Claude Code: `docs/hooks.md`.

mod command;
/// Command hooks as configured (in `foya-config`).
pub use foya_config::hooks as config;
/// The decision rules (pure; in `foya-core`).
pub(crate) use foya_core::hooks::decision;
mod runner;
pub(crate) mod stop;

pub use config::{CommandHook, HookCommands, HookEvent, MatcherGroup, hook_tool_input};
pub(crate) use runner::Hooks;
pub use stop::{StopDecision, StopHook, StopHookInput};

use async_trait::async_trait;
use foya_protocol::{ApprovalMode, RunId, SessionId, ToolCallId};
use serde::Serialize;
use std::path::PathBuf;

/// What a hook receives: the JSON written to a command hook's stdin. Field names are
/// Claude Code's; a field that does not apply to the point is absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookInput {
    /// The session.
    pub session_id: SessionId,
    /// A JSONL export of the session's log (one persisted event per line), written
    /// before the hook runs; empty when the runtime has no transcript directory.
    pub transcript_path: PathBuf,
    /// The session's working directory (where command hooks run).
    pub cwd: PathBuf,
    /// The hook point (`PreToolUse`).
    pub hook_event_name: &'static str,
    /// The session's approval mode in Claude Code's words ([`permission_mode`]).
    pub permission_mode: &'static str,
    /// The run id of the turn, when the point is inside one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<RunId>,
    /// Tool events: Foya's tool name (`shell`; see `docs/hooks.md` for Claude's names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool events: the call's validated arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_input: Option<serde_json::Value>,
    /// `PostToolUse`: `{"content": …, "is_error": …}` of the result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_response: Option<serde_json::Value>,
    /// Tool events: the call's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<ToolCallId>,
    /// `UserPromptSubmit`: the input's text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// `Stop`, `SubagentStop`: whether the turn already continues because of a hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_hook_active: Option<bool>,
    /// `Stop`, `SubagentStop`: the text of the model's last answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<String>,
    /// `SessionStart`: `startup` or `resume`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// `PreCompact`: `manual` (`/compact`) or `auto`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<&'static str>,
    /// `PreCompact`: the instructions of a manual compaction (always empty in Foya).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// `SessionEnd`: why (`other`: the runtime shuts down).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

impl HookInput {
    /// The input of `event` with the common fields; the caller fills the point's own.
    #[must_use]
    pub fn new(event: HookEvent, session_id: SessionId, cwd: PathBuf, mode: ApprovalMode) -> Self {
        Self {
            session_id,
            transcript_path: PathBuf::new(),
            cwd,
            hook_event_name: event.name(),
            permission_mode: permission_mode(mode),
            turn_id: None,
            tool_name: None,
            tool_input: None,
            tool_response: None,
            tool_use_id: None,
            prompt: None,
            stop_hook_active: None,
            last_assistant_message: None,
            source: None,
            trigger: None,
            custom_instructions: None,
            reason: None,
        }
    }

    /// The point of this input.
    #[must_use]
    pub fn event(&self) -> Option<HookEvent> {
        HookEvent::from_name(self.hook_event_name)
    }

    /// What a matcher is tested against: the tool name for tool events, `source` for
    /// `SessionStart`, `trigger` for `PreCompact`; `None` (every group runs) otherwise.
    #[must_use]
    pub fn subject(&self) -> Option<&str> {
        match self.event()? {
            HookEvent::PreToolUse | HookEvent::PostToolUse => self.tool_name.as_deref(),
            HookEvent::SessionStart => self.source,
            HookEvent::PreCompact => self.trigger,
            _ => None,
        }
    }
}

/// Claude Code's name of an approval mode.
#[must_use]
pub fn permission_mode(mode: ApprovalMode) -> &'static str {
    match mode {
        ApprovalMode::ReadOnly => "plan",
        ApprovalMode::Ask => "default",
        ApprovalMode::AutoEdit => "acceptEdits",
        ApprovalMode::Auto => "auto",
        ApprovalMode::Bypass => "bypassPermissions",
    }
}

pub use foya_core::hooks::{HookResponse, HookRun};

/// An in-process hook of an embedder (`RuntimeConfig::hooks`): runs before the command
/// hooks of the same point, with the same input and the same rules.
#[async_trait]
pub trait Hook: Send + Sync + std::fmt::Debug {
    /// Its name in `hook_ran` events (logged as `in-process:NAME`).
    fn name(&self) -> &str;

    /// Whether it runs at `event`; `subject` is what a matcher would see
    /// ([`HookInput::subject`]: the tool name for tool events).
    fn applies(&self, event: HookEvent, subject: Option<&str>) -> bool;

    /// Its answer.
    ///
    /// # Cancel safety
    /// The future is dropped when the turn is cancelled; it must not leave work behind.
    async fn run(&self, input: &HookInput) -> HookResponse;
}

//! Session configuration, the approval vocabulary and session summaries. (The commands
//! clients send are the HTTP service's routes and the cluster's `GatewayRequest`.)

use crate::UnixMs;
use crate::ids::{RunId, Seq, SessionId, ToolCallId};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How much a session may do without asking a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    /// Only side-effect-free tools run.
    ReadOnly,
    /// Every write, exec or network call needs a decision.
    #[default]
    Ask,
    /// Writes inside the working directory are allowed; exec asks.
    AutoEdit,
    /// Side effects are allowed inside the sandbox; anything leaving it asks.
    Auto,
    /// No approvals and no sandbox. Must be chosen explicitly.
    Bypass,
}

impl ApprovalMode {
    /// The kebab-case name (`read-only`, `ask`, `auto-edit`, `auto`, `bypass`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Ask => "ask",
            Self::AutoEdit => "auto-edit",
            Self::Auto => "auto",
            Self::Bypass => "bypass",
        }
    }
}

impl std::str::FromStr for ApprovalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(Self::ReadOnly),
            "ask" => Ok(Self::Ask),
            "auto-edit" => Ok(Self::AutoEdit),
            "auto" => Ok(Self::Auto),
            "bypass" => Ok(Self::Bypass),
            other => Err(format!(
                "unknown approval mode {other:?}; expected read-only, ask, auto-edit, auto or bypass"
            )),
        }
    }
}

/// A person's (or an approver's) answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this one call.
    AllowOnce,
    /// Run it, and grant the same kind of call for the rest of the session (persisted).
    AllowForSession,
    /// Do not run it; the model gets an `is_error` result.
    Deny,
}

/// Who started a sub-agent session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRef {
    /// The parent session.
    pub session_id: SessionId,
    /// The parent turn.
    pub run_id: RunId,
    /// The `agent` tool call that started this session.
    pub tool_call_id: ToolCallId,
}

/// Configuration of a session, fixed at creation (recorded in `session_created`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// Working directory: tool paths are relative to it.
    pub cwd: PathBuf,
    /// Project identifier handed to tools (defaults to the working directory's name).
    #[serde(default)]
    pub project_id: Option<String>,
    /// Approval mode.
    #[serde(default)]
    pub approval_mode: ApprovalMode,
    /// Provider profile or protocol name (`openai-chat`, `anthropic`, `scripted`, …).
    #[serde(default)]
    pub provider: String,
    /// Model name sent to the provider.
    #[serde(default)]
    pub model: String,
    /// Title set by the user at creation.
    #[serde(default)]
    pub title: Option<String>,
    /// Maximum number of tool steps per turn; `None` means no fixed limit.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Set for sub-agent sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// Whether the runtime may compact this session on its own (before a step over the
    /// threshold, once per turn on a provider overflow). `false`: never; an overflow
    /// fails the turn. `/compact` works either way. Default `true` (absent when true).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub auto_compact: bool,
    /// The MCP servers (configured names) whose tools this session sees; `None`: every
    /// server the runtime's configuration does not set `enabled = false`; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<String>>,
    /// The agent's instructions for this session: they replace Foya's built-in coding-agent
    /// prompt or follow it ([`Instructions`]). `None`: the runtime's default (itself
    /// `None` unless the embedder set one), i.e. the built-in prompt alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Instructions>,
}

/// An agent's own instructions, set from code (not read from a file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instructions {
    /// The text, sent as the system prompt's first section (or second, after the
    /// built-in prompt, with [`InstructionsMode::Append`]; or the whole prompt, with
    /// [`InstructionsMode::Only`]).
    pub text: String,
    /// Whether the text replaces the built-in prompt, follows it, or stands alone.
    #[serde(default)]
    pub mode: InstructionsMode,
}

/// How [`Instructions`] combine with Foya's built-in coding-agent prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstructionsMode {
    /// The text replaces the built-in prompt (the environment and approval-mode
    /// sections still follow it).
    #[default]
    Replace,
    /// The text follows the built-in prompt.
    Append,
    /// The text alone: neither the built-in prompt nor the environment and
    /// approval-mode sections (a coding agent's) are sent. Sections taken from the
    /// project's and the user's files still follow it, but only when the runtime reads
    /// those files (foya-actors' `ContextOptions::with_files`; an embedder's default
    /// reads none), so by default the system prompt is exactly the text.
    Only,
}

impl Instructions {
    /// Instructions that replace the built-in prompt.
    pub fn replace(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            mode: InstructionsMode::Replace,
        }
    }

    /// Instructions that follow the built-in prompt.
    pub fn append(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            mode: InstructionsMode::Append,
        }
    }

    /// Instructions that are the whole system prompt ([`InstructionsMode::Only`]).
    pub fn only(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            mode: InstructionsMode::Only,
        }
    }
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if signature
fn is_true(value: &bool) -> bool {
    *value
}

impl SessionConfig {
    /// A configuration with the given working directory and defaults elsewhere.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            project_id: None,
            approval_mode: ApprovalMode::default(),
            provider: String::new(),
            model: String::new(),
            title: None,
            max_steps: None,
            parent: None,
            auto_compact: true,
            mcp_servers: None,
            instructions: None,
        }
    }
}

/// One row of a session listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session.
    pub id: SessionId,
    /// Current title, if any.
    #[serde(default)]
    pub title: Option<String>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Model name.
    #[serde(default)]
    pub model: String,
    /// When `session_created` was written.
    pub created_at_ms: UnixMs,
    /// When its latest event was written.
    pub updated_at_ms: UnixMs,
    /// Seq of its latest event.
    pub last_seq: Seq,
    /// Whether the session was deleted (tombstoned).
    #[serde(default)]
    pub deleted: bool,
    /// Where the session lives, for cluster listings (`None` = this node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

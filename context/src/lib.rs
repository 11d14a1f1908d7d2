//! The context compiler: before every step the turn rebuilds the system prompt, the
//! message history, the tool list and a token budget from the project's files, the
//! session's events and the model's limits (specification step 3).
//!
//! Owns: [`compile`] (pure), the history fold [`history`], the token estimate
//! [`estimate_tokens`], command expansion [`expand_command`] and the pure halves of
//! compaction ([`compaction_request`], [`checkpoint_kept`]). Only [`ProjectContext::load`]
//! touches the file system. Must not: read the clock, the environment or the network;
//! decide *when* to compact (the turn does, from [`Budget`]).

mod commands;
mod compaction;
mod compile;
mod estimate;
mod fold;
mod frontmatter;
mod history;
mod kernel;
mod project;
mod title;

pub use commands::expand_command;
pub use compaction::{
    COMPACTION_INSTRUCTION, COMPACTION_SYSTEM_PROMPT, CUT_NOTE, IMAGE_LEFT_OUT, KEPT_CUT_NOTE,
    MIN_TRUNCATED_TOKENS, OMITTED_NOTE, TRUNCATED_NOTE, can_shrink, checkpoint_kept,
    checkpoint_kept_without_images, compaction_request, without_images,
};
pub use compile::{compile, compile_folded};
pub use estimate::{Calibration, estimate_tokens};
pub use fold::HistoryFold;
pub use history::{
    CHECKPOINT_PREFIX, HOOK_CONTEXT_PREFIX, MISSING_RESULT, history, interrupted_context_text,
    touched_paths,
};
pub use kernel::{KERNEL_INSTRUCTIONS, KERNEL_INSTRUCTIONS_VERSION};
pub use project::{CommandTemplate, ProjectContext, Rule, SkillMeta, project_root};
pub use title::{
    MAX_TITLE_CHARS, TITLE_SYSTEM_PROMPT, clean_title, normalize_title, title_request,
};

pub use foya_core::request::ImageBudget;
use foya_core::request::ToolSchema;
use foya_protocol::{Event, SessionConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Names of the built-in commands (`/compact`, `/title`); project files cannot shadow them.
pub const BUILTIN_COMMANDS: [&str; 2] = ["compact", "title"];

/// The file tools whose `path` argument counts as a touched path.
pub const FILE_TOOLS: [&str; 3] = ["read_file", "write_file", "edit_file"];

/// The session's environment, passed in by the caller (never read inside [`compile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// Working directory (absolute).
    pub cwd: PathBuf,
    /// Operating system (`linux`, `macos`, …).
    pub os: String,
    /// Shell used by the shell tool (`bash`, …).
    pub shell: String,
    /// Today's date as the caller wants the model to see it (e.g. `2026-11-29`).
    pub date: String,
}

/// What the model can take. Token counts are in provider tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// The model's context window (input + output), in tokens.
    pub context_window: u64,
    /// Tokens kept free for the model's output.
    pub reserved_output: u64,
    /// Percentage of the window (1..=100) above which compaction is due; default 85.
    pub compact_threshold_pct: u8,
    /// Whether the model accepts image inputs.
    pub supports_images: bool,
    /// How many images, and how many bytes of them, one request may carry.
    pub images: ImageBudget,
}

impl ModelLimits {
    /// Default compaction threshold, in percent of the window.
    pub const DEFAULT_COMPACT_THRESHOLD_PCT: u8 = 85;

    /// Limits for a window, with the default threshold, no images, and an output
    /// reserve of `min(window / 8, 32_000)` tokens.
    #[must_use]
    pub fn new(context_window: u64) -> Self {
        Self {
            context_window,
            reserved_output: (context_window / 8).min(32_000),
            compact_threshold_pct: Self::DEFAULT_COMPACT_THRESHOLD_PCT,
            supports_images: false,
            images: ImageBudget::default(),
        }
    }
}

/// Everything [`compile`] needs for one step.
#[derive(Debug, Clone, Copy)]
pub struct CompileInput<'a> {
    /// The session's configuration (approval mode, …).
    pub config: &'a SessionConfig,
    /// Files loaded by [`ProjectContext::load`].
    pub project: &'a ProjectContext,
    /// Working directory, OS, shell, date.
    pub env: &'a Environment,
    /// The session's events, in seq order (the whole log is fine: the fold starts at the
    /// latest compaction checkpoint).
    pub history: &'a [Event],
    /// Paths read or written in this session (see [`touched_paths`]); relative paths are
    /// relative to `env.cwd`.
    pub touched_paths: &'a BTreeSet<PathBuf>,
    /// Tool schemas exposed in this step (already filtered by the approval mode), with
    /// their token estimate.
    pub tools: &'a ToolSet,
    /// The model's limits.
    pub limits: ModelLimits,
    /// Calibration from the previous step's reported usage.
    pub calibration: Calibration,
    /// Where the images' sizes are read (for [`ModelLimits::images`]); `None`: every
    /// image counts as 0 bytes (only the count limit applies).
    pub attachments: Option<&'a dyn AttachmentSizes>,
}

/// What the compiler asks of an attachment store: the size of a stored image, for the
/// image budget (the runtime's `AttachmentStore` answers it from its folder).
pub trait AttachmentSizes: Sync + std::fmt::Debug {
    /// Size in bytes of attachment `id`, when it is stored (`None`: unknown).
    fn size(&self, id: &str) -> Option<u64>;
}

/// The tool schemas of a turn and their token estimate, computed once: every step's
/// request shares the schemas instead of copying them, and the estimate (which
/// serialises each JSON Schema) is not redone per step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSet {
    schemas: std::sync::Arc<[ToolSchema]>,
    tokens: u64,
}

impl ToolSet {
    /// The set of `schemas`; estimates their tokens (see [`ToolSet::tokens`]).
    #[must_use]
    pub fn new(schemas: Vec<ToolSchema>) -> Self {
        let tokens = schemas.iter().map(compile::tool_tokens).sum();
        Self {
            schemas: schemas.into(),
            tokens,
        }
    }

    /// The schemas, shared.
    #[must_use]
    pub fn schemas(&self) -> &std::sync::Arc<[ToolSchema]> {
        &self.schemas
    }

    /// Estimated tokens of the schemas as the function-calling formats send them: per
    /// tool a fixed overhead plus name, description and the JSON Schema text.
    #[must_use]
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
}

/// The budget of one compiled request. All values are tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Sum of the section estimates × the calibration ratio (rounded up).
    pub estimated_input_tokens: u64,
    /// The model's context window.
    pub window: u64,
    /// Tokens reserved for output.
    pub reserve: u64,
    /// `window × compact_threshold_pct / 100`.
    pub threshold_tokens: u64,
    /// `estimated_input_tokens > threshold_tokens`: compaction is due before this step.
    pub over_threshold: bool,
    /// `estimated_input_tokens + reserve <= window`.
    pub fits: bool,
}

/// The result of [`compile`]: what the provider request is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledContext {
    /// The system prompt (layout in [`compile`]).
    pub system: String,
    /// The effective history, well-formed (see [`history`]).
    pub messages: foya_core::request::Messages,
    /// The tools exposed now (shared with the [`ToolSet`] they come from).
    pub tools: std::sync::Arc<[ToolSchema]>,
    /// The budget.
    pub budget: Budget,
    /// Uncalibrated estimated tokens per section, keyed `kernel`, `project_instructions`,
    /// `rules`, `memory`, `skills`, `environment` (includes the approval mode),
    /// `history`, `tools` — ready for a `context_diagnostics` event.
    pub sections: BTreeMap<String, u64>,
}

/// What a command invocation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandAction {
    /// `/compact`: compact the context now (manual trigger).
    Compact,
    /// `/title <text>`: set the title by hand; an empty text asks for a generated title.
    Title(String),
    /// A project command: run a turn with this prompt as the user text.
    Prompt(String),
}

/// Context compilation failures the caller reports to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The history references images but the model cannot read them.
    #[error(
        "the model does not accept images, but the conversation references image attachments {}; use a model with vision or start a session without the images",
        attachment_ids.join(", ")
    )]
    ImagesNotSupported {
        /// The attachment ids, in history order, without duplicates.
        attachment_ids: Vec<String>,
    },
    /// `/name` is neither built in nor a project command.
    #[error(
        "unknown command /{name}; available commands: {}",
        list_commands(available)
    )]
    UnknownCommand {
        /// The name asked for.
        name: String,
        /// Built-in and project command names, sorted.
        available: Vec<String>,
    },
}

fn list_commands(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("/{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;

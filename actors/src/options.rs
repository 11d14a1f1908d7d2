//! Owns [`ContextOptions`]: the runtime-wide settings of context compilation, compaction
//! and title generation (one field of `RuntimeConfig`, so embedders can take the
//! defaults with `ContextOptions::default()`).

use crate::provider::ModelClient;
use std::path::PathBuf;
use std::sync::Arc;

/// Context, compaction and title settings shared by every session of a runtime.
#[derive(Debug, Clone)]
pub struct ContextOptions {
    /// User-level context directory (memory, skills, commands). `None` (the default): no
    /// user-level files; [`Self::with_files`] sets the platform config directory + `foya`
    /// (`~/.config/foya` on Linux), as the CLI does.
    pub user_dir: Option<PathBuf>,
    /// Whether sessions read their project's files: instruction files (`AGENTS.md`,
    /// `FOYA.md` from the project root down to the working directory), `.foya/rules`,
    /// `.foya/memory.md`, skills and commands. Default `false`, so an embedder's agent
    /// says only what its code says; the CLI turns it on ([`Self::with_files`]).
    pub project_files: bool,
    /// Whether the runtime compacts on its own: early when the estimate crosses the
    /// threshold, and once per turn when the provider reports `context_overflow`.
    /// `/compact` works either way. Default `true`.
    pub auto_compact: bool,
    /// Percentage of the context window (1..=100) above which compaction is due before a
    /// step. Default 85.
    pub compact_threshold_pct: u8,
    /// Whether a session's first input asks the model for a title. Default `false`
    /// (an extra model request); `foya chat` and `foya serve --generate-titles` turn it on.
    pub generate_titles: bool,
    /// Model name for title requests; `None`: the session's model.
    pub title_model: Option<String>,
    /// Client for the auxiliary requests (title, compaction summary); `None`: the
    /// session's own client. Both kinds are sent without tools, with
    /// [`crate::context::TITLE_SYSTEM_PROMPT`] or
    /// [`crate::context::COMPACTION_SYSTEM_PROMPT`] as system prompt (the scripted client
    /// recognises them and answers without consuming its script).
    pub aux_model: Option<Arc<dyn ModelClient>>,
}

impl Default for ContextOptions {
    fn default() -> Self {
        Self {
            user_dir: None,
            project_files: false,
            auto_compact: true,
            compact_threshold_pct: crate::context::ModelLimits::DEFAULT_COMPACT_THRESHOLD_PCT,
            generate_titles: false,
            title_model: None,
            aux_model: None,
        }
    }
}

impl ContextOptions {
    /// The defaults plus the files a coding agent reads (what the CLI uses): the
    /// project's files ([`Self::project_files`]) and the user's config directory
    /// (`~/.config/foya` on Linux) as [`Self::user_dir`].
    #[must_use]
    pub fn with_files() -> Self {
        Self {
            user_dir: foya_config::files::user_config_dir(),
            project_files: true,
            ..Self::default()
        }
    }

    /// The user-level directory to load, if any ([`Self::user_dir`]).
    #[must_use]
    pub fn resolved_user_dir(&self) -> Option<PathBuf> {
        self.user_dir.clone()
    }
}

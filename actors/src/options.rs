//! Owns [`ContextOptions`]: the runtime-wide settings of context compilation, compaction
//! and title generation (one field of `RuntimeConfig`, so embedders can take the
//! defaults with `ContextOptions::default()`).

use crate::provider::ModelClient;
use std::path::PathBuf;
use std::sync::Arc;

/// Context, compaction and title settings shared by every session of a runtime.
#[derive(Debug, Clone)]
pub struct ContextOptions {
    /// User-level context directory (memory, skills, commands). `None`: the platform
    /// config directory + `foya` (`~/.config/foya` on Linux), when it exists.
    pub user_dir: Option<PathBuf>,
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
            auto_compact: true,
            compact_threshold_pct: crate::context::ModelLimits::DEFAULT_COMPACT_THRESHOLD_PCT,
            generate_titles: false,
            title_model: None,
            aux_model: None,
        }
    }
}

impl ContextOptions {
    /// The user-level directory to load: `user_dir`, else `<config dir>/foya`.
    #[must_use]
    pub fn resolved_user_dir(&self) -> Option<PathBuf> {
        self.user_dir
            .clone()
            .or_else(|| dirs::config_dir().map(|d| d.join("foya")))
    }
}

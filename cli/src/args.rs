//! The arguments the commands share (clap): where sessions are stored, which provider,
//! `--max-steps`, which MCP servers, `--cluster`, and the arguments of `run`, `chat` and
//! `sessions`; the exit statuses; how an error is reported.

use clap::{Args, Subcommand};
use foya_protocol::ApprovalMode;
use std::path::PathBuf;

/// Exit status of a turn that completed.
pub const EXIT_OK: u8 = 0;
/// Exit status of a turn that failed, or of a runtime error.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of a usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// Exit status of `foya sessions list --cluster` when some nodes did not answer: the
/// sessions of the others were printed, the missing nodes named (stderr, and an
/// `{"unreachable": [...]}` line with `--json`).
pub const EXIT_PARTIAL: u8 = 3;
/// Exit status when the event store is damaged (or of a newer format): the command
/// printed one line saying so and what to do next (`foya store check`, `foya store
/// salvage`); `foya store check` exits with it when it finds a problem, `foya sessions
/// list` after listing what was readable, `foya store salvage` when some session could
/// not be copied whole.
pub const EXIT_DAMAGED: u8 = 4;
/// Exit status of a cancelled turn (128 + SIGINT).
pub const EXIT_CANCELLED: u8 = 130;
/// Exit status of `foya run` after SIGTERM cancelled its turn cleanly (128 + SIGTERM, as
/// shells report a process ended by SIGTERM).
pub const EXIT_TERMINATED: u8 = 143;
/// Exit status of `foya run` after SIGHUP (its terminal went away) cancelled its turn
/// cleanly (128 + SIGHUP).
pub const EXIT_HANGUP: u8 = 129;

/// Where sessions are stored.
#[derive(Debug, Clone, Args)]
pub struct DataDirArg {
    /// Data directory (default: $FOYA_DATA_DIR when set and not empty, else the platform
    /// data dir, e.g. ~/.local/share/foya).
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
}

/// `--store URL`: a shared event store instead of the data directory's redb file.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArg {
    /// A shared event store instead of the data directory's redb file:
    /// `postgresql://user@host:port/db` (default: $FOYA_STORE_URL when set; without
    /// either, the data directory's store). Several processes may share one.
    #[arg(
        long = "store",
        env = "FOYA_STORE_URL",
        value_name = "URL",
        global = true
    )]
    pub store: Option<String>,
}

/// Which model provider to use.
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// A profile name from config.toml (`openai`, `anthropic`, …), a protocol
    /// (`openai-chat`, `anthropic`, `openai-responses`), `scripted` (responses from
    /// `--script`) or `sim` (the simulated model, in process: no key, no server; its
    /// turns read README.md twice, then answer).
    #[arg(long, default_value = "openai")]
    pub provider: String,
    /// Base URL of the provider API: up to `/v1` for the OpenAI kinds (e.g.
    /// `http://127.0.0.1:8000/v1`), without `/v1` for anthropic (e.g.
    /// `https://api.anthropic.com`). Also $OPENAI_BASE_URL for openai-chat.
    #[arg(long, value_parser = crate::values::http_url)]
    pub base_url: Option<String>,
    /// Model name.
    #[arg(long)]
    pub model: Option<String>,
    /// Script of model responses for `--provider scripted` (JSON).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// Seed of the simulated model's random choices, for `--provider sim` (default 0).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// `--max-steps N` (at least 1; default 50). A command with another default sets it
/// with `#[command(mut_arg("max_steps", |a| a.default_value("N")))]` (a const generic
/// default would not work: clap caches `default_value_t` in a static shared by every
/// instantiation).
#[derive(Debug, Clone, Copy, Args)]
pub struct MaxStepsArg {
    /// Maximum number of tool steps per turn (at least 1).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: u32,
}

/// Which MCP servers a session uses.
#[derive(Debug, Clone, Default, Args)]
pub struct McpArgs {
    /// Use this MCP server (a configured name; repeat for several). Without it every
    /// configured server not set `enabled = false` is used.
    #[arg(long = "mcp", value_name = "NAME")]
    pub(crate) mcp: Vec<String>,
    /// Use no MCP server.
    #[arg(long, conflicts_with = "mcp")]
    pub(crate) no_mcp: bool,
    /// Also read the project's MCP servers (`.mcp.json` and `[mcp_servers]` of
    /// `.foya/config.toml`): they run programs the project chose.
    #[arg(long)]
    pub(crate) trust_project_mcp: bool,
}

impl McpArgs {
    /// The session's `mcp_servers`: `None` (the default set), the named ones, or none.
    pub fn selection(&self) -> Option<Vec<String>> {
        if self.no_mcp {
            Some(Vec::new())
        } else if self.mcp.is_empty() {
            None
        } else {
            Some(self.mcp.clone())
        }
    }
}

/// Reaching a running cluster from a command (`foya sessions list --cluster`).
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// A `foya node` to ask (HOST:PORT, its --listen address) instead of the local data
    /// dir; it answers for every node it is connected to.
    #[arg(long, value_name = "HOST:PORT", requires = "cookie_file")]
    pub(crate) cluster: Option<String>,
    /// File holding the cluster's shared secret (with --cluster).
    #[arg(long, requires = "cluster")]
    pub(crate) cookie_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub data: DataDirArg,
    #[command(flatten)]
    pub store: StoreArg,
    /// Working directory of the session (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Approval mode of a new session: read-only, ask (the default), auto-edit, auto or
    /// bypass. `ask` prompts on a terminal and denies when nobody can answer. A session
    /// continued with `--session` keeps its own mode (a different one is refused with a
    /// warning).
    #[arg(long, value_parser = parse_approval)]
    pub approval: Option<ApprovalMode>,
    #[command(flatten)]
    pub steps: MaxStepsArg,
    #[command(flatten)]
    pub compaction: crate::context_config::CompactionArg,
    /// Continue an existing session instead of creating one.
    #[arg(long)]
    pub session: Option<String>,
    /// Print one JSON object per line (live deltas and persisted events).
    #[arg(long)]
    pub json: bool,
    /// Commit durability of the event store: `immediate` (fsync every commit, the
    /// default) or `none` (no fsync: faster, a machine crash may lose recent events).
    #[arg(long, default_value = "immediate", value_parser = parse_durability)]
    pub durability: foya_storage::Durability,
    #[command(flatten)]
    pub mcp: McpArgs,
    /// The prompt.
    #[arg(required = true, num_args = 1..)]
    pub prompt: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List the most recently updated sessions, newest first (--all: every one; with
    /// --cluster: every node's, with the node each lives on).
    List {
        #[command(flatten)]
        data: DataDirArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// How many sessions to list (the most recently updated).
        #[arg(long, default_value_t = 50, value_parser = crate::values::positive_count, conflicts_with = "all")]
        limit: usize,
        /// List every session, a page at a time (nothing held beyond a page).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        cluster: ClusterArgs,
        #[command(flatten)]
        store: StoreArg,
    },
    /// Delete a session in a data dir no process is using: its active turn (if any) is
    /// cancelled, queued inputs are dropped, then `session_deleted` is written.
    Delete {
        /// Session id.
        id: String,
        #[command(flatten)]
        data: DataDirArg,
    },
    /// Set a session's title by hand (a data dir no process is using). A title set by
    /// hand is never overwritten by a generated one.
    Title {
        /// Session id.
        id: String,
        /// The new title.
        title: String,
        #[command(flatten)]
        data: DataDirArg,
    },
    /// Print the persisted events of a session in seq order.
    Show {
        /// Session id.
        id: String,
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        store: StoreArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[command(mut_arg("max_steps", |a| a.default_value("100")))]
pub struct ChatArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub data: DataDirArg,
    #[command(flatten)]
    pub store: StoreArg,
    /// Working directory of a new session (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Approval mode of a new session: read-only, ask, auto-edit, auto or bypass.
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub approval: ApprovalMode,
    // `--max-steps`: of a new session.
    #[command(flatten)]
    pub steps: MaxStepsArg,
    #[command(flatten)]
    pub compaction: crate::context_config::CompactionArg,
    /// Resume this session instead of creating one.
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// `--approval`: one of the approval modes.
///
/// # Errors
/// Not the name of an approval mode.
pub fn parse_approval(s: &str) -> Result<ApprovalMode, crate::values::ValueError> {
    s.parse().map_err(crate::values::ValueError)
}

/// `--durability`: `immediate` or `none`.
///
/// # Errors
/// Another word.
pub fn parse_durability(s: &str) -> Result<foya_storage::Durability, crate::values::ValueError> {
    match s {
        "immediate" => Ok(foya_storage::Durability::Immediate),
        "none" => Ok(foya_storage::Durability::None),
        other => Err(crate::values::ValueError(format!(
            "unknown durability {other:?} (immediate | none)"
        ))),
    }
}

/// `e` and its causes joined by `: `, each cause once: a cause whose text the message
/// before it already ends with (an error that prints its source in its own message)
/// is skipped.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Prints `foya: <error chain>` on stderr.
pub fn report(e: &anyhow::Error) {
    if crate::damage::is_damage(e) {
        crate::damage::report(&error_chain(e));
    } else {
        eprintln!("foya: {}", error_chain(e));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An error that prints its source in its own message, as thiserror's
    /// `#[error("…: {source}")]` does.
    #[derive(Debug)]
    struct Repeats {
        source: std::io::Error,
    }

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading x: {}", self.source)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(Repeats { source: io() }).context("cannot load");
        assert_eq!(error_chain(&e), "cannot load: reading x: gone");
        let e = anyhow::Error::new(io()).context("cannot read script x");
        assert_eq!(error_chain(&e), "cannot read script x: gone");
    }
}

//! Command-line grammar (clap) and dispatch to the subcommands.

use clap::{Args, Parser, Subcommand};
use foya_protocol::ApprovalMode;
use std::path::PathBuf;

/// Exit status of a turn that completed.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status of a turn that failed, or of a runtime error.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit status of a usage or configuration error.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status of a cancelled turn (128 + SIGINT).
pub(crate) const EXIT_CANCELLED: u8 = 130;

#[derive(Debug, Parser)]
#[command(name = "foya", version, about = "Foya agent runtime")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one turn headless: stream the answer to stdout, tool activity to stderr.
    Run(RunArgs),
    /// Inspect and manage stored sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Serve the simulated model over HTTP (OpenAI Chat, Anthropic, OpenAI Responses).
    SimServer(crate::sim_server::SimServerArgs),
    /// Drive many sessions through turns and report throughput, latency and resources.
    Loadtest(crate::loadtest::LoadtestArgs),
}

/// Where sessions are stored.
#[derive(Debug, Clone, Args)]
pub(crate) struct DataDirArg {
    /// Data directory (default: $FOYA_DATA_DIR, else the platform data dir, e.g.
    /// ~/.local/share/foya).
    #[arg(long, env = "FOYA_DATA_DIR", global = true)]
    pub(crate) data_dir: Option<PathBuf>,
}

/// Which model provider to use.
#[derive(Debug, Clone, Args)]
pub(crate) struct ProviderArgs {
    /// A profile name from config.toml (`openai`, `anthropic`, …) or a protocol
    /// (`openai-chat`, `anthropic`, `openai-responses`, `scripted`).
    #[arg(long, default_value = "openai")]
    pub(crate) provider: String,
    /// Base URL of the provider API (e.g. http://127.0.0.1:8000/v1). Also
    /// $OPENAI_BASE_URL for openai-chat.
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Model name.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Script of model responses for `--provider scripted` (JSON).
    #[arg(long)]
    pub(crate) script: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    #[command(flatten)]
    pub(crate) data: DataDirArg,
    /// Working directory of the session (default: the current directory).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    /// Approval mode: read-only, ask, auto-edit, auto or bypass. `ask` prompts on a
    /// terminal and denies when nobody can answer.
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub(crate) approval: ApprovalMode,
    /// Maximum number of tool steps in the turn (headless default: 50).
    #[arg(long, default_value_t = 50)]
    pub(crate) max_steps: u32,
    /// Continue an existing session instead of creating one.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Print one JSON object per line (live deltas and persisted events).
    #[arg(long)]
    pub(crate) json: bool,
    /// The prompt.
    #[arg(required = true, num_args = 1.., trailing_var_arg = true)]
    pub(crate) prompt: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// List sessions, most recently updated first.
    List {
        #[command(flatten)]
        data: DataDirArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Print the persisted events of a session in seq order.
    Show {
        /// Session id.
        id: String,
        #[command(flatten)]
        data: DataDirArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

fn parse_approval(s: &str) -> Result<ApprovalMode, String> {
    s.parse()
}

/// Runs the parsed command and returns the process exit status.
pub(crate) async fn dispatch(cli: Cli) -> u8 {
    match cli.command {
        Command::Run(args) => crate::run::run(args).await,
        Command::Sessions { command } => crate::sessions::sessions(command).await,
        Command::SimServer(args) => crate::sim_server::sim_server(args).await,
        Command::Loadtest(args) => crate::loadtest::loadtest(args).await,
    }
}

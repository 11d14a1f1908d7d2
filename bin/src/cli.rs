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
/// Exit status of `foya sessions list --cluster` when some nodes did not answer: the
/// sessions of the others were printed, the missing nodes named (stderr, and an
/// `{"unreachable": [...]}` line with `--json`).
pub(crate) const EXIT_PARTIAL: u8 = 3;
/// Exit status when the event store is damaged (or of a newer format): the command
/// printed one line saying so and what to do next (`foya store check`, `foya store
/// salvage`); `foya store check` exits with it when it finds a problem, `foya sessions
/// list` after listing what was readable, `foya store salvage` when some session could
/// not be copied whole.
pub(crate) const EXIT_DAMAGED: u8 = 4;
/// Exit status of a cancelled turn (128 + SIGINT).
pub(crate) const EXIT_CANCELLED: u8 = 130;
/// Exit status of `foya run` after SIGTERM cancelled its turn cleanly (128 + SIGTERM, as
/// shells report a process ended by SIGTERM).
pub(crate) const EXIT_TERMINATED: u8 = 143;
/// Exit status of `foya run` after SIGHUP (its terminal went away) cancelled its turn
/// cleanly (128 + SIGHUP).
pub(crate) const EXIT_HANGUP: u8 = 129;

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
    /// Serve the kernel over HTTP (sessions, inputs, approvals, SSE events).
    Serve(ServeArgs),
    /// An interactive terminal session.
    Chat(ChatArgs),
    /// Serve the runtime as a cluster node (ractor_cluster) until SIGINT/SIGTERM/SIGHUP.
    Node(crate::node::NodeArgs),
    /// Serve the simulated model over HTTP (OpenAI Chat, Anthropic, OpenAI Responses).
    SimServer(crate::sim_server::SimServerArgs),
    /// Drive many sessions through turns and report throughput, latency and resources.
    Loadtest(Box<crate::loadtest::LoadtestArgs>),
    /// Check, salvage and back up the event store.
    Store {
        #[command(subcommand)]
        command: crate::store_cmd::StoreCommand,
    },
    /// Trust a project, so its own .foya/config.toml and .mcp.json apply (provider
    /// profiles, hooks, MCP servers); or list the trusted projects, or revoke a trust.
    Trust(crate::trust::TrustArgs),
    /// Inspect the configured MCP tool servers.
    Mcp {
        #[command(subcommand)]
        command: crate::mcp::McpCommand,
    },
}

/// Where sessions are stored.
#[derive(Debug, Clone, Args)]
pub(crate) struct DataDirArg {
    /// Data directory (default: $FOYA_DATA_DIR when set and not empty, else the platform
    /// data dir, e.g. ~/.local/share/foya).
    #[arg(long, global = true)]
    pub(crate) data_dir: Option<PathBuf>,
}

/// Which model provider to use.
#[derive(Debug, Clone, Args)]
pub(crate) struct ProviderArgs {
    /// A profile name from config.toml (`openai`, `anthropic`, …), a protocol
    /// (`openai-chat`, `anthropic`, `openai-responses`), `scripted` (responses from
    /// `--script`) or `sim` (the simulated model, in process: no key, no server; its
    /// turns read README.md twice, then answer).
    #[arg(long, default_value = "openai")]
    pub(crate) provider: String,
    /// Base URL of the provider API: up to `/v1` for the OpenAI kinds (e.g.
    /// `http://127.0.0.1:8000/v1`), without `/v1` for anthropic (e.g.
    /// `https://api.anthropic.com`). Also $OPENAI_BASE_URL for openai-chat.
    #[arg(long, value_parser = crate::values::http_url)]
    pub(crate) base_url: Option<String>,
    /// Model name.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Script of model responses for `--provider scripted` (JSON).
    #[arg(long)]
    pub(crate) script: Option<PathBuf>,
    /// Seed of the simulated model's random choices, for `--provider sim` (default 0).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
}

/// `--max-steps N` (at least 1; default 50). A command with another default sets it
/// with `#[command(mut_arg("max_steps", |a| a.default_value("N")))]` (a const generic
/// default would not work: clap caches `default_value_t` in a static shared by every
/// instantiation).
#[derive(Debug, Clone, Copy, Args)]
pub(crate) struct MaxStepsArg {
    /// Maximum number of tool steps per turn (at least 1).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_steps: u32,
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
    #[command(flatten)]
    pub(crate) steps: MaxStepsArg,
    #[command(flatten)]
    pub(crate) compaction: crate::context_config::CompactionArg,
    /// Continue an existing session instead of creating one.
    #[arg(long)]
    pub(crate) session: Option<String>,
    /// Print one JSON object per line (live deltas and persisted events).
    #[arg(long)]
    pub(crate) json: bool,
    /// Commit durability of the event store: `immediate` (fsync every commit, the
    /// default) or `none` (no fsync: faster, a machine crash may lose recent events).
    #[arg(long, default_value = "immediate", value_parser = parse_durability)]
    pub(crate) durability: foya_storage::Durability,
    #[command(flatten)]
    pub(crate) mcp: crate::mcp::McpArgs,
    /// The prompt.
    #[arg(required = true, num_args = 1..)]
    pub(crate) prompt: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionsCommand {
    /// List sessions, most recently updated first (with --cluster: every node's, with
    /// the node each lives on).
    List {
        #[command(flatten)]
        data: DataDirArg,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: crate::node::ClusterArgs,
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
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    #[command(flatten)]
    pub(crate) data: DataDirArg,
    /// Address to listen on (port 0 picks a free one; the bound address is printed as
    /// the first line of stdout).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub(crate) listen: String,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    pub(crate) token_file: Option<PathBuf>,
    /// Approval mode of sessions created without one.
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub(crate) approval: ApprovalMode,
    // `--max-steps`: of sessions created without one.
    #[command(flatten)]
    pub(crate) steps: MaxStepsArg,
    /// Ask the model for a title on each session's first input (an extra request).
    #[arg(long)]
    pub(crate) generate_titles: bool,
    #[command(flatten)]
    pub(crate) compaction: crate::context_config::CompactionArg,
    /// MCP servers: `--mcp`/`--no-mcp` choose those of sessions created without
    /// `mcp_servers`.
    #[command(flatten)]
    pub(crate) mcp: crate::mcp::McpArgs,
}

#[derive(Debug, Args)]
#[command(mut_arg("max_steps", |a| a.default_value("100")))]
pub(crate) struct ChatArgs {
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    #[command(flatten)]
    pub(crate) data: DataDirArg,
    /// Working directory of a new session (default: the current directory).
    #[arg(long)]
    pub(crate) cwd: Option<PathBuf>,
    /// Approval mode of a new session: read-only, ask, auto-edit, auto or bypass.
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub(crate) approval: ApprovalMode,
    // `--max-steps`: of a new session.
    #[command(flatten)]
    pub(crate) steps: MaxStepsArg,
    #[command(flatten)]
    pub(crate) compaction: crate::context_config::CompactionArg,
    /// Resume this session instead of creating one.
    #[arg(long)]
    pub(crate) session: Option<String>,
    #[command(flatten)]
    pub(crate) mcp: crate::mcp::McpArgs,
}

pub(crate) fn parse_approval(s: &str) -> Result<ApprovalMode, String> {
    s.parse()
}

fn parse_durability(s: &str) -> Result<foya_storage::Durability, String> {
    match s {
        "immediate" => Ok(foya_storage::Durability::Immediate),
        "none" => Ok(foya_storage::Durability::None),
        other => Err(format!("unknown durability {other:?} (immediate | none)")),
    }
}

/// Runs the parsed command and returns the process exit status.
pub(crate) async fn dispatch(cli: Cli) -> u8 {
    match cli.command {
        Command::Run(args) => crate::run::run(args).await,
        Command::Sessions { command } => crate::sessions::sessions(command).await,
        Command::Serve(args) => crate::serve::serve(args).await,
        Command::Chat(args) => crate::chat::chat(args).await,
        Command::Node(args) => crate::node::node(args).await,
        Command::SimServer(args) => crate::sim_server::sim_server(args).await,
        Command::Loadtest(args) => crate::loadtest::loadtest(*args).await,
        Command::Store { command } => crate::store_cmd::store(command).await,
        Command::Trust(args) => crate::trust::trust(&args),
        Command::Mcp { command } => crate::mcp::mcp(command).await,
    }
}

/// `e` and its causes joined by `: `, each cause once: a cause whose text the message
/// before it already ends with (an error that prints its source in its own message)
/// is skipped.
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
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
pub(crate) fn report(e: &anyhow::Error) {
    if crate::damage::is_damage(e) {
        crate::damage::report(&error_chain(e));
    } else {
        eprintln!("foya: {}", error_chain(e));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
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

    #[test]
    fn bad_values_are_refused_at_parse_time() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope/report.json");
        let missing = format!("--json={}", missing.display());
        let cases: [&[&str]; 11] = [
            &["loadtest", "--max-attempts", "0"],
            &["loadtest", "--max-attempts", "101"],
            &["loadtest", "--duration", "inf"],
            &["loadtest", "--duration=-1"],
            &["loadtest", "--duration", "NaN"],
            &["loadtest", "--turns", "0"],
            &["loadtest", "--sessions", "0"],
            &["loadtest", "--concurrency", "0"],
            &["loadtest", &missing],
            &["run", "--base-url", "notaurl", "hi"],
            &["chat", "--base-url", "ftp://example.com/v1"],
        ];
        for args in cases {
            let argv = std::iter::once("foya").chain(args.iter().copied());
            let e = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{args:?}"
            );
            assert!(e.use_stderr());
        }
        let ok = format!("--json={}", dir.path().join("report.json").display());
        let argv = [
            "foya",
            "loadtest",
            "--duration",
            "0.5",
            "--turns",
            "2",
            "--sessions",
            "3",
            "--concurrency",
            "1",
            &ok,
            "--base-url",
            "http://127.0.0.1:8000/v1",
        ];
        let Command::Loadtest(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("not loadtest");
        };
        assert_eq!(
            (args.duration, args.turns, args.sessions, args.concurrency),
            (Some(std::time::Duration::from_millis(500)), 2, 3, Some(1))
        );
    }

    #[test]
    fn zero_max_steps_is_a_usage_error() {
        for command in ["run", "chat", "serve"] {
            let mut argv = vec!["foya", command, "--max-steps", "0"];
            if command == "run" {
                argv.push("hi");
            }
            let e = Cli::try_parse_from(&argv).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{command}"
            );
            assert!(e.use_stderr());
        }
        let ok = Cli::try_parse_from(["foya", "run", "--max-steps", "1", "hi"]).unwrap();
        let steps = match ok.command {
            Command::Run(args) => Some(args.steps.max_steps),
            _ => None,
        };
        assert_eq!(steps, Some(1));
        // Each command keeps its own default.
        let defaults: Vec<u32> = [
            vec!["foya", "run", "hi"],
            vec!["foya", "serve"],
            vec!["foya", "chat"],
        ]
        .into_iter()
        .map(|argv| match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(args) => args.steps.max_steps,
            Command::Serve(args) => args.steps.max_steps,
            Command::Chat(args) => args.steps.max_steps,
            _ => 0,
        })
        .collect();
        assert_eq!(defaults, vec![50, 50, 100]);
    }
}

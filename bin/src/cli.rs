//! Command-line grammar (clap) and dispatch to the subcommands, each implemented in a
//! library crate (`foya-cli`, `foya-serve`, `foya-loadtest`).

use clap::{Parser, Subcommand};
use foya_cli::args::{ChatArgs, RunArgs, SessionsCommand};
use foya_serve::ServeArgs;

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
    Node(foya_cli::node::NodeArgs),
    /// Serve the simulated model over HTTP (OpenAI Chat, Anthropic, OpenAI Responses).
    SimServer(foya_loadtest::sim_server::SimServerArgs),
    /// Drive many sessions through turns and report throughput, latency and resources.
    Loadtest(Box<foya_loadtest::LoadtestArgs>),
    /// Check, salvage and back up the event store.
    Store {
        #[command(subcommand)]
        command: foya_cli::store_cmd::StoreCommand,
    },
    /// Trust a project, so its own .foya/config.toml and .mcp.json apply (provider
    /// profiles, hooks, MCP servers); or list the trusted projects, or revoke a trust.
    Trust(foya_cli::trust::TrustArgs),
    /// Inspect the configured MCP tool servers.
    Mcp {
        #[command(subcommand)]
        command: foya_cli::mcp::McpCommand,
    },
}

/// Runs the parsed command; how it ended (`main` turns it into the exit status).
pub(crate) async fn dispatch(cli: Cli) -> Result<(), foya_cli::exit::CommandError> {
    match cli.command {
        Command::Run(args) => foya_cli::run::run(args).await,
        Command::Sessions { command } => foya_cli::sessions::sessions(command).await,
        Command::Serve(args) => foya_serve::serve(args).await,
        Command::Chat(args) => foya_cli::chat::chat(args).await,
        Command::Node(args) => foya_cli::node::node_with(args, Some(foya_serve::node_http)).await,
        Command::SimServer(args) => foya_loadtest::sim_server::sim_server(args).await,
        Command::Loadtest(args) => foya_loadtest::loadtest(*args).await,
        Command::Store { command } => foya_cli::store_cmd::store(command).await,
        Command::Trust(args) => foya_cli::trust::trust(&args),
        Command::Mcp { command } => foya_cli::mcp::mcp(command).await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

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
        // The values these accept: `foya_loadtest`'s `good_values_parse`.
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
            Command::Serve(args) => args.service.steps.max_steps,
            Command::Chat(args) => args.steps.max_steps,
            _ => 0,
        })
        .collect();
        assert_eq!(defaults, vec![50, 50, 100]);
    }
}

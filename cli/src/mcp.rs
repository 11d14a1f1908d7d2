//! MCP servers on the command line: the `--mcp NAME` / `--no-mcp` /
//! `--trust-project-mcp` flags of `run`, `chat` and `serve`, loading the servers for the
//! runtime, and `foya mcp list`.
//!
//! User servers are `[mcp_servers.NAME]` of `~/.config/foya/config.toml`; a project's
//! (`[mcp_servers]` of `.foya/config.toml`, `.mcp.json` at the project root) are read
//! only when the user trusted the project (`foya trust`), or for one run with
//! `--trust-project-mcp`.

pub use crate::args::McpArgs;
use crate::exit::{CommandError, Ended};
use clap::Subcommand;
use foya_actors::mcp::{McpConfig, McpManager, ServerState};
use foya_actors::tools::sandbox::SandboxRunner;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `foya mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start every configured MCP server, list its state and tools, stop them.
    List {
        /// Working directory (finds the project; default: the current directory).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Also read the project's MCP servers.
        #[arg(long)]
        trust_project_mcp: bool,
        /// One JSON object per server.
        #[arg(long)]
        json: bool,
    },
}

/// The configured servers for a session in `cwd`, or `None` when there are none.
///
/// # Errors
/// An unreadable or invalid config file; `--mcp NAME` naming no configured server.
pub fn load(cwd: &Path, args: &McpArgs) -> anyhow::Result<Option<Arc<McpManager>>> {
    let config = read(cwd, args.trust_project_mcp)?;
    for name in &args.mcp {
        anyhow::ensure!(
            config.servers.contains_key(name),
            "--mcp {name}: no MCP server `{name}` is configured (configured: {}){}",
            names(&config),
            if args.trust_project_mcp {
                ""
            } else {
                "; a project's servers need `foya trust` or --trust-project-mcp"
            }
        );
    }
    if config.servers.is_empty() || args.no_mcp {
        return Ok(None);
    }
    Ok(Some(Arc::new(McpManager::new(
        config,
        &SandboxRunner::this_binary(),
    ))))
}

fn names(config: &McpConfig) -> String {
    if config.servers.is_empty() {
        return "none".into();
    }
    config
        .servers
        .keys()
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

fn read(cwd: &Path, trust_project: bool) -> anyhow::Result<McpConfig> {
    let trust_project = trust_project || foya_config::trust::is_trusted(cwd);
    let user = foya_config::provider::user_file();
    let root = foya_actors::context::project_root(cwd);
    let project = foya_config::provider::project_file(cwd);
    McpConfig::load(user.as_deref(), &project, &root, trust_project).map_err(anyhow::Error::msg)
}

/// Runs `foya mcp …`: succeeds when every server is running.
///
/// # Errors
/// A usage or configuration error; [`Ended::Failed`] when a server failed (its line says
/// why).
pub async fn mcp(command: McpCommand) -> Result<(), CommandError> {
    let McpCommand::List {
        cwd,
        trust_project_mcp,
        json,
    } = command;
    let cwd = crate::setup::working_dir(cwd.as_deref()).map_err(usage)?;
    let config = read(&cwd, trust_project_mcp).map_err(usage)?;
    let manager = McpManager::new(config, &SandboxRunner::this_binary());
    let reports = manager.report().await;
    manager.shutdown().await;
    let mut result = Ok(());
    if reports.is_empty() && !json {
        println!("no MCP servers configured");
    }
    for report in reports {
        let state = match &report.state {
            ServerState::Running => "running".to_owned(),
            ServerState::Failed { error } => {
                result = Err(Ended::Failed.into());
                format!("failed: {error}")
            }
            ServerState::NotStarted => "not started".to_owned(),
            _ => "stopped".to_owned(),
        };
        if json {
            let tools: Vec<_> = report
                .tools
                .iter()
                .map(|(name, description)| serde_json::json!({"name": name, "description": description}))
                .collect();
            let line = serde_json::json!({
                "name": report.name,
                "transport": report.transport,
                "state": state,
                "tools": tools,
            });
            println!("{line}");
        } else {
            println!("{}  {}  {state}", report.name, report.transport);
            for (name, _) in &report.tools {
                println!("  {name}");
            }
        }
    }
    result
}

/// A usage or configuration error, printed as `foya: <error chain>` (never as a damaged
/// store: `foya mcp` reads no store).
fn usage(e: anyhow::Error) -> CommandError {
    eprintln!("foya: {}", crate::args::error_chain(&e));
    Ended::Usage.into()
}

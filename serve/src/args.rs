//! The arguments of `foya serve`.

use clap::Args;
use foya_cli::args::{DataDirArg, MaxStepsArg, ProviderArgs, parse_approval};
use foya_protocol::ApprovalMode;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub data: DataDirArg,
    #[command(flatten)]
    pub store: foya_cli::args::StoreArg,
    /// Address to listen on (port 0 picks a free one; the bound address is printed as
    /// the first line of stdout).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: String,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Another name this server answers to (HOST or HOST:PORT; repeatable), e.g. a
    /// reverse proxy's: requests whose Host or Origin names neither this nor the listen
    /// address, localhost, 127.0.0.1 or [::1] (with the port) are refused.
    #[arg(long, value_name = "HOST[:PORT]")]
    #[allow(
        rustdoc::broken_intra_doc_links,
        reason = "the text is the flag's --help, where [::1] is an address, not a link"
    )]
    pub allowed_host: Vec<String>,
    /// Approval mode of sessions created without one.
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub approval: ApprovalMode,
    // `--max-steps`: of sessions created without one.
    #[command(flatten)]
    pub steps: MaxStepsArg,
    /// Ask the model for a title on each session's first input (an extra request).
    #[arg(long)]
    pub generate_titles: bool,
    #[command(flatten)]
    pub compaction: foya_cli::context_config::CompactionArg,
    /// MCP servers: `--mcp`/`--no-mcp` choose those of sessions created without
    /// `mcp_servers`.
    #[command(flatten)]
    pub mcp: foya_cli::mcp::McpArgs,
}

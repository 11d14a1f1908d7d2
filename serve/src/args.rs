//! The arguments of `foya serve`.

use clap::Args;
use foya_cli::args::{DataDirArg, ProviderArgs};
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
    /// The guard and the defaults of sessions created over HTTP (shared with `foya node
    /// --http`).
    #[command(flatten)]
    pub service: foya_cli::node_http::ServiceArgs,
}

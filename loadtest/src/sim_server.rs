//! `foya sim-server`: serves the simulated model over HTTP in the three wire formats
//! (OpenAI Chat Completions, Anthropic Messages, OpenAI Responses) until Ctrl-C.

use crate::SimArgs;
use clap::Args;
use foya_cli::exit::{CommandError, failed};
use std::io::Write as _;
use std::net::SocketAddr;

#[derive(Debug, Args)]
pub struct SimServerArgs {
    /// Address to listen on (loopback by default; port 0 picks a free port). The bound
    /// address is printed as a URL (`http://127.0.0.1:PORT`) on the first line of stdout.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub(crate) listen: SocketAddr,
    #[command(flatten)]
    pub(crate) sim: SimArgs,
}

/// Runs the server until Ctrl-C.
///
/// # Errors
/// A bad simulator configuration (usage); the address cannot be bound; the server
/// stops with an error.
pub async fn sim_server(args: SimServerArgs) -> Result<(), CommandError> {
    let config = args.sim.to_config().map_err(CommandError::Usage)?;
    let listener =
        foya_cli::listen::bind(&args.listen.to_string(), foya_cli::listen::Port::AnyOrZero).await?;
    let addr = listener.local_addr().map_err(failed)?;
    let mut stdout = std::io::stdout();
    // A URL to paste as `--base-url` (with `/v1` for openai-chat and openai-responses);
    // it contains `127.0.0.1:PORT` for scripts that grep the address.
    let _ = writeln!(stdout, "http://{addr}");
    let _ = stdout.flush();
    eprintln!(
        "sim-server: POST http://{addr}/v1/chat/completions | /v1/messages | /v1/responses (Ctrl-C stops)"
    );
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    foya_sim::serve_sim_with_shutdown(listener, config, shutdown)
        .await
        .map_err(|e| failed(format!("sim-server: {e}")))
}

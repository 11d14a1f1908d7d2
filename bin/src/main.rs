//! The `foya` command line: parses arguments, loads configuration, installs tracing,
//! starts the runtime and renders what it does. No runtime logic lives here.

mod chat;
mod cli;
mod cluster_list;
mod data;
mod loadtest;
mod node;
mod render;
mod run;
mod serve;
mod sessions;
mod setup;
mod sim_server;
mod values;

use clap::Parser;
use std::process::ExitCode;

/// mimalloc instead of glibc malloc: under many concurrent sessions the runtime allocates
/// from every worker thread at once, and glibc's arena locks showed up as about a third of
/// the load test's CPU profile (futex wake-ups, `malloc_consolidate`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A sandboxed child re-executes this binary as `foya __sandbox-exec …`: it applies the
    // Landlock policy and execs the command, never returning here.
    foya_actors::tools::sandbox::sandbox_entry_if_requested();

    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("foya: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(cli::dispatch(cli));
    data::release_owner();
    // Do not wait for lingering blocking tasks (a stdin reader) at exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(code)
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: warnings only).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

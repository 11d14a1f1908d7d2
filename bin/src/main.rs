//! The `foya` command line: parses arguments, installs tracing, starts the tokio runtime
//! and dispatches to the command, implemented in a library crate: `foya-cli` (run, chat,
//! sessions, store, trust, mcp, node; configuration and rendering), `foya-serve` (serve),
//! `foya-loadtest` (loadtest, sim-server). No runtime logic lives here.

mod cli;

use clap::Parser;
use foya_cli::exit::{CommandError, Ended};
use foya_cli::signals::Signalled;
use std::process::ExitCode;

/// mimalloc instead of glibc malloc: under many concurrent sessions the runtime allocates
/// from every worker thread at once, and glibc's arena locks showed up as about a third of
/// the load test's CPU profile (futex wake-ups, `malloc_consolidate`). Built without
/// transparent huge pages (`no_thp`, in the workspace manifest): with them a partly used
/// 2 MiB page counts whole in the resident set (docs/benchmarks.md, "100 000 concurrent
/// sessions").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A sandboxed child may re-execute this binary (when `foya-sandbox` is not beside
    // it) as `foya __sandbox-exec …`: it applies the Landlock policy and execs the
    // command, never returning here.
    foya_actors::tools::sandbox::sandbox_entry_if_requested();
    // What started `foya` may have left descriptors open: none reaches its children.
    foya_actors::tools::sandbox::reset_inherited_state();
    // Its environment holds the user's keys: no process of the same user reads them back.
    foya_actors::tools::sandbox::forbid_inspection();

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
        // The load test's CPU accounting tells the blocking pool's threads (where the
        // file tools work) from the workers; cheap enough to keep for every command.
        .on_thread_start(foya_loadtest::pool::thread_started)
        .on_thread_stop(foya_loadtest::pool::thread_stopped)
        .on_thread_park(foya_loadtest::pool::worker_parked)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("foya: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let ended = runtime.block_on(cli::dispatch(cli));
    if let Err(e) = &ended {
        e.report();
    }
    let code = exit_status(&ended);
    foya_storage::data_dir::release_owner();
    // Do not wait for lingering blocking tasks (a stdin reader) at exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    ExitCode::from(code)
}

/// The exit status of how a command ended: the one place the statuses of docs/cli.md
/// ("Exit status") are chosen.
fn exit_status(ended: &Result<(), CommandError>) -> u8 {
    use foya_cli::args::{
        EXIT_CANCELLED, EXIT_DAMAGED, EXIT_FAILED, EXIT_HANGUP, EXIT_OK, EXIT_PARTIAL,
        EXIT_TERMINATED, EXIT_USAGE,
    };
    match ended {
        Ok(()) => EXIT_OK,
        Err(CommandError::Failed(_) | CommandError::Ended(Ended::Failed)) => EXIT_FAILED,
        Err(CommandError::Usage(_) | CommandError::Ended(Ended::Usage)) => EXIT_USAGE,
        Err(CommandError::Ended(Ended::Partial)) => EXIT_PARTIAL,
        Err(CommandError::Damaged(_) | CommandError::Ended(Ended::Damaged)) => EXIT_DAMAGED,
        Err(CommandError::Ended(Ended::Cancelled | Ended::Signalled(Signalled::Interrupt))) => {
            EXIT_CANCELLED
        }
        Err(CommandError::Ended(Ended::Signalled(Signalled::Terminate))) => EXIT_TERMINATED,
        Err(CommandError::Ended(Ended::Signalled(Signalled::Hangup))) => EXIT_HANGUP,
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: warnings only).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let directives = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let filter = EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("warn"));
    use std::io::IsTerminal as _;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal, not in a log file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// The filter directives: `RUST_LOG` (default `warn`), with ractor and ractor_cluster at
/// `error` unless `RUST_LOG` names them — they log every closed node session and
/// handshake at warn, which is noise on a command's stderr.
fn log_filter(rust_log: Option<&str>) -> String {
    let base = rust_log
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or("warn");
    if base.contains("ractor") {
        base.to_owned()
    } else {
        format!("{base},ractor=error,ractor_cluster=error")
    }
}

#[cfg(test)]
mod tests {
    use super::{exit_status, log_filter};
    use foya_cli::exit::{CommandError, Ended};
    use foya_cli::signals::Signalled;

    #[test]
    fn every_end_has_its_documented_exit_status() {
        let cases: [(Result<(), CommandError>, u8); 12] = [
            (Ok(()), 0),
            (Err(CommandError::Failed(anyhow::anyhow!("x"))), 1),
            (Err(Ended::Failed.into()), 1),
            (Err(CommandError::Usage(anyhow::anyhow!("x"))), 2),
            (Err(Ended::Usage.into()), 2),
            (Err(Ended::Partial.into()), 3),
            (Err(CommandError::Damaged(anyhow::anyhow!("x"))), 4),
            (Err(Ended::Damaged.into()), 4),
            (Err(Ended::Cancelled.into()), 130),
            (Err(Ended::Signalled(Signalled::Interrupt).into()), 130),
            (Err(Ended::Signalled(Signalled::Terminate).into()), 143),
            (Err(Ended::Signalled(Signalled::Hangup).into()), 129),
        ];
        for (ended, status) in cases {
            assert_eq!(exit_status(&ended), status, "{ended:?}");
        }
    }

    #[test]
    fn ractor_crates_stay_at_error_unless_rust_log_names_them() {
        let cases = [
            (None, "warn,ractor=error,ractor_cluster=error"),
            (Some(""), "warn,ractor=error,ractor_cluster=error"),
            (Some("debug"), "debug,ractor=error,ractor_cluster=error"),
            (
                Some("info,ractor_cluster=debug"),
                "info,ractor_cluster=debug",
            ),
        ];
        for (rust_log, expected) in cases {
            assert_eq!(log_filter(rust_log), expected, "{rust_log:?}");
        }
    }
}

//! `foya loadtest`: drives N sessions through T turns each against the in-process
//! simulated provider (or a real HTTP provider profile, e.g. `foya sim-server`) with real
//! tools on a generated workspace, shows a live progress bar, and reports throughput,
//! latency and overhead percentiles, failures by class, peak RSS and CPU time (text on
//! stdout, JSON with `--json FILE`, charts in one self-contained page with `--html
//! FILE`). Ctrl-C stops it with a partial report.
//!
//! `foya-loadtest` is this command as a library crate, with `foya sim-server`
//! ([`sim_server`]) and the CPU accounting of the tokio runtime's threads ([`pool`],
//! whose hooks the binary installs).

mod bare;
mod cpu;
mod driver;
mod floor;
mod html;
pub mod pool;
mod probe;
mod prom;
mod report;
mod scenario;
mod sim_args;
pub mod sim_server;
mod through;
mod through_report;
mod timeline;
mod workspace;

pub use sim_args::SimArgs;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use driver::{Outcome, Shared};
use foya_actors::Runtime;
use foya_actors::provider::ModelClient;
use foya_actors::provider::profile::ProviderProfile;
use foya_actors::provider::retry::{MAX_ATTEMPTS_LIMIT, RetryPolicy};
use foya_actors::provider::sim::SimConfig;
use foya_cli::exit::{CommandError, Ended};
use foya_protocol::ApprovalMode;
use foya_storage::{Durability, EventLog as _, LogStore, Store, StoreOptions};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use probe::Probe;
use report::{Percentiles, Report};
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
pub struct LoadtestArgs {
    /// Number of sessions (at least 1).
    #[arg(long, default_value_t = 100, value_parser = foya_cli::values::positive_count)]
    pub(crate) sessions: usize,
    /// Turns per session (run one after another within a session; at least 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) turns: u32,
    /// `sim` (the in-process simulator) or a provider profile / protocol name
    /// (`openai-chat`, `anthropic`, `openai-responses`, a config.toml profile).
    #[arg(long, default_value = foya_cli::setup::SIM)]
    pub(crate) provider: String,
    /// Base URL for `--provider PROFILE`: the address `foya sim-server` printed, plus
    /// `/v1` for `openai-chat` and `openai-responses`; as printed for `anthropic`, whose
    /// paths (`/v1/messages`) already start with `/v1`.
    #[arg(long, value_parser = foya_cli::values::http_url)]
    pub(crate) base_url: Option<String>,
    /// Model name (default: the profile's, `sim-1` for the simulator).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Most turns running at once (at least 1; default: all sessions).
    #[arg(long, value_parser = foya_cli::values::positive_count)]
    pub(crate) concurrency: Option<usize>,
    /// Stop after this many seconds (finite, greater than 0), with a partial report.
    #[arg(long, value_parser = foya_cli::values::positive_seconds)]
    pub(crate) duration: Option<Duration>,
    /// Also write the report as JSON to this file (its directory must exist and be
    /// writable; checked before the run).
    #[arg(long, value_parser = foya_cli::values::output_file)]
    pub(crate) json: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page with charts to this file
    /// (throughput, latency histograms, CPU split, memory and errors over time; its
    /// directory must exist and be writable; checked before the run).
    #[arg(long, value_parser = foya_cli::values::output_file)]
    pub(crate) html: Option<PathBuf>,
    /// Store durability: `none` (no fsync, default) or `immediate` (fsync every commit).
    #[arg(long, value_enum)]
    pub(crate) durability: Option<DurabilityArg>,
    /// The sessions' approval mode: `read-only` (default; exec and write tools are
    /// refused), `ask` or `auto-edit` (a call that needs approval is denied: the load
    /// test attaches no approver), `auto` (exec runs in the sandbox) or `bypass`.
    #[arg(long, value_parser = foya_cli::args::parse_approval)]
    pub(crate) approval: Option<ApprovalMode>,
    /// A scenario file (`.toml`, or `.json`): `approval`, `durability` and `[sim]` (the
    /// simulator's fields, as in `--sim-config`); a flag given beside it wins.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub(crate) scenario: Option<PathBuf>,
    /// Data directory of the store (default: a temporary directory, removed at the end).
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// `--store URL` (or $FOYA_STORE_URL): the sessions' events go to this shared store
    /// (`postgresql://user@host:port/db`) instead of a redb file in the data directory.
    /// `--durability none` (the default) sets PostgreSQL's `synchronous_commit` off on
    /// the writer's connections, `immediate` keeps the server's setting.
    #[command(flatten)]
    pub(crate) store: foya_cli::args::StoreArg,
    /// Serve the run's Prometheus metrics at `http://ADDR/metrics` while it runs (a
    /// loopback address; port 0 picks one, printed on stderr). Traces are exported when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is set (docs/observability.md).
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<String>,
    /// Attempts per model request, the first included (retry policy; 1 to 100, the
    /// ceiling of a profile's `max_attempts`).
    #[arg(long, default_value_t = RetryPolicy::default().max_attempts,
          value_parser = max_attempts)]
    pub(crate) max_attempts: u32,
    /// After the run, replay the same sessions × turns with a bare HTTP client that only
    /// reads the response bytes (HTTP providers only): each session's turn k sends the
    /// requests the runtime sent in session 0's turn k (the last captured turn past the
    /// captured ones). Reports the runtime's CPU per turn as a multiple of the bare
    /// client's.
    #[arg(long)]
    pub(crate) compare_bare: bool,
    /// After the run, do the work the turns demanded again with no runtime around it:
    /// read the same model streams (the simulator's, or the same SSE bytes over HTTP),
    /// append the same events to a fresh store with the same durability and group
    /// commit, run the same tool calls (the same files read, the same commands through
    /// the sandbox helper). Reports the runtime's CPU per turn as a multiple of it
    /// (`cpu_ratio_vs_floor`, child processes included on both sides).
    #[arg(long)]
    pub(crate) compare_floor: bool,
    /// Capacity of each subscriber's channel (events + deltas; at least 128). The session
    /// sends a model stream's deltas in batches of up to 128 and a commit's events at
    /// once, without waiting: a smaller channel overflows and every turn fails with
    /// `lagged`. Many tool calls per step need more (a step's results may arrive
    /// together, one event per call).
    #[arg(long, default_value_t = foya_actors::DEFAULT_SUBSCRIBER_BUFFER,
          value_parser = foya_cli::values::subscriber_buffer)]
    pub(crate) subscriber_buffer: usize,
    /// Drive running `foya node`s (or `foya serve`) over HTTP instead of a runtime in
    /// this process: their base URLs, comma-separated (`http://127.0.0.1:7001,…`).
    /// Sessions are created round-robin over them, in a generated workspace they must
    /// see at the same path; the report adds what the nodes' `/metrics` say about the
    /// run (events committed, append latency). The nodes choose the model, the store and
    /// its durability.
    #[arg(long, value_name = "URL,...", value_delimiter = ',',
          value_parser = foya_cli::values::http_url)]
    pub(crate) through: Vec<String>,
    /// With `--through`: where a session's inputs and event streams go: `owner` (the
    /// node that created it) or `forwarded` (the next node of the list, which forwards
    /// them to the owner).
    #[arg(long, value_enum, default_value = "owner", requires = "through")]
    pub(crate) route: through::Route,
    /// With `--through`: a file holding the nodes' bearer token (their `--token-file`).
    #[arg(long, value_name = "FILE", requires = "through")]
    pub(crate) token_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) sim: SimArgs,
    /// MCP servers of the sessions (`[mcp_servers]` of the user's config.toml). In the
    /// default `read-only` mode only tools listed in a server's `read_only_tools` run;
    /// call one with `--tool-name mcp__SERVER__TOOL`.
    #[command(flatten)]
    pub(crate) mcp: foya_cli::mcp::McpArgs,
}

/// `--max-attempts`: 1 to [`MAX_ATTEMPTS_LIMIT`], as a profile's `max_attempts`.
fn max_attempts(s: &str) -> Result<u32, foya_cli::values::ValueError> {
    let n = foya_cli::values::positive_u32(s)?;
    if n > MAX_ATTEMPTS_LIMIT {
        return Err(foya_cli::values::ValueError(format!(
            "at most {MAX_ATTEMPTS_LIMIT} (every attempt, the first included)"
        )));
    }
    Ok(n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DurabilityArg {
    None,
    Immediate,
}

/// Runs the load test: succeeds when every turn completed without error.
///
/// # Errors
/// [`Ended::Failed`] when a turn failed or an error was counted (the report says which),
/// [`Ended::Signalled`] when a signal stopped the run (after its partial report), and a
/// usage error for anything that kept the run from starting or its report from being
/// written.
pub async fn loadtest(args: LoadtestArgs) -> Result<(), CommandError> {
    match loadtest_inner(args).await {
        Ok(ended) => Ok(ended?),
        Err(e) => Err(CommandError::Usage(e)),
    }
}

/// The run, and how it ended (the outer error: it could not run or report).
async fn loadtest_inner(args: LoadtestArgs) -> anyhow::Result<Result<(), Ended>> {
    // Installed first, before any setup: SIGINT, SIGTERM or SIGHUP from the first moment
    // stops the run with a partial report (never lost between two waits, never the
    // default kill that would leave the temporary directories behind).
    let mut signals = foya_cli::signals::Signals::install()?;
    anyhow::ensure!(args.sessions > 0, "--sessions must be at least 1");
    if !args.through.is_empty() {
        return through::run(&args, &mut signals).await;
    }
    let scenario = match &args.scenario {
        Some(path) => scenario::load(path)?,
        None => scenario::Scenario::default(),
    };
    let (mut sim, calls_chosen) = match scenario.sim {
        Some(base) => args.sim.over(Some(base))?,
        None => args.sim.to_config_and_choice()?,
    };
    let approval = args
        .approval
        .or(scenario.approval)
        .unwrap_or(ApprovalMode::ReadOnly);
    let durability_arg = args
        .durability
        .or(scenario.durability)
        .unwrap_or(DurabilityArg::None);
    if !calls_chosen {
        workspace::use_distinct_calls(&mut sim);
    }
    let (client, model, profile) = model_client(&args, &sim)?;
    anyhow::ensure!(
        !args.compare_bare || profile.is_some(),
        "--compare-bare needs an HTTP provider (e.g. --provider openai-chat --base-url …)"
    );
    if let Some(profile) = &profile {
        // Before anything is sent: a profile without --base-url is the real (paid) API.
        eprintln!(
            "foya loadtest: sending requests to {} (--provider {})",
            foya_actors::provider::redact::display_url(&profile.base_url),
            args.provider
        );
        let given = args.sim.behaviour_flags();
        if !given.is_empty() {
            eprintln!(
                "foya loadtest: over HTTP the server decides what the model does; {} only \
                 shape{} the generated workspace here (give the server the same flags)",
                given.join(", "),
                if given.len() == 1 { "s" } else { "" }
            );
        }
    }
    // One file per call of a turn (of this config; over HTTP the server's must match).
    let workspace = workspace::create(&sim)?;
    let temp_data = tempfile::Builder::new()
        .prefix("foya-loadtest-data")
        .tempdir()
        .context("cannot create the data directory")?;
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| temp_data.path().to_owned());
    let durability = match durability_arg {
        DurabilityArg::None => Durability::None,
        DurabilityArg::Immediate => Durability::Immediate,
    };
    let store: LogStore = match foya_cli::shared_store::url(&args.store) {
        Some(url) => {
            anyhow::ensure!(
                !args.compare_floor,
                "--compare-floor replays into a redb store: not with --store"
            );
            foya_cli::shared_store::open_with(url, durability == Durability::Immediate).await?
        }
        None => Store::open(
            &data_dir.join("foya.redb"),
            StoreOptions {
                durability,
                ..StoreOptions::default()
            },
        )
        .context("cannot open the store")?
        .into(),
    };

    let floor_model = match &profile {
        Some(_) => None,
        None => Some(floor::Model::Sim(Arc::clone(&client))),
    };
    let probe = Probe::new(client, args.sessions, args.turns);
    let slots = probe.slots();
    let provider_cpu = probe.cpu();
    let captured = probe.captured();
    let tool_cpu = Arc::new(cpu::CpuMeter::default());
    let driver_cpu = Arc::new(cpu::CpuMeter::default());
    let mut config = foya_cli::setup::runtime_config(store.clone(), Arc::new(probe))?;
    config.tools = Arc::new(cpu::metered_builtins(&tool_cpu));
    let here = std::env::current_dir().context("no current directory")?;
    config.mcp = foya_cli::mcp::load(&here, &args.mcp)?;
    config.retry.max_attempts = args.max_attempts;
    config.subscriber_buffer = args.subscriber_buffer;
    // Traces when OTEL_* ask; metrics when they are served (--metrics-listen).
    let telemetry = foya_cli::setup::telemetry(args.metrics_listen.is_some())?;
    if let Some(telemetry) = &telemetry {
        config = telemetry.instrument(config);
    }
    let metrics_stop = CancellationToken::new();
    if let (Some(listen), Some(telemetry)) = (&args.metrics_listen, &telemetry) {
        foya_telemetry::http::check_loopback(listen)?;
        let listener = foya_cli::listen::bind(listen, foya_cli::listen::Port::AnyOrZero).await?;
        let addr = listener.local_addr().context("no local address")?;
        eprintln!("foya loadtest: metrics at http://{addr}/metrics");
        tokio::spawn(foya_telemetry::http::serve_metrics(
            listener,
            telemetry.clone(),
            None,
            metrics_stop.clone(),
        ));
    }
    let runtime = Runtime::start(config)
        .await
        .context("cannot start the runtime")?;

    let total = args.sessions as u64 * u64::from(args.turns);
    let progress = progress_bar(total);
    let stop = CancellationToken::new();
    let shared = Arc::new(Shared {
        runtime,
        slots,
        turns: args.turns,
        cwd: std::fs::canonicalize(workspace.path()).context("workspace path")?,
        model,
        permits: Semaphore::new(args.concurrency.unwrap_or(args.sessions).max(1)),
        stop: stop.clone(),
        progress: progress.clone(),
        driver_cpu: Arc::clone(&driver_cpu),
        started: Instant::now(),
        mcp_servers: args.mcp.selection(),
        approval,
    });
    let sampling = CancellationToken::new();
    let memory = timeline::sample_memory(shared.started, sampling.clone());

    let meter_overhead = cpu::outside_overhead();
    let stats_before = store.stats();
    let latency_before = store.append_latency();
    let appends_before = store.as_redb().map(Store::appends_committed);
    let storage_before = store.as_redb().map(Store::writer_cpu);
    let cpu_before = cpu::cpu_time();
    let children_before = cpu::children_cpu_time().await;
    let blocking_before = pool::blocking_cpu();
    let started = Instant::now();
    // The signal that stopped the run, if one did.
    let (outcomes, mut interrupted_by_user) = collect_outcomes(
        args.sessions,
        |index| driver::drive(index, Arc::clone(&shared)),
        &mut signals,
        &stop,
        &progress,
        args.duration,
    )
    .await;
    let wall = started.elapsed();
    sampling.cancel();
    let memory = memory.await.unwrap_or_default();
    let cpu = cpu::cpu_time().saturating_sub(cpu_before);
    let children = cpu::children_cpu_time()
        .await
        .saturating_sub(children_before);
    let blocking = pool::blocking_cpu().saturating_sub(blocking_before);
    // Every append the turns waited for has its commit counted (published before it
    // resolved).
    let storage = match (store.as_redb(), storage_before) {
        (Some(redb), Some(before)) => redb.writer_cpu().saturating_sub(before),
        _ => Duration::ZERO,
    };
    let latency = store.append_latency().since(&latency_before);
    progress.finish_and_clear();
    let stats = store.stats();
    let events_persisted = stats.appended_events - stats_before.appended_events;

    let (mut report, samples, timeline) =
        build_report(&args, durability_arg, &shared, outcomes, events_persisted);
    report.endpoint = profile
        .as_ref()
        .map(|p| foya_actors::provider::redact::display_url(&p.base_url));
    report.stopped_early = stop.is_cancelled();
    report.commits = stats.commits - stats_before.commits;
    report.provider_cpu_s = provider_cpu.total().as_secs_f64();
    report.tool_cpu_s = tool_cpu.total().as_secs_f64();
    report.tool_blocking_cpu_s = blocking.as_secs_f64();
    report.driver_cpu_s = driver_cpu.total().as_secs_f64();
    report.storage_cpu_s = storage.as_secs_f64();
    let measurements = provider_cpu.count() + tool_cpu.count() + driver_cpu.count();
    report.meter_overhead_s = meter_overhead.as_secs_f64() * measurements as f64;
    report.children_cpu_s = children.as_secs_f64();
    // A shared store's appends are those acknowledged (its latency samples).
    report.appends = match (store.as_redb(), appends_before) {
        (Some(redb), Some(before)) => redb.appends_committed() - before,
        _ => latency.count(),
    };
    report.set_append_latency(&latency);
    report.store = store.is_shared().then(|| store.location());
    report.finish(wall, cpu);
    let floor_tools = floor::FloorTools::new(&shared.cwd, approval);
    if let Ok(shared) = Arc::try_unwrap(shared) {
        shared.runtime.shutdown().await;
    }
    store.close().await;
    metrics_stop.cancel();
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }

    if args.compare_bare && profile.is_some() && stop.is_cancelled() {
        let why = match interrupted_by_user {
            Some(signal) => format!("{} stopped the run", signal.name()),
            None => "--duration stopped the run before every turn ran".to_owned(),
        };
        eprintln!("foya loadtest: the bare-client comparison (--compare-bare) was skipped: {why}");
    }
    if let (Some(profile), true) = (&profile, args.compare_bare && !stop.is_cancelled()) {
        let turns = captured_turns(&captured);
        let concurrency = args.concurrency.unwrap_or(args.sessions);
        eprintln!("foya loadtest: replaying the requests with a bare client (--compare-bare)");
        let bare = bare::run(profile, &turns, args.sessions, args.turns, concurrency);
        tokio::select! {
            bare = bare => report.set_bare(bare?),
            // Ctrl-C during the bare pass: the runtime's report, without the comparison.
            signal = signals.recv() => {
                eprintln!("stopping… (the bare-client comparison was not finished)");
                interrupted_by_user = Some(signal);
                report.stopped_early = true;
            }
        }
    }

    if args.compare_floor && stop.is_cancelled() {
        eprintln!(
            "foya loadtest: the floor comparison (--compare-floor) was skipped: the run was stopped"
        );
    } else if args.compare_floor && interrupted_by_user.is_none() {
        let floor = floor::Floor {
            model: match (floor_model, &profile) {
                (Some(model), _) => model,
                (None, Some(profile)) => floor::Model::Http(Arc::new(bare::Replay::new(
                    profile,
                    &captured_turns(&captured),
                )?)),
                (None, None) => anyhow::bail!("--compare-floor: no model to replay"),
            },
            captured: captured_turns(&captured),
            logs: match store.as_redb() {
                Some(redb) => floor::read_logs(redb)?,
                None => anyhow::bail!("--compare-floor: not with --store"),
            },
            tools: floor_tools,
            concurrency: args.concurrency.unwrap_or(args.sessions),
        };
        let dir = tempfile::Builder::new()
            .prefix("foya-loadtest-floor")
            .tempdir_in(&data_dir)
            .context("cannot create the floor's data directory")?;
        let options = StoreOptions {
            durability,
            ..StoreOptions::default()
        };
        eprintln!("foya loadtest: doing the turns' work with no runtime (--compare-floor)");
        let floor_db = dir.path().join("foya.redb");
        tokio::select! {
            floor = floor.run(&floor_db, options) => report.set_floor(floor?),
            signal = signals.recv() => {
                eprintln!("stopping… (the floor comparison was not finished)");
                interrupted_by_user = Some(signal);
                report.stopped_early = true;
            }
        }
    }

    if let Some(notice) = refused_notice(&report) {
        eprintln!("{notice}");
    }
    print!("{}", report.to_text());
    write_json(args.json.as_deref(), &report)?;
    if let Some(path) = &args.html {
        let page = html::page(&html::Input {
            report: &report,
            samples: &samples,
            timeline: &timeline,
            memory: &memory,
        });
        std::fs::write(path, page).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ended(
        interrupted_by_user,
        report.turns_failed,
        &report.errors,
    ))
}

/// Writes the JSON report to `--json FILE`, when given.
fn write_json(
    path: Option<&std::path::Path>,
    report: &impl serde::Serialize,
) -> anyhow::Result<()> {
    if let Some(path) = path {
        let json = serde_json::to_string_pretty(report)?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// How a run that reported ended: stopped by a signal, failed (a turn failed or an error
/// was counted) or succeeded.
fn ended(
    interrupted_by_user: Option<foya_cli::signals::Signalled>,
    turns_failed: u64,
    errors: &std::collections::BTreeMap<String, u64>,
) -> Result<(), Ended> {
    if let Some(signal) = interrupted_by_user {
        Err(Ended::Signalled(signal))
    } else if turns_failed > 0 || !errors.is_empty() {
        Err(Ended::Failed)
    } else {
        Ok(())
    }
}

/// The stderr line for turns whose tool calls were all refused (none ran), with the
/// first refusal's message and what to change; `None` when there were none.
fn refused_notice(report: &Report) -> Option<String> {
    let n = report.turns_tools_refused;
    if n == 0 {
        return None;
    }
    let why = report
        .error_examples
        .get("tool_error")
        .map_or(String::new(), |m| format!(" (first: {m})"));
    let hint = match report.approval.as_str() {
        "read-only" | "ask" | "auto-edit" => format!(
            "; --approval {} refuses exec and write tools: use --approval auto or bypass",
            report.approval
        ),
        _ => String::new(),
    };
    Some(format!(
        "foya loadtest: {} of {} ran none of the tool calls the model asked for, every one \
         refused{why}{hint}",
        foya_cli::words::count(n, "turn"),
        report.turns_completed + report.turns_failed
    ))
}

/// Session 0's requests by turn, as captured.
fn captured_turns(captured: &probe::Captured) -> Vec<Vec<foya_actors::provider::ModelRequest>> {
    captured
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// What one session task of a run counted (in process: [`Outcome`]; `--through`: its
/// own).
trait SessionOutcome: Send + 'static {
    /// The outcome of a task that panicked: a `driver_panicked` error.
    fn panicked() -> Self;
}

impl SessionOutcome for Outcome {
    fn panicked() -> Self {
        let mut out = Self {
            index: usize::MAX,
            ..Self::default()
        };
        out.errors.insert("driver_panicked".into(), 1);
        out
    }
}

/// Runs `drive(index)` for each of the `sessions` as its own task and collects the
/// outcomes as the tasks end (a task that panicked: [`SessionOutcome::panicked`]). The
/// first signal, or the end of `duration`, cancels `stop` (the tasks then end their
/// turns early); `progress` says so. Returns the outcomes and the signal that stopped the
/// run, if one did.
async fn collect_outcomes<T, F>(
    sessions: usize,
    drive: impl Fn(usize) -> F,
    signals: &mut foya_cli::signals::Signals,
    stop: &CancellationToken,
    progress: &ProgressBar,
    duration: Option<Duration>,
) -> (Vec<T>, Option<foya_cli::signals::Signalled>)
where
    T: SessionOutcome,
    F: Future<Output = T> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..sessions {
        tasks.spawn(drive(index));
    }
    let mut outcomes = Vec::with_capacity(sessions);
    let mut interrupted_by_user = None;
    let deadline = duration.and_then(|d| tokio::time::Instant::now().checked_add(d));
    loop {
        tokio::select! {
            joined = tasks.join_next() => match joined {
                Some(Ok(outcome)) => outcomes.push(outcome),
                Some(Err(_)) => outcomes.push(T::panicked()),
                None => break,
            },
            signal = signals.recv(), if !stop.is_cancelled() => {
                interrupted_by_user = Some(signal);
                progress.println("stopping… (partial report follows)");
                stop.cancel();
            }
            () = sleep_until(deadline), if !stop.is_cancelled() => stop.cancel(),
        }
    }
    (outcomes, interrupted_by_user)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The client for `--provider`: the simulator in process, or an HTTP client (with its
/// resolved profile).
type ClientChoice = (Arc<dyn ModelClient>, String, Option<ProviderProfile>);

fn model_client(args: &LoadtestArgs, sim: &SimConfig) -> anyhow::Result<ClientChoice> {
    if args.provider == foya_cli::setup::SIM {
        let model = args.model.clone().unwrap_or_else(|| sim.model.clone());
        let client = foya_actors::provider::sim::SimClient::new(sim.clone());
        return Ok((Arc::new(client), model, None));
    }
    anyhow::ensure!(
        args.provider != foya_cli::setup::SCRIPTED,
        "--provider scripted is for `foya run`, `chat` and `serve`; a load test uses `sim` \
         (the default, in process) or an HTTP profile (e.g. openai-chat with --base-url)"
    );
    let cwd = std::env::current_dir().context("no current directory")?;
    let config = foya_config::provider::ProviderConfig::load(&cwd)?;
    let base_url = args.base_url.as_deref();
    // A bare protocol name needs a model: fall back to the simulator's model name.
    let profile = match config.resolve(&args.provider, base_url, args.model.as_deref()) {
        Err(_) if args.model.is_none() => config
            .resolve(&args.provider, base_url, Some(&sim.model))
            .map_err(|e| foya_cli::setup::also_known(e, foya_cli::setup::SIM))?,
        resolved => resolved.map_err(|e| foya_cli::setup::also_known(e, foya_cli::setup::SIM))?,
    };
    let model = profile.model.clone();
    let client = foya_actors::provider::http::HttpModelClient::new(profile.clone())?;
    Ok((Arc::new(client), model, Some(profile)))
}

fn progress_bar(total: u64) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {pos}/{len} turns ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The raw latency samples behind the report's percentiles (the HTML histograms).
#[derive(Debug, Default)]
pub(crate) struct Samples {
    /// Model request latencies, in milliseconds.
    pub(crate) model_ms: Vec<f64>,
    /// Runtime overheads, in microseconds.
    pub(crate) overhead_us: Vec<f64>,
    /// Relay latencies, in milliseconds.
    pub(crate) relay_ms: Vec<f64>,
}

fn build_report(
    args: &LoadtestArgs,
    durability: DurabilityArg,
    shared: &Shared,
    outcomes: Vec<Outcome>,
    events_persisted: u64,
) -> (Report, Samples, timeline::Timeline) {
    let mut report = Report {
        provider: args.provider.clone(),
        durability: format!("{durability:?}").to_lowercase(),
        approval: shared.approval.as_str().to_owned(),
        sessions: args.sessions,
        turns_per_session: args.turns,
        events_persisted,
        ..Report::default()
    };
    let mut relay = Vec::new();
    let mut overhead = Vec::new();
    let mut latency = Vec::new();
    let mut timeline = timeline::Timeline::since(shared.started);
    let mut tool_ms_total = 0u64;
    for out in outcomes {
        timeline.merge(out.timeline);
        report.turns_completed += out.completed;
        report.turns_failed += out.failed;
        report.turns_interrupted += out.interrupted;
        report.steps += out.steps;
        report.tool_calls += out.tool_calls;
        report.tool_calls_run += out.tool_calls_run;
        report.turns_tools_refused += out.turns_tools_refused;
        report.deltas_received += out.deltas;
        report::add_counts(&mut report.errors, out.errors);
        report::add_examples(&mut report.error_examples, out.error_examples);
        report::add_counts(&mut report.retries, out.retries);
        relay.extend(out.relay_ms);
        // The n-th gap of a session follows its n-th tool-calling step: subtract that
        // step's tool time to leave what the runtime added.
        tool_ms_total += out.tool_ms.iter().sum::<u64>();
        if let Some(slot) = shared.slots.get(out.index) {
            let slot = probe::lock(slot);
            for (gap, tool_ms) in slot.gaps.iter().zip(&out.tool_ms) {
                let tool = Duration::from_millis(*tool_ms);
                overhead.push(gap.saturating_sub(tool).as_secs_f64() * 1e6);
            }
        }
    }
    for slot in shared.slots.iter() {
        let slot = probe::lock(slot);
        report.model_requests += slot.requests;
        latency.extend(slot.latencies.iter().map(|d| d.as_secs_f64() * 1e3));
    }
    report.tool_ms_per_call =
        (report.tool_calls_run > 0).then(|| tool_ms_total as f64 / report.tool_calls_run as f64);
    report.relay_latency_ms = Percentiles::of(&mut relay);
    report.overhead_us = Percentiles::of(&mut overhead);
    report.model_latency_ms = Percentiles::of(&mut latency);
    let samples = Samples {
        model_ms: latency,
        overhead_us: overhead,
        relay_ms: relay,
    };
    (report, samples, timeline)
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod run_tests;

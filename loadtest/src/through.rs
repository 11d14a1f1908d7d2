//! `foya loadtest --through URL,URL,…`: the turns run in `foya node` processes (or `foya
//! serve`), reached over their HTTP API (docs/http-api.md), instead of a runtime in this
//! process. The driver is a client like any other:
//!
//! - sessions are created round-robin over the given nodes (`POST /sessions`; a node
//!   creates a session only in a shard it holds, so the node that created a session owns
//!   it), working in a generated workspace (a `README.md`, what the nodes' `--provider
//!   sim` reads) that the nodes must see at the same path (the same machine);
//! - each turn opens the session's event stream (`GET /sessions/{id}/events` with
//!   `Last-Event-ID`: the last seq it received), posts the input (`POST
//!   /sessions/{id}/inputs`, with an `input_id`, so a retry is taken once) and reads the
//!   stream until the turn's `turn_complete`, checking the seqs dense; the stream is
//!   closed between turns, so the streams open at once are the turns in flight
//!   (`--concurrency`);
//! - `--route owner` (default) sends a session's inputs and streams to the node that
//!   created it, `--route forwarded` to the next node of the list, which forwards them to
//!   the owner (docs/cluster.md);
//! - a 503 with `Retry-After` (a node that has not claimed shards yet, a shard moving) is
//!   sent again after the time it asks (at most 30 s in all), an event stream that ends
//!   before its turn resumed from the last seq.
//!
//! The store's figures are the nodes' own: each node's `GET /metrics` is read before and
//! after the run (`prom.rs`), so the append latency is measured inside the nodes (call to
//! acknowledgement) and the events are those their stores committed.

use super::LoadtestArgs;
use super::driver::TurnEnd;
use super::prom;
use super::report::{self, Percentiles};
use super::through_report::{NodeFigures, ThroughReport, percentiles_ms};
use anyhow::Context as _;
use clap::ValueEnum;
use eventsource_stream::Eventsource as _;
use foya_cli::exit::Ended;
use foya_protocol::{ApprovalMode, Event, EventKind, InputId, TurnStatus};
use futures::StreamExt as _;
use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Where a session's inputs and event streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Route {
    /// The node that created the session (its owner).
    Owner,
    /// The next node of `--through`, which forwards to the owner.
    Forwarded,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Self::Owner => "owner",
            Self::Forwarded => "forwarded",
        }
    }
}

/// How long a request answered 503 with `Retry-After` is sent again.
const RETRY_FOR: Duration = Duration::from_secs(30);
/// Longest wait asked by a `Retry-After` that is honoured as is.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
/// A request other than an event stream: its answer within this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// A turn whose stream delivers nothing for this long is given up (`stalled`).
const STALL: Duration = Duration::from_secs(120);
/// Resumes of one turn's stream before it is given up (`stream_ended`).
const MAX_RESUMES: u32 = 10;
/// After a stop, how long the driver waits for the cancelled turn's end.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The flags `--through` does not take (the nodes decide these), with why.
fn refused_flags(args: &LoadtestArgs) -> Vec<&'static str> {
    let mut refused = Vec::new();
    let mut refuse = |given: bool, flag: &'static str| {
        if given {
            refused.push(flag);
        }
    };
    refuse(args.provider != foya_cli::setup::SIM, "--provider");
    refuse(args.base_url.is_some(), "--base-url");
    refuse(args.durability.is_some(), "--durability");
    refuse(args.scenario.is_some(), "--scenario");
    refuse(args.data_dir.is_some(), "--data-dir");
    refuse(
        foya_cli::shared_store::url(&args.store).is_some(),
        "--store",
    );
    refuse(args.metrics_listen.is_some(), "--metrics-listen");
    refuse(args.compare_bare, "--compare-bare");
    refuse(args.compare_floor, "--compare-floor");
    refuse(args.html.is_some(), "--html");
    refuse(
        args.max_attempts != foya_actors::provider::retry::RetryPolicy::default().max_attempts,
        "--max-attempts",
    );
    refuse(
        args.subscriber_buffer != foya_actors::DEFAULT_SUBSCRIBER_BUFFER,
        "--subscriber-buffer",
    );
    refused
}

/// What every session task shares.
#[derive(Debug)]
struct Driver {
    client: reqwest::Client,
    /// The nodes' base URLs (no trailing `/`).
    nodes: Vec<String>,
    /// Each node's name, once a session it created told it (`foya-node`).
    names: Mutex<Vec<Option<String>>>,
    token: Option<String>,
    cwd: PathBuf,
    approval: ApprovalMode,
    model: Option<String>,
    mcp_servers: Option<Vec<String>>,
    route: Route,
    turns: u32,
    permits: Semaphore,
    stop: CancellationToken,
    progress: ProgressBar,
}

/// What one session task counted.
#[derive(Debug, Default)]
struct Outcome {
    /// The node that created the session (its index), when it was created.
    node: Option<usize>,
    completed: u64,
    failed: u64,
    interrupted: u64,
    steps: u64,
    tool_calls: u64,
    tool_calls_run: u64,
    /// The last seq received (dense from 1: the events received).
    last_seq: u64,
    deltas: u64,
    inputs_forwarded: u64,
    stream_resumes: u64,
    turn_ms: Vec<f64>,
    retries: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    error_examples: BTreeMap<String, String>,
}

impl Outcome {
    fn error(&mut self, class: &str, message: impl std::fmt::Display) {
        *self.errors.entry(class.to_owned()).or_default() += 1;
        self.error_examples
            .entry(class.to_owned())
            .or_insert_with(|| message.to_string());
    }
}

impl super::SessionOutcome for Outcome {
    fn panicked() -> Self {
        let mut out = Self::default();
        out.error("driver_panicked", "a session task panicked");
        out
    }
}

/// A request refused or failed, as the report names it.
#[derive(Debug)]
struct Failure {
    class: &'static str,
    message: String,
}

impl Driver {
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, url);
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    fn name_of(&self, node: usize) -> Option<String> {
        self.names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(node)
            .cloned()
            .flatten()
    }

    /// Sends `make()` until it is not a 503 with `Retry-After` (each retry counted by
    /// its error code), for at most [`RETRY_FOR`] or until the run stops.
    async fn send(
        &self,
        class: &'static str,
        out: &mut Outcome,
        make: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Failure> {
        let started = Instant::now();
        loop {
            let resp = make()
                .timeout(REQUEST_TIMEOUT)
                .send()
                .await
                .map_err(|e| Failure {
                    class,
                    message: error_chain(&e),
                })?;
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let retry = match retry_after {
                Some(secs) if resp.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                    Duration::from_secs(secs).min(MAX_RETRY_AFTER)
                }
                _ => return Ok(resp),
            };
            if started.elapsed() + retry > RETRY_FOR || self.stop.is_cancelled() {
                return Ok(resp);
            }
            let code = error_code(resp).await;
            *out.retries.entry(code).or_default() += 1;
            tokio::select! {
                () = self.stop.cancelled() => {}
                () = tokio::time::sleep(retry) => {}
            }
        }
    }
}

/// `{"error": {"code": …}}`'s code, or the status.
async fn error_code(resp: reqwest::Response) -> String {
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    body["error"]["code"]
        .as_str()
        .map_or_else(|| status.as_u16().to_string(), str::to_owned)
}

/// A refused answer as a [`Failure`]: its status and body (cut).
async fn refused(class: &'static str, resp: reqwest::Response) -> Failure {
    let status = resp.status();
    let body = resp.text().await.unwrap_or_default();
    let body: String = body.chars().take(300).collect();
    Failure {
        class,
        message: format!("{status}: {}", body.trim()),
    }
}

/// An error with its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The `foya-node` header of an answer.
fn served_by(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get("foya-node")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Drives session `index` (created through node `index % nodes`) through its turns.
async fn drive(index: usize, driver: Arc<Driver>) -> Outcome {
    let mut out = Outcome::default();
    let node = index % driver.nodes.len();
    let mut body = serde_json::json!({
        "cwd": driver.cwd,
        "approval_mode": driver.approval.as_str(),
        "title": format!("loadtest {index}"),
    });
    if let Some(model) = &driver.model {
        body["model"] = serde_json::json!(model);
    }
    if let Some(servers) = &driver.mcp_servers {
        body["mcp_servers"] = serde_json::json!(servers);
    }
    let url = format!("{}/sessions", driver.nodes[node]);
    if driver.stop.is_cancelled() {
        out.interrupted = u64::from(driver.turns);
        return out;
    }
    let created = driver
        .send("create_session", &mut out, || {
            driver.request(reqwest::Method::POST, &url).json(&body)
        })
        .await;
    let id = match created {
        Ok(resp) if resp.status() == reqwest::StatusCode::CREATED => {
            let name = served_by(&resp);
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            match body["id"].as_str() {
                Some(id) => {
                    if let Some(name) = name {
                        let mut names = driver
                            .names
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if let Some(slot) = names.get_mut(node) {
                            slot.get_or_insert(name);
                        }
                    }
                    id.to_owned()
                }
                None => {
                    out.error("create_session", format!("no id in the answer: {body}"));
                    out.failed = u64::from(driver.turns);
                    return out;
                }
            }
        }
        Ok(resp) => {
            let failure = refused("create_session", resp).await;
            out.error(failure.class, failure.message);
            out.failed = u64::from(driver.turns);
            return out;
        }
        Err(failure) => {
            out.error(failure.class, failure.message);
            out.failed = u64::from(driver.turns);
            return out;
        }
    };
    out.node = Some(node);
    let entry = match driver.route {
        Route::Owner => node,
        Route::Forwarded => (node + 1) % driver.nodes.len(),
    };
    for turn in 0..driver.turns {
        let permit = tokio::select! {
            () = driver.stop.cancelled() => None,
            permit = driver.permits.acquire() => permit.ok(),
        };
        let Some(_permit) = permit else {
            out.interrupted += u64::from(driver.turns - turn);
            break;
        };
        match run_turn(index, turn, &driver, &id, entry, &mut out).await {
            TurnEnd::Done => driver.progress.inc(1),
            TurnEnd::Stopped => {
                out.interrupted += u64::from(driver.turns - turn);
                break;
            }
            TurnEnd::Lost => {
                out.failed += u64::from(driver.turns - turn);
                break;
            }
        }
    }
    out
}

/// The open event stream of one turn.
type Stream = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// Opens session `id`'s event stream on `base` after the last seq received.
async fn open_stream(
    driver: &Driver,
    base: &str,
    id: &str,
    out: &mut Outcome,
) -> Result<Stream, Failure> {
    let url = format!("{base}/sessions/{id}/events");
    let last = out.last_seq;
    let resp = driver
        .send("events", out, || {
            driver
                .request(reqwest::Method::GET, &url)
                .header("Last-Event-ID", last.to_string())
        })
        .await?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(refused("events", resp).await);
    }
    Ok(resp.bytes_stream().eventsource().boxed())
}

/// One turn: open the stream, post the input, read until `turn_complete`.
async fn run_turn(
    index: usize,
    turn: u32,
    driver: &Driver,
    id: &str,
    entry: usize,
    out: &mut Outcome,
) -> TurnEnd {
    let base = driver.nodes[entry].as_str();
    let mut stream = match open_stream(driver, base, id, out).await {
        Ok(stream) => stream,
        Err(failure) => {
            out.error(failure.class, failure.message);
            return TurnEnd::Lost;
        }
    };
    let posted = Instant::now();
    let url = format!("{base}/sessions/{id}/inputs");
    let body = serde_json::json!({
        "input_id": InputId::new(),
        "text": super::probe::user_text(index, turn),
    });
    let submitted = driver
        .send("submit", out, || {
            driver.request(reqwest::Method::POST, &url).json(&body)
        })
        .await;
    match submitted {
        Ok(resp) if resp.status() == reqwest::StatusCode::ACCEPTED => {
            let owner = served_by(&resp);
            if let (Some(owner), Some(asked)) = (owner, driver.name_of(entry))
                && owner != asked
            {
                out.inputs_forwarded += 1;
            }
        }
        Ok(resp) => {
            let failure = refused("submit", resp).await;
            out.error(failure.class, failure.message);
            return TurnEnd::Lost;
        }
        Err(failure) => {
            out.error(failure.class, failure.message);
            return TurnEnd::Lost;
        }
    }
    let mut stopping: Option<tokio::time::Instant> = None;
    let mut resumes = 0u32;
    loop {
        let deadline = match stopping {
            Some(at) => at,
            None => tokio::time::Instant::now() + STALL,
        };
        let next = tokio::select! {
            () = driver.stop.cancelled(), if stopping.is_none() => {
                stopping = Some(tokio::time::Instant::now() + STOP_WAIT);
                let url = format!("{base}/sessions/{id}/cancel");
                // The turn's end still arrives on the stream (or it already ended).
                let _ = driver
                    .request(reqwest::Method::POST, &url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .timeout(REQUEST_TIMEOUT)
                    .send()
                    .await;
                continue;
            }
            () = tokio::time::sleep_until(deadline) => {
                if stopping.is_some() {
                    return TurnEnd::Stopped;
                }
                out.error("stalled", format!(
                    "session {id}: nothing on its event stream for {} s", STALL.as_secs()));
                return TurnEnd::Lost;
            }
            next = stream.next() => next,
        };
        let sse = match next {
            Some(Ok(sse)) => sse,
            ended => {
                // The stream ended (or broke) before the turn: resume after the last seq.
                resumes += 1;
                out.stream_resumes += 1;
                if resumes > MAX_RESUMES {
                    let why = match ended {
                        Some(Err(e)) => e.to_string(),
                        _ => "the stream ended".to_owned(),
                    };
                    out.error(
                        "stream_ended",
                        format!("session {id}: {why}, {MAX_RESUMES} resumes"),
                    );
                    return TurnEnd::Lost;
                }
                match open_stream(driver, base, id, out).await {
                    Ok(s) => stream = s,
                    Err(failure) => {
                        out.error(failure.class, failure.message);
                        return TurnEnd::Lost;
                    }
                }
                continue;
            }
        };
        match sse.event.as_str() {
            "delta" => out.deltas += 1,
            "notice" => {
                // `lagged`: the stream fell behind and was cut; `moved`: the node
                // handed the session off. Either way resume after the last seq received
                // (the stream ends next); `closed`: the session closed it.
                let notice: serde_json::Value = serde_json::from_str(&sse.data).unwrap_or_default();
                if notice["type"] == "closed" {
                    out.error("subscription_closed", format!("session {id}: {}", sse.data));
                    return TurnEnd::Lost;
                }
            }
            "event" => {
                let event: Event = match serde_json::from_str(&sse.data) {
                    Ok(event) => event,
                    Err(e) => {
                        out.error("bad_event", format!("session {id}: {e}"));
                        return TurnEnd::Lost;
                    }
                };
                if event.seq.0 != out.last_seq + 1 {
                    out.error(
                        "seq_gap",
                        format!(
                            "session {id}: seq {} after {} on the stream",
                            event.seq.0, out.last_seq
                        ),
                    );
                    return TurnEnd::Lost;
                }
                out.last_seq = event.seq.0;
                if let Some(end) = count(event.kind, stopping.is_some(), out) {
                    if let TurnEnd::Done = end {
                        out.turn_ms.push(posted.elapsed().as_secs_f64() * 1e3);
                    }
                    return end;
                }
            }
            _ => {}
        }
    }
}

/// Counts one event; `Some` at the turn's end.
fn count(kind: EventKind, stopping: bool, out: &mut Outcome) -> Option<TurnEnd> {
    match kind {
        EventKind::StepStarted { .. } => out.steps += 1,
        EventKind::AssistantMessage(message) => {
            out.tool_calls += u64::try_from(message.tool_calls.len()).unwrap_or(u64::MAX);
        }
        EventKind::ToolFinished { .. } => out.tool_calls_run += 1,
        EventKind::ToolMessage(message) if message.is_error && !stopping => {
            let text: String = message.content.chars().take(300).collect();
            out.error("tool_error", text);
        }
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            ..
        } if stopping => return Some(TurnEnd::Stopped),
        EventKind::TurnComplete { status, error, .. } => {
            match (status, error) {
                (TurnStatus::Completed, _) => out.completed += 1,
                (TurnStatus::Cancelled, _) => {
                    out.failed += 1;
                    out.error("cancelled", "a turn was cancelled");
                }
                (TurnStatus::Failed, Some(error)) => {
                    out.failed += 1;
                    out.error(error.class.as_str(), &error.message);
                }
                (TurnStatus::Failed, None) => {
                    out.failed += 1;
                    out.error("unknown", "a turn failed without an error");
                }
            }
            return Some(TurnEnd::Done);
        }
        _ => {}
    }
    None
}

/// Reads node `base`'s `/metrics`.
async fn scrape(
    client: &reqwest::Client,
    token: Option<&str>,
    base: &str,
) -> anyhow::Result<prom::Scrape> {
    let url = format!("{base}/metrics");
    let mut req = client.get(&url).timeout(REQUEST_TIMEOUT);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot read {url}: {}", error_chain(&e)))?;
    let status = resp.status();
    let text = resp
        .text()
        .await
        .map_err(|e| anyhow::anyhow!("cannot read {url}: {}", error_chain(&e)))?;
    anyhow::ensure!(
        status.is_success(),
        "cannot read {url}: {status} (the append latency and committed events are the          nodes' own metrics: start the nodes with --http and metrics on)"
    );
    prom::parse(&text).with_context(|| format!("{url} is not Prometheus text"))
}

/// The nodes' base URLs from `--through` (a trailing `/` dropped; at least one).
fn node_urls(through: &[String]) -> anyhow::Result<Vec<String>> {
    let nodes: Vec<String> = through
        .iter()
        .map(|u| u.trim().trim_end_matches('/').to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    anyhow::ensure!(!nodes.is_empty(), "--through needs at least one node URL");
    Ok(nodes)
}

/// Runs the load test through the nodes of `args.through`.
///
/// # Errors
/// A flag `--through` does not take, an unreadable token file, a node whose `/metrics`
/// cannot be read (before or after the run), a report that cannot be written.
pub(crate) async fn run(
    args: &LoadtestArgs,
    signals: &mut foya_cli::signals::Signals,
) -> anyhow::Result<Result<(), Ended>> {
    let refused = refused_flags(args);
    anyhow::ensure!(
        refused.is_empty(),
        "--through drives `foya node`s, which choose the model, the store and its          durability themselves (their own flags, e.g. `--provider sim`, `--store URL` with          `options=-c synchronous_commit=off` in it): not with {}",
        refused.join(", ")
    );
    anyhow::ensure!(
        args.sim.behaviour_flags().is_empty(),
        "--through: the nodes' model decides what a turn does; not with {}",
        args.sim.behaviour_flags().join(", ")
    );
    let nodes = node_urls(&args.through)?;
    let token = match &args.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read token file {}", path.display()))?;
            let text = text.trim().to_owned();
            anyhow::ensure!(
                !text.is_empty(),
                "the token file {} is empty",
                path.display()
            );
            Some(text)
        }
        None => None,
    };
    let approval = args.approval.unwrap_or(ApprovalMode::ReadOnly);
    // What the nodes' `--provider sim` reads (README.md); the same machine sees it.
    let workspace = super::workspace::create(&foya_actors::provider::sim::SimConfig::default())?;
    let cwd = std::fs::canonicalize(workspace.path()).context("workspace path")?;
    let client = reqwest::Client::builder()
        .build()
        .context("cannot build the HTTP client")?;
    let mut before = Vec::with_capacity(nodes.len());
    for base in &nodes {
        before.push(scrape(&client, token.as_deref(), base).await?);
    }
    let concurrency = args.concurrency.unwrap_or(args.sessions).max(1);
    let total = args.sessions as u64 * u64::from(args.turns);
    let progress = super::progress_bar(total);
    let stop = CancellationToken::new();
    let driver = Arc::new(Driver {
        client: client.clone(),
        names: Mutex::new(vec![None; nodes.len()]),
        nodes: nodes.clone(),
        token: token.clone(),
        cwd,
        approval,
        model: args.model.clone(),
        mcp_servers: args.mcp.selection(),
        route: args.route,
        turns: args.turns,
        permits: Semaphore::new(concurrency),
        stop: stop.clone(),
        progress: progress.clone(),
    });
    let cpu_before = super::cpu::cpu_time();
    let started = Instant::now();
    let (outcomes, interrupted_by_user) = super::collect_outcomes(
        args.sessions,
        |index| drive(index, Arc::clone(&driver)),
        signals,
        &stop,
        &progress,
        args.duration,
    )
    .await;
    let wall = started.elapsed();
    let driver_cpu = super::cpu::cpu_time().saturating_sub(cpu_before);
    progress.finish_and_clear();
    let mut after = Vec::with_capacity(nodes.len());
    for base in &nodes {
        after.push(scrape(&client, token.as_deref(), base).await?);
    }

    let names = driver
        .names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut report = ThroughReport {
        mode: "through".into(),
        route: args.route.as_str().into(),
        approval: approval.as_str().into(),
        sessions: args.sessions,
        turns_per_session: args.turns,
        concurrency,
        driver_cpu_s: driver_cpu.as_secs_f64(),
        stopped_early: stop.is_cancelled(),
        ..ThroughReport::default()
    };
    for (i, base) in nodes.iter().enumerate() {
        let (b, a) = (&before[i], &after[i]);
        let delta = |name: &str| a.counter(name).saturating_sub(b.counter(name));
        let mut node = NodeFigures {
            url: base.clone(),
            name: names.get(i).cloned().flatten(),
            events_committed: delta(prom::EVENTS),
            commits: delta(prom::COMMITS),
            append_errors: delta(prom::APPEND_ERRORS),
            ..NodeFigures::default()
        };
        match (
            a.histogram(prom::APPEND).since(&b.histogram(prom::APPEND)),
            a.histogram(prom::COMMIT).since(&b.histogram(prom::COMMIT)),
        ) {
            (Some(append), Some(commit)) => {
                node.appends = append.count;
                node.append_latency_ms = percentiles_ms(&append);
                node.append = append;
                node.commit = commit;
            }
            _ => {
                *report.errors.entry("metrics".into()).or_default() += 1;
                report
                    .error_examples
                    .entry("metrics".into())
                    .or_insert_with(|| {
                        format!("{base}: its histograms went down during the run (a restart?)")
                    });
            }
        }
        report.nodes.push(node);
    }
    let mut turn_ms = Vec::new();
    for out in outcomes {
        if let Some(node) = out.node.and_then(|n| report.nodes.get_mut(n)) {
            node.sessions_created += 1;
        }
        report.turns_completed += out.completed;
        report.turns_failed += out.failed;
        report.turns_interrupted += out.interrupted;
        report.steps += out.steps;
        report.tool_calls += out.tool_calls;
        report.tool_calls_run += out.tool_calls_run;
        report.events_received += out.last_seq;
        report.deltas_received += out.deltas;
        report.inputs_forwarded += out.inputs_forwarded;
        report.stream_resumes += out.stream_resumes;
        turn_ms.extend(out.turn_ms);
        report::add_counts(&mut report.retries, out.retries);
        report::add_counts(&mut report.errors, out.errors);
        report::add_examples(&mut report.error_examples, out.error_examples);
    }
    report.turn_latency_ms = Percentiles::of(&mut turn_ms);
    report.finish(wall);
    drop(workspace);

    print!("{}", report.to_text());
    super::write_json(args.json.as_deref(), &report)?;
    Ok(super::ended(
        interrupted_by_user,
        report.turns_failed,
        &report.errors,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn node_urls_drop_a_trailing_slash_and_need_one() {
        assert_eq!(
            node_urls(&["http://127.0.0.1:1/".into(), " http://127.0.0.1:2".into()]).unwrap(),
            ["http://127.0.0.1:1", "http://127.0.0.1:2"]
        );
        assert!(node_urls(&[String::new()]).is_err());
    }

    #[test]
    fn a_turn_is_counted_from_its_events_until_its_end() {
        let mut out = Outcome::default();
        assert!(count(EventKind::StepStarted { step: 1 }, false, &mut out).is_none());
        let end = count(
            EventKind::TurnComplete {
                status: TurnStatus::Completed,
                reason: None,
                error: None,
            },
            false,
            &mut out,
        );
        assert!(matches!(end, Some(TurnEnd::Done)));
        assert_eq!((out.steps, out.completed, out.failed), (1, 1, 0));
        // A cancelled end after the driver's own cancel (a stop) is not a failure.
        let end = count(
            EventKind::TurnComplete {
                status: TurnStatus::Cancelled,
                reason: None,
                error: None,
            },
            true,
            &mut out,
        );
        assert!(matches!(end, Some(TurnEnd::Stopped)));
        assert!(out.errors.is_empty());
    }
}

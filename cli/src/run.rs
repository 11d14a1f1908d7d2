//! `foya run`: one headless turn, streamed to the terminal. Ctrl-C (SIGINT), SIGTERM or
//! SIGHUP cancels the turn cleanly (its tools are stopped, `turn_complete{cancelled}` is
//! persisted) and exits 130, 143 or 129; a second signal exits at once. When the reader of
//! stdout goes away (`BrokenPipe`), the turn is cancelled the same way and the exit is 0.

use crate::args::RunArgs;
use crate::exit::{CommandError, Ended};
use crate::render::Renderer;
use crate::signals::{Signalled, Signals};
use anyhow::Context as _;
use foya_actors::{Runtime, SessionHandle, SubscribeOptions};
use foya_protocol::event::Notice;
use foya_protocol::{
    ApprovalDecision, ApprovalMode, ApprovalRequestId, Event, EventKind, Input, InputId, RunId,
    Seq, SessionConfig, SessionId, SessionUpdate, TurnStatus,
};
use foya_storage::EventLog as _;
use std::io::IsTerminal as _;

/// `foya run`: succeeds when the turn completed (or the reader of stdout went away).
///
/// # Errors
/// A usage or configuration error; the runtime could not do its job; the turn failed or
/// was cancelled (by a signal, or because the input ended at an approval prompt).
pub async fn run(args: RunArgs) -> Result<(), CommandError> {
    match run_inner(args).await {
        Ok(ended) => Ok(ended?),
        Err(Failure::Usage(e)) => Err(CommandError::Usage(e)),
        Err(Failure::Runtime(e)) => Err(e.into()),
    }
}

enum Failure {
    /// Bad arguments or configuration (exit 2).
    Usage(anyhow::Error),
    /// The runtime could not do its job (exit 1).
    Runtime(anyhow::Error),
}

async fn run_inner(args: RunArgs) -> Result<Result<(), Ended>, Failure> {
    let prompt = args.prompt.join(" ");
    if prompt.trim().is_empty() {
        return Err(Failure::Usage(anyhow::anyhow!(
            "the prompt is empty: give the text of the request"
        )));
    }
    // Installed first, so a Ctrl-C, SIGTERM or SIGHUP from now on cancels instead of
    // killing the process.
    let signals = Signals::install().map_err(Failure::Runtime)?;
    let cwd = crate::setup::working_dir(args.cwd.as_deref()).map_err(Failure::Usage)?;
    let dir = crate::data::data_dir(args.data.data_dir.as_deref()).map_err(Failure::Usage)?;
    // `--session ID` works on a stored session that is not deleted: otherwise (or
    // without a store at all) this says so and exits 1, creating nothing — checked
    // before the provider, so the answer is the same whatever the provider.
    let session_store = match &args.session {
        Some(id) => {
            let id: SessionId = id
                .parse()
                .map_err(|e| Failure::Usage(anyhow::anyhow!("{e}")))?;
            match crate::shared_store::url(&args.store) {
                Some(url) => {
                    let store = crate::shared_store::open(url)
                        .await
                        .map_err(Failure::Runtime)?;
                    match crate::shared_store::input_refusal(&store, id)
                        .await
                        .map_err(Failure::Runtime)?
                    {
                        Some(message) => return Err(Failure::Runtime(anyhow::anyhow!(message))),
                        None => Some(store),
                    }
                }
                None => match crate::data::open_for_input(&dir, id, args.durability)
                    .map_err(Failure::Runtime)?
                {
                    Some(store) => Some(store.into()),
                    None => return Ok(Err(Ended::Failed)),
                },
            }
        }
        None => None,
    };
    let (model, model_name) =
        crate::setup::model_client(&args.provider, &cwd).map_err(Failure::Usage)?;
    // Read before the store is opened: a broken project config creates nothing.
    let hooks = crate::hooks::load(&cwd).map_err(Failure::Usage)?;
    let auto_compact =
        crate::context_config::auto_compact(&cwd, args.compaction).map_err(Failure::Usage)?;
    let mcp = crate::mcp::load(&cwd, &args.mcp).map_err(Failure::Usage)?;
    let store: foya_storage::LogStore = match (session_store, crate::shared_store::url(&args.store))
    {
        (Some(store), _) => store,
        (None, Some(url)) => crate::shared_store::open(url)
            .await
            .map_err(Failure::Runtime)?,
        (None, None) => crate::data::open_store_with(&dir, args.durability)
            .map_err(Failure::Runtime)?
            .into(),
    };

    let mut config = crate::setup::runtime_config(store.clone(), model).map_err(Failure::Usage)?;
    crate::hooks::apply(&mut config, hooks, &dir);
    config.context.auto_compact = auto_compact;
    config.mcp = mcp;
    config.attachments = Some(crate::data::attachments(&dir, &store));
    // Traces only (nothing scrapes a `run`): off unless OTEL_* or `[telemetry]` ask.
    let telemetry = crate::setup::telemetry(false).map_err(Failure::Usage)?;
    if let Some(telemetry) = &telemetry {
        config = telemetry.instrument(config);
    }
    let runtime = Runtime::start(config)
        .await
        .context("cannot start the runtime")
        .map_err(Failure::Runtime)?;
    let outcome = drive(&runtime, &store, &args, cwd, model_name, prompt, signals).await;
    match &outcome {
        // A second signal: leave at once, without waiting for the cancel to finish.
        Ok(Forced(_)) => runtime.shutdown_within(std::time::Duration::ZERO).await,
        Ok(Done(_)) | Err(_) => runtime.shutdown().await,
    }
    // Every span of the run is exported before the exit (not after a second signal:
    // that leaves at once).
    if let Some(telemetry) = telemetry
        && !matches!(outcome, Ok(Forced(_)))
    {
        telemetry.shutdown().await;
    }
    match outcome {
        Ok(Forced(signal)) => Ok(Err(Ended::Signalled(signal))),
        Ok(Done(ended)) => Ok(ended),
        Err(e) => Err(e),
    }
}

/// How the wait for the turn ended.
enum Exit {
    /// The turn ended (or could not start): how the command ends.
    Done(Result<(), Ended>),
    /// A second signal: exit now.
    Forced(Signalled),
}
use Exit::{Done, Forced};

/// Opens the session to run in: the one of `--session` (loading it closes a turn a
/// crashed process left open) or a new one. Returns it with the seq to subscribe from
/// and the events persisted before this process (to name their tool calls).
async fn open_session(
    runtime: &Runtime,
    store: &foya_storage::LogStore,
    args: &RunArgs,
    cwd: std::path::PathBuf,
    model: String,
) -> Result<(SessionHandle, Seq, Vec<Event>), Failure> {
    let Some(id) = &args.session else {
        let mut config = SessionConfig::new(cwd);
        config.approval_mode = args.approval.unwrap_or_default();
        config.provider.clone_from(&args.provider.provider);
        config.model = model;
        config.max_steps = Some(args.steps.max_steps);
        config.mcp_servers = args.mcp.selection();
        let session = runtime
            .create_session(config)
            .await
            .context("cannot create a session")
            .map_err(Failure::Runtime)?;
        // From seq 1: `--json` streams the whole log of a new session.
        return Ok((session, Seq::FIRST, Vec::new()));
    };
    let id: SessionId = id
        .parse()
        .map_err(|e| Failure::Usage(anyhow::anyhow!("{e}")))?;
    // Read before loading: recovery's events (if any) come after it and are shown.
    let earlier = store
        .read_from(id, Seq::FIRST)
        .await
        .map_err(|e| Failure::Runtime(e.into()))?;
    check_script_left(args, id, &earlier).map_err(Failure::Usage)?;
    warn_ignored_approval(args.approval, id, &earlier);
    let session = runtime
        .session(id)
        .await
        .context("cannot open the session")
        .map_err(Failure::Runtime)?;
    // Provider and model come from the command line every time: a resumed session that
    // was created with another model records `config_changed` and uses this one.
    session
        .set_model(args.provider.provider.clone(), model)
        .await
        .context("cannot switch the session's model")
        .map_err(Failure::Runtime)?;
    let from = earlier.last().map_or(Seq::FIRST, |e| e.seq.next());
    Ok((session, from, earlier))
}

/// The approval mode session `earlier` (its log) was created with; the default for a
/// log without its `session_created`.
fn stored_approval(earlier: &[Event]) -> ApprovalMode {
    earlier
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SessionCreated { config } => Some(config.approval_mode),
            _ => None,
        })
        .unwrap_or_default()
}

/// `--approval` with `--session`: a continued session keeps the mode it was created with
/// (a command line must not quietly widen what a session may do); a different mode on
/// the command line is named on stderr as ignored.
fn warn_ignored_approval(asked: Option<ApprovalMode>, id: SessionId, earlier: &[Event]) {
    let stored = stored_approval(earlier);
    if let Some(asked) = asked
        && asked != stored
    {
        eprintln!(
            "foya: warning: --approval {} is ignored: session {id} keeps the approval mode it \
             was created with ({}); start a new session (without --session) to use another mode",
            asked.as_str(),
            stored.as_str()
        );
    }
}

/// With `--provider scripted`, a continued session needs a response left in the script:
/// the scripted model answers with the response numbered by the assistant messages in the
/// history, so a session that used them all would fail (`invalid_request`: the script has
/// N responses and this session asked for response N+1).
fn check_script_left(args: &RunArgs, id: SessionId, earlier: &[Event]) -> anyhow::Result<()> {
    let (true, Some(path)) = (
        args.provider.provider == crate::setup::SCRIPTED,
        &args.provider.script,
    ) else {
        return Ok(());
    };
    let compacted = earlier
        .iter()
        .any(|e| matches!(e.kind, EventKind::CompactionCheckpoint { .. }));
    let used = earlier
        .iter()
        .filter(|e| matches!(e.kind, EventKind::AssistantMessage(_)))
        .count();
    let script = crate::setup::load_script(path)?;
    if !earlier.is_empty() && !compacted && used >= script.responses.len() {
        anyhow::bail!(
            "session {id} already used {} of the script {} (a scripted model \
             answers with response N+1 after N assistant messages); continue it with a \
             script that has more responses",
            match script.responses.len() {
                1 => "the only response".to_owned(),
                n => format!("all {n} responses"),
            },
            path.display()
        );
    }
    Ok(())
}

/// What ended the wait for the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Ctrl-C, SIGTERM or SIGHUP.
    Signal(Signalled),
    /// Stdout was closed by its reader (`BrokenPipe`).
    StdoutClosed,
    /// Stdin ended (or failed) at an approval prompt: the turn is cancelled and the exit
    /// follows its status.
    InputClosed,
}

async fn drive(
    runtime: &Runtime,
    store: &foya_storage::LogStore,
    args: &RunArgs,
    cwd: std::path::PathBuf,
    model: String,
    prompt: String,
    mut signals: Signals,
) -> Result<Exit, Failure> {
    let (session, from, earlier) = open_session(runtime, store, args, cwd, model).await?;
    let interactive = std::io::stdin().is_terminal();
    // The session's own mode (a continued session keeps the one it was created with).
    let mode = if args.session.is_some() {
        stored_approval(&earlier)
    } else {
        args.approval.unwrap_or_default()
    };
    let approver = interactive && mode != ApprovalMode::Bypass;
    let mut updates = session
        .subscribe(from, SubscribeOptions { approver })
        .await
        .context("cannot subscribe")
        .map_err(Failure::Runtime)?;
    if !args.json {
        eprintln!(
            "{}",
            crate::render::dim(&format!("session {}", session.id()))
        );
    }
    let input_id = InputId::new();
    session
        .submit_with_id(input_id, Input::text(prompt))
        .await
        .context("cannot submit the input")
        .map_err(Failure::Runtime)?;

    let mut renderer = Renderer::new(args.json);
    renderer.prime(&earlier);
    let mut run_id: Option<RunId> = None;
    // The first stop cancels the turn cleanly; a second signal leaves at once.
    let mut stop: Option<Stop> = None;
    // Approval requests are asked one at a time, off the loop, so signals and updates
    // are handled while the prompt waits for a line.
    let mut approvals = Approvals::default();
    loop {
        let signalled = tokio::select! {
            signal = signals.recv() => Some(signal),
            Some((request_id, answer)) = approvals.answers.recv() => {
                approvals.asking = None;
                match answer {
                    Some((decision, message)) if stop.is_none() => {
                        let _ = session.decide_approval(request_id, decision, message).await;
                        approvals.ask_next();
                    }
                    Some(_) => {}
                    None if stop.is_none() => {
                        // End of input (^D) or the terminal is gone: nobody can answer,
                        // which is not a refusal by the user. Cancel the turn.
                        stop = Some(Stop::InputClosed);
                        approvals.queue.clear();
                        eprintln!("\nfoya: no answer (the input ended): cancelling the turn");
                        let _ = session.cancel().await;
                    }
                    None => {}
                }
                None
            }
            update = updates.recv() => {
                let Some(update) = update else {
                    eprintln!("foya: the session closed before the turn ended");
                    return Ok(Done(Err(Ended::Failed)));
                };
                if stop != Some(Stop::StdoutClosed)
                    && let Err(e) = renderer.render(&update)
                {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        eprintln!("foya: cannot write the output: {e}");
                    }
                    // Nobody reads the answer any more: stop the turn cleanly.
                    if stop.is_none() {
                        stop = Some(Stop::StdoutClosed);
                        let _ = session.cancel().await;
                    }
                }
                // Too slow a reader (a burst of deltas larger than the buffer): the
                // subscription ended after this notice; resume from the last event it
                // delivered, as chat does — the store replays what was missed.
                if let SessionUpdate::Notice(Notice::Lagged { last_seq, .. }) = &update {
                    updates = session
                        .subscribe(last_seq.next(), SubscribeOptions { approver })
                        .await
                        .context("cannot resubscribe after falling behind")
                        .map_err(Failure::Runtime)?;
                    renderer.resubscribed(updates.replay_end());
                    continue;
                }
                let SessionUpdate::Event(event) = &update else { continue };
                match &event.kind {
                    EventKind::TurnStarted { input_id: started } if *started == input_id => {
                        run_id = event.run_id;
                    }
                    EventKind::ApprovalRequested { request_id, tool_name, action, grant, .. }
                        if approver && event.run_id == run_id && stop.is_none() =>
                    {
                        let offers_session = crate::render::offers_session_grant(grant.as_deref());
                        approvals.queue.push_back((*request_id, tool_name.clone(), action.clone(), offers_session));
                        approvals.ask_next();
                    }
                    EventKind::ApprovalDecided { request_id, .. } => {
                        // Decided elsewhere (or by cancellation): no need to ask.
                        approvals.queue.retain(|(id, ..)| id != request_id);
                    }
                    EventKind::TurnComplete { status, .. } if run_id.is_some() && event.run_id == run_id => {
                        let _ = renderer.end_line();
                        match stop {
                            Some(Stop::Signal(signal @ (Signalled::Terminate | Signalled::Hangup))) => {
                                return Ok(Done(Err(Ended::Signalled(signal))));
                            }
                            Some(Stop::StdoutClosed) => return Ok(Done(Ok(()))),
                            Some(Stop::Signal(Signalled::Interrupt) | Stop::InputClosed) | None => {}
                        }
                        return Ok(Done(match status {
                            TurnStatus::Completed => Ok(()),
                            TurnStatus::Failed => Err(Ended::Failed),
                            TurnStatus::Cancelled => Err(Ended::Cancelled),
                        }));
                    }
                    EventKind::InputDropped { input_id: dropped, reason } if *dropped == input_id => {
                        eprintln!("foya: the input was dropped: {reason}");
                        return Ok(Done(Err(Ended::Failed)));
                    }
                    _ => {}
                }
                None
            }
        };
        let Some(signal) = signalled else { continue };
        if matches!(stop, Some(Stop::Signal(_))) {
            let _ = renderer.end_line();
            return Ok(Forced(signal));
        }
        stop = Some(Stop::Signal(signal));
        // A prompt left waiting is answered by the cancellation, not by the user.
        approvals.queue.clear();
        let _ = renderer.end_line();
        eprintln!("\n{}", signal.cancelling());
        let _ = session.cancel().await;
    }
}

/// The approval requests of `foya run`'s turn, asked one at a time on a task of their
/// own so the loop keeps handling signals and updates while a prompt waits.
#[derive(Debug)]
struct Approvals {
    /// Requests not asked yet: id, tool name, action, whether "allow for this session"
    /// is offered.
    queue: std::collections::VecDeque<(ApprovalRequestId, String, String, bool)>,
    /// The request whose prompt is on the terminal.
    asking: Option<ApprovalRequestId>,
    answers_tx: tokio::sync::mpsc::UnboundedSender<(ApprovalRequestId, Option<Answer>)>,
    /// Answers typed at the prompt (`None`: the input ended before a line was typed).
    answers: tokio::sync::mpsc::UnboundedReceiver<(ApprovalRequestId, Option<Answer>)>,
}

/// A typed answer: the decision and the message to the model.
type Answer = (ApprovalDecision, Option<String>);

impl Default for Approvals {
    fn default() -> Self {
        let (answers_tx, answers) = tokio::sync::mpsc::unbounded_channel();
        Self {
            queue: std::collections::VecDeque::new(),
            asking: None,
            answers_tx,
            answers,
        }
    }
}

impl Approvals {
    /// Puts the next queued request's prompt on the terminal, unless one is there.
    fn ask_next(&mut self) {
        if self.asking.is_some() {
            return;
        }
        let Some((request_id, tool, action, offers_session)) = self.queue.pop_front() else {
            return;
        };
        self.asking = Some(request_id);
        let answers = self.answers_tx.clone();
        tokio::spawn(async move {
            let answer = ask(&tool, &action, offers_session).await;
            let _ = answers.send((request_id, answer));
        });
    }
}

/// Asks the person at the terminal (what a line means: [`decision`]); `None` when the
/// input ended or failed before a line was typed. Type-ahead is discarded first.
/// "[a]lways this session" is offered only when the request grants it.
async fn ask(tool: &str, action: &str, offers_session: bool) -> Option<Answer> {
    let prompt = format!(
        "allow {}: {}? {}: ",
        crate::render::terminal_safe(tool),
        crate::render::terminal_safe(action),
        crate::render::approval_choices(offers_session)
    );
    let line = tokio::task::spawn_blocking(move || {
        // Keys typed before the prompt was shown (type-ahead while the model streamed)
        // are not an answer to a question the user has not seen: drop them.
        let stdin = std::io::stdin();
        let _ = nix::sys::termios::tcflush(&stdin, nix::sys::termios::FlushArg::TCIFLUSH);
        eprint!("{prompt}");
        let mut line = String::new();
        match stdin.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line),
        }
    })
    .await
    .ok()
    .flatten()?;
    Some(decision(line.trim()))
}

/// The decision a typed answer means: `y` allow once, `a` allow for the session, empty
/// or `n` deny, any other text deny with that text as the message to the model.
pub(crate) fn decision(answer: &str) -> Answer {
    match answer {
        "y" | "yes" => (ApprovalDecision::AllowOnce, None),
        "a" | "always" => (ApprovalDecision::AllowForSession, None),
        "" | "n" | "no" => (
            ApprovalDecision::Deny,
            Some("the user denied this call".into()),
        ),
        reason => (ApprovalDecision::Deny, Some(reason.to_owned())),
    }
}

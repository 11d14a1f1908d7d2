//! `foya run`: one headless turn, streamed to the terminal.

use crate::cli::{EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_USAGE, RunArgs};
use crate::render::Renderer;
use anyhow::Context as _;
use foya_actors::runtime::{Runtime, RuntimeConfig, SubscribeOptions};
use foya_protocol::{
    ApprovalDecision, ApprovalMode, EventKind, Input, InputId, RunId, Seq, SessionConfig,
    SessionId, SessionUpdate, TurnStatus,
};
use std::io::IsTerminal as _;

pub(crate) async fn run(args: RunArgs) -> u8 {
    match run_inner(args).await {
        Ok(code) => code,
        Err(Failure::Usage(e)) => {
            eprintln!("foya: {e:#}");
            EXIT_USAGE
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("foya: {e:#}");
            EXIT_FAILED
        }
    }
}

enum Failure {
    /// Bad arguments or configuration (exit 2).
    Usage(anyhow::Error),
    /// The runtime could not do its job (exit 1).
    Runtime(anyhow::Error),
}

async fn run_inner(args: RunArgs) -> Result<u8, Failure> {
    let cwd = crate::setup::working_dir(args.cwd.as_deref()).map_err(Failure::Usage)?;
    let (model, model_name) =
        crate::setup::model_client(&args.provider, &cwd).map_err(Failure::Usage)?;
    let dir = crate::data::data_dir(args.data.data_dir.as_deref()).map_err(Failure::Usage)?;
    let store = crate::data::open_store_with(&dir, args.durability).map_err(Failure::Runtime)?;

    let mut config = RuntimeConfig::new(store.clone(), model);
    config.stop_hook_commands = crate::data::stop_hooks(&cwd).map_err(Failure::Usage)?;
    let runtime = Runtime::start(config)
        .await
        .context("cannot start the runtime")
        .map_err(Failure::Runtime)?;
    let outcome = drive(&runtime, &store, &args, cwd, model_name).await;
    runtime.shutdown().await;
    outcome
}

async fn drive(
    runtime: &Runtime,
    store: &foya_storage::Store,
    args: &RunArgs,
    cwd: std::path::PathBuf,
    model: String,
) -> Result<u8, Failure> {
    let session = match &args.session {
        Some(id) => {
            let id: SessionId = id
                .parse()
                .map_err(|e| Failure::Usage(anyhow::anyhow!("{e}")))?;
            runtime
                .session(id)
                .await
                .context("cannot open the session")
                .map_err(Failure::Runtime)?
        }
        None => {
            let mut config = SessionConfig::new(cwd);
            config.approval_mode = args.approval;
            config.provider.clone_from(&args.provider.provider);
            config.model = model;
            config.max_steps = Some(args.max_steps);
            runtime
                .create_session(config)
                .await
                .context("cannot create a session")
                .map_err(Failure::Runtime)?
        }
    };
    let interactive = std::io::stdin().is_terminal();
    let approver = interactive && args.approval != ApprovalMode::Bypass;
    let from = store
        .last_seq(session.id())
        .map_err(|e| Failure::Runtime(e.into()))?
        .map_or(Seq::FIRST, Seq::next);
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
        .submit_with_id(input_id, Input::text(args.prompt.join(" ")))
        .await
        .context("cannot submit the input")
        .map_err(Failure::Runtime)?;

    let mut renderer = Renderer::new(args.json);
    let mut run_id: Option<RunId> = None;
    let mut interrupts = 0u32;
    loop {
        tokio::select! {
            // Ctrl-C cancels the turn cleanly; a second one leaves at once.
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts > 1 {
                    renderer.end_line();
                    return Ok(EXIT_CANCELLED);
                }
                eprintln!("\ncancelling… (Ctrl-C again to quit now)");
                let _ = session.cancel().await;
            }
            update = updates.recv() => {
                let Some(update) = update else {
                    eprintln!("foya: the session closed before the turn ended");
                    return Ok(EXIT_FAILED);
                };
                renderer.render(&update);
                let SessionUpdate::Event(event) = &update else { continue };
                match &event.kind {
                    EventKind::TurnStarted { input_id: started } if *started == input_id => {
                        run_id = event.run_id;
                    }
                    EventKind::ApprovalRequested { request_id, tool_name, action, .. }
                        if approver && event.run_id == run_id =>
                    {
                        let (decision, message) = ask(tool_name, action).await;
                        let _ = session.decide_approval(*request_id, decision, message).await;
                    }
                    EventKind::TurnComplete { status, .. } if run_id.is_some() && event.run_id == run_id => {
                        renderer.end_line();
                        return Ok(match status {
                            TurnStatus::Completed => EXIT_OK,
                            TurnStatus::Failed => EXIT_FAILED,
                            TurnStatus::Cancelled => EXIT_CANCELLED,
                        });
                    }
                    EventKind::InputDropped { input_id: dropped, reason } if *dropped == input_id => {
                        eprintln!("foya: the input was dropped: {reason}");
                        return Ok(EXIT_FAILED);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Asks the person at the terminal: `y` allow once, `a` allow for the session, anything
/// else denies (with the typed text, if any, as the message to the model).
async fn ask(tool: &str, action: &str) -> (ApprovalDecision, Option<String>) {
    eprint!("allow {tool}: {action}? [y]es / [a]lways this session / [n]o (or type a reason): ");
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    let answer = match line {
        Ok(Ok(line)) => line.trim().to_owned(),
        _ => String::new(),
    };
    match answer.as_str() {
        "y" | "yes" => (ApprovalDecision::AllowOnce, None),
        "a" | "always" => (ApprovalDecision::AllowForSession, None),
        "" | "n" | "no" => (
            ApprovalDecision::Deny,
            Some("the user denied this call".into()),
        ),
        reason => (ApprovalDecision::Deny, Some(reason.to_owned())),
    }
}

//! Following turns in `foya chat`: renders updates until every input submitted from the
//! prompt (and those typed meanwhile, which queue) has finished; answers approvals from
//! typed lines; Ctrl-C (SIGINT, the terminal is in cooked mode here) cancels the running
//! turn, a second one exits. SIGTERM or SIGHUP drains the runtime (as `foya serve` does
//! on them): the running turn is cancelled through the normal cancel path and its
//! `turn_complete{cancelled}` committed, queued inputs stay queued for the next resume;
//! then the chat exits 143 or 129. Another signal meanwhile quits at once.

use super::commands::{self, ChatCommand};
use super::input::TurnReader;
use super::{Action, Chat};
use crate::exit::Ended;
use crate::render::Renderer;
use crate::signals::Signalled;
use foya_actors::DEFAULT_SHUTDOWN_GRACE;
use foya_actors::SubscribeOptions;
use foya_protocol::event::Notice;
use foya_protocol::{
    ApprovalRequestId, EventKind, Input, InputId, RunId, SessionUpdate, TurnStatus,
};
use std::collections::{HashMap, HashSet};

/// Submits `input`, then the lines typed after it that were already read (`ahead`: the
/// rest of a paste, each handled as a line typed while the turn runs, so inputs queue in
/// the order they were typed), and follows them (and whatever is queued behind them) to
/// the end. `Ok(Some(leave))` asks the caller to leave the chat so.
///
/// # Errors
/// The session refused the input or its subscription closed.
pub(super) async fn follow(
    chat: &mut Chat<'_>,
    input: Input,
    ahead: Vec<String>,
) -> anyhow::Result<Option<super::Leave>> {
    let first = chat.session.submit_with_id(InputId::new(), input).await?;
    let mut state = Follow {
        pending: HashSet::from([first]),
        ..Follow::default()
    };
    for line in ahead {
        if let Some(code) = state.typed(chat, line).await {
            return Ok(Some(code));
        }
    }
    // Piped stdin keeps its one reader (given back below); a terminal gets a reader
    // for the time of the turn.
    let piped = chat.piped.take();
    let is_piped = piped.is_some();
    let mut reader = piped.unwrap_or_else(TurnReader::start);
    let mut reader_open = true;
    // SIGTERM or SIGHUP: the runtime drains (polled only once one arrived).
    let runtime = chat.runtime;
    let drain = runtime.drain(DEFAULT_SHUTDOWN_GRACE);
    tokio::pin!(drain);
    let mut terminated: Option<Signalled> = None;
    let result = loop {
        if state.pending.is_empty() && terminated.is_none() {
            break Ok(None);
        }
        tokio::select! {
            signal = chat.signals.recv() => {
                let _ = state.renderer.end_line();
                if terminated.is_some() {
                    chat.forced = true;
                    break Ok(Some(Err(Ended::Signalled(signal))));
                }
                match signal {
                    Signalled::Interrupt => {
                        state.interrupts += 1;
                        if state.interrupts > 1 {
                            let _ = chat.session.cancel().await;
                            break Ok(Some(Err(Ended::Cancelled)));
                        }
                        eprintln!("{}", crate::render::dim("cancelling… (Ctrl-C again to quit)"));
                        let _ = chat.session.cancel().await;
                    }
                    Signalled::Terminate | Signalled::Hangup => {
                        eprintln!("{}", crate::render::dim(&signal.cancelling()));
                        terminated = Some(signal);
                    }
                }
            }
            _ = &mut drain, if terminated.is_some() => {
                break Ok(terminated.map(|signal| Err(Ended::Signalled(signal))));
            }
            line = reader.lines.recv(), if reader_open && terminated.is_none() => match line {
                Some(Some(line)) => {
                    if let Some(code) = state.typed(chat, line).await {
                        break Ok(Some(code));
                    }
                }
                Some(None) | None => reader_open = false,
            },
            update = chat.updates.recv() => {
                let Some(update) = update else {
                    break Err(anyhow::anyhow!("the session closed"));
                };
                if let SessionUpdate::Notice(notice) = &update {
                    match notice {
                        Notice::Lagged { last_seq, .. } => {
                            // Live deltas were lost: the renderer prints the rest of
                            // the turn from the persisted answers the resubscription
                            // replays.
                            state.renderer.fell_behind();
                            let options = SubscribeOptions { approver: chat.approver };
                            chat.updates = chat.session.subscribe(last_seq.next(), options).await?;
                            state.renderer.resubscribed(chat.updates.replay_end());
                            continue;
                        }
                        Notice::Closed { reason, .. } | Notice::Moved { reason, .. } => {
                            break Err(anyhow::anyhow!("the session closed: {reason}"));
                        }
                    }
                }
                let _ = state.renderer.render(&update);
                state.event(chat, &update);
            }
        }
    };
    let _ = state.renderer.end_line();
    if is_piped {
        chat.piped = Some(reader);
    } else {
        reader.stop().await;
    }
    result
}

/// What the follower tracks.
#[derive(Debug, Default)]
struct Follow {
    renderer: Renderer,
    /// Inputs submitted here that have not finished.
    pending: HashSet<InputId>,
    /// Turns of those inputs.
    runs: HashMap<RunId, InputId>,
    /// The approval request the next typed line answers.
    awaiting: Option<ApprovalRequestId>,
    interrupts: u32,
}

impl Follow {
    /// A line typed while turns run: an approval answer, a command, or a queued input.
    async fn typed(&mut self, chat: &mut Chat<'_>, line: String) -> Option<super::Leave> {
        if let Some(request_id) = self.awaiting.take() {
            let (decision, message) = crate::run::decision(line.trim());
            if let Err(e) = chat
                .session
                .decide_approval(request_id, decision, message)
                .await
            {
                eprintln!("foya: {e}");
            }
            return None;
        }
        let text = line.trim();
        match commands::split(text).and_then(|(name, _)| commands::find(name)) {
            Some(ChatCommand::Cancel) => {
                let _ = chat.session.cancel().await;
                None
            }
            Some(ChatCommand::Exit) => {
                let _ = chat.session.cancel().await;
                Some(Ok(()))
            }
            _ => match chat.command(text).await {
                Action::Done => None,
                Action::Exit(leave) => Some(leave),
                Action::Submit(input) => {
                    match chat.session.submit_with_id(InputId::new(), input).await {
                        Ok(id) => {
                            self.pending.insert(id);
                            let _ = self.renderer.end_line();
                            eprintln!("{}", crate::render::dim(&format!("queued: {text}")));
                        }
                        Err(e) => eprintln!("foya: {e}"),
                    }
                    None
                }
            },
        }
    }

    fn event(&mut self, chat: &Chat<'_>, update: &SessionUpdate) {
        let SessionUpdate::Event(event) = update else {
            return;
        };
        match &event.kind {
            EventKind::TurnStarted { input_id } if self.pending.contains(input_id) => {
                if let Some(run_id) = event.run_id {
                    self.runs.insert(run_id, *input_id);
                }
                self.interrupts = 0;
            }
            EventKind::TurnComplete { status, .. } => {
                let input = event.run_id.and_then(|r| self.runs.remove(&r));
                if let Some(input) = input {
                    self.pending.remove(&input);
                    if *status == TurnStatus::Cancelled {
                        eprintln!("{}", crate::render::dim("(turn cancelled)"));
                    }
                }
            }
            EventKind::InputDropped { input_id, reason } if self.pending.remove(input_id) => {
                eprintln!("foya: the input was dropped: {reason}");
            }
            EventKind::ApprovalRequested {
                request_id, grant, ..
            } if chat.approver => {
                let offers_session = crate::render::offers_session_grant(grant.as_deref());
                eprintln!(
                    "  {}, then Enter",
                    crate::render::approval_choices(offers_session)
                );
                self.awaiting = Some(*request_id);
            }
            EventKind::ApprovalDecided { request_id, .. } if self.awaiting == Some(*request_id) => {
                self.awaiting = None;
            }
            _ => {}
        }
    }
}

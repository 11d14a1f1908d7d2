//! `foya chat`: an interactive terminal session. The answer streams to stdout, reasoning
//! dimmed, tool calls with their status (queued ▸ running ▸ done/error) and a result
//! preview (rendering is `render.rs`); approval prompts; Ctrl-C cancels the turn (a
//! second one exits); lines typed while a turn runs are queued; slash commands (the
//! table in `commands.rs`) and project commands; `--session ID` resumes.
//! SIGTERM or SIGHUP stops the chat gracefully (`turn.rs`): a running turn is cancelled
//! (its `turn_complete{cancelled}` committed, queued inputs kept for the next resume)
//! and the exit status is 143 or 129, also when idle; a second signal quits at once.
//!
//! When stdin is not a terminal (`printf 'a\nb\n' | foya chat`), every line is an
//! input (or a command), submitted in order as it is read by one reader for the whole
//! session (so no line is lost between turns); nobody answers approvals (a call that
//! needs one is denied, as with `foya run`); at the end of stdin the chat waits for the
//! submitted turns to finish, then exits 0.

mod commands;
mod input;
mod turn;

use crate::args::ChatArgs;
use crate::exit::{CommandError, Ended};
use crate::signals::{Signalled, Signals};
use anyhow::Context as _;
use commands::ChatCommand;
use foya_actors::{Runtime, SubscribeOptions};
use foya_actors::{SessionHandle, Subscription};
use foya_protocol::{ApprovalMode, Input, Seq, SessionConfig, SessionId};
use foya_storage::EventLog as _;
use input::{Editor, Prompted};
use std::io::IsTerminal as _;
use std::path::PathBuf;

/// How the chat is left: `Ok` (`/exit`, Ctrl-D, Ctrl-C twice at the prompt) or the end
/// that sets the exit status (a cancelled turn, a signal).
type Leave = Result<(), Ended>;

/// `foya chat`: an interactive session on a terminal, or one input per piped line.
///
/// # Errors
/// A usage or configuration error; the runtime could not do its job; the chat was left
/// by a signal or a cancel (its exit status).
pub async fn chat(args: ChatArgs) -> Result<(), CommandError> {
    // Installed first, so a SIGTERM or SIGHUP from now on stops the chat gracefully
    // instead of killing the process.
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return Err(failed(e)),
    };
    let cwd = match crate::setup::working_dir(args.cwd.as_deref()) {
        Ok(cwd) => cwd,
        Err(e) => return Err(usage(e)),
    };
    let dir = match crate::data::data_dir(args.data.data_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => return Err(usage(e)),
    };
    // `--session ID` resumes a stored session that is not deleted: otherwise (or without
    // a store at all) this says so and exits 1, creating nothing — checked before the
    // provider, so the answer is the same whatever the provider.
    let shared_url = crate::shared_store::url(&args.store);
    let resumed: Option<foya_storage::LogStore> = match &args.session {
        Some(id) => match id.parse::<SessionId>() {
            Ok(id) => match shared_url {
                Some(url) => {
                    let store = match crate::shared_store::open(url).await {
                        Ok(store) => store,
                        Err(e) => return Err(failed(e)),
                    };
                    match crate::shared_store::input_refusal(&store, id).await {
                        Ok(None) => Some(store),
                        Ok(Some(message)) => {
                            eprintln!("foya: {message}");
                            store.close().await;
                            return Err(Ended::Failed.into());
                        }
                        Err(e) => {
                            store.close().await;
                            return Err(failed(e));
                        }
                    }
                }
                None => {
                    match crate::data::open_for_input(&dir, id, foya_storage::Durability::Immediate)
                    {
                        Ok(Some(store)) => Some(store.into()),
                        Ok(None) => return Err(Ended::Failed.into()),
                        Err(e) => return Err(failed(e)),
                    }
                }
            },
            Err(e) => return Err(usage(anyhow::anyhow!("{e}"))),
        },
        None => None,
    };
    let (model, model_name) = match crate::setup::model_client(&args.provider, &cwd) {
        Ok(m) => m,
        Err(e) => return Err(usage(e)),
    };
    let auto_compact = match crate::context_config::auto_compact(&cwd, args.compaction) {
        Ok(on) => on,
        Err(e) => return Err(usage(e)),
    };
    let mcp = match crate::mcp::load(&cwd, &args.mcp) {
        Ok(mcp) => mcp,
        Err(e) => return Err(usage(e)),
    };
    let hooks = match crate::hooks::load(&cwd) {
        Ok(hooks) => hooks,
        Err(e) => return Err(usage(e)),
    };
    let store: foya_storage::LogStore = match (resumed, shared_url) {
        (Some(store), _) => store,
        (None, Some(url)) => match crate::shared_store::open(url).await {
            Ok(store) => store,
            Err(e) => return Err(failed(e)),
        },
        (None, None) => match crate::data::open_store(&dir) {
            Ok(store) => store.into(),
            Err(e) => return Err(failed(e)),
        },
    };
    let mut config = match crate::setup::runtime_config(store.clone(), model) {
        Ok(config) => config,
        Err(e) => return Err(usage(e)),
    };
    config.context.generate_titles = true;
    config.context.auto_compact = auto_compact;
    config.mcp = mcp;
    crate::hooks::apply(&mut config, hooks, &dir);
    // Where the runtime finds user commands: chat lists them with an unknown command.
    let user_dir = config.context.resolved_user_dir();
    config.attachments = Some(crate::data::attachments(&dir, &store));
    let runtime = match Runtime::start(config).await {
        Ok(r) => r,
        Err(e) => return Err(failed(anyhow::anyhow!("cannot start the runtime: {e}"))),
    };
    let (code, forced) = match open(&runtime, &store, &args, cwd, model_name).await {
        Ok((session, updates, cwd)) => {
            let approver = approver(&args);
            // Piped stdin: one reader for the whole chat, never stopped between turns.
            let piped = (!std::io::stdin().is_terminal()).then(input::TurnReader::start);
            let mut chat = Chat {
                runtime: &runtime,
                session,
                updates,
                cwd,
                user_dir,
                approver,
                piped,
                signals,
                forced: false,
            };
            let code = chat.run().await;
            (code, chat.forced)
        }
        Err(e) => (Err(failed(e)), false),
    };
    if forced {
        // A second signal: leave at once, without waiting for a cancel to finish.
        runtime.shutdown_within(std::time::Duration::ZERO).await;
    } else {
        runtime.shutdown().await;
    }
    code
}

/// Whether this chat answers approvals: only on a terminal (piped lines are inputs) and
/// unless approvals are bypassed.
fn approver(args: &ChatArgs) -> bool {
    args.approval != ApprovalMode::Bypass && std::io::stdin().is_terminal()
}

fn usage(e: anyhow::Error) -> CommandError {
    CommandError::Usage(e)
}

fn failed(e: anyhow::Error) -> CommandError {
    e.into()
}

/// Creates or resumes the session and subscribes after its last event; returns them
/// with the session's working directory.
async fn open(
    runtime: &Runtime,
    store: &foya_storage::LogStore,
    args: &ChatArgs,
    cwd: PathBuf,
    model: String,
) -> anyhow::Result<(SessionHandle, Subscription, PathBuf)> {
    let (session, cwd) = match &args.session {
        Some(id) => {
            let id: SessionId = id.parse()?;
            let session = runtime
                .session(id)
                .await
                .context("cannot open the session")?;
            // The model of the command line, as `foya run --session` (`config_changed`
            // when it differs from the session's).
            session
                .set_model(args.provider.provider.clone(), model)
                .await
                .context("cannot switch the session's model")?;
            eprintln!("{}", crate::render::dim(&format!("resumed session {id}")));
            let cwd = store.session(id).await?.map_or(cwd, |s| s.cwd);
            (session, cwd)
        }
        None => {
            let mut config = SessionConfig::new(cwd.clone());
            config.approval_mode = args.approval;
            config.provider.clone_from(&args.provider.provider);
            config.model = model;
            config.max_steps = Some(args.steps.max_steps);
            config.mcp_servers = args.mcp.selection();
            let session = runtime
                .create_session(config)
                .await
                .context("cannot create a session")?;
            eprintln!(
                "{}",
                crate::render::dim(&format!("session {}", session.id()))
            );
            (session, cwd)
        }
    };
    if std::io::stdin().is_terminal() {
        // Someone types: say how (a script piping its prompts needs no hint).
        eprintln!(
            "{}",
            crate::render::dim("type a prompt; /help for commands; Ctrl-D or /exit quits")
        );
    }
    let from = store
        .last_seq(session.id())
        .await?
        .map_or(Seq::FIRST, Seq::next);
    let approver = approver(args);
    let updates = session
        .subscribe(from, SubscribeOptions { approver })
        .await
        .context("cannot subscribe")?;
    Ok((session, updates, cwd))
}

/// The interactive loop.
struct Chat<'a> {
    runtime: &'a Runtime,
    session: SessionHandle,
    updates: Subscription,
    /// The session's working directory (where its project commands are).
    cwd: PathBuf,
    /// The user-level directory of the runtime's context (user commands).
    user_dir: Option<PathBuf>,
    approver: bool,
    /// The line reader when stdin is not a terminal (taken while a turn is followed).
    piped: Option<input::TurnReader>,
    /// Ctrl-C, SIGTERM and SIGHUP, installed for the whole chat.
    signals: Signals,
    /// A second signal asked to quit at once (the runtime is not given time to drain).
    forced: bool,
}

/// What a slash command asks the loop to do.
enum Action {
    /// Nothing more (the command was handled).
    Done,
    /// Submit this input and follow its turn.
    Submit(Input),
    /// Leave the chat.
    Exit(Leave),
}

impl Chat<'_> {
    async fn run(&mut self) -> Result<(), CommandError> {
        let code = self.run_lines().await;
        if let Some(reader) = self.piped.take() {
            reader.stop().await;
        }
        code
    }

    /// The next line: from the piped reader, else from the line editor (created on
    /// first use).
    async fn read(&mut self, editor: &mut Option<Editor>) -> anyhow::Result<Prompted> {
        if let Some(reader) = self.piped.as_mut() {
            return Ok(tokio::select! {
                signal = self.signals.recv() => Prompted::Signal(signal),
                line = reader.lines.recv() => match line {
                    Some(Some(line)) => Prompted::Line(line),
                    Some(None) | None => Prompted::Eof,
                },
            });
        }
        let editor = match editor {
            Some(editor) => editor,
            None => editor.insert(Editor::new()?),
        };
        Ok(tokio::select! {
            signal = self.signals.recv() => Prompted::Signal(signal),
            prompted = editor.read() => prompted,
        })
    }

    async fn run_lines(&mut self) -> Result<(), CommandError> {
        let mut editor = None;
        let mut interrupted = false;
        loop {
            let prompted = match self.read(&mut editor).await {
                Ok(p) => p,
                Err(e) => return Err(failed(e)),
            };
            let line = match prompted {
                Prompted::Line(line) => line,
                // No turn runs: SIGTERM or SIGHUP leaves with its status.
                Prompted::Signal(signal @ (Signalled::Terminate | Signalled::Hangup)) => {
                    return Err(Ended::Signalled(signal).into());
                }
                Prompted::Interrupted | Prompted::Signal(Signalled::Interrupt) if interrupted => {
                    return Ok(());
                }
                Prompted::Interrupted | Prompted::Signal(Signalled::Interrupt) => {
                    interrupted = true;
                    eprintln!(
                        "{}",
                        crate::render::dim("(Ctrl-C again, Ctrl-D or /exit to quit)")
                    );
                    continue;
                }
                Prompted::Eof => return Ok(()),
            };
            interrupted = false;
            let input = match self.command(line.trim()).await {
                Action::Done => continue,
                Action::Exit(leave) => return Ok(leave?),
                Action::Submit(input) => input,
            };
            // The rest of a paste the line editor read with this line queues behind it.
            let ahead = match editor.as_mut() {
                Some(editor) if self.piped.is_none() => editor.typed_ahead().await,
                _ => Vec::new(),
            };
            match turn::follow(self, input, ahead).await {
                Ok(None) => {}
                Ok(Some(leave)) => return Ok(leave?),
                Err(e) => return Err(failed(e)),
            }
        }
    }

    /// Interprets a typed line: a slash command ([`commands::COMMANDS`], or a project
    /// command passed to the session), or a prompt to submit. An unknown command is
    /// refused here, naming every command chat accepts.
    async fn command(&mut self, line: &str) -> Action {
        if line.is_empty() {
            return Action::Done;
        }
        let Some((name, arguments)) = commands::split(line) else {
            return Action::Submit(Input::text(line));
        };
        let Some(command) = commands::find(name) else {
            if let Some(message) = commands::unknown(name, &self.cwd, self.user_dir.as_deref()) {
                eprintln!("foya: {message}");
                return Action::Done;
            }
            return Action::Submit(Input::command(name, arguments));
        };
        match command {
            ChatCommand::Exit => Action::Exit(Ok(())),
            ChatCommand::Help => {
                eprintln!("{}", commands::help(&self.cwd, self.user_dir.as_deref()));
                Action::Done
            }
            ChatCommand::Compact => Action::Submit(Input::command(name, arguments)),
            ChatCommand::Cancel => {
                eprintln!("{}", crate::render::dim("no turn is running"));
                Action::Done
            }
            ChatCommand::Title if arguments.is_empty() => {
                eprintln!("usage: /title TEXT");
                Action::Done
            }
            ChatCommand::Title => {
                match self.session.set_title(arguments.to_owned()).await {
                    Ok(()) => eprintln!("{}", crate::render::dim("title set")),
                    Err(e) => eprintln!("foya: {e}"),
                }
                Action::Done
            }
            ChatCommand::Sessions => {
                match self.runtime.list_sessions().await {
                    Ok(list) => {
                        for s in list.iter().filter(|s| !s.deleted) {
                            let mark = if s.id == self.session.id() { "*" } else { " " };
                            let title = s.title.as_deref().unwrap_or("(untitled)");
                            eprintln!("{mark} {}  {title}", s.id);
                        }
                    }
                    Err(e) => eprintln!("foya: {e}"),
                }
                Action::Done
            }
        }
    }
}

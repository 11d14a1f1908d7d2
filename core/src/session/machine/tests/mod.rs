//! Machine tests: a scenario of inputs in, a transcript of effects out, compared with
//! an inline snapshot. No runtime: the harness answers appends (committed, or failed
//! when told), prepares inputs with an empty project and records no hook events.
//!
//! Transcript: `> input` for what happens, `< effect` for what the machine asks;
//! ids are shown as `i1` (inputs), `r1` (runs), `a1` (approval requests), in order of
//! appearance. An append shows its run, its seqs and its events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod approvals;
mod lifecycle;
mod queue;
mod titles;

use super::*;
use expect_test::Expect;
use foya_protocol::{AssistantMessage, SessionConfig, SessionId, ToolCall, ToolMessage};
use std::fmt::Write as _;

/// Drives a [`SessionMachine`] the way the SessionActor does and writes the transcript.
struct Harness {
    machine: SessionMachine,
    out: String,
    /// Long ids as written, and their short names.
    names: Vec<(String, String)>,
    /// The next commits fail with this message.
    failing: Option<String>,
    /// Run ids of the turns started, in order.
    runs: Vec<RunId>,
    /// The wall clock every input is fed with.
    now_ms: u64,
}

fn settings() -> Settings {
    Settings {
        queued_on_restart: QueuedOnRestart::Run,
        without_approver: WithoutApprover::Wait,
        generate_titles: false,
    }
}

/// What the driver's `plan` answers with an empty project: the built-in commands only
/// (the runtime's `session/commands.rs` expands project commands too).
fn plan(input: Input) -> (Input, Plan) {
    let Some(command) = input.command.clone() else {
        return (input, Plan::Model);
    };
    let plan = match command.name.trim().trim_start_matches('/') {
        "compact" => Plan::Compact,
        "title" => match command.arguments.trim() {
            "" => Plan::GenerateTitle,
            title => Plan::SetTitle(title.to_owned()),
        },
        name => Plan::Unknown(format!(
            "unknown command /{name}; available commands: /compact, /title"
        )),
    };
    (input, plan)
}

fn config() -> SessionConfig {
    SessionConfig::new("/w")
}

fn created(id: SessionId, config: SessionConfig) -> Event {
    Event {
        session_id: id,
        seq: Seq::FIRST,
        run_id: None,
        at_ms: 1_000,
        kind: EventKind::SessionCreated { config },
    }
}

impl Harness {
    /// A new session (only `session_created` in its log), started.
    fn new() -> Self {
        Self::with(settings(), config())
    }

    fn with(settings: Settings, config: SessionConfig) -> Self {
        let id = SessionId::new();
        Self::from_log(settings, &[created(id, config)])
    }

    /// A session loaded from `log` (the `Loaded` input is not fed yet).
    fn from_log(settings: Settings, log: &[Event]) -> Self {
        let fold = SessionState::from_log(log).unwrap();
        let mut harness = Self {
            machine: SessionMachine::new(fold, settings),
            out: String::new(),
            names: Vec::new(),
            failing: None,
            runs: Vec::new(),
            now_ms: 1_000,
        };
        // Names in order of appearance: the session, then the log's runs and inputs.
        harness.name("s", &log[0].session_id.to_string());
        for event in log {
            if let Some(run) = event.run_id {
                harness.name("r", &run.to_string());
            }
            harness.describe(&event.kind);
        }
        harness
    }

    fn name(&mut self, prefix: &str, long: &str) -> String {
        if let Some((_, short)) = self.names.iter().find(|(l, _)| l == long) {
            return short.clone();
        }
        let n = self
            .names
            .iter()
            .filter(|(_, s)| s.starts_with(prefix))
            .count()
            + 1;
        let short = format!("{prefix}{n}");
        self.names.push((long.to_owned(), short.clone()));
        short
    }

    fn input_id(&mut self) -> InputId {
        let id = InputId::new();
        self.name("i", &id.to_string());
        id
    }

    /// The run of the `n`-th turn started (1-based).
    fn run(&self, n: usize) -> RunId {
        self.runs[n - 1]
    }

    /// Feeds `input` (written as `> label`) and answers the effects like the driver.
    fn on(&mut self, label: &str, input: SessionInput) -> &mut Self {
        writeln!(self.out, "> {label}").unwrap();
        let mut effects = self.machine.on(input, self.now_ms);
        loop {
            let mut answer = None;
            for effect in effects {
                if let Some(input) = self.effect(effect) {
                    answer = Some(input);
                }
            }
            match answer {
                Some(input) => effects = self.machine.on(input, self.now_ms),
                None => return self,
            }
        }
    }

    fn effect(&mut self, effect: Effect) -> Option<SessionInput> {
        let line = match effect {
            Effect::Append(events) => {
                let run = events[0]
                    .run_id
                    .map_or("-".into(), |r| self.name("r", &r.to_string()));
                let kinds: Vec<String> = events.iter().map(|e| self.describe(&e.kind)).collect();
                let (first, last) = (events[0].seq, events[events.len() - 1].seq);
                writeln!(
                    self.out,
                    "< append {run} {first}..{last}: {}",
                    kinds.join(", ")
                )
                .unwrap();
                return Some(match &self.failing {
                    Some(message) => {
                        writeln!(self.out, "> commit failed").unwrap();
                        SessionInput::CommitFailed(message.clone())
                    }
                    None => SessionInput::Committed(events),
                });
            }
            // Every commit is published: shown by its append.
            Effect::Publish(_) => return None,
            Effect::PrepareInput { input_id, input } => {
                let (input, plan) = plan(input);
                return Some(SessionInput::InputPrepared {
                    input_id,
                    input,
                    plan,
                });
            }
            Effect::RunSessionEndHooks => {
                writeln!(self.out, "< run SessionEnd hooks").unwrap();
                return Some(SessionInput::SessionEndHooksRan { kinds: Vec::new() });
            }
            Effect::PublishDeltas { run_id, deltas } => {
                format!(
                    "deltas {} x{}",
                    self.name("r", &run_id.to_string()),
                    deltas.len()
                )
            }
            Effect::StartTurn {
                run_id,
                mode,
                first_in_runtime,
            } => {
                self.runs.push(run_id);
                let run = self.name("r", &run_id.to_string());
                let first = if first_in_runtime { " first" } else { "" };
                format!("start_turn {run} {mode:?}{first}")
            }
            Effect::CancelTurn { reason } => format!("cancel_turn {reason:?}"),
            Effect::StopTurn => "stop_turn".into(),
            Effect::StartTitle { text, expected } => {
                format!("start_title {text:?} expected={expected:?}")
            }
            Effect::AddSubscriber {
                approver,
                replay_end,
            } => format!("subscriber approver={approver} replay_end={replay_end}"),
            Effect::Reply(answer) => format!("reply {}", self.answer(answer)),
            Effect::AnswerApproval { request_id, answer } => {
                let id = self.name("a", &request_id.to_string());
                format!("answer_approval {id} {answer:?}")
            }
            Effect::DropApproval { request_id } => {
                format!("drop_approval {}", self.name("a", &request_id.to_string()))
            }
            Effect::DropApprovals => "drop_approvals".into(),
            Effect::AnswerDelete(result) => format!("answer_delete {result:?}"),
            Effect::AnswerShutdown => "answer_shutdown".into(),
            Effect::AnswerDrained => "answer_drained".into(),
            Effect::ForgetTranscript => "forget_transcript".into(),
            Effect::CloseSubscribers { reason } => format!("close_subscribers {reason:?}"),
            Effect::WentIdle => "idle".into(),
            Effect::Stop { reason } => format!("stop {reason:?}"),
            Effect::Fail(message) => format!("fail {message:?}"),
        };
        writeln!(self.out, "< {line}").unwrap();
        None
    }

    fn answer(&mut self, answer: Answer) -> String {
        match answer {
            Answer::Submitted(Ok(id)) => format!("submitted {}", self.name("i", &id.to_string())),
            Answer::PendingApprovals(pending) => {
                let ids: Vec<String> = pending
                    .iter()
                    .map(|r| self.name("a", &r.request_id.to_string()))
                    .collect();
                format!("pending [{}]", ids.join(", "))
            }
            Answer::Submitted(Err(e)) | Answer::Done(Err(e)) => format!("error: {e}"),
            Answer::Done(Ok(())) | Answer::Appended(Ok(())) => "ok".into(),
            Answer::Appended(Err(e)) => format!("refused: {e}"),
            Answer::TitleApplied(applied) => format!("title applied={applied}"),
        }
    }

    fn describe(&mut self, kind: &EventKind) -> String {
        let name = kind.type_name();
        match kind {
            EventKind::UserMessage { input_id, input } => {
                format!(
                    "{name}({} {:?})",
                    self.name("i", &input_id.to_string()),
                    input.text
                )
            }
            EventKind::TurnStarted { input_id } | EventKind::InputQueued { input_id, .. } => {
                format!("{name}({})", self.name("i", &input_id.to_string()))
            }
            EventKind::InputDropped { input_id, reason } => {
                format!(
                    "{name}({} {reason:?})",
                    self.name("i", &input_id.to_string())
                )
            }
            EventKind::TurnComplete {
                status,
                reason,
                error,
            } => {
                let mut s = format!("{name}({status:?}");
                if let Some(reason) = reason {
                    write!(s, " {reason:?}").unwrap();
                }
                if let Some(error) = error {
                    write!(s, " {}: {:?}", error.class.as_str(), error.message).unwrap();
                }
                s + ")"
            }
            EventKind::ToolMessage(m) => format!("{name}({} {:?})", m.tool_call_id, m.content),
            EventKind::ApprovalRequested {
                request_id, grant, ..
            } => format!(
                "{name}({} grant={grant:?})",
                self.name("a", &request_id.to_string())
            ),
            EventKind::ApprovalDecided {
                request_id,
                decision,
                grant,
                ..
            } => format!(
                "{name}({} {decision:?} grant={grant:?})",
                self.name("a", &request_id.to_string())
            ),
            EventKind::TitleSet { title, source } => format!("{name}({title:?} {source:?})"),
            EventKind::ConfigChanged { provider, model } => format!("{name}({provider}/{model})"),
            _ => name.to_owned(),
        }
    }

    // Scenario steps.

    fn submit(&mut self, text: &str) -> InputId {
        let input_id = self.input_id();
        self.submit_as(input_id, Input::text(text));
        input_id
    }

    fn submit_as(&mut self, input_id: InputId, input: Input) -> &mut Self {
        let shown = match &input.command {
            Some(c) => format!("/{} {:?}", c.name, c.arguments),
            None => format!("{:?}", input.text),
        };
        let label = format!("submit {} {shown}", self.name("i", &input_id.to_string()));
        self.on(
            &label,
            SessionInput::SubmitInput {
                input_id,
                input,
                model_takes_images: false,
            },
        )
    }

    fn turn_append(&mut self, run: RunId, kinds: Vec<EventKind>) -> &mut Self {
        let names: Vec<&str> = kinds.iter().map(EventKind::type_name).collect();
        let label = format!(
            "turn_append {} [{}]",
            self.name("r", &run.to_string()),
            names.join(", ")
        );
        self.on(&label, SessionInput::TurnAppend { run_id: run, kinds })
    }

    /// The turn writes its `turn_complete` and its actor exits.
    fn turn_completes(&mut self, run: RunId) -> &mut Self {
        self.turn_append(run, vec![completed(TurnStatus::Completed, None, None)]);
        self.on("turn_ended", SessionInput::TurnEnded { failure: None })
    }

    fn ask_approval(
        &mut self,
        run: RunId,
        call: &str,
        grant_key: &str,
        approver: bool,
    ) -> ApprovalRequestId {
        let request_id = ApprovalRequestId::new();
        let label = format!(
            "approval_requested {} {call} approver={approver}",
            self.name("a", &request_id.to_string())
        );
        self.on(
            &label,
            SessionInput::ApprovalRequested {
                request_id,
                run_id: run,
                tool_call_id: ToolCallId::new(call),
                tool_name: "shell".into(),
                action: "ls".into(),
                reason: "runs a command".into(),
                grant_key: grant_key.into(),
                approver_attached: approver,
            },
        );
        request_id
    }

    fn decide(&mut self, request_id: ApprovalRequestId, decision: ApprovalDecision) -> &mut Self {
        let label = format!(
            "decide {} {decision:?}",
            self.name("a", &request_id.to_string())
        );
        self.on(
            &label,
            SessionInput::DecideApproval {
                request_id,
                decision,
                message: None,
            },
        )
    }

    /// The transcript so far, with every long id replaced by its name.
    fn take(&mut self) -> String {
        let mut out = std::mem::take(&mut self.out);
        for (long, short) in &self.names {
            out = out.replace(long, short);
        }
        out
    }

    fn check(&mut self, expected: Expect) {
        expected.assert_eq(&self.take());
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: ToolCallId::new(id),
        name: "shell".into(),
        arguments: serde_json::json!({}),
        extra: None,
    }
}

fn assistant(calls: &[&str]) -> EventKind {
    EventKind::AssistantMessage(AssistantMessage {
        tool_calls: calls.iter().map(|c| call(c)).collect(),
        ..AssistantMessage::default()
    })
}

fn tool_started(id: &str) -> EventKind {
    EventKind::ToolStarted {
        tool_call_id: ToolCallId::new(id),
        name: "shell".into(),
    }
}

fn tool_result(id: &str) -> EventKind {
    EventKind::ToolMessage(ToolMessage {
        tool_call_id: ToolCallId::new(id),
        content: "done".into(),
        is_error: false,
        images: Vec::new(),
    })
}

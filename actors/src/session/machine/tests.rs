//! Machine tests: a scenario of inputs in, a transcript of effects out, compared with
//! an inline snapshot. No runtime: the harness answers appends (committed, or failed
//! when told), prepares inputs with an empty project and records no hook events.
//!
//! Transcript: `> input` for what happens, `< effect` for what the machine asks;
//! ids are shown as `i1` (inputs), `r1` (runs), `a1` (approval requests), in order of
//! appearance. An append shows its run, its seqs and its events.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::context::ProjectContext;
use crate::session::commands;
use expect_test::{Expect, expect};
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
}

fn settings() -> Settings {
    Settings {
        queued_on_restart: QueuedOnRestart::Run,
        without_approver: WithoutApprover::Wait,
        generate_titles: false,
        clock: || 1_000,
    }
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
        let mut effects = self.machine.on(input);
        loop {
            let mut answer = None;
            for effect in effects {
                if let Some(input) = self.effect(effect) {
                    answer = Some(input);
                }
            }
            match answer {
                Some(input) => effects = self.machine.on(input),
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
                let (input, plan) = commands::plan(&ProjectContext::default(), input);
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

#[test]
fn inputs_arriving_while_busy_queue_and_run_in_fifo_order() {
    let mut h = Harness::new();
    h.submit("a");
    h.submit("b");
    h.submit("c");
    let first = h.run(1);
    h.turn_completes(first);
    let second = h.run(2);
    h.turn_completes(second);
    let third = h.run(3);
    h.turn_completes(third);
    h.check(expect![[r#"
        > submit i1 "a"
        < append r1 2..3: user_message(i1 "a"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "b"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > submit i3 "c"
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > turn_append r1 [turn_complete]
        < append r1 6..6: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < append r2 7..8: user_message(i2 "b"), turn_started(i2)
        < start_turn r2 Model
        > turn_append r2 [turn_complete]
        < append r2 9..9: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < append r3 10..11: user_message(i3 "c"), turn_started(i3)
        < start_turn r3 Model
        > turn_append r3 [turn_complete]
        < append r3 12..12: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
    "#]]);
}

#[test]
fn an_input_id_is_applied_once_and_bad_inputs_are_refused_before_anything_is_written() {
    let mut h = Harness::new();
    let id = h.submit("hi");
    h.submit_as(id, Input::text("hi"));
    let blank = h.input_id();
    h.submit_as(blank, Input::text("  "));
    let with_image = Input {
        images: vec![foya_protocol::AttachmentRef {
            id: "01930000-0000-7000-8000-000000000001".into(),
            media_type: Some("image/png".into()),
        }],
        ..Input::text("what is this?")
    };
    let image = h.input_id();
    h.submit_as(image, with_image);
    h.check(expect![[r#"
        > submit i1 "hi"
        < append r1 2..3: user_message(i1 "hi"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i1 "hi"
        < reply submitted i1
        > submit i2 "  "
        < reply error: the input is empty
        > submit i3 "what is this?"
        < reply error: model "" does not accept images (its provider profile has no vision); send the input without images
    "#]]);
}

#[test]
fn a_subscriber_replays_up_to_the_last_committed_seq() {
    let mut h = Harness::new();
    h.on("subscribe", SessionInput::Subscribe { approver: true });
    h.submit("go");
    h.on("subscribe", SessionInput::Subscribe { approver: false });
    h.check(expect![[r#"
        > subscribe
        < subscriber approver=true replay_end=1
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > subscribe
        < subscriber approver=false replay_end=3
    "#]]);
}

#[test]
fn cancel_is_a_no_op_when_idle_and_cancels_the_turn_when_busy() {
    let mut h = Harness::new();
    h.on("cancel", SessionInput::Cancel);
    h.submit("first");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1", "c2"]), tool_started("c1")]);
    h.on("cancel", SessionInput::Cancel);
    assert_eq!(
        h.machine.phase(),
        &Phase::Turn(ActiveTurn {
            run_id: run,
            stage: TurnStage::Cancelling
        })
    );
    // Tool activity after the cancel is no longer recorded; the turn's own events are.
    h.turn_append(run, vec![tool_started("c2")]);
    h.turn_append(run, vec![tool_result("c1"), tool_started("c2")]);
    h.turn_append(
        run,
        vec![
            EventKind::TurnCancelled {
                reason: "user".into(),
            },
            completed(TurnStatus::Cancelled, None, None),
        ],
    );
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    h.check(expect![[r#"
        > cancel
        < reply ok
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message, tool_started]
        < append r1 4..5: assistant_message, tool_started
        < reply ok
        > cancel
        < cancel_turn "user"
        < reply ok
        > turn_append r1 [tool_started]
        < reply refused: the turn is being cancelled
        > turn_append r1 [tool_message, tool_started]
        < append r1 6..6: tool_message(c1 "done")
        < reply ok
        > turn_append r1 [turn_cancelled, turn_complete]
        < append r1 7..8: turn_cancelled, turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
    "#]]);
}

#[test]
fn clear_queue_drops_the_waiting_inputs_in_order() {
    let mut h = Harness::new();
    h.on("clear_queue", SessionInput::ClearQueue);
    h.submit("running");
    h.submit("b");
    h.submit("c");
    h.on("clear_queue", SessionInput::ClearQueue);
    let run = h.run(1);
    h.turn_completes(run);
    h.check(expect![[r#"
        > clear_queue
        < reply ok
        > submit i1 "running"
        < append r1 2..3: user_message(i1 "running"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "b"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > submit i3 "c"
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > clear_queue
        < append - 6..7: input_dropped(i2 "queue cleared"), input_dropped(i3 "queue cleared")
        < reply ok
        > turn_append r1 [turn_complete]
        < append r1 8..8: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
    "#]]);
}

#[test]
fn without_an_approver_a_request_waits_or_is_denied_per_the_setting() {
    for without_approver in [WithoutApprover::Wait, WithoutApprover::Deny] {
        let mut h = Harness::with(
            Settings {
                without_approver,
                ..settings()
            },
            config(),
        );
        h.submit("go");
        let run = h.run(1);
        h.turn_append(run, vec![assistant(&["c1"])]);
        h.ask_approval(run, "c1", "shell:ls", false);
        h.on("get_pending_approvals", SessionInput::GetPendingApprovals);
        h.check(match without_approver {
            WithoutApprover::Wait => expect![[r#"
                > submit i1 "go"
                < append r1 2..3: user_message(i1 "go"), turn_started(i1)
                < start_turn r1 Model first
                < reply submitted i1
                > turn_append r1 [assistant_message]
                < append r1 4..4: assistant_message
                < reply ok
                > approval_requested a1 c1 approver=false
                < append r1 5..5: approval_requested(a1 grant=Some("shell:ls"))
                > get_pending_approvals
                < reply pending [a1]
            "#]],
            WithoutApprover::Deny => expect![[r#"
                > submit i1 "go"
                < append r1 2..3: user_message(i1 "go"), turn_started(i1)
                < start_turn r1 Model first
                < reply submitted i1
                > turn_append r1 [assistant_message]
                < append r1 4..4: assistant_message
                < reply ok
                > approval_requested a1 c1 approver=false
                < append r1 5..6: approval_requested(a1 grant=Some("shell:ls")), approval_decided(a1 Deny grant=None)
                < answer_approval a1 ApprovalAnswer { allowed: false, message: Some("denied: this call needs approval and no approver is attached to the session") }
                > get_pending_approvals
                < reply pending []
            "#]],
        });
    }
}

#[test]
fn an_approvers_decision_is_persisted_before_the_call_hears_it_and_a_grant_answers_later_calls() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1", "c2", "c3", "c4"])]);
    let first = h.ask_approval(run, "c1", "shell:ls", true);
    let second = h.ask_approval(run, "c2", "", true);
    h.on("get_pending_approvals", SessionInput::GetPendingApprovals);
    h.decide(first, ApprovalDecision::AllowForSession);
    h.decide(first, ApprovalDecision::AllowOnce);
    // A grant answers at once, without an event; an empty key offers no grant.
    h.ask_approval(run, "c3", "shell:ls", true);
    h.decide(second, ApprovalDecision::AllowForSession);
    h.ask_approval(run, "c4", "", true);
    // The turn ends with a request waiting: its reply is dropped.
    h.turn_completes(run);
    h.on("get_pending_approvals", SessionInput::GetPendingApprovals);
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message]
        < append r1 4..4: assistant_message
        < reply ok
        > approval_requested a1 c1 approver=true
        < append r1 5..5: approval_requested(a1 grant=Some("shell:ls"))
        > approval_requested a2 c2 approver=true
        < append r1 6..6: approval_requested(a2 grant=Some(""))
        > get_pending_approvals
        < reply pending [a1, a2]
        > decide a1 AllowForSession
        < append r1 7..7: approval_decided(a1 AllowForSession grant=Some("shell:ls"))
        < answer_approval a1 ApprovalAnswer { allowed: true, message: None }
        < reply ok
        > decide a1 AllowOnce
        < reply error: no pending approval request a1
        > approval_requested a3 c3 approver=true
        < answer_approval a3 ApprovalAnswer { allowed: true, message: None }
        > decide a2 AllowForSession
        < append r1 8..8: approval_decided(a2 AllowForSession grant=None)
        < answer_approval a2 ApprovalAnswer { allowed: true, message: None }
        < reply ok
        > approval_requested a4 c4 approver=true
        < append r1 9..9: approval_requested(a4 grant=Some(""))
        > turn_append r1 [turn_complete]
        < append r1 10..10: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > get_pending_approvals
        < reply pending []
    "#]]);
}

#[test]
fn a_denial_carries_the_persons_message_or_a_default() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1", "c2"])]);
    let first = h.ask_approval(run, "c1", "k", true);
    let second = h.ask_approval(run, "c2", "k", true);
    h.on(
        "decide a1 Deny \"not now\"",
        SessionInput::DecideApproval {
            request_id: first,
            decision: ApprovalDecision::Deny,
            message: Some("not now".into()),
        },
    );
    h.decide(second, ApprovalDecision::Deny);
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message]
        < append r1 4..4: assistant_message
        < reply ok
        > approval_requested a1 c1 approver=true
        < append r1 5..5: approval_requested(a1 grant=Some("k"))
        > approval_requested a2 c2 approver=true
        < append r1 6..6: approval_requested(a2 grant=Some("k"))
        > decide a1 Deny "not now"
        < append r1 7..7: approval_decided(a1 Deny grant=None)
        < answer_approval a1 ApprovalAnswer { allowed: false, message: Some("not now") }
        < reply ok
        > decide a2 Deny
        < append r1 8..8: approval_decided(a2 Deny grant=None)
        < answer_approval a2 ApprovalAnswer { allowed: false, message: Some("denied by the user") }
        < reply ok
    "#]]);
}

#[test]
fn nothing_is_written_or_published_for_a_run_after_its_turn_complete() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.on(
        "deltas r1",
        SessionInput::Deltas {
            run_id: run,
            deltas: vec![Delta::TextDelta { text: "a".into() }],
        },
    );
    h.turn_append(run, vec![completed(TurnStatus::Completed, None, None)]);
    // The actor has not exited yet: a late append, deltas and approvals of its run.
    h.turn_append(run, vec![tool_result("c1")]);
    h.on(
        "deltas r1",
        SessionInput::Deltas {
            run_id: run,
            deltas: vec![Delta::TextDelta { text: "b".into() }],
        },
    );
    h.ask_approval(run, "c1", "k", true);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    h.turn_append(run, vec![tool_result("c1")]);
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > deltas r1
        < deltas r1 x1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_append r1 [tool_message]
        < reply refused: run r1 is not the session's open turn
        > deltas r1
        > approval_requested a1 c1 approver=true
        < drop_approval a1
        > turn_ended
        < drop_approvals
        < idle
        > turn_append r1 [tool_message]
        < reply refused: run r1 is not the session's open turn
    "#]]);
}

#[test]
fn a_crashed_turn_is_closed_failed_internal_and_the_queue_goes_on() {
    let mut h = Harness::new();
    h.submit("first");
    h.submit("second");
    let run = h.run(1);
    h.turn_append(
        run,
        vec![assistant(&["ran", "waited"]), tool_started("ran")],
    );
    h.on(
        "turn_ended (panicked)",
        SessionInput::TurnEnded {
            failure: Some("turn failed: boom".into()),
        },
    );
    let second = h.run(2);
    // A turn that stops without a word is closed too.
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    let _ = second;
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "second"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > turn_append r1 [assistant_message, tool_started]
        < append r1 5..6: assistant_message, tool_started
        < reply ok
        > turn_ended (panicked)
        < drop_approvals
        < append r1 7..9: tool_message(ran "the turn crashed before this call finished"), tool_message(waited "not run: the turn stopped before this call started; nothing was executed"), turn_complete(Failed "turn crashed" internal: "turn failed: boom")
        < append r2 10..11: user_message(i2 "second"), turn_started(i2)
        < start_turn r2 Model
        > turn_ended
        < drop_approvals
        < append r2 12..12: turn_complete(Failed "turn crashed" internal: "the turn stopped without completing")
        < idle
    "#]]);
}

#[test]
fn a_failed_append_of_the_turn_fails_it_with_class_storage_and_the_session_goes_on() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    h.turn_append(run, vec![assistant(&["c1"]), tool_started("c1")]);
    h.failing = Some("disk full".into());
    h.turn_append(run, vec![tool_result("c1")]);
    h.failing = None;
    assert_eq!(
        h.machine.phase(),
        &Phase::Turn(ActiveTurn {
            run_id: run,
            stage: TurnStage::StorageFailed("disk full".into())
        })
    );
    h.turn_append(run, vec![completed(TurnStatus::Completed, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    // A submit whose append fails is reported, and nothing changed.
    h.failing = Some("disk full".into());
    h.submit("lost");
    h.failing = None;
    h.submit("kept");
    h.check(expect![[r#"
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [assistant_message, tool_started]
        < append r1 4..5: assistant_message, tool_started
        < reply ok
        > turn_append r1 [tool_message]
        < append r1 6..6: tool_message(c1 "done")
        > commit failed
        < stop_turn
        < reply refused: storage: disk full
        > turn_append r1 [turn_complete]
        < reply refused: the turn failed on a storage error: disk full
        > turn_ended
        < drop_approvals
        < append r1 6..7: tool_message(c1 "outcome unknown: the turn failed on a storage error before this result was saved"), turn_complete(Failed "storage" storage: "disk full")
        < idle
        > submit i2 "lost"
        < append r2 8..9: user_message(i2 "lost"), turn_started(i2)
        > commit failed
        < reply error: storage: disk full
        > submit i3 "kept"
        < append r3 8..9: user_message(i3 "kept"), turn_started(i3)
        < start_turn r3 Model
        < reply submitted i3
    "#]]);
}

/// A log cut by a restart: a turn with a started and a waiting call, then two queued
/// inputs.
fn interrupted_log() -> Vec<Event> {
    let id = SessionId::new();
    let run = Some(RunId::new());
    let (first, second, third) = (InputId::new(), InputId::new(), InputId::new());
    let kinds = vec![
        (None, EventKind::SessionCreated { config: config() }),
        (
            run,
            EventKind::UserMessage {
                input_id: first,
                input: Input::text("one"),
            },
        ),
        (run, EventKind::TurnStarted { input_id: first }),
        (run, assistant(&["ran", "waited"])),
        (run, tool_started("ran")),
        (
            None,
            EventKind::InputQueued {
                input_id: second,
                input: Input::text("two"),
            },
        ),
        (
            None,
            EventKind::InputQueued {
                input_id: third,
                input: Input::text("three"),
            },
        ),
    ];
    kinds
        .into_iter()
        .zip(1..)
        .map(|((run_id, kind), seq)| Event {
            session_id: id,
            seq: Seq(seq),
            run_id,
            at_ms: 5_000,
            kind,
        })
        .collect()
}

#[test]
fn on_load_an_interrupted_turn_is_closed_and_the_queue_runs_or_is_dropped() {
    for queued_on_restart in [QueuedOnRestart::Run, QueuedOnRestart::Drop] {
        let settings = Settings {
            queued_on_restart,
            ..settings()
        };
        let mut h = Harness::from_log(settings, &interrupted_log());
        h.on("loaded", SessionInput::Loaded);
        h.check(match queued_on_restart {
            QueuedOnRestart::Run => expect![[r#"
                > loaded
                < append r1 8..10: tool_message(ran "outcome unknown: the runtime stopped while this ran; it was not re-run"), tool_message(waited "not run: the turn stopped before this call started; nothing was executed"), turn_complete(Failed "interrupted by restart" internal: "the runtime stopped while this turn ran")
                < append r2 11..12: user_message(i2 "two"), turn_started(i2)
                < start_turn r2 Model first
            "#]],
            QueuedOnRestart::Drop => expect![[r#"
                > loaded
                < append r1 8..10: tool_message(ran "outcome unknown: the runtime stopped while this ran; it was not re-run"), tool_message(waited "not run: the turn stopped before this call started; nothing was executed"), turn_complete(Failed "interrupted by restart" internal: "the runtime stopped while this turn ran")
                < append - 11..12: input_dropped(i2 "dropped on restart"), input_dropped(i3 "dropped on restart")
                < idle
            "#]],
        });
    }
}

#[test]
fn shutdown_cancels_the_turn_refuses_inputs_and_answers_once_the_turn_ended() {
    let mut h = Harness::new();
    h.submit("first");
    h.submit("queued");
    let run = h.run(1);
    h.on("shutdown", SessionInput::Shutdown);
    h.submit("refused");
    h.turn_append(run, vec![completed(TurnStatus::Cancelled, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    // Idle: answered at once (the hooks ran already).
    h.on("shutdown", SessionInput::Shutdown);
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "queued"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > shutdown
        < cancel_turn "runtime shutdown"
        > submit i3 "refused"
        < reply error: the runtime is shutting down
        > turn_append r1 [turn_complete]
        < append r1 5..5: turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < run SessionEnd hooks
        < answer_shutdown
        > shutdown
        < answer_shutdown
    "#]]);
}

#[test]
fn a_sub_agent_or_a_session_without_a_turn_runs_no_session_end_hooks() {
    let mut h = Harness::new();
    h.on("shutdown", SessionInput::Shutdown);
    let child = SessionConfig {
        parent: Some(foya_protocol::command::ParentRef {
            session_id: SessionId::new(),
            run_id: RunId::new(),
            tool_call_id: ToolCallId::new("agent"),
        }),
        ..config()
    };
    let mut c = Harness::with(settings(), child);
    c.submit("go");
    let run = c.run(1);
    c.turn_completes(run);
    c.on("shutdown", SessionInput::Shutdown);
    h.out.push_str(&c.take());
    h.check(expect![[r#"
        > shutdown
        < answer_shutdown
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > shutdown
        < answer_shutdown
    "#]]);
}

#[test]
fn delete_during_a_turn_cancels_it_then_drops_the_queue_and_writes_session_deleted() {
    let mut h = Harness::new();
    h.submit("first");
    h.submit("queued");
    let run = h.run(1);
    h.on("delete", SessionInput::Delete);
    h.submit("refused");
    h.turn_append(run, vec![completed(TurnStatus::Cancelled, None, None)]);
    h.on("turn_ended", SessionInput::TurnEnded { failure: None });
    assert_eq!(h.machine.phase(), &Phase::Deleted);
    // Deleted: nothing more happens.
    h.submit("after");
    h.on("subscribe", SessionInput::Subscribe { approver: false });
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 "queued"
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > delete
        < cancel_turn "session deleted"
        > submit i3 "refused"
        < reply error: session s1 was deleted
        > turn_append r1 [turn_complete]
        < append r1 5..5: turn_complete(Cancelled)
        < reply ok
        > turn_ended
        < drop_approvals
        < append - 6..7: input_dropped(i2 "session deleted"), session_deleted
        < forget_transcript
        < close_subscribers "session deleted"
        < answer_delete Ok(())
        < stop "session deleted"
        > submit i4 "after"
        > subscribe
    "#]]);
}

#[test]
fn delete_when_idle_is_at_once_and_a_failed_delete_still_stops_the_actor() {
    let mut h = Harness::new();
    h.on("delete", SessionInput::Delete);
    let mut failing = Harness::new();
    failing.failing = Some("disk full".into());
    failing.on("delete", SessionInput::Delete);
    assert_eq!(failing.machine.phase(), &Phase::Deleting(None));
    h.out.push_str(&failing.take());
    h.check(expect![[r#"
        > delete
        < append - 2..2: session_deleted
        < forget_transcript
        < close_subscribers "session deleted"
        < answer_delete Ok(())
        < stop "session deleted"
        > delete
        < append - 2..2: session_deleted
        > commit failed
        < close_subscribers "session deleted"
        < answer_delete Err(Storage("disk full"))
        < stop "session deleted"
    "#]]);
}

#[test]
fn the_first_input_starts_title_generation_once_when_enabled_and_untitled() {
    let titled = |generate_titles, title: Option<&str>| {
        let mut h = Harness::with(
            Settings {
                generate_titles,
                ..settings()
            },
            SessionConfig {
                title: title.map(str::to_owned),
                ..config()
            },
        );
        h.submit("fix the parser");
        let run = h.run(1);
        h.turn_completes(run);
        h.submit("and the lexer");
        h.take()
    };
    let mut out = titled(true, None);
    out += "---\n";
    out += &titled(false, None);
    out += "---\n";
    out += &titled(true, Some("mine"));
    expect![[r#"
        > submit i1 "fix the parser"
        < append r1 2..3: user_message(i1 "fix the parser"), turn_started(i1)
        < start_title Input("fix the parser") expected=None
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i2 "and the lexer"
        < append r2 5..6: user_message(i2 "and the lexer"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
        ---
        > submit i1 "fix the parser"
        < append r1 2..3: user_message(i1 "fix the parser"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i2 "and the lexer"
        < append r2 5..6: user_message(i2 "and the lexer"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
        ---
        > submit i1 "fix the parser"
        < append r1 2..3: user_message(i1 "fix the parser"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > submit i2 "and the lexer"
        < append r2 5..6: user_message(i2 "and the lexer"), turn_started(i2)
        < start_turn r2 Model
        < reply submitted i2
    "#]]
    .assert_eq(&out);
}

#[test]
fn a_generated_title_lands_only_if_the_title_did_not_change_meanwhile() {
    let mut h = Harness::new();
    let generated =
        |title: &str, expected: Option<(&str, TitleSource)>| SessionInput::TitleGenerated {
            title: title.into(),
            expected: expected.map(|(t, s)| (t.to_owned(), s)),
        };
    h.on(
        "title_generated \"Parser\" expected=None",
        generated("Parser", None),
    );
    h.on(
        "set_title \"Mine\"",
        SessionInput::SetTitle {
            title: "Mine".into(),
        },
    );
    h.on(
        "title_generated \"Later\" expected=Parser",
        generated("Later", Some(("Parser", TitleSource::Generated))),
    );
    h.check(expect![[r#"
        > title_generated "Parser" expected=None
        < append - 2..2: title_set("Parser" Generated)
        < reply title applied=true
        > set_title "Mine"
        < append - 3..3: title_set("Mine" User)
        < reply ok
        > title_generated "Later" expected=Parser
        < reply title applied=false
    "#]]);
}

#[test]
fn commands_that_complete_at_once_record_their_turn_and_the_queue_goes_on() {
    let mut h = Harness::new();
    h.submit("first");
    let run = h.run(1);
    for input in [
        Input::command("title", " Parser "),
        Input::command("title", ""),
        Input::command("nope", ""),
        Input::command("compact", ""),
    ] {
        let id = h.input_id();
        h.submit_as(id, input);
    }
    h.turn_completes(run);
    h.check(expect![[r#"
        > submit i1 "first"
        < append r1 2..3: user_message(i1 "first"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > submit i2 /title " Parser "
        < append - 4..4: input_queued(i2)
        < reply submitted i2
        > submit i3 /title ""
        < append - 5..5: input_queued(i3)
        < reply submitted i3
        > submit i4 /nope ""
        < append - 6..6: input_queued(i4)
        < reply submitted i4
        > submit i5 /compact ""
        < append - 7..7: input_queued(i5)
        < reply submitted i5
        > turn_append r1 [turn_complete]
        < append r1 8..8: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < append r2 9..12: user_message(i2 ""), turn_started(i2), title_set("Parser" User), turn_complete(Completed)
        < append r3 13..15: user_message(i3 ""), turn_started(i3), turn_complete(Completed)
        < start_title FirstUserMessage expected=Some(("Parser", User))
        < append r4 16..18: user_message(i4 ""), turn_started(i4), turn_complete(Failed "unknown_command" invalid_request: "unknown command /nope; available commands: /compact, /title")
        < append r5 19..20: user_message(i5 ""), turn_started(i5)
        < start_turn r5 Compact
    "#]]);
}

#[test]
fn set_model_writes_config_changed_only_when_it_differs() {
    let mut h = Harness::new();
    let (provider, model) = (config().provider, config().model);
    h.on(
        "set_model (same)",
        SessionInput::SetModel {
            provider: provider.clone(),
            model,
        },
    );
    h.on(
        "set_model other",
        SessionInput::SetModel {
            provider,
            model: "other".into(),
        },
    );
    h.check(expect![[r#"
        > set_model (same)
        < reply ok
        > set_model other
        < append - 2..2: config_changed(/other)
        < reply ok
    "#]]);
}

#[test]
fn only_an_idle_unwatched_session_hibernates() {
    let mut h = Harness::new();
    let check = |quiet, watched| SessionInput::HibernateCheck { quiet, watched };
    h.on("hibernate_check quiet watched", check(true, true));
    h.on("hibernate_check not quiet", check(false, false));
    h.submit("go");
    h.on("hibernate_check quiet unwatched (busy)", check(true, false));
    let run = h.run(1);
    h.turn_completes(run);
    assert!(h.machine.is_idle());
    h.on("hibernate_check quiet unwatched", check(true, false));
    h.check(expect![[r#"
        > hibernate_check quiet watched
        > hibernate_check not quiet
        > submit i1 "go"
        < append r1 2..3: user_message(i1 "go"), turn_started(i1)
        < start_turn r1 Model first
        < reply submitted i1
        > hibernate_check quiet unwatched (busy)
        > turn_append r1 [turn_complete]
        < append r1 4..4: turn_complete(Completed)
        < reply ok
        > turn_ended
        < drop_approvals
        < idle
        > hibernate_check quiet unwatched
        < stop "hibernated"
    "#]]);
}

#[test]
fn the_phase_follows_the_turns_compaction() {
    let mut h = Harness::new();
    h.submit("go");
    let run = h.run(1);
    let stage = |h: &Harness| match h.machine.phase() {
        Phase::Turn(turn) => turn.stage.clone(),
        other => panic!("{other:?}"),
    };
    h.turn_append(
        run,
        vec![EventKind::CompactionStarted {
            trigger: "threshold".into(),
            tokens_before: 10,
        }],
    );
    assert_eq!(stage(&h), TurnStage::Compacting);
    h.turn_append(run, vec![EventKind::StepStarted { step: 2 }]);
    assert_eq!(stage(&h), TurnStage::Running);
}

#[test]
fn event_times_never_go_backwards_when_the_clock_does() {
    let mut h = Harness::new();
    h.machine.settings.clock = || 10;
    let effects = h.machine.on(SessionInput::SetTitle { title: "t".into() });
    let Some(Effect::Append(events)) = effects.into_iter().next() else {
        panic!("no append")
    };
    assert_eq!(events[0].at_ms, 1_000, "not before session_created");
}

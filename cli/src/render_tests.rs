//! Unit tests of the [`Renderer`] on in-memory writers.
#![allow(clippy::unwrap_used)]

use super::Renderer;
use foya_protocol::event::{LiveDelta, Notice};
use foya_protocol::{
    AssistantMessage, Delta, ErrorClass, ErrorInfo, Event, EventKind, FinishReason, InputId,
    ProviderError, RunId, Seq, SessionId, SessionUpdate, ToolCall, ToolCallId, ToolMessage,
    TurnStatus,
};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// A writer whose bytes the test reads back.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

struct Fixture {
    renderer: Renderer,
    out: Buf,
    err: Buf,
    session: SessionId,
    run: RunId,
}

fn fixture(live_text: bool) -> Fixture {
    let (out, err) = (Buf::default(), Buf::default());
    Fixture {
        renderer: Renderer::with_writers(
            false,
            live_text,
            false,
            Box::new(out.clone()),
            Box::new(err.clone()),
        ),
        out,
        err,
        session: SessionId::new(),
        run: RunId::new(),
    }
}

impl Fixture {
    fn delta(&mut self, delta: Delta) {
        let update = SessionUpdate::Delta(LiveDelta {
            session_id: self.session,
            run_id: self.run,
            delta,
        });
        self.renderer.render(&update).unwrap();
    }

    fn event(&mut self, run: RunId, kind: EventKind) {
        self.event_at(Seq(1), run, kind);
    }

    fn event_at(&mut self, seq: Seq, run: RunId, kind: EventKind) {
        let update = SessionUpdate::Event(Event {
            session_id: self.session,
            seq,
            run_id: Some(run),
            at_ms: 0,
            kind,
        });
        self.renderer.render(&update).unwrap();
    }

    fn text(&mut self, text: &str) {
        self.delta(Delta::TextDelta { text: text.into() });
    }

    fn answer(&mut self, text: &str) {
        let message = AssistantMessage {
            text: text.into(),
            ..AssistantMessage::default()
        };
        self.event(self.run, EventKind::AssistantMessage(message));
    }

    fn retry(&mut self) {
        let error = ProviderError::new(ErrorClass::StreamInterrupted, "connection reset");
        self.event(
            self.run,
            EventKind::ProviderRetry {
                attempt: 2,
                max_attempts: 5,
                delay_ms: 500,
                error,
            },
        );
    }
}

#[test]
fn reasoning_ends_with_a_newline_before_the_answer_starts() {
    let mut f = fixture(true);
    f.delta(Delta::ReasoningDelta {
        text: "thinking about it".into(),
    });
    f.text("The answer.");
    f.answer("The answer.");
    assert_eq!(f.err.text(), "thinking about it\n");
    assert_eq!(f.out.text(), "The answer.");
    f.renderer.end_line().unwrap();
    assert_eq!(f.out.text(), "The answer.\n");
    // Reasoning that already ends its line gets no extra blank line.
    let mut f = fixture(true);
    f.delta(Delta::ReasoningDelta {
        text: "done\n".into(),
    });
    f.text("x");
    assert_eq!(f.err.text(), "done\n");
}

#[test]
fn a_retry_after_partial_text_on_a_terminal_is_marked_and_the_answer_restarts() {
    let mut f = fixture(true);
    f.text("Hello wo");
    f.retry();
    f.text("Hello world.");
    f.answer("Hello world.");
    f.renderer.end_line().unwrap();
    assert_eq!(f.out.text(), "Hello wo\nHello world.\n");
    assert_eq!(
        f.err.text(),
        "[retrying: stream_interrupted, attempt 2/5]\n\
         ↻ retrying in 0.5s (attempt 2/5) because stream_interrupted: connection reset\n"
    );
}

#[test]
fn without_a_terminal_stdout_is_exactly_the_persisted_answer() {
    let mut f = fixture(false);
    f.text("Hello wo");
    f.retry();
    f.text("Hello world.");
    f.answer("Hello world.");
    f.renderer.end_line().unwrap();
    assert_eq!(f.out.text(), "Hello world.\n");
    assert!(
        f.err
            .text()
            .starts_with("[retrying: stream_interrupted, attempt 2/5]\n"),
        "{}",
        f.err.text()
    );
    // A retry before any text is only the usual retry line.
    let mut f = fixture(false);
    f.retry();
    assert!(f.err.text().starts_with("↻ retrying"), "{}", f.err.text());
}

#[test]
fn a_turn_closed_by_recovery_names_its_tool_and_is_not_reported_as_an_error() {
    let mut f = fixture(false);
    let earlier = RunId::new();
    let call = ToolCall {
        id: ToolCallId::new("call_1"),
        name: "shell".into(),
        arguments: serde_json::json!({"command": "sleep 100"}),
        extra: None,
    };
    let persisted = Event {
        session_id: f.session,
        seq: Seq(3),
        run_id: Some(earlier),
        at_ms: 0,
        kind: EventKind::AssistantMessage(AssistantMessage {
            tool_calls: vec![call],
            ..AssistantMessage::default()
        }),
    };
    f.renderer.prime([&persisted]);
    f.event(
        earlier,
        EventKind::ToolMessage(ToolMessage {
            tool_call_id: ToolCallId::new("call_1"),
            content: "outcome unknown".into(),
            is_error: true,
            images: Vec::new(),
        }),
    );
    f.event(
        earlier,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("interrupted by restart".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::Internal,
                message: "the runtime stopped while this turn ran".into(),
            }),
        },
    );
    // This process's own turn still reports its error.
    f.event(
        f.run,
        EventKind::TurnStarted {
            input_id: InputId::new(),
        },
    );
    f.event(
        f.run,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: None,
            error: Some(ErrorInfo {
                class: ErrorClass::Network,
                message: "down".into(),
            }),
        },
    );
    assert_eq!(
        f.err.text(),
        "✗ shell: outcome unknown\n\
         (an earlier turn ended Failed: interrupted by restart)\n\
         error: network: down\n"
    );
    assert_eq!(f.out.text(), "");
}

#[test]
fn approval_decisions_read_as_plain_words() {
    use foya_protocol::{ApprovalDecision, ApprovalRequestId};
    let mut f = fixture(false);
    let decisions = [
        (ApprovalDecision::AllowOnce, None),
        (ApprovalDecision::AllowForSession, None),
        (
            ApprovalDecision::Deny,
            Some("the user denied this call".to_owned()),
        ),
        (ApprovalDecision::Deny, None),
    ];
    for (decision, message) in decisions {
        let kind = EventKind::ApprovalDecided {
            request_id: ApprovalRequestId::new(),
            tool_call_id: ToolCallId::new("c1"),
            decision,
            message,
            grant: None,
        };
        f.event(f.run, kind);
    }
    assert_eq!(
        f.err.text(),
        "  approval: allowed once\n  approval: allowed for this session\n  approval: denied (the user denied this call)\n  approval: denied\n"
    );
}

#[test]
fn after_falling_behind_the_answer_is_completed_from_the_persisted_message_once() {
    let mut f = fixture(true);
    f.text("Hello ");
    let lagged = SessionUpdate::Notice(Notice::Lagged {
        session_id: f.session,
        last_seq: Seq(1),
    });
    f.renderer.render(&lagged).unwrap();
    // Deltas of the resubscription arrive for the middle of the answer: they are
    // not printed (the part between was lost), the persisted answer completes it.
    f.text("world");
    f.answer("Hello brave new world.");
    // The next step of the same turn is printed from its message, not its deltas.
    f.text("Second");
    f.answer("Second step.");
    f.renderer.end_line().unwrap();
    assert_eq!(f.out.text(), "Hello brave new world.Second step.\n");
    assert_eq!(
        f.err.text(),
        "\n(output fell behind; the rest of this turn is shown step by step)\n"
    );
    // The turn ends after the resubscription's replay: the next turn streams live.
    f.renderer.resubscribed(Seq(1));
    f.event_at(Seq(2), f.run, completed());
    f.text("Live");
    assert_eq!(f.out.text(), "Hello brave new world.Second step.\nLive");
}

fn completed() -> EventKind {
    EventKind::TurnComplete {
        status: TurnStatus::Completed,
        reason: None,
        error: None,
    }
}

#[test]
fn a_lag_across_a_turn_boundary_prints_the_next_turn_from_its_persisted_message() {
    let mut f = fixture(true);
    let (first, second, third) = (f.run, RunId::new(), RunId::new());
    f.event_at(
        Seq(2),
        first,
        EventKind::TurnStarted {
            input_id: InputId::new(),
        },
    );
    f.text("One ");
    f.renderer.fell_behind();
    // The resubscription replays seq 3..=5: the first turn's end and the second
    // turn's start, whose first deltas ("Two ") were lost before it registered.
    f.renderer.resubscribed(Seq(5));
    f.event_at(
        Seq(3),
        first,
        EventKind::AssistantMessage(AssistantMessage {
            text: "One done.".into(),
            ..AssistantMessage::default()
        }),
    );
    f.event_at(Seq(4), first, completed());
    f.event_at(
        Seq(5),
        second,
        EventKind::TurnStarted {
            input_id: InputId::new(),
        },
    );
    f.run = second;
    f.text("halves.");
    f.event_at(
        Seq(6),
        second,
        EventKind::AssistantMessage(AssistantMessage {
            text: "Two halves.".into(),
            ..AssistantMessage::default()
        }),
    );
    f.event_at(Seq(7), second, completed());
    // A turn started after the replay streams live.
    f.event_at(
        Seq(8),
        third,
        EventKind::TurnStarted {
            input_id: InputId::new(),
        },
    );
    f.run = third;
    f.text("Three");
    assert_eq!(f.out.text(), "One done.\nTwo halves.\nThree");
}

#[test]
fn after_falling_behind_a_retried_answer_is_printed_whole() {
    let mut f = fixture(true);
    f.text("Hello wo");
    f.renderer.fell_behind();
    f.retry();
    f.answer("Goodbye.");
    f.renderer.end_line().unwrap();
    assert_eq!(f.out.text(), "Hello wo\nGoodbye.\n");
}

#[test]
fn control_sequences_from_the_model_are_shown_not_obeyed_on_a_terminal() {
    let mut f = fixture(true);
    f.text("a\x1b[2Jb\r\nc\rd\u{9b}e\tf\n");
    f.delta(Delta::ReasoningDelta {
        text: "\x1b]0;title\x07".into(),
    });
    assert_eq!(f.out.text(), "a^[[2Jb\nc^Md<U+009B>e\tf\n");
    assert_eq!(f.err.text(), "^[]0;title^G");
    // A CRLF split across deltas is a newline, as it is whole.
    let mut g = fixture(true);
    g.text("g\r");
    g.text("\nh\r");
    g.text("i");
    assert_eq!(g.out.text(), "g\nhi");
    // Into a pipe the answer is the persisted bytes.
    let mut f = fixture(false);
    f.answer("a\x1b[2Jb");
    assert_eq!(f.out.text(), "a\x1b[2Jb");
    // An approval request cannot disguise its command.
    let mut f = fixture(true);
    f.event(
        f.run,
        EventKind::ApprovalRequested {
            request_id: foya_protocol::ApprovalRequestId::new(),
            tool_call_id: ToolCallId("c1".into()),
            tool_name: "shell".into(),
            action: "rm -rf ~\x1b[2K\rls".into(),
            reason: "writes".into(),
            grant: None,
        },
    );
    assert_eq!(
        f.err.text(),
        "? approval needed for shell: rm -rf ~^[[2K^Mls (writes)\n"
    );
}

#[test]
fn an_answer_cut_short_says_why_on_stderr() {
    for (reason, says) in [
        (FinishReason::Length, "output-token limit"),
        (FinishReason::ContentFilter, "content filter"),
        (FinishReason::ContextWindow, "context window"),
    ] {
        let mut f = fixture(false);
        let message = AssistantMessage {
            text: "Half an ans".into(),
            finish_reason: Some(reason),
            ..AssistantMessage::default()
        };
        f.event(f.run, EventKind::AssistantMessage(message));
        assert_eq!(f.out.text(), "Half an ans\n");
        assert!(f.err.text().contains(says), "{reason:?}: {}", f.err.text());
    }
    let mut f = fixture(false);
    let message = AssistantMessage {
        text: "Done.".into(),
        finish_reason: Some(FinishReason::Stop),
        ..AssistantMessage::default()
    };
    f.event(f.run, EventKind::AssistantMessage(message));
    assert_eq!(f.err.text(), "");
}

#[test]
fn a_question_that_grants_nothing_offers_no_always() {
    use super::{approval_choices, offers_session_grant};
    // The grant key of the request: empty (a hook's question, a protected path…) offers
    // no "always this session"; a key, or none recorded (an older log), offers it.
    for (grant, offered) in [(Some(""), false), (Some("shell:ls"), true), (None, true)] {
        assert_eq!(offers_session_grant(grant), offered, "{grant:?}");
    }
    assert_eq!(
        approval_choices(true),
        "[y]es once / [a]lways this session / [n]o (or type a reason)"
    );
    let without = approval_choices(false);
    assert!(!without.contains("[a]lways"), "{without}");
    assert!(
        without.contains("\"always this session\" is not offered"),
        "{without}"
    );
}

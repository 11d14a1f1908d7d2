//! Terminal rendering of session updates: answer text to stdout, tool activity, retries
//! and errors to stderr; or one JSON object per line with `--json`.
//!
//! Answer text on a terminal streams as it arrives. When stdout is not a terminal (a
//! pipe or a file) each step's text is printed once, from its persisted
//! `assistant_message`, so the output is exactly what the log says even when a model
//! request was retried after part of its text had streamed.

use foya_protocol::event::Notice;
use foya_protocol::{
    ApprovalDecision, Delta, Event, EventKind, FinishReason, RunId, Seq, SessionUpdate, ToolCallId,
};
use std::collections::{HashMap, HashSet};
use std::io::Write;

/// Longest tool-result preview shown on stderr, in characters.
const PREVIEW_CHARS: usize = 120;

/// Renders updates of one session.
pub(crate) struct Renderer {
    json: bool,
    /// Answer text streams from deltas (stdout is a terminal); otherwise it is printed
    /// from each `assistant_message`.
    live_text: bool,
    /// Dim stderr notes with ANSI escapes.
    color: bool,
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
    /// Tool calls seen in assistant messages, for naming them when they run.
    calls: HashMap<ToolCallId, (String, String)>,
    /// Turns whose `turn_started` this renderer saw; a `turn_complete` of another turn
    /// closes one that ran before this process (recovery after a crash).
    runs: HashSet<RunId>,
    /// Whether the last thing on stdout was answer text without a trailing newline.
    open_line: bool,
    /// Whether the last thing on stderr was reasoning text without a trailing newline.
    reasoning_open: bool,
    /// Whether text deltas arrived since the current model request started.
    step_text: bool,
    /// Answer text written live since the current model request started (live mode).
    shown: String,
    /// The subscription fell behind (`lagged`): deltas were lost, so answer text is
    /// printed from each `assistant_message` (the part not already shown) instead of
    /// from deltas, until a turn starts or ends after `caught_up_after`.
    behind: bool,
    /// The resubscription's replay end ([`Renderer::resubscribed`]): a turn started
    /// after it streamed entirely to the new subscription. `None` while behind and not
    /// yet resubscribed.
    caught_up_after: Option<Seq>,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("json", &self.json)
            .field("live_text", &self.live_text)
            .field("open_line", &self.open_line)
            .finish_non_exhaustive()
    }
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new(false)
    }
}

impl Renderer {
    /// A renderer on the process's stdout and stderr; text streams live when stdout is
    /// a terminal.
    pub(crate) fn new(json: bool) -> Self {
        use std::io::IsTerminal as _;
        Self::with_writers(
            json,
            std::io::stdout().is_terminal(),
            color_enabled(),
            Box::new(std::io::stdout()),
            Box::new(std::io::stderr()),
        )
    }

    /// A renderer on the given writers (`out` for answer text or JSON lines, `err` for
    /// everything else).
    pub(crate) fn with_writers(
        json: bool,
        live_text: bool,
        color: bool,
        out: Box<dyn Write + Send>,
        err: Box<dyn Write + Send>,
    ) -> Self {
        Self {
            json,
            live_text,
            color,
            out,
            err,
            calls: HashMap::new(),
            runs: HashSet::new(),
            open_line: false,
            reasoning_open: false,
            step_text: false,
            shown: String::new(),
            behind: false,
            caught_up_after: None,
        }
    }

    /// Learns the tool calls of events that were persisted before this renderer started
    /// (a continued session), so their results are named. Prints nothing.
    pub(crate) fn prime<'a>(&mut self, events: impl IntoIterator<Item = &'a Event>) {
        for event in events {
            if let EventKind::AssistantMessage(m) = &event.kind {
                for call in &m.tool_calls {
                    let args = serde_json::to_string(&call.arguments).unwrap_or_default();
                    self.calls
                        .insert(call.id.clone(), (call.name.clone(), args));
                }
            }
        }
    }

    /// The caller resubscribed after [`Renderer::fell_behind`]; `replay_end` is the new
    /// subscription's `replay_end()`. Live printing resumes with the first turn that
    /// starts after it, or after the turn in progress then ends (its steps' deltas may
    /// have been lost before the resubscription, a turn replayed whole certainly were).
    pub(crate) fn resubscribed(&mut self, replay_end: Seq) {
        if self.behind {
            self.caught_up_after = Some(replay_end);
        }
    }

    /// Whether `event` comes after the resubscription's replay (see `resubscribed`).
    fn after_replay(&self, event: &Event) -> bool {
        self.caught_up_after.is_some_and(|end| event.seq > end)
    }

    /// Renders one update.
    ///
    /// # Errors
    /// Writing to stdout failed (e.g. `BrokenPipe` when the reader went away); errors
    /// writing to stderr are ignored.
    pub(crate) fn render(&mut self, update: &SessionUpdate) -> std::io::Result<()> {
        if self.json {
            if let Ok(line) = serde_json::to_string(update) {
                writeln!(self.out, "{line}")?;
                self.out.flush()?;
            }
            return Ok(());
        }
        match update {
            SessionUpdate::Delta(d) => self.delta(&d.delta),
            SessionUpdate::Event(e) => self.event(e),
            SessionUpdate::Notice(Notice::Lagged { .. }) => {
                self.fell_behind();
                Ok(())
            }
            SessionUpdate::Notice(Notice::Closed { .. } | Notice::Moved { .. }) => Ok(()),
        }
    }

    /// The subscription fell behind and lost live deltas (the caller resubscribes from
    /// the last persisted event it received; deltas are not persisted, so they are not
    /// replayed). The rest of the current turn's answer is printed step by step from
    /// the persisted `assistant_message`s, which hold every byte: what was already shown
    /// of the step in progress is not repeated, so stdout still ends up holding the
    /// whole answer exactly once.
    pub(crate) fn fell_behind(&mut self) {
        if self.json || !self.live_text {
            return;
        }
        self.caught_up_after = None;
        if self.behind {
            return;
        }
        self.behind = true;
        self.end_reasoning();
        let line = self.dim("(output fell behind; the rest of this turn is shown step by step)");
        if self.open_line {
            // The note goes to stderr; keep the answer's partial line intact on stdout.
            let _ = writeln!(self.err);
        }
        self.note(&line);
    }

    fn dim(&self, text: &str) -> String {
        paint_dim(self.color, text)
    }

    /// A line on stderr (errors writing it are ignored: nowhere to report them).
    fn note(&mut self, line: &str) {
        let _ = writeln!(self.err, "{line}");
        let _ = self.err.flush();
    }

    /// Ends dimmed reasoning with a newline before anything else is written.
    fn end_reasoning(&mut self) {
        if self.reasoning_open {
            self.reasoning_open = false;
            let _ = writeln!(self.err);
            let _ = self.err.flush();
        }
    }

    fn write_text(&mut self, text: &str) -> std::io::Result<()> {
        // On a terminal the model's text cannot move the cursor, clear the screen or
        // retitle the window; into a pipe or a file it is the persisted bytes. A carriage
        // return ending a chunk is dropped there: it is half of a CRLF split across
        // deltas, or a lone one, which may not move the cursor either.
        let text = if self.live_text {
            text.strip_suffix('\r').unwrap_or(text)
        } else {
            text
        };
        if text.is_empty() {
            return Ok(());
        }
        let text = if self.live_text {
            terminal_safe(text)
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        self.open_line = !text.ends_with('\n');
        Ok(())
    }

    fn delta(&mut self, delta: &Delta) -> std::io::Result<()> {
        match delta {
            Delta::TextDelta { text } => {
                self.end_reasoning();
                self.step_text |= !text.is_empty();
                if self.live_text && !self.behind {
                    self.write_text(text)?;
                    self.shown.push_str(text);
                }
            }
            Delta::ReasoningDelta { text } => {
                if !text.is_empty() {
                    let _ = write!(self.err, "{}", self.dim(&terminal_safe(text)));
                    let _ = self.err.flush();
                    self.reasoning_open = !text.ends_with('\n');
                }
            }
            Delta::ToolCallQueued { name, .. } => {
                self.end_reasoning();
                self.end_line()?;
                let line = self.dim(&format!("• {name} queued"));
                self.note(&line);
            }
            Delta::ToolCallDelta { .. } | Delta::ToolOutput { .. } => {}
        }
        Ok(())
    }

    fn event(&mut self, event: &Event) -> std::io::Result<()> {
        match &event.kind {
            EventKind::TurnStarted { .. } => {
                if self.behind && self.after_replay(event) {
                    self.behind = false;
                    self.caught_up_after = None;
                }
                if let Some(run) = event.run_id {
                    self.runs.insert(run);
                }
            }
            EventKind::AssistantMessage(m) => {
                self.end_reasoning();
                if !self.live_text {
                    self.write_text(&m.text)?;
                } else if self.behind {
                    // Deltas were lost: print what was not shown of this step's answer.
                    match m.text.strip_prefix(self.shown.as_str()) {
                        Some(rest) => self.write_text(rest)?,
                        None => {
                            self.end_line()?;
                            self.write_text(&m.text)?;
                        }
                    }
                }
                self.shown.clear();
                self.step_text = false;
                self.prime([event]);
                if let Some(why) = m.finish_reason.and_then(cut_short) {
                    self.end_line()?;
                    let line = self.dim(&format!("({why})"));
                    self.note(&line);
                }
            }
            EventKind::ToolStarted { tool_call_id, name } => {
                self.end_line()?;
                let args = self
                    .calls
                    .get(tool_call_id)
                    .map(|(_, a)| a.as_str())
                    .unwrap_or("");
                let line = format!("▶ {name} {}", preview(args));
                self.note(&line);
            }
            EventKind::ToolMessage(t) => {
                self.end_line()?;
                let name = self
                    .calls
                    .get(&t.tool_call_id)
                    .map(|(n, _)| n.as_str())
                    .unwrap_or("tool");
                let mark = if t.is_error { "✗" } else { "✓" };
                let line = format!("{mark} {name}: {}", preview(&t.content));
                self.note(&line);
            }
            EventKind::ApprovalRequested {
                tool_name,
                action,
                reason,
                ..
            } => {
                self.end_reasoning();
                self.end_line()?;
                let line = terminal_safe(&format!(
                    "? approval needed for {tool_name}: {action} ({reason})"
                ))
                .into_owned();
                self.note(&line);
            }
            EventKind::ApprovalDecided {
                decision, message, ..
            } => {
                self.note(&approval_line(decision, message.as_deref()));
            }
            EventKind::HookRan {
                hook_event,
                decision,
                reason,
                ..
            } if *decision != foya_protocol::HookDecision::None => {
                self.end_reasoning();
                self.end_line()?;
                let why = reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                let line = format!("⚑ {hook_event} hook: {}{why}", decision.as_str());
                self.note(&terminal_safe(&line));
            }
            EventKind::ProviderRetry {
                attempt,
                max_attempts,
                delay_ms,
                error,
            } => {
                self.end_reasoning();
                self.end_line()?;
                self.shown.clear();
                if std::mem::take(&mut self.step_text) {
                    // Part of this request's answer already arrived; the retry streams
                    // the whole answer again. On a terminal it shows after this marker;
                    // otherwise only the persisted answer is printed.
                    let marker = self.dim(&format!(
                        "[retrying: {}, attempt {attempt}/{max_attempts}]",
                        error.class
                    ));
                    self.note(&marker);
                }
                self.note(&format!(
                    "↻ retrying in {:.1}s (attempt {attempt}/{max_attempts}) because {}: {}",
                    *delay_ms as f64 / 1000.0,
                    error.class,
                    terminal_safe(&error.message)
                ));
            }
            EventKind::TurnComplete {
                status,
                reason,
                error,
            } => {
                self.end_reasoning();
                self.end_line()?;
                self.step_text = false;
                self.shown.clear();
                if self.after_replay(event) {
                    // The turn in progress at the resubscription ended: the next one
                    // streams whole.
                    self.behind = false;
                    self.caught_up_after = None;
                }
                let ours = event.run_id.is_some_and(|r| self.runs.contains(&r));
                if !ours {
                    // A turn that ran before this process: closed by recovery on load.
                    let why = reason.as_deref().unwrap_or("");
                    let line = self.dim(&format!("(an earlier turn ended {status:?}: {why})"));
                    self.note(&line);
                } else if let Some(err) = error {
                    self.note(&format!(
                        "error: {}: {}",
                        err.class,
                        terminal_safe(&err.message)
                    ));
                } else if let Some(reason) = reason {
                    self.note(&format!("turn {status:?}: {}", terminal_safe(reason)));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Finishes an open answer line so stderr output starts on its own line.
    ///
    /// # Errors
    /// Writing to stdout failed.
    pub(crate) fn end_line(&mut self) -> std::io::Result<()> {
        if self.open_line {
            self.open_line = false;
            writeln!(self.out)?;
            self.out.flush()?;
        }
        Ok(())
    }
}

/// Why an answer that ended for `reason` is incomplete, for a note on stderr; `None`
/// for an answer that ended normally.
fn cut_short(reason: FinishReason) -> Option<&'static str> {
    match reason {
        FinishReason::Length => Some(
            "the answer was cut off: the model reached its output-token limit \
             (finish reason length; a profile's max_output_tokens sets it)",
        ),
        FinishReason::ContentFilter => {
            Some("the answer was stopped by the provider's content filter or a refusal")
        }
        FinishReason::ContextWindow => {
            Some("the answer was cut off: the model's context window is full")
        }
        FinishReason::Stop | FinishReason::ToolCalls | FinishReason::PauseTurn => None,
        FinishReason::Other => None,
    }
}

/// `text` safe to write to a terminal: what a person reads is what runs. Control
/// characters other than newline and tab (ESC sequences that move the cursor, clear the
/// screen, set the window title or hide text; a lone carriage return that overwrites a
/// line) are shown as `^[`, `^M`, …; C1 controls, bidirectional controls (U+202E, which
/// reverses what follows), zero-width and other invisible characters as `<U+XXXX>`
/// ([`foya_protocol::visible::visible`], shared with the SSE payloads of `serve`). A
/// carriage return before a newline is dropped. Text without such characters is
/// borrowed.
pub(crate) fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    foya_protocol::visible::visible(text)
}

/// Whether stderr notes are dimmed: stderr is a terminal and `NO_COLOR` is unset.
fn color_enabled() -> bool {
    use std::io::IsTerminal as _;
    static COLOR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COLOR.get_or_init(|| std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
}

/// `text` in ANSI faint when `color`, else unchanged.
fn paint_dim(color: bool, text: &str) -> String {
    if color {
        format!("\x1b[2m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// `text` dimmed (ANSI faint) when stderr is a terminal and `NO_COLOR` is unset; plain
/// otherwise, so logs and pipes get no escape codes.
pub(crate) fn dim(text: &str) -> String {
    paint_dim(color_enabled(), text)
}

/// First line of `text`, shortened to [`PREVIEW_CHARS`].
fn preview(text: &str) -> String {
    let text = terminal_safe(text);
    let first = text.lines().next().unwrap_or("");
    let mut out: String = first.chars().take(PREVIEW_CHARS).collect();
    if first.chars().count() > PREVIEW_CHARS || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

/// Whether an approval request offers "allow for this session", from its `grant`: an
/// empty key offers none (a question a `PreToolUse` hook asks, a protected path, a
/// command whose grant would cover other code); an absent one (a log written before
/// grants were recorded) is offered as it was then.
pub(crate) fn offers_session_grant(grant: Option<&str>) -> bool {
    grant != Some("")
}

/// The answers an approval prompt offers.
pub(crate) fn approval_choices(offers_session: bool) -> &'static str {
    if offers_session {
        "[y]es once / [a]lways this session / [n]o (or type a reason)"
    } else {
        "[y]es once / [n]o (or type a reason); \"always this session\" is not offered for this call"
    }
}

/// `  approval: allowed once`, `… allowed for this session`, `… denied (<message>)`.
pub(crate) fn approval_line(decision: &ApprovalDecision, message: Option<&str>) -> String {
    let what = match decision {
        ApprovalDecision::AllowOnce => "allowed once",
        ApprovalDecision::AllowForSession => "allowed for this session",
        ApprovalDecision::Deny => "denied",
    };
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(message) => format!("  approval: {what} ({message})"),
        None => format!("  approval: {what}"),
    }
}

/// One session of `sessions list`'s text output: id, event count (`1 event`, `2 events`,
/// the count right-aligned and the noun padded so that the columns line up), working
/// directory, title, and `[deleted]` for a deleted session. The directory's name and a
/// generated title are untrusted text: their terminal controls are shown, not obeyed.
pub(crate) fn summary_line(s: &foya_protocol::SessionSummary) -> String {
    let title = s.title.as_deref().unwrap_or("(untitled)");
    let deleted = if s.deleted { " [deleted]" } else { "" };
    let noun = if s.last_seq.0 == 1 { "event" } else { "events" };
    let line = format!(
        "{}  {:>5} {noun:<6}  {}  {title}{deleted}",
        s.id,
        s.last_seq.0,
        s.cwd.display(),
    );
    terminal_safe(&line).into_owned()
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;

//! Terminal rendering of session updates: answer text to stdout as it streams, tool
//! activity, retries and errors to stderr; or one JSON object per line with `--json`.

use foya_protocol::{Delta, Event, EventKind, SessionUpdate, ToolCallId};
use std::collections::HashMap;
use std::io::Write as _;

/// Longest tool-result preview shown on stderr, in characters.
const PREVIEW_CHARS: usize = 120;

/// Renders updates of one session.
#[derive(Debug, Default)]
pub(crate) struct Renderer {
    json: bool,
    /// Tool calls seen in assistant messages, for naming them when they run.
    calls: HashMap<ToolCallId, (String, String)>,
    /// Whether the last thing on stdout was answer text without a trailing newline.
    open_line: bool,
}

impl Renderer {
    pub(crate) fn new(json: bool) -> Self {
        Self {
            json,
            ..Self::default()
        }
    }

    pub(crate) fn render(&mut self, update: &SessionUpdate) {
        if self.json {
            if let Ok(line) = serde_json::to_string(update) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            return;
        }
        match update {
            SessionUpdate::Delta(d) => self.delta(&d.delta),
            SessionUpdate::Event(e) => self.event(e),
            SessionUpdate::Notice(_) => {}
        }
    }

    fn delta(&mut self, delta: &Delta) {
        match delta {
            Delta::TextDelta { text } => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes());
                let _ = out.flush();
                self.open_line = !text.ends_with('\n');
            }
            Delta::ReasoningDelta { text } => {
                eprint!("{}", dim(text));
            }
            Delta::ToolCallQueued { name, .. } => {
                self.end_line();
                eprintln!("{}", crate::render::dim(&format!("• {name} queued")));
            }
            Delta::ToolCallDelta { .. } | Delta::ToolOutput { .. } => {}
        }
    }

    fn event(&mut self, event: &Event) {
        match &event.kind {
            EventKind::AssistantMessage(m) => {
                if !m.reasoning.is_empty() {
                    eprintln!();
                }
                for call in &m.tool_calls {
                    let args = serde_json::to_string(&call.arguments).unwrap_or_default();
                    self.calls
                        .insert(call.id.clone(), (call.name.clone(), args));
                }
            }
            EventKind::ToolStarted { tool_call_id, name } => {
                self.end_line();
                let args = self
                    .calls
                    .get(tool_call_id)
                    .map(|(_, a)| a.as_str())
                    .unwrap_or("");
                eprintln!("▶ {name} {}", preview(args));
            }
            EventKind::ToolMessage(t) => {
                let name = self
                    .calls
                    .get(&t.tool_call_id)
                    .map(|(n, _)| n.as_str())
                    .unwrap_or("tool");
                let mark = if t.is_error { "✗" } else { "✓" };
                eprintln!("{mark} {name}: {}", preview(&t.content));
            }
            EventKind::ApprovalRequested {
                tool_name,
                action,
                reason,
                ..
            } => {
                self.end_line();
                eprintln!("? approval needed for {tool_name}: {action} ({reason})");
            }
            EventKind::ApprovalDecided {
                decision, message, ..
            } => {
                let note = message.as_deref().unwrap_or("");
                eprintln!("  approval: {decision:?} {note}");
            }
            EventKind::ProviderRetry {
                attempt,
                max_attempts,
                delay_ms,
                error,
            } => {
                self.end_line();
                eprintln!(
                    "↻ retrying in {:.1}s (attempt {attempt}/{max_attempts}) because {}: {}",
                    *delay_ms as f64 / 1000.0,
                    error.class,
                    error.message
                );
            }
            EventKind::TurnComplete {
                status,
                reason,
                error,
            } => {
                self.end_line();
                if let Some(err) = error {
                    eprintln!("error: {}: {}", err.class, err.message);
                } else if let Some(reason) = reason {
                    eprintln!("turn {status:?}: {reason}");
                }
            }
            _ => {}
        }
    }

    /// Finishes an open answer line so stderr output starts on its own line.
    pub(crate) fn end_line(&mut self) {
        if self.open_line {
            println!();
            self.open_line = false;
        }
    }
}

/// `text` dimmed (ANSI faint) when stderr is a terminal and `NO_COLOR` is unset; plain
/// otherwise, so logs and pipes get no escape codes.
pub(crate) fn dim(text: &str) -> String {
    use std::io::IsTerminal as _;
    static COLOR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let color = *COLOR
        .get_or_init(|| std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none());
    if color {
        format!("\x1b[2m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// First line of `text`, shortened to [`PREVIEW_CHARS`].
fn preview(text: &str) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut out: String = first.chars().take(PREVIEW_CHARS).collect();
    if first.chars().count() > PREVIEW_CHARS || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}

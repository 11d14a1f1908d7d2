//! Keyboard input of `foya chat`: the line editor (rustyline, with history) while idle,
//! and a plain line reader while a turn runs (the terminal is in cooked mode then, so
//! Ctrl-C is a SIGINT that cancels the turn, and typed lines are queued as inputs).
//!
//! Order: several lines pasted at the prompt arrive in one read, and the line editor
//! keeps those after the first in its own buffer. Before a turn starts, the chat takes
//! them out ([`Editor::typed_ahead`]) and queues them, so a line typed while the turn
//! runs (read by the [`TurnReader`]) comes after them, as it was typed.

use rustyline::error::ReadlineError;
use std::os::fd::AsFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use tokio::sync::mpsc;

/// The prompt shown while idle.
pub(crate) const PROMPT: &str = "foya> ";

/// What the line editor returned.
#[derive(Debug)]
pub(crate) enum Prompted {
    /// A line (without the newline).
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D, or the terminal went away.
    Eof,
    /// A signal arrived while waiting for the line.
    Signal(crate::signals::Signalled),
}

/// The line editor of the chat: rustyline with a [`LineTracker`].
type LineEditor = rustyline::Editor<LineTracker, rustyline::history::DefaultHistory>;

/// The line editor, moved to a blocking thread for each prompt.
#[derive(Debug)]
pub(crate) struct Editor {
    inner: Option<LineEditor>,
    /// A line [`Self::typed_ahead`] found typed but not finished: the next prompt starts
    /// with it.
    unfinished: String,
}

impl Editor {
    pub(crate) fn new() -> anyhow::Result<Self> {
        let mut editor = LineEditor::new()?;
        editor.set_helper(Some(LineTracker::default()));
        Ok(Self {
            inner: Some(editor),
            unfinished: String::new(),
        })
    }

    /// Shows the prompt and reads one line with editing and history.
    pub(crate) async fn read(&mut self) -> Prompted {
        let Some(mut editor) = self.inner.take() else {
            return Prompted::Eof;
        };
        let unfinished = std::mem::take(&mut self.unfinished);
        let joined = tokio::task::spawn_blocking(move || {
            let result = editor.readline_with_initial(PROMPT, (&unfinished, ""));
            (editor, result)
        })
        .await;
        let Ok((editor, result)) = joined else {
            return Prompted::Eof;
        };
        self.inner = Some(editor);
        match result {
            Ok(line) => {
                if !line.trim().is_empty()
                    && let Some(editor) = self.inner.as_mut()
                {
                    let _ = editor.add_history_entry(line.as_str());
                }
                Prompted::Line(line)
            }
            Err(ReadlineError::Interrupted) => Prompted::Interrupted,
            Err(_) => Prompted::Eof,
        }
    }

    /// The complete lines the line editor already holds after the line [`Self::read`]
    /// returned (the rest of a paste), read without waiting for more input. A last line
    /// without its Enter yet is kept for the next prompt.
    pub(crate) async fn typed_ahead(&mut self) -> Vec<String> {
        let Some(mut editor) = self.inner.take() else {
            return Vec::new();
        };
        let joined = tokio::task::spawn_blocking(move || {
            let drained = drain(&mut editor);
            (editor, drained)
        })
        .await;
        let Ok((editor, (lines, unfinished))) = joined else {
            return Vec::new();
        };
        self.inner = Some(editor);
        self.unfinished = unfinished;
        lines
    }
}

/// Remembers the line being edited (rustyline asks its hinter after every change to
/// the line), so that a line [`drain`] cuts short is not lost.
#[derive(Debug, Default)]
struct LineTracker {
    line: std::sync::Mutex<String>,
}

impl LineTracker {
    fn set(&self, line: &str) {
        let mut kept = self
            .line
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.clear();
        kept.push_str(line);
    }

    fn take(&self) -> String {
        std::mem::take(
            &mut *self
                .line
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl rustyline::hint::Hinter for LineTracker {
    type Hint = String;

    fn hint(&self, line: &str, _pos: usize, _ctx: &rustyline::Context<'_>) -> Option<String> {
        self.set(line);
        None
    }
}

impl rustyline::completion::Completer for LineTracker {
    type Candidate = String;
}

impl rustyline::highlight::Highlighter for LineTracker {}

impl rustyline::validate::Validator for LineTracker {}

impl rustyline::Helper for LineTracker {}

/// Reads the lines `editor` holds in its buffer: with stdin switched to a non-blocking
/// open of the same terminal, a read of the terminal that would wait fails instead, and
/// that ends the line the editor is reading. Also the text of that last line, typed
/// without its Enter (empty when there is none).
fn drain(editor: &mut LineEditor) -> (Vec<String>, String) {
    let Ok(_nonblocking) = NonBlockingStdin::install() else {
        return (Vec::new(), String::new());
    };
    let mut lines = Vec::new();
    loop {
        if let Some(tracker) = editor.helper() {
            tracker.set("");
        }
        match editor.readline("") {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                lines.push(line);
            }
            Err(_) => {
                let unfinished = editor.helper().map(LineTracker::take).unwrap_or_default();
                return (lines, unfinished);
            }
        }
    }
}

/// Fd 0 replaced by a non-blocking open of the terminal it is (a new open file
/// description: stdout and stderr, which share the original one, stay blocking); the
/// original fd 0 is put back when this is dropped.
struct NonBlockingStdin {
    saved: std::os::fd::OwnedFd,
}

impl NonBlockingStdin {
    fn install() -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let saved = nix::unistd::dup(std::io::stdin().as_fd())?;
        let terminal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits() | nix::fcntl::OFlag::O_NOCTTY.bits())
            .open("/proc/self/fd/0")?;
        nix::unistd::dup2_stdin(&terminal)?;
        Ok(Self { saved })
    }
}

impl Drop for NonBlockingStdin {
    fn drop(&mut self) {
        let _ = nix::unistd::dup2_stdin(&self.saved);
    }
}

/// Reads lines from stdin on a thread while a turn runs; stopping it waits at most one
/// poll interval (100 ms) so the line editor gets the terminal back untouched.
#[derive(Debug)]
pub(crate) struct TurnReader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Lines typed (`None` once stdin ended).
    pub(crate) lines: mpsc::UnboundedReceiver<Option<String>>,
}

impl TurnReader {
    pub(crate) fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, lines) = mpsc::unbounded_channel();
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || read_lines(&flag, &tx));
        Self {
            stop,
            thread: Some(thread),
            lines,
        }
    }

    /// Stops the reader and waits for its thread.
    pub(crate) async fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

fn read_lines(stop: &AtomicBool, tx: &mpsc::UnboundedSender<Option<String>>) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::io::Read as _;
    let stdin = std::io::stdin();
    // Raw reads of a duplicate of fd 0, not `Stdin::read_line`: its buffer would keep a
    // second line that came in the same read out of `poll`'s sight until more input.
    let Ok(mut raw) = stdin.as_fd().try_clone_to_owned().map(std::fs::File::from) else {
        let _ = tx.send(None);
        return;
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    while !stop.load(Ordering::SeqCst) {
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(100u16)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
        let n = match raw.read(&mut chunk) {
            Ok(0) | Err(_) => {
                // End of input: a last line without a newline still counts.
                if !pending.is_empty() {
                    let _ = tx.send(Some(line_text(&pending)));
                }
                let _ = tx.send(None);
                break;
            }
            Ok(n) => n,
        };
        pending.extend_from_slice(&chunk[..n]);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if tx.send(Some(line_text(&line))).is_err() {
                return;
            }
        }
    }
}

/// One line's text: invalid UTF-8 replaced, the line ending removed.
fn line_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .trim_end_matches(['\n', '\r'])
        .to_owned()
}

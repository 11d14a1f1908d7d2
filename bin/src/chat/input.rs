//! Keyboard input of `foya chat`: the line editor (rustyline, with history) while idle,
//! and a plain line reader while a turn runs (the terminal is in cooked mode then, so
//! Ctrl-C is a SIGINT that cancels the turn, and typed lines are queued as inputs).

use rustyline::DefaultEditor;
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

/// The line editor, moved to a blocking thread for each prompt.
#[derive(Debug)]
pub(crate) struct Editor {
    inner: Option<DefaultEditor>,
}

impl Editor {
    pub(crate) fn new() -> anyhow::Result<Self> {
        Ok(Self {
            inner: Some(DefaultEditor::new()?),
        })
    }

    /// Shows the prompt and reads one line with editing and history.
    pub(crate) async fn read(&mut self) -> Prompted {
        let Some(mut editor) = self.inner.take() else {
            return Prompted::Eof;
        };
        let joined = tokio::task::spawn_blocking(move || {
            let result = editor.readline(PROMPT);
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

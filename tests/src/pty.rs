//! A program at a pseudo-terminal, as a person at a terminal runs it: its stdin, stdout
//! and stderr on the slave end of a pty (nix's `openpty`), 80×24 with echo off, and the
//! slave its controlling terminal in a session of its own (`setsid --ctty`, util-linux),
//! so Ctrl-C typed in cooked mode is a SIGINT to it. The test types on the master end and
//! waits for what the terminal shows, under one deadline for the whole run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::io::{Read as _, Write as _};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running program at a pseudo-terminal (killed when dropped before it was waited for).
#[derive(Debug)]
pub struct Pty {
    child: Option<Child>,
    /// The master end: writing to it is typing.
    keys: std::fs::File,
    /// What the terminal shows, in chunks; disconnected once no process has the slave end
    /// open.
    screen: mpsc::Receiver<Vec<u8>>,
    /// Shown and not yet waited past.
    unread: Vec<u8>,
    /// Everything shown, for the messages of a failed wait.
    shown: Vec<u8>,
    deadline: Instant,
}

impl Pty {
    /// Runs `command` (its program, arguments, environment and working directory; not
    /// its stdio) at a new pseudo-terminal; every wait of the run ends by `timeout` from
    /// now.
    pub fn spawn(command: &Command, timeout: Duration) -> Self {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let size = nix::pty::Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).unwrap();
        let mut termios = tcgetattr(&pty.slave).unwrap();
        termios.local_flags.remove(LocalFlags::ECHO);
        tcsetattr(&pty.slave, SetArg::TCSANOW, &termios).unwrap();
        // `--ctty` makes its stdin (the slave) the controlling terminal; `--wait` keeps
        // the exit status where setsid has to fork.
        let mut setsid = crate::child::wrapped(command, &["setsid", "--ctty", "--wait"]);
        let child = setsid
            .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::from(pty.slave))
            .spawn()
            .unwrap();
        // The slave's copies went with `setsid`: only the program holds it now.
        drop(setsid);
        let keys = std::fs::File::from(pty.master);
        let mut reader = keys.try_clone().unwrap();
        let (tx, screen) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once no process has the slave end open.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Self {
            child: Some(child),
            keys,
            screen,
            unread: Vec::new(),
            shown: Vec::new(),
            deadline: Instant::now() + timeout,
        }
    }

    /// Types `keys` (`\n` or `\r` is Enter, `\x03` Ctrl-C).
    pub fn send(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
    }

    /// Waits until the terminal shows `text` after what earlier waits saw; the next
    /// wait looks after it.
    pub fn expect(&mut self, text: &str) {
        let needle = text.as_bytes();
        loop {
            if let Some(at) = self.unread.windows(needle.len()).position(|w| w == needle) {
                self.unread.drain(..at + needle.len());
                return;
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.screen.recv_timeout(left) {
                Ok(chunk) => self.take(chunk),
                Err(e) => panic!(
                    "the terminal never showed {text:?} ({e}); it showed:\n{}",
                    String::from_utf8_lossy(&self.shown)
                ),
            }
        }
    }

    /// Waits until no process has the terminal open any more (the program ended).
    pub fn expect_eof(&mut self) {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.screen.recv_timeout(left) {
                Ok(chunk) => self.take(chunk),
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(e) => panic!(
                    "the terminal stayed open ({e}); it showed:\n{}",
                    String::from_utf8_lossy(&self.shown)
                ),
            }
        }
    }

    /// Waits for the program's exit (killed, and a panic, when the deadline passes).
    pub fn wait(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("waited for once");
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send(status);
            }
        });
        match rx.recv_timeout(self.deadline.saturating_duration_since(Instant::now())) {
            Ok(status) => status,
            Err(e) => {
                let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                panic!("the program did not exit ({e})")
            }
        }
    }

    fn take(&mut self, chunk: Vec<u8>) {
        self.shown.extend_from_slice(&chunk);
        self.unread.extend(chunk);
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

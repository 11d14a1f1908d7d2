//! The signals `foya run` and `foya chat` handle while a turn runs: Ctrl-C (SIGINT),
//! SIGTERM and SIGHUP (the terminal went away) cancel the turn cleanly; the exit status
//! afterwards is 128 + the signal number (130, 143, 129), as a shell reports a process
//! that signal ended. A second signal quits at once (same status).

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signalled {
    /// Ctrl-C (SIGINT).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP (the terminal went away).
    Hangup,
}

impl Signalled {
    /// How the user names it: `Ctrl-C`, `SIGTERM`, `SIGHUP`.
    pub fn name(self) -> &'static str {
        match self {
            Signalled::Interrupt => "Ctrl-C",
            Signalled::Terminate => "SIGTERM",
            Signalled::Hangup => "SIGHUP",
        }
    }

    /// The line shown when the first signal starts the cancel.
    pub fn cancelling(self) -> String {
        format!("cancelling… ({} again to quit now)", self.name())
    }
}

/// The installed handlers: from [`Signals::install`] on, SIGINT, SIGTERM and SIGHUP no
/// longer end the process; they are delivered by [`Signals::recv`] (tokio keeps one
/// pending delivery of each until it is received).
#[derive(Debug)]
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Installs the handlers.
    ///
    /// # Errors
    /// A handler cannot be installed.
    pub fn install() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())
                .context("cannot install the SIGINT handler")?,
            terminate: signal(SignalKind::terminate())
                .context("cannot install the SIGTERM handler")?,
            hangup: signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")?,
        })
    }

    /// The next signal.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal that arrives while no one waits is kept for the next call.
    pub async fn recv(&mut self) -> Signalled {
        tokio::select! {
            _ = self.interrupt.recv() => Signalled::Interrupt,
            _ = self.terminate.recv() => Signalled::Terminate,
            _ = self.hangup.recv() => Signalled::Hangup,
        }
    }
}

/// The next Ctrl-C, SIGTERM or SIGHUP through `signals` (installed early with
/// [`Signals::install`]); Ctrl-C alone when the handlers could not be installed (`None`).
///
/// # Cancel safety
/// Cancel safe: a signal that arrives while no one waits is kept for the next call.
pub async fn next(signals: &mut Option<Signals>) {
    match signals {
        Some(signals) => {
            signals.recv().await;
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

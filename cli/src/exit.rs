//! How a command ends when it does not succeed: a [`CommandError`]. Every command of
//! `foya` (these, `foya-serve`'s and `foya-loadtest`'s) returns `Result<(), CommandError>`;
//! the binary's `main` prints what is left to say ([`CommandError::report`]) and maps the
//! error to its exit status in one place (`docs/cli.md`, "Exit status").

use crate::signals::Signalled;

/// Why a command did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Bad arguments or configuration (exit status 2). Reported as `foya: <error chain>`.
    #[error("{}", crate::args::error_chain(.0))]
    Usage(anyhow::Error),
    /// The command could not do its job (exit status 1). Reported as `foya: <error
    /// chain>`.
    #[error("{}", crate::args::error_chain(.0))]
    Failed(anyhow::Error),
    /// The event store is damaged or of a newer format (exit status 4). Reported as one
    /// line naming it and what to do ([`crate::damage::report`]).
    #[error("{}", crate::args::error_chain(.0))]
    Damaged(anyhow::Error),
    /// The command ended with a status it has already explained on the terminal.
    #[error(transparent)]
    Ended(#[from] Ended),
}

/// A command's end that it has already explained (stderr, or the turn's own output), so
/// nothing is left to print; only the exit status remains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Ended {
    /// What was asked failed: a turn that ended failed, no such session, a store that is
    /// not there (exit status 1).
    #[error("the command failed")]
    Failed,
    /// A usage error already explained (exit status 2).
    #[error("usage error")]
    Usage,
    /// `foya sessions list --cluster`: some nodes did not answer; the others' sessions
    /// were printed (exit status 3).
    #[error("some nodes did not answer")]
    Partial,
    /// The event store is damaged: what was readable was printed, and what to do (exit
    /// status 4).
    #[error("the event store is damaged")]
    Damaged,
    /// The turn was cancelled: by Ctrl-C, or because the input ended at an approval
    /// prompt (exit status 130, as after SIGINT).
    #[error("the turn was cancelled")]
    Cancelled,
    /// SIGTERM or SIGHUP cancelled the turn, or a second signal ended the command (exit
    /// status 128 + the signal's number: 143, 129; 130 for Ctrl-C).
    #[error("the turn was cancelled by {}", .0.name())]
    Signalled(Signalled),
}

impl CommandError {
    /// A usage or configuration error (exit status 2).
    pub fn usage(e: impl Into<anyhow::Error>) -> Self {
        CommandError::Usage(e.into())
    }

    /// Prints on stderr what the user has not been told yet: `foya: <error chain>`, or the
    /// line for a damaged store (for a usage error too: its exit status stays 2);
    /// nothing for [`CommandError::Ended`].
    pub fn report(&self) {
        match self {
            CommandError::Usage(e) | CommandError::Failed(e) | CommandError::Damaged(e) => {
                crate::args::report(e);
            }
            CommandError::Ended(_) => {}
        }
    }
}

/// An error of a command's steps: [`CommandError::Ended`] when it is an [`Ended`] (a
/// step that already explained itself), [`CommandError::Damaged`] when it says the event
/// store is damaged or of a newer format ([`crate::damage::is_damage`]), else
/// [`CommandError::Failed`].
impl From<anyhow::Error> for CommandError {
    fn from(e: anyhow::Error) -> Self {
        if let Some(ended) = e.downcast_ref::<Ended>() {
            CommandError::Ended(*ended)
        } else if crate::damage::is_damage(&e) {
            CommandError::Damaged(e)
        } else {
            CommandError::Failed(e)
        }
    }
}

/// A failed command (or damaged store) whose message is `message`.
pub fn failed(message: impl std::fmt::Display) -> CommandError {
    CommandError::Failed(anyhow::anyhow!("{message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_store_is_told_from_other_failures_by_its_error() {
        let damaged = anyhow::Error::new(foya_storage::OpenError::NewerFormat {
            path: "foya.redb".into(),
            message: "format 9".into(),
        })
        .context("cannot open the store");
        assert!(matches!(
            CommandError::from(damaged),
            CommandError::Damaged(_)
        ));
        let other = anyhow::anyhow!("no session x");
        assert!(matches!(CommandError::from(other), CommandError::Failed(_)));
        let said = anyhow::Error::new(Ended::Partial);
        assert!(matches!(
            CommandError::from(said),
            CommandError::Ended(Ended::Partial)
        ));
        assert_eq!(failed("no session x").to_string(), "no session x");
    }
}

//! Error enums of the store, one per operation family (open, append, read), plus the
//! wide [`Error`] every narrow one converts into.
//!
//! redb's own errors are not `Clone` and one failed commit must be reported to every
//! append of its batch, so storage failures are carried as their rendered message.

use foya_protocol::{Seq, SessionId};
use std::path::PathBuf;

/// Why [`crate::Store::open`], [`crate::Store::open_in_memory`] or
/// [`crate::ReadOnlyStore::open`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The parent directory of the database file could not be created.
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process (or another `Store` in this one) has the file open: for
    /// [`crate::Store::open`], any store, read-only ones included; for
    /// [`crate::ReadOnlyStore::open`], a writable [`crate::Store`].
    #[error("database {path} is already open by another store or process")]
    AlreadyOpen {
        /// The database file.
        path: PathBuf,
    },
    /// [`crate::ReadOnlyStore::open`] only: there is no database file (none was created).
    #[error("database {path} does not exist")]
    NotFound {
        /// The database file.
        path: PathBuf,
    },
    /// [`crate::ReadOnlyStore::open`] only: the file was not closed cleanly (its writer
    /// was killed) or its creation was interrupted, and reading it needs a repair, which
    /// writes. [`crate::Store::open`] repairs it; nothing was changed.
    #[error(
        "database {path} needs recovery (it was not closed cleanly); opening it writable repairs it"
    )]
    NeedsRecovery {
        /// The database file.
        path: PathBuf,
    },
    /// The file is damaged: redb found it corrupt (a checksum, a length or a structure
    /// that cannot be right), it is truncated, or reading it made redb panic (contained).
    /// `message` says what was found (with the offset or table where known).
    /// `foya store check` describes the damage, `foya store salvage` copies what is
    /// readable into a fresh store.
    #[error("database {path} is damaged: {message}")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong, as found.
        message: String,
    },
    /// The file was written by a newer version of the database format than this build
    /// reads.
    #[error("database {path} was written by a newer format version: {message}")]
    NewerFormat {
        /// The database file.
        path: PathBuf,
        /// redb's message.
        message: String,
    },
    /// redb could not open, repair or initialise the file.
    #[error("cannot open database {path}: {message}")]
    Database {
        /// The database file (`:memory:` for the in-memory backend).
        path: PathBuf,
        /// redb's message.
        message: String,
    },
    /// The writer thread could not be started.
    #[error("cannot start the store writer thread: {0}")]
    Spawn(std::io::Error),
}

/// Why an [`crate::Store::append`] was refused or failed. Nothing of a refused or failed
/// append was committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The events do not continue the session's log densely.
    #[error("seq mismatch: expected {expected}, got {got}")]
    SeqMismatch {
        /// The seq the next event must have.
        expected: Seq,
        /// The seq it had.
        got: Seq,
    },
    /// The session's `session_deleted` was committed; nothing is written after it.
    #[error("session is deleted; no event may be appended after session_deleted")]
    SessionDeleted,
    /// The session does not exist and the first event is not `session_created`.
    #[error("unknown session: the first event of a session must be session_created at seq 1")]
    UnknownSession,
    /// The events of one append belong to more than one session.
    #[error("one append must hold events of one session: {expected} and {got} were mixed")]
    MixedSessions {
        /// The session of the first event.
        expected: SessionId,
        /// A different session found later in the same append.
        got: SessionId,
    },
    /// An event could not be encoded (e.g. a working directory that is not UTF-8).
    #[error("cannot encode event: {0}")]
    Encode(String),
    /// redb or the disk failed (I/O error, full disk, …); the whole batch was rolled back
    /// and may be retried. From a shared store (a lost connection) the batch may also
    /// have committed before its answer was lost: the log tells.
    #[error("storage failure: {0}")]
    Storage(String),
    /// A shared store cannot tell whether the batch committed: its statement failed,
    /// and the server process that ran it could not be ended, so bytes of it still on
    /// their way may commit later. Never take it as refused: the log tells, once those
    /// bytes have arrived or their server process has ended.
    #[error("the append's outcome is unknown: {0}")]
    Unknown(String),
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
    /// The append's [`crate::Fence`] is stale: `shard` is now at `epoch` (another node
    /// claimed it; `None`: the shard has no epoch row). Nothing was written. Never retried:
    /// the writer lost the shard and must stop writing its sessions.
    #[error("fenced: shard {shard} moved on to epoch {epoch:?}; this node no longer owns it")]
    Fenced {
        /// The session's shard.
        shard: u32,
        /// The shard's current epoch.
        epoch: Option<u64>,
    },
    /// The append's [`crate::Fence`] names another shard than the session's (a
    /// sub-agent's child lives in its parent's shard): nothing was written. Never retried:
    /// the caller fenced the session with the wrong shard.
    #[error("the session is in shard {shard}, not in the fence's shard {fence_shard}")]
    WrongShard {
        /// The session's shard.
        shard: u32,
        /// The shard the fence named.
        fence_shard: u32,
    },
}

impl AppendError {
    /// The check every store makes of one append before it writes: the events are of
    /// one session and their seqs follow each other from the first (an empty batch
    /// passes).
    ///
    /// # Errors
    /// [`AppendError::MixedSessions`] or [`AppendError::SeqMismatch`] for the first
    /// event that breaks the rule.
    pub fn check_batch(events: &[foya_protocol::Event]) -> Result<(), AppendError> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        for (event, offset) in events.iter().zip(0u64..) {
            if event.session_id != first.session_id {
                return Err(AppendError::MixedSessions {
                    expected: first.session_id,
                    got: event.session_id,
                });
            }
            let expected = first.seq.0.checked_add(offset).map(Seq);
            if expected != Some(event.seq) {
                return Err(AppendError::SeqMismatch {
                    expected: expected.unwrap_or(Seq(u64::MAX)),
                    got: event.seq,
                });
            }
        }
        Ok(())
    }

    /// Whether the same append may succeed if tried again: only after a storage failure
    /// (nothing of the batch was written). A refusal (seq, deletion) stays one, and
    /// [`AppendError::Fenced`] is never retried.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Storage(_))
    }
}

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A stored value was written by a newer (or unknown) format version.
    #[error("unsupported stored format version {version} (this build reads version {supported})")]
    UnsupportedFormat {
        /// The version byte found.
        version: u8,
        /// The version this build reads.
        supported: u8,
    },
    /// A stored value is not valid for its format version.
    #[error("cannot decode stored value: {0}")]
    Decode(String),
    /// redb or the disk failed.
    #[error("storage failure: {0}")]
    Storage(String),
    /// The stored data is damaged: redb found a page corrupt or panicked on it
    /// (contained). Other sessions may still read.
    #[error("damaged data: {0}")]
    Corrupt(String),
}

/// Any store error; every narrow error converts into it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening failed.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// An append failed.
    #[error(transparent)]
    Append(#[from] AppendError),
    /// A read failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

impl From<ReadError> for AppendError {
    fn from(e: ReadError) -> Self {
        Self::Storage(e.to_string())
    }
}

impl ReadError {
    /// Wraps a redb failure (kept private so redb stays out of the public API): one redb
    /// call's corruption is [`ReadError::Corrupt`], any other [`ReadError::Storage`].
    pub(crate) fn storage(e: impl Into<redb::Error>) -> Self {
        match e.into() {
            redb::Error::Corrupted(message) => Self::Corrupt(message),
            other => Self::Storage(other.to_string()),
        }
    }

    /// Whether this error means the stored data is damaged or unreadable by this build
    /// (as opposed to a failing disk or a closed store): [`ReadError::Corrupt`],
    /// [`ReadError::Decode`], [`ReadError::UnsupportedFormat`].
    #[must_use]
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            Self::Corrupt(_) | Self::Decode(_) | Self::UnsupportedFormat { .. }
        )
    }
}

impl OpenError {
    /// Whether the file is damaged or of a format this build cannot read
    /// ([`OpenError::Corrupt`], [`OpenError::NewerFormat`]).
    #[must_use]
    pub fn is_damage(&self) -> bool {
        matches!(self, Self::Corrupt { .. } | Self::NewerFormat { .. })
    }

    /// Classifies redb's refusal to open `path` (kept private so redb stays out of the
    /// public API).
    pub(crate) fn from_redb(path: &std::path::Path, e: redb::DatabaseError) -> Self {
        let path = path.to_owned();
        match e {
            redb::DatabaseError::DatabaseAlreadyOpen
            | redb::DatabaseError::LockProtocolMismatch => Self::AlreadyOpen { path },
            redb::DatabaseError::RepairAborted => Self::NeedsRecovery { path },
            redb::DatabaseError::Storage(redb::StorageError::Corrupted(message)) => {
                if message.contains("Expected file format version") {
                    // redb refuses an unknown version before checking the slot's
                    // checksum: a damaged header reads like a newer format.
                    match crate::header::version_damage(&path) {
                        Some(damage) => Self::Corrupt {
                            path,
                            message: format!("{damage} (redb: {message})"),
                        },
                        None => Self::NewerFormat { path, message },
                    }
                } else {
                    Self::Corrupt { path, message }
                }
            }
            redb::DatabaseError::Storage(redb::StorageError::Io(io))
                if io.to_string().contains("magic number") =>
            {
                Self::Corrupt {
                    path,
                    message: "not a redb database (its magic number does not match)".to_owned(),
                }
            }
            redb::DatabaseError::Storage(redb::StorageError::Io(io))
                if io.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                Self::Corrupt {
                    path,
                    message: format!("the file is shorter than its own layout says ({io})"),
                }
            }
            other => Self::Database {
                path,
                message: other.to_string(),
            },
        }
    }
}

//! `foya-storage`: the Foya event log, a [redb](https://docs.rs/redb/4) database file
//! holding every session's append-only log of [`foya_protocol::Event`]s and a summary per
//! session.
//!
//! Invariants: this crate is the only one that names redb; it knows nothing about actors
//! or HTTP; a committed event is never changed or removed.
//!
//! # Schema
//!
//! | table      | key                                | value                                   |
//! |------------|------------------------------------|-----------------------------------------|
//! | `events`   | `(session: u128, seq: u64)`        | codec(`StoredEvent {run_id, at_ms, kind}`) |
//! | `sessions` | `session: u128`                    | codec([`foya_protocol::SessionSummary`]) |
//! | `pending`  | `(session: u128, kind: u8, item: u128)` | `()`: a queued input or an open turn (the recovery index) |
//!
//! The session key is the id's 16 bytes read as a big-endian `u128`, so one session's
//! events are contiguous and ordered by seq: [`Store::read_from`] is one range scan.
//! Seqs are dense per session (1, 2, 3, …): the first event is `session_created` at
//! seq 1, and nothing follows `session_deleted`. The writer writes the summary row in the
//! same transaction as an event that changes it: `session_created` sets cwd, model and
//! title (from the config), `title_set` the title, `session_deleted` the `deleted` flag.
//! A summary's `last_seq` and `updated_at_ms` (the latest event's `at_ms`) are read from
//! the session's latest `events` row whenever a summary is read, so an ordinary append
//! touches only the `events` table (one insert per event; rewriting the summary row on
//! every append cost the writer about a third more btree work per step).
//!
//! The recovery index `pending` holds a row per queued input and per open turn, kept in
//! the same transaction as `input_queued`, `input_dropped`, `turn_started`,
//! `turn_complete` and `session_deleted`: [`Store::pending_sessions`] names the sessions
//! start-up must recover without reading a million logs. A file from before it gets
//! it built from its logs on its first [`Store::open`].
//!
//! # Codec
//!
//! Every stored value is one format-version byte ([`codec::FORMAT_VERSION`]) followed by
//! MessagePack with named fields (`rmp_serde`), so fields added later with
//! `#[serde(default)]` and the tagged protocol enums read back. Session id and seq are in
//! the key, not the value, and no `#[serde(flatten)]` is used in the stored form. A value
//! with an unknown version byte is refused with [`ReadError::UnsupportedFormat`]. Golden
//! encodings in `storage/tests/golden/` pin the format.
//!
//! # Writes: one writer thread, group commit
//!
//! A dedicated thread owns every write transaction. [`Store::append`] encodes its events
//! on the caller's task and queues them on a bounded channel
//! ([`StoreOptions::queue_capacity`]); a full queue makes appends wait, so a slow disk
//! slows producers instead of growing memory. The writer takes a request, drains up to
//! [`StoreOptions::max_batch`] more, validates each against the session's last seq and
//! deleted flag (cached, loaded lazily from `sessions`), inserts the valid ones and
//! commits them all in ONE transaction: many sessions' appends share one fsync. Each
//! append resolves after that commit: valid ones `Ok`, refused ones with their error
//! (refusing one append never affects the others of the batch). The writer thread reads
//! its own CPU clock once per transaction; [`Store::writer_cpu`] gives the total (for
//! load tests, next to [`Store::stats`]).
//!
//! # Durability and failures
//!
//! [`Durability::Immediate`] (default) fsyncs each commit, so an acknowledged append
//! survives a crash of the process or machine; after a SIGKILL, opening the file runs
//! redb's repair and every acknowledged event is there. A file whose creation was
//! interrupted (killed in its first milliseconds: no magic number yet) is moved aside to
//! `foya.redb.torn-<unix ms>` and created anew, instead of refusing every later open —
//! unless its acknowledgement journal names acknowledged sessions: then it was emptied,
//! not torn, and the open refuses it as damaged ([`OpenError::Corrupt`]; [`repair`] is
//! the explicit way on). [`Durability::None`] skips the
//! fsync (load tests). If a commit fails (I/O error, full disk), every append of that
//! batch gets [`AppendError::Storage`], nothing of the batch is written, the writer's
//! cached state is untouched, the database is reopened (redb refuses all work after an
//! I/O error until then), and the next batch is tried normally.
//!
//! # Damage
//!
//! redb trusts its file's bytes and may panic on a damaged page; every redb call here
//! runs inside a panic boundary (`guard.rs`) that turns such a panic into
//! [`OpenError::Corrupt`] / [`ReadError::Corrupt`] and replaces the handle that panicked.
//! Damage stays local: [`Store::survey`] / [`ReadOnlyStore::survey`] list every session
//! that reads and name the ones that do not; [`ReadOnlyStore::open_damaged`] reads a file
//! redb refuses through a recovered private copy, [`ReadOnlyStore::open_salvaged`]
//! exactly what salvage reads of it; [`repair`] replaces a damaged file with what salvage
//! reads, keeping it beside. A header whose commit slot names an unknown format version
//! without a matching checksum is damage, not a newer format (`header.rs`). [`check`] verifies a file (redb's
//! integrity check and the log's invariants), [`salvage`] copies every readable session
//! into a fresh store (from the btree and, where it is broken, straight from the leaf
//! pages: `raw.rs`), [`Store::backup`] writes a consistent copy. After each commit the
//! writer appends the sessions' acknowledged seqs to a journal beside the file
//! (`journal.rs`); an open compares it with the database and reports every session that
//! lost acknowledged events ([`Store::losses`], `losses.rs`).
//!
//! # Reads
//!
//! Reads ([`Store::read_from`], [`Store::read_range`], [`Store::last_seq`],
//! [`Store::session`], [`Store::list_sessions`]) are short redb read transactions on the
//! caller's thread: they see exactly the committed events and never wait for the
//! writer. They are synchronous and brief enough to call from async code.
//!
//! A command that only reads opens a [`ReadOnlyStore`] instead: the same reads on a file
//! opened read-only, which it never writes (a [`Store`] writes on open and close even
//! when nothing is appended) and on which it creates no table. It shares the file with
//! other read-only stores but not with a [`Store`] ([`OpenError::AlreadyOpen`]), and
//! refuses a file that needs redb's repair ([`OpenError::NeedsRecovery`]: opening it
//! with [`Store::open`] repairs it).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use foya_protocol::{Event, EventKind, Seq, SessionConfig, SessionId};
//! use foya_storage::{Store, StoreOptions};
//!
//! let store = Store::open_in_memory(StoreOptions::default())?;
//! let session = SessionId::new();
//! let created = Event {
//!     session_id: session,
//!     seq: Seq(1),
//!     run_id: None,
//!     at_ms: 1_700_000_000_000,
//!     kind: EventKind::SessionCreated { config: SessionConfig::new("/work") },
//! };
//! store.append(vec![created.clone()]).await?;
//! assert_eq!(store.read_from(session, Seq(1))?, vec![created]);
//! store.close().await;
//! # Ok::<(), foya_storage::Error>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs)]

mod backup;
mod check;
pub mod codec;
mod commits;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
#[cfg(test)]
mod conformance_redb;
pub mod data_dir;
mod db;
mod error;
mod guard;
mod header;
mod journal;
mod latency;
mod listing;
mod log;
mod losses;
mod open;
mod ownership;
mod pending;
mod query;
mod raw;
mod read;
mod read_only;
mod recent;
mod recover;
mod repair;
mod salvage;
mod schema;
mod store;
mod survey;
mod writer;

pub use backup::BackupReport;
pub use check::{CheckReport, check};
pub use commits::{AppendObserver, CommitObserver, CommitStat};
pub use error::{AppendError, Error, OpenError, ReadError};
pub use latency::{Latencies, LatencyHistogram};
pub use log::{
    BoxFuture, Cursor, DynEventLog, EventLog, Fence, LogStore, Page, SharedAttachmentError,
    SharedAttachments,
};
pub use losses::{Loss, recorded_losses};
pub use ownership::{NotOwner, Ownership};
pub use read_only::ReadOnlyStore;
pub use recover::REPAIRED as REPAIRED_NOTE;
pub use repair::{RepairReport, repair};
pub use salvage::{SalvageReport, SalvagedSession, salvage};
pub use store::{Durability, Store, StoreOptions, StoreStats};
pub use survey::{Survey, Unreadable};

//! `foya-actors`: the Foya agent runtime.
//!
//! The actor tree (Supervisor → SessionActor → TurnActor → ToolActors),
//! the pure parts they drive (wire adapters, context compiler, approval policy, loop
//! detection), the built-in tools, and the embedding façade. See `ARCHITECTURE.md`.
//!
//! Invariants: only this crate names `ractor`; it never prints to a terminal.

mod agent;
// The repository's docs/embedding.md (one level above this crate), so that its code
// blocks run as doctests.
#[doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/embedding.md"))]
pub mod guide {}
mod attachments;
#[cfg(feature = "cluster")]
pub mod cluster;
pub use foya_context as context;
pub mod hooks;
#[cfg(feature = "mcp")]
pub mod mcp;
/// Model providers (the `foya-providers` crate, under the path they had in this crate).
pub use foya_providers as provider;
pub use foya_tools as tools;

mod handle;
mod kernel;
mod log;
mod options;
mod outcome;
mod runtime;
mod session;
mod subscription;
mod supervisor;
mod task;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod turn;

pub use agent::{Agent, AgentBuilder};
pub use attachments::{
    Attachment, AttachmentError, AttachmentStore, ImageError, image_dimensions, sniff_image,
};
pub use handle::SessionApi;
pub use kernel::{QueuedOnRestart, RuntimeError, StopCause, StorageError, WithoutApprover};
pub use kernel::{RuntimeStats, StatsSource};
pub use options::ContextOptions;
pub use outcome::{ApprovalRequest, ToolCallRecord, TurnEvent, TurnOutcome, TurnStream};
pub use runtime::{
    DEFAULT_HANDOFF_DRAIN, DEFAULT_HIBERNATE_AFTER, DEFAULT_HIBERNATE_AT_ONCE_ABOVE,
    DEFAULT_IDLE_LOG_EVENTS, DEFAULT_SHUTDOWN_GRACE, DEFAULT_SUBSCRIBER_BUFFER,
    HANDOFF_CANCEL_GRACE, HandOff, MIN_SUBSCRIBER_BUFFER, Runtime, RuntimeConfig, SessionHandle,
};
pub use subscription::{SubscribeOptions, Subscription};
pub use turn::protection::Limits as ProtectionLimits;

// Crates whose types appear in this crate's public signatures, so that an embedder
// implementing `ModelClient` or `Tool` needs no dependency of its own on them.
pub use async_trait::async_trait;
pub use foya_protocol as protocol;
pub use foya_storage as storage;
pub use futures;
pub use schemars;
pub use serde_json;
pub use tokio_util::sync::CancellationToken;

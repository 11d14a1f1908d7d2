//! `foya-protocol`: the plain serde types every other crate speaks.
//!
//! Invariants: this crate performs no I/O and depends on no runtime (no tokio, ractor,
//! redb or reqwest). Every type here has a stable JSON form (clients and scripts read it)
//! and is also stored as MessagePack by `foya-storage`, so enum variants are only ever
//! appended and new fields are `#[serde(default)]`.
#![warn(missing_docs)]

pub mod command;
pub mod event;
pub mod ids;
pub mod input;
pub mod message;
pub mod stream;
pub mod visible;

pub use command::{
    ApprovalDecision, ApprovalMode, Instructions, InstructionsMode, SessionConfig, SessionSummary,
};
pub use event::{
    Delta, ErrorInfo, Event, EventKind, HookDecision, SessionUpdate, TitleSource, TurnStatus,
};
pub use ids::{ApprovalRequestId, InputId, RunId, Seq, SessionId, ToolCallId};
pub use input::{AttachmentRef, CommandInvocation, Input, PageElement};
pub use message::{
    AssistantMessage, FinishReason, Message, ReasoningPart, ToolCall, ToolMessage, Usage,
};
pub use stream::{ErrorClass, ProviderError, StreamAggregate, StreamEvent};

/// Milliseconds since the Unix epoch, the unit of every `*_at_ms` field.
pub type UnixMs = u64;

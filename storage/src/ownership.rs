//! The ownership seam: which sessions a node may write, under which [`Fence`].
//!
//! A runtime without an [`Ownership`] (the default, and every redb store) owns every
//! session and appends with [`Fence::None`]. A cluster node (`foya node --store
//! postgres://…`) gives its runtime one built over its lease (`foya-storage-pg`'s
//! `ShardOwnership`): every write of a session then carries its shard's fence, a session
//! whose shard the node does not hold is refused, new sessions get an id in a shard the
//! node holds, and a write the store refuses as fenced is reported here
//! ([`Ownership::fenced`]) so that the node stops writing that shard at once.

use crate::log::Fence;
use foya_protocol::SessionId;
use std::fmt;

/// Why a node may not run (or write) a session: its shard is not held here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOwner {
    /// The session's shard.
    pub shard: u32,
    /// The node that owns it (or should, by placement), when known.
    pub owner: Option<String>,
}

/// What a runtime asks of the node it runs on about shard ownership.
pub trait Ownership: Send + Sync + fmt::Debug + 'static {
    /// The shard of `session`; a sub-agent's child (`parent` set) lives in its
    /// parent's shard.
    fn shard_of(&self, session: SessionId, parent: Option<SessionId>) -> u32;

    /// The fence to write `shard`'s sessions under, while this node holds it (a shard
    /// being handed off still writes: its running turns finish).
    ///
    /// # Errors
    /// [`NotOwner`] when this node does not hold `shard` (never claimed, released, or
    /// its lease was lost).
    fn fence(&self, shard: u32) -> Result<Fence, NotOwner>;

    /// Whether `shard`'s sessions may be loaded, created or take new inputs here: held
    /// and not being handed off.
    ///
    /// # Errors
    /// [`NotOwner`], naming the owner when known.
    fn admit(&self, shard: u32) -> Result<(), NotOwner>;

    /// A fresh session id in a shard this node holds and admits (`in_shard`: exactly
    /// that one, a sub-agent's child in its parent's shard); `None` when there is none.
    fn mint_session_id(&self, in_shard: Option<u32>) -> Option<SessionId>;

    /// The store refused a write under `fence` ([`crate::AppendError::Fenced`]): another
    /// node owns the shard now. The node must stop writing it (later [`Self::fence`]
    /// calls for it fail); the runtime drops the shard's sessions.
    fn fenced(&self, fence: Fence);
}

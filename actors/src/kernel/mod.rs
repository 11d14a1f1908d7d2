//! The kernel: the bottom layer every actor and the façade build on — the error type and
//! its request/reply helpers (`error.rs`), what every actor shares (`deps.rs`), the clock
//! (`clock.rs`) and the values actors hand the façade (`approval.rs`).
//!
//! Must not: name an actor (supervisor, session, turn, ToolActor) or the façade
//! (`runtime`, `handle`, `outcome`); `.ci/module-cycles` fails on an import cycle.

mod approval;
mod clock;
mod deps;
mod error;
mod stats;

pub use approval::ApprovalRequest;
pub(crate) use clock::now_ms;
pub(crate) use deps::{ControlConfig, RuntimeDeps};
pub use deps::{QueuedOnRestart, StopCause, WithoutApprover};
#[cfg(feature = "cluster")]
pub use error::ClusterError;
pub(crate) use error::{Reply, actor_err, ask};
pub use error::{RuntimeError, StorageError};
pub(crate) use stats::SessionShare;
pub use stats::{RuntimeStats, StatsSource};

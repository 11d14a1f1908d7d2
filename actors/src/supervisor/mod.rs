//! Supervisor: one per runtime; creates, loads and supervises SessionActors.
//!
//! Owns the registry `DashMap<SessionId, ActorRef<SessionMsg>>` (shared read-only with the
//! façade for fast lookups). A session not in the registry is loaded from the log on
//! demand: its events are folded and the SessionActor's start runs recovery.
//!
//! Supervision policy (exhaustive, `handle_supervisor_evt`): a SessionActor that fails
//! (panic, handler error) is restarted from the log and its registry entry replaced —
//! its subscribers see their channel end (`Notice::Lagged`) and resubscribe; one that
//! stops normally (deleted, shut down) is removed from the registry. The supervisor never
//! stops because a child did. A session is restarted at most three times per runtime
//! (then it stays stopped until something asks for it again), so a failing start cannot
//! spin.
//!
//! Sub-agents (`sub_agent.rs`): a child session the `agent` tool starts sits under a
//! SubAgentActor beside the parent turn, under the parent session, and stops when the
//! `agent` call that started it ends.

pub(crate) mod actor;
#[cfg(test)]
mod agent_tool_tests;
pub(crate) mod sub_agent;

pub(crate) use actor::{SupervisorActor, SupervisorArgs};

use crate::kernel::Reply;
use crate::session::SessionMsg;
use foya_protocol::{SessionConfig, SessionId};
use ractor::ActorRef;

/// Messages of the Supervisor.
#[derive(Debug)]
pub(crate) enum SupervisorMsg {
    /// Write `session_created` and start its SessionActor; answers with the new id.
    CreateSession {
        config: Box<SessionConfig>,
        reply: Reply<(SessionId, ActorRef<SessionMsg>)>,
    },
    /// The live SessionActor of `id`, loading it from the log if needed.
    GetSession {
        id: SessionId,
        reply: Reply<ActorRef<SessionMsg>>,
    },
    /// Shutdown: from now on refuse to create or load sessions; answers with the live
    /// SessionActors (messages are handled in order, so none is started after).
    Drain {
        reply: Reply<Vec<ActorRef<SessionMsg>>>,
    },
    /// Restarts failed session `id` from the log again: its last restart could not read
    /// the log (`attempt` restarts tried so far).
    Restart { id: SessionId, attempt: u32 },
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for SupervisorMsg {}

//! `foya-core`: the pure core of the Foya agent runtime (raft-rs style): what happens
//! goes in, what to do comes out; the runtime's actors carry the effects out.
//!
//! - [`turn`]: the turn's state machine, run protection, repeated call ids;
//! - [`session`]: the session's state machine and the fold of its log;
//! - [`hooks`]: hook answers and the decision rules that combine them;
//! - [`approval`], [`schedule`], [`retry`], [`request`]: the plain values and rules the
//!   machines decide with (the gateway's verdict, tool batching, the retry policy, the
//!   neutral model request).
//!
//! Invariants: no I/O, no clock read (time enters as an input), no async runtime. Its
//! normal dependencies are `foya-protocol`, serde and small pure crates; `.ci/boundaries`
//! fails when it depends on tokio, ractor, redb, reqwest or an HTTP stack.

pub mod approval;
pub mod hooks;
mod messages;
pub mod request;
pub mod retry;
pub mod schedule;
pub mod session;
pub mod turn;

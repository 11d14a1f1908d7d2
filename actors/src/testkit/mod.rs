//! The one test kit of the workspace: what the unit tests of this crate, its integration
//! tests (`actors/tests/`) and the end-to-end tests (`foya-tests`) share.
//!
//! - waiting: [`within`] (one global real-time timeout), [`events_until`],
//!   [`until_closed`];
//! - looking at a log without indexing into it: [`types`], [`of_type`], [`kinds_of`],
//!   [`tool_messages`],
//!   [`turn_status`], [`assert_well_formed`], [`is_turn_complete`];
//! - a runtime on an in-memory store with a scripted model ([`runtime`], [`config_for`],
//!   [`one_turn`]), a model that records its requests ([`RecordingClient`],
//!   [`recorded_runtime`]), stores and working directories ([`memory_store`],
//!   [`workdir`]);
//! - test tools ([`tools`], [`TestTool`]), the sandboxed built-ins
//!   ([`sandboxed_builtins`]) and tool-call fixtures ([`tool_context`], [`Recorder`],
//!   [`call_tool`]);
//! - processes seen through `/proc` ([`procs`]).
//!
//! Built for this crate's own tests (`cfg(test)`) and, behind the `testkit` feature, for
//! every other test: the integration tests get it through `foya-actors`' dev-dependency
//! on itself with the feature, `foya-tests` through its normal dependency. It is one
//! module of the runtime crate rather than a crate of its own because a crate depending
//! on `foya-actors` could not serve this crate's unit tests: they would see a second copy
//! of every runtime type.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod events;
pub mod procs;
mod runtime;
mod tools;

pub use events::{
    TIMEOUT, TimedOut, assert_well_formed, events_until, is_turn_complete, kinds_of, of_type,
    tool_message, tool_messages, turn_status, types, until_closed, wait_until, within,
};
pub use runtime::{
    RecordingClient, config_for, memory_store, one_turn, recorded_runtime, runtime,
    runtime_with_model, script, session_config, session_config_in, subscribe, workdir,
};
pub use tools::{
    Behaviour, Recorder, TestTool, call_tool, confined, sandbox_helper, sandbox_runner,
    sandboxed_builtins, tool_context, tools,
};

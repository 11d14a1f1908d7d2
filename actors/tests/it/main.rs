//! The integration tests of `foya-actors`, in one test binary (`cargo test -p foya-actors
//! --test it`; one module per area, filter with `-- turn_control::`): one link for every
//! test edit instead of one binary per file. The tests share this process: each starts
//! what it needs itself (temporary directories, loopback ports chosen by the kernel,
//! child processes found by a marker of their own, its own tokio runtime) and reads no
//! environment variable another test sets. The shared harness is the crate's test kit
//! (`foya_actors::testkit`, the `testkit` feature); `common`, `http_support` and
//! `turn_support` are the pieces several modules here share. The provider stream
//! samples stay in `actors/tests/fixtures/providers` (foya-sim's wire tests read them too).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
mod compaction;
mod compaction_bounds;
mod compaction_images;
mod compaction_threshold;
mod compaction_work;
mod context_project;
mod context_steps;
mod embedding;
mod embedding_surface;
mod embedding_tools;
mod http_client;
mod http_client_html;
mod http_support;
mod runtime_shutdown;
mod security;
#[cfg(feature = "sim")]
mod sim_client;
#[cfg(feature = "sim")]
mod sim_server;
mod telemetry_stats;
mod titles_commands;
mod tools_files;
mod tools_registry;
mod tools_sandbox;
mod tools_sandbox_server;
mod tools_shell;
mod turn_control;
mod turn_duplicate_ids;
mod turn_pressure_http;
mod turn_support;
mod turn_tool_pool;
mod turn_tools;
mod turn_tools_gateway;
mod wire_fixtures;

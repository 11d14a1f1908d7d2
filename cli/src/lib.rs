//! `foya-cli`: the library behind the `foya` command — every command but `serve` and
//! `loadtest` (`run`, `chat`, `sessions`, `store`, `trust`, `mcp`, `node`), their shared
//! arguments (clap), and what `serve` and `loadtest` share with them: the data directory
//! (`data`), the model client for `--provider` (`setup`), hooks, MCP servers, signals,
//! terminal rendering (`render`: model text is shown, never obeyed) and the one line and
//! exit status 4 of a damaged store (`damage`).
//!
//! Must not: contain runtime logic (that is `foya-actors`), name ractor or redb. The
//! binary (`bin/`) only composes the grammar of these commands, installs tracing and
//! dispatches.

pub mod args;
pub mod chat;
mod cluster_list;
pub mod context_config;
pub mod damage;
pub mod data;
pub mod exit;
pub mod hooks;
pub mod listen;
pub mod mcp;
pub mod node;
pub mod node_http;
#[cfg(feature = "postgres")]
pub mod node_shards;
mod render;
pub mod run;
pub mod sessions;
pub mod setup;
pub mod shared_store;
pub mod signals;
pub mod store_cmd;
pub mod store_populate;
pub mod trust;
pub mod values;
pub mod words;

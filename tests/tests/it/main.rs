//! The end-to-end tests of the Foya runtime, in one test binary (`cargo test -p foya-tests
//! --test it`; one module per area, filter with `-- serve::`): one link for every test
//! edit instead of one binary per file. The tests share this process: each starts what it
//! needs itself (temporary directories, loopback ports chosen by the kernel, child
//! processes found by a marker of their own) and reads no environment variable another
//! test sets; the shared harness is the `foya_tests` library (`tests/src`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod chat;
mod chat_typeahead;
mod cli_approval_tty;
mod cli_durability;
mod cli_pressure;
mod cli_run;
mod cli_signals;
mod cli_usage;
mod cluster;
mod cluster_faults;
mod cluster_ops;
mod crash_restart;
mod docs_cli;
mod failover;
mod hooks;
mod hooks_context;
mod loadtest;
mod loadtest_real_tools;
mod loadtest_through;
mod mcp;
mod mcp_failures;
mod mcp_names;
mod mcp_serve;
mod node_http;
mod profile_retry;
mod provider_responses;
mod readme;
mod runtime;
mod sandbox_helper;
mod sandbox_server_calls;
mod sandbox_tmp;
mod sandbox_workspace;
mod security_attacks;
mod security_grants;
mod security_links;
mod security_secrets;
mod security_trust;
mod security_trust_tty;
mod security_web;
mod serve;
mod sessions_paging;
mod sessions_read_only;
mod store_damage;
mod store_pg;
mod store_pg_outages;
mod store_populate;
mod stream_invalid;
mod telemetry;
mod tool_env;
mod tool_ids;
mod tool_names;
mod tool_orphans;
mod turn_rules;
mod webview;

//! Shared harness for the end-to-end tests: the mock provider (real wire formats over
//! real HTTP), the path of the real `foya` binary and its child processes' piped stdio,
//! real headless Chromium driven over WebDriver (`browser`), the real `foya serve` driven
//! as a client and an approver (`serve`), `foya node`s on PostgreSQL with their HTTP API
//! (`node`), a program at a pseudo-terminal (`pty`), and the cluster fault harness with
//! its invariant checker (`fault_cluster`).
pub mod browser;
pub mod child;
pub mod fault_cluster;
pub mod foya_bin;
pub mod hook_project;
pub mod mcp;
pub mod mock_provider;
pub mod node;
pub mod otlp;
pub mod pty;
pub mod serve;

pub use foya_actors::testkit::procs;
pub use foya_bin::foya_bin;

/// The end-to-end tests that start a cluster node inside the test process run one at a
/// time: ractor's process groups are process-wide (see `foya_actors::cluster`), so two
/// such tests in one test binary would see, ping and drop each other's gateways.
///
/// A per-cluster group name or pg scope would not separate them (ractor_cluster 0.16):
/// every node session advertises the local members of every scope and group of the
/// process to its peer (`which_scopes_and_groups`), so one cluster's sessions create
/// proxies of the other's gateways; and each `NodeServer` numbers its sessions from 0, so
/// proxies made by two in-process servers can carry the same `ActorId`, which keys a
/// group's members (one replaces or removes the other) and which a missed heartbeat
/// maps to a node session of the wrong server.
pub static IN_PROCESS_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

//! `foya node --http ADDR`: what the node hands to the HTTP service of `foya serve`
//! (crate `foya-serve`, which depends on this one; the `foya` binary plugs it in as an
//! [`HttpService`]): its listener, runtime, store, the session defaults (the flags
//! `foya serve` and `foya node` share: [`ServiceArgs`]) and, on a shared store, a
//! [`SessionDirectory`] saying which node serves each session (`docs/cluster.md`).

use crate::args::{MaxStepsArg, parse_approval};
use clap::Args;
use foya_actors::{Runtime, RuntimeConfig};
use foya_protocol::{ApprovalMode, SessionId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The HTTP service's flags `foya serve` and `foya node` share: the service's guard and
/// the defaults of sessions created over HTTP.
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// Another name this server answers to (HOST or HOST:PORT; repeatable), e.g. a
    /// reverse proxy's: requests whose Host or Origin names neither this nor the listen
    /// address, localhost, 127.0.0.1 or [::1] (with the port) are refused.
    #[arg(long, value_name = "HOST[:PORT]")]
    #[allow(
        rustdoc::broken_intra_doc_links,
        reason = "the text is the flag's --help, where [::1] is an address, not a link"
    )]
    pub allowed_host: Vec<String>,
    /// Approval mode of sessions created without one.
    #[arg(long, default_value = "ask", value_parser = parse_approval)]
    pub approval: ApprovalMode,
    // `--max-steps`: of sessions created without one.
    #[command(flatten)]
    pub steps: MaxStepsArg,
    /// Ask the model for a title on each session's first input (an extra request).
    #[arg(long)]
    pub generate_titles: bool,
    #[command(flatten)]
    pub compaction: crate::context_config::CompactionArg,
    /// MCP servers: `--mcp`/`--no-mcp` choose those of sessions created without
    /// `mcp_servers`.
    #[command(flatten)]
    pub mcp: crate::mcp::McpArgs,
}

/// Applies what `foya serve` sets up in a runtime's config for its sessions: the
/// working directory's MCP servers and hooks, attachments (in the data directory, and
/// in `store` when it is shared), titles and automatic compaction. Returns the
/// attachment store.
///
/// # Errors
/// A bad compaction setting, MCP or hooks configuration.
pub fn configure(
    config: &mut RuntimeConfig,
    args: &ServiceArgs,
    cwd: &Path,
    dir: &Path,
    store: &foya_storage::LogStore,
) -> anyhow::Result<Arc<foya_actors::AttachmentStore>> {
    let auto_compact = crate::context_config::auto_compact(cwd, args.compaction)?;
    config.mcp = crate::mcp::load(cwd, &args.mcp)?;
    let hooks = crate::hooks::load(cwd)?;
    crate::hooks::apply(config, hooks, dir);
    let attachments = crate::data::attachments(dir, store);
    config.attachments = Some(Arc::clone(&attachments));
    config.context.generate_titles = args.generate_titles;
    config.context.auto_compact = auto_compact;
    Ok(attachments)
}

/// Where a session is served now, as a node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The store has no such session.
    Unknown,
    /// This node owns it.
    Here,
    /// Another live node owns it.
    Owner {
        /// Its name.
        node: String,
        /// Where its HTTP service is (`http://HOST:PORT`), if it registered one.
        address: Option<String>,
    },
    /// No live node owns it. `leased`: some node holds a live lease (a failover is in
    /// progress); else no node places shards and the session is served where asked.
    Unowned {
        /// Whether any node holds a live lease.
        leased: bool,
    },
}

/// A boxed future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which node serves each session: the shared store's shards and leases.
pub trait SessionDirectory: Send + Sync + std::fmt::Debug + 'static {
    /// This node's name.
    fn node(&self) -> &str;
    /// Where `session` is served now.
    fn locate(&self, session: SessionId) -> BoxFuture<'_, anyhow::Result<Placement>>;
    /// The name of the live node owning each of `sessions` (those without one left out).
    fn owners<'a>(
        &'a self,
        sessions: &'a [SessionId],
    ) -> BoxFuture<'a, anyhow::Result<HashMap<SessionId, String>>>;
}

/// Where a node is reached, as registered with its lease (`foya_nodes.address`): its
/// cluster listen address and, when it serves HTTP (`--http`), that address, written
/// `cluster=HOST:PORT` and ` http=HOST:PORT` after it (space separated).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeAddress {
    /// The ractor cluster listen address (`--listen`).
    pub cluster: Option<String>,
    /// The HTTP address other nodes forward to: `--advertise-http`'s URL, else `--http`
    /// as bound (HOST:PORT).
    pub http: Option<String>,
}

impl NodeAddress {
    /// The registered text.
    #[must_use]
    pub fn render(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = &self.cluster {
            parts.push(format!("cluster={c}"));
        }
        if let Some(h) = &self.http {
            parts.push(format!("http={h}"));
        }
        parts.join(" ")
    }

    /// Parses what [`Self::render`] wrote (unknown keys ignored).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for part in text.split_whitespace() {
            match part.split_once('=') {
                Some(("cluster", v)) => out.cluster = Some(v.to_owned()),
                Some(("http", v)) => out.http = Some(v.to_owned()),
                _ => {}
            }
        }
        out
    }
}

/// The HTTP base URL in a node's registered address (`foya_nodes.address`): the address
/// itself when it is `http://HOST:PORT`, else the `http=HOST:PORT` part of a
/// [`NodeAddress`]; `None` when it names no HTTP address.
#[must_use]
pub fn http_address(registered: &str) -> Option<String> {
    let registered = registered.trim();
    if registered.starts_with("http://") || registered.starts_with("https://") {
        return Some(registered.trim_end_matches('/').to_owned());
    }
    NodeAddress::parse(registered)
        .http
        .filter(|a| !a.is_empty())
        .map(|a| {
            // `--advertise-http URL` is registered whole; a bound address as HOST:PORT.
            if a.starts_with("http://") || a.starts_with("https://") {
                a.trim_end_matches('/').to_owned()
            } else {
                format!("http://{a}")
            }
        })
}

/// The directory of the shared store at `url` for node `node`.
///
/// # Errors
/// `url` is not a store URL this build can read.
pub fn directory(url: &str, node: &str) -> anyhow::Result<Arc<dyn SessionDirectory>> {
    pg::directory(url, node)
}

#[cfg(feature = "postgres")]
mod pg {
    use super::{BoxFuture, Placement, SessionDirectory};
    use foya_protocol::SessionId;
    use std::collections::HashMap;
    use std::sync::Arc;

    #[derive(Debug)]
    struct PgDirectory {
        directory: foya_storage_pg::Directory,
        node: String,
    }

    pub(super) fn directory(url: &str, node: &str) -> anyhow::Result<Arc<dyn SessionDirectory>> {
        Ok(Arc::new(PgDirectory {
            directory: foya_storage_pg::Directory::new(url)?,
            node: node.to_owned(),
        }))
    }

    impl SessionDirectory for PgDirectory {
        fn node(&self) -> &str {
            &self.node
        }

        fn locate(&self, session: SessionId) -> BoxFuture<'_, anyhow::Result<Placement>> {
            Box::pin(async move {
                Ok(match self.directory.session(session).await? {
                    foya_storage_pg::Placement::Unknown => Placement::Unknown,
                    foya_storage_pg::Placement::Owned { owner, .. } if owner.node == self.node => {
                        Placement::Here
                    }
                    foya_storage_pg::Placement::Owned { owner, .. } => Placement::Owner {
                        address: owner.address.as_deref().and_then(super::http_address),
                        node: owner.node,
                    },
                    foya_storage_pg::Placement::Unowned { leased, .. } => {
                        Placement::Unowned { leased }
                    }
                })
            })
        }

        fn owners<'a>(
            &'a self,
            sessions: &'a [SessionId],
        ) -> BoxFuture<'a, anyhow::Result<HashMap<SessionId, String>>> {
            Box::pin(async move { Ok(self.directory.owners(sessions).await?) })
        }
    }
}

#[cfg(not(feature = "postgres"))]
mod pg {
    use super::SessionDirectory;
    use std::sync::Arc;

    pub(super) fn directory(_url: &str, _node: &str) -> anyhow::Result<Arc<dyn SessionDirectory>> {
        anyhow::bail!(
            "this foya was built without PostgreSQL support: build it with the `postgres` \
             feature (the default of the foya binary)"
        )
    }
}

/// What `foya node --http` hands to its HTTP service.
#[derive(Debug)]
pub struct NodeHttp {
    /// The bound `--http` listener.
    pub listener: tokio::net::TcpListener,
    /// `--http` as given.
    pub listen: String,
    /// The node's runtime (shared with its cluster node).
    pub runtime: Arc<Runtime>,
    /// The node's store.
    pub store: foya_storage::LogStore,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The attachment store its runtime uses.
    pub attachments: Arc<foya_actors::AttachmentStore>,
    /// The bearer token every request must carry (`--token-file`).
    pub token: Option<Arc<str>>,
    /// Traces and metrics (`GET /metrics`).
    pub telemetry: Option<foya_telemetry::Telemetry>,
    /// The working directory of sessions created without one.
    pub cwd: PathBuf,
    /// The provider and model of sessions created without one.
    pub provider: String,
    /// The model of sessions created without one.
    pub model: String,
    /// The service's flags.
    pub service: ServiceArgs,
    /// On a shared store: which node serves each session (`None`: every session here).
    pub directory: Option<Arc<dyn SessionDirectory>>,
    /// Cancelled when the node stops: the service stops accepting and ends its streams.
    pub stop: CancellationToken,
}

/// The HTTP service of `foya node --http` (the `foya` binary's: `foya serve`'s API); it
/// returns when `NodeHttp::stop` was cancelled and its connections are done.
pub type HttpService = fn(NodeHttp) -> BoxFuture<'static, ()>;

#[cfg(test)]
mod tests {
    use super::http_address;

    #[test]
    fn the_http_address_is_read_from_either_registered_form() {
        assert_eq!(
            http_address("http://127.0.0.1:7878/").as_deref(),
            Some("http://127.0.0.1:7878")
        );
        assert_eq!(
            http_address("cluster=127.0.0.1:4370 http=127.0.0.1:7878").as_deref(),
            Some("http://127.0.0.1:7878")
        );
        assert_eq!(
            http_address("cluster=127.0.0.1:4370 http=http://10.0.0.5:8080").as_deref(),
            Some("http://10.0.0.5:8080")
        );
        assert_eq!(http_address("cluster=127.0.0.1:4370"), None);
        assert_eq!(http_address(""), None);
    }
}

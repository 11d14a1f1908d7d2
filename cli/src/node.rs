//! `foya node`: the runtime served as a ractor_cluster node until SIGINT, SIGTERM or
//! SIGHUP; then its running turns are cancelled cleanly (`turn_complete{cancelled}`
//! committed, waiting at most `DEFAULT_SHUTDOWN_GRACE`), the node leaves the cluster, the
//! runtime stops and the store closes (exit 0).
//!
//! Prints one line `foya node <name> listening on <addr>` to stdout once the node server
//! and gateway are up (scripts and tests wait for it; on a store of shards, only after
//! its first placement claimed its shards, see `node_shards.rs`), then only logs
//! (stderr): among
//! them one warning per `--connect` peer it cannot reach (address and reason), while it
//! keeps running and redialling. The data dir's owner file records the listen address,
//! so a command refused by the store's lock names it. With `--store URL` (or
//! `FOYA_STORE_URL`) the node's sessions live in that shared store instead.
//!
//! Node names are unique in a cluster: a node that finds a node started earlier under
//! its name leaves the cluster, prints why and exits with status 1.

pub use crate::args::ClusterArgs;
use crate::args::{DataDirArg, ProviderArgs};
use crate::exit::{CommandError, Ended};
use anyhow::Context as _;
use clap::Args;
use foya_actors::Runtime;
use foya_actors::cluster::{ClusterNode, NodeConfig};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Address to listen on for other nodes, e.g. 127.0.0.1:4370 (a fixed port: peers
    /// dial it).
    #[arg(long, value_parser = crate::values::fixed_port_addr)]
    pub(crate) listen: SocketAddr,
    /// File holding the cluster's shared secret (surrounding whitespace ignored).
    #[arg(long)]
    pub(crate) cookie_file: PathBuf,
    /// A node to connect to and keep connected (HOST:PORT); repeatable. One that cannot
    /// be reached is logged once (a warning with the reason) and redialled with backoff.
    #[arg(long)]
    pub(crate) connect: Vec<String>,
    /// This node's name, unique in the cluster (default: `node@<listen>`). A node that
    /// joins under a name a running node holds is refused and exits with status 1.
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Serve the HTTP API of `foya serve` (docs/http-api.md: every session of the
    /// cluster, the web view, `GET /metrics`) on this address (HOST:PORT; port 0 picks a
    /// free one). A loopback address unless --token-file is given.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) http: Option<String>,
    /// File holding the bearer token `--http` requires (`Authorization: Bearer TOKEN`).
    #[arg(long, requires = "http")]
    pub(crate) token_file: Option<PathBuf>,
    /// The URL other nodes reach this node's `--http` at (e.g. http://10.0.0.5:8080),
    /// registered with its lease for forwarding (`--store` on PostgreSQL). Required
    /// when --http binds an unspecified address (0.0.0.0, [::]); default: --http's
    /// address as bound.
    #[arg(long, value_name = "URL", requires = "http", value_parser = crate::values::advertised_url)]
    pub(crate) advertise_http: Option<String>,
    /// How long a graceful handoff (a shard moving to a node that joined, or SIGTERM)
    /// lets the shard's running turns finish before it cancels them, in seconds (`--store`
    /// on PostgreSQL; 0: cancel at once).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = crate::values::seconds)]
    pub(crate) handoff_drain: std::time::Duration,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    #[command(flatten)]
    pub(crate) data: DataDirArg,
    #[command(flatten)]
    pub(crate) store: crate::args::StoreArg,
    /// `foya serve`'s flags for `--http` (the guard, defaults of sessions created over it).
    #[command(flatten)]
    pub(crate) service: crate::node_http::ServiceArgs,
}

/// `--http`'s service flags, with `--advertise-http`'s host among the names the
/// service answers to (requests forwarded by the other nodes name it in `Host`).
fn advertised_host_allowed(args: &NodeArgs) -> crate::node_http::ServiceArgs {
    let mut service = args.service.clone();
    if let Some(url) = args
        .advertise_http
        .as_deref()
        .and_then(|u| reqwest::Url::parse(u).ok())
        && let Some(host) = url.host_str()
    {
        service.allowed_host.push(match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        });
    }
    service
}

/// Reads a cookie file (surrounding whitespace ignored); prints why not and returns
/// `None` when it cannot be read or is empty.
pub(crate) fn read_cookie(path: &std::path::Path) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(c) if !c.trim().is_empty() => Some(c.trim().to_owned()),
        Ok(_) => {
            eprintln!("foya: the cookie file is empty");
            None
        }
        Err(e) => {
            eprintln!("foya: cannot read cookie file {}: {e}", path.display());
            None
        }
    }
}

/// Runs the node until SIGINT, SIGTERM or SIGHUP.
///
/// # Errors
/// An unreadable or empty cookie file (usage); the node cannot start.
pub async fn node(args: NodeArgs) -> Result<(), CommandError> {
    node_with(args, None).await
}

/// Refuses an `--http` address other machines can reach when no `--token-file` guards it:
/// the API creates sessions and runs tools, `/metrics` tells what the node runs.
fn check_http_exposure(http: &str) -> anyhow::Result<()> {
    let loopback = foya_telemetry::http::loopback_only(http)
        .with_context(|| format!("--http {http}: expected HOST:PORT, e.g. 127.0.0.1:7878"))?;
    if !loopback {
        anyhow::bail!(
            "--http {http} is reachable from other machines: give --token-file so that only \
             holders of the token can create sessions, run tools and read the metrics (or \
             serve on a loopback address)"
        );
    }
    Ok(())
}

/// [`node`], with `--http` served by `http` (the `foya` binary's: `foya serve`'s API;
/// without one, `--http` serves `GET /metrics` alone).
///
/// # Errors
/// As [`node`].
pub async fn node_with(
    args: NodeArgs,
    http: Option<crate::node_http::HttpService>,
) -> Result<(), CommandError> {
    let Some(cookie) = read_cookie(&args.cookie_file) else {
        return Err(Ended::Usage.into());
    };
    Ok(serve(args, cookie, http).await?)
}

async fn serve(
    args: NodeArgs,
    cookie: String,
    http_service: Option<crate::node_http::HttpService>,
) -> anyhow::Result<()> {
    // SIGINT, SIGTERM and SIGHUP are handled from the start, before the lease is
    // registered: a node stopped while it joins hands off what it holds and ends its lease
    // (exit 0), as once it serves.
    let mut signals = crate::signals::Signals::install().ok();
    let cwd = std::env::current_dir().context("no current directory")?;
    let (model, model_name) = crate::setup::model_client(&args.provider, &cwd)?;
    // A node on PostgreSQL registers its HTTP address for the others to forward to: an
    // unspecified bind address (0.0.0.0, [::]) names no host they can dial. Refused
    // before anything is bound or created.
    #[cfg(feature = "postgres")]
    if let Some(http) = &args.http
        && args.advertise_http.is_none()
        && crate::shared_store::url(&args.store).is_some_and(crate::shared_store::is_postgres)
        && let Ok(bind) = http.trim().parse::<SocketAddr>()
        && bind.ip().is_unspecified()
    {
        anyhow::bail!(
            "--http {http} binds an unspecified address, which the other nodes cannot \
             forward requests to: give the URL they reach this node at with \
             --advertise-http (e.g. --advertise-http http://10.0.0.5:{}), or bind a \
             specific address",
            if bind.port() == 0 {
                "PORT".to_owned()
            } else {
                bind.port().to_string()
            }
        );
    }
    // Check the address before anything is created on disk (as `foya serve` binds first):
    // bound once and let go, so a taken address fails with one clear line. The node
    // server binds it again right after (a process that takes the port in between still
    // makes the start fail, later).
    drop(crate::listen::bind(&args.listen.to_string(), crate::listen::Port::Fixed).await?);
    let token = match &args.token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read token file {}", path.display()))?;
            let text = text.trim();
            anyhow::ensure!(
                !text.is_empty(),
                "the token file {} is empty",
                path.display()
            );
            Some(std::sync::Arc::<str>::from(text))
        }
        None => None,
    };
    let metrics_listener = match &args.http {
        Some(http) => {
            if token.is_none() {
                check_http_exposure(http)?;
            }
            Some(crate::listen::bind(http, crate::listen::Port::AnyOrZero).await?)
        }
        None => None,
    };
    let dir = crate::data::data_dir(args.data.data_dir.as_deref())?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("node@{}", args.listen));
    // --- shard ownership (issue 42, `node_shards.rs`): a PostgreSQL store gets a lease
    // registered under the node's name, its address `cluster=<listen>[ http=<--http as
    // bound>]`, and the runtime's ownership over it.
    #[cfg(feature = "postgres")]
    let mut shard_node: Option<crate::node_shards::ShardNode> = None;
    let store: foya_storage::LogStore = match crate::shared_store::url(&args.store) {
        #[cfg(feature = "postgres")]
        Some(url) if crate::shared_store::is_postgres(url) => {
            let log = crate::shared_store::open_pg(url, true).await?;
            let bound = metrics_listener
                .as_ref()
                .and_then(|l| l.local_addr().ok())
                .map(|a| a.to_string());
            let address = crate::node_http::NodeAddress {
                cluster: Some(args.listen.to_string()),
                http: args.advertise_http.clone().or(bound),
            };
            shard_node = Some(
                crate::node_shards::register(url, log.clone(), &name, &address, args.handoff_drain)
                    .await?,
            );
            foya_storage::LogStore::shared(log)
        }
        Some(url) => crate::shared_store::open(url).await?,
        None => crate::data::open_store(&dir)?.into(),
    };
    // --- end of shard ownership's setup
    let shared = store.is_shared();
    let http_store = store.clone();
    let mut config = crate::setup::runtime_config(store, model)?;
    #[cfg(feature = "postgres")]
    if let Some(shard_node) = &shard_node {
        config.ownership = Some(shard_node.ownership());
    }
    // Sessions created through the cluster without a provider or model (the embedding
    // API's `SessionConfig::new(cwd)`) record the ones this node serves them with.
    config.default_provider.clone_from(&args.provider.provider);
    config.default_model.clone_from(&model_name);
    config.handoff_drain = args.handoff_drain;
    // Metrics when served (--http); traces when OTEL_* or `[telemetry]` ask.
    let telemetry = crate::setup::telemetry(metrics_listener.is_some())?;
    if let Some(telemetry) = &telemetry {
        config = telemetry.instrument(config);
    }
    let metrics_stop = tokio_util::sync::CancellationToken::new();
    // `--http` with an HTTP service: `foya serve`'s API over this node's runtime, started
    // once the cluster node is (below); its sessions set up as `foya serve`'s.
    let (metrics_listener, http) = match (metrics_listener, http_service) {
        (Some(listener), Some(service)) => {
            let cwd = crate::setup::working_dir(None)?;
            let attachments =
                crate::node_http::configure(&mut config, &args.service, &cwd, &dir, &http_store)?;
            (None, Some((service, listener, cwd, attachments)))
        }
        (listener, _) => (listener, None),
    };
    if let (Some(listener), Some(telemetry)) = (metrics_listener, &telemetry) {
        if let Ok(addr) = listener.local_addr() {
            eprintln!("foya node: metrics at http://{addr}/metrics");
        }
        tokio::spawn(foya_telemetry::http::serve_metrics(
            listener,
            telemetry.clone(),
            token.clone(),
            metrics_stop.clone(),
        ));
    }
    let runtime = Runtime::start(config)
        .await
        .context("cannot start the runtime")?;
    // A node with shards recovers each shard as it claims it (`node_shards.rs`).
    #[cfg(feature = "postgres")]
    let recover_now = shard_node.is_none();
    #[cfg(not(feature = "postgres"))]
    let recover_now = true;
    if recover_now {
        runtime
            .recover_all()
            .await
            .context("cannot recover sessions")?;
    }
    // A node with shards serves once it holds them (bounded: `ShardNode::settle`), so a
    // client it answers is not refused `NoShard` by a node that has just started.
    #[cfg(feature = "postgres")]
    if let Some(shards) = shard_node.as_mut() {
        let settled = tokio::select! {
            settled = shards.settle(&runtime) => Some(settled),
            () = crate::signals::next(&mut signals) => None,
        };
        match settled {
            Some(Ok(_)) => {}
            Some(Err(reason)) => {
                runtime.close().await;
                anyhow::bail!(
                    "node {name:?} lost its lease in the store ({reason}) before it served: \
                     it wrote nothing. Start it again to rejoin."
                );
            }
            // Stopped while joining: what it holds is handed off, its lease ended.
            None => {
                shards.hand_off_all(&runtime).await;
                runtime.drain(foya_actors::DEFAULT_SHUTDOWN_GRACE).await;
                if let Some(shards) = shard_node.take() {
                    shards.shutdown().await;
                }
                runtime.close().await;
                metrics_stop.cancel();
                if let Some(telemetry) = telemetry {
                    telemetry.shutdown().await;
                }
                return Ok(());
            }
        }
    }
    let config = NodeConfig::new(args.listen, cookie, args.connect.clone(), name.clone());
    let node = ClusterNode::start(runtime, config)
        .await
        .context("cannot start the cluster node")?;
    let http_task = match http {
        Some((service, listener, cwd, attachments)) => {
            if let Ok(addr) = listener.local_addr() {
                eprintln!("foya node: HTTP API at http://{addr}");
                eprintln!("foya node: metrics at http://{addr}/metrics");
            }
            let directory = match crate::shared_store::url(&args.store) {
                Some(url) => Some(crate::node_http::directory(url, &name)?),
                None => None,
            };
            Some(tokio::spawn(service(crate::node_http::NodeHttp {
                listener,
                listen: args.http.clone().unwrap_or_default(),
                runtime: node.shared_runtime(),
                store: http_store,
                data_dir: dir.clone(),
                attachments,
                token: token.clone(),
                telemetry: telemetry.clone(),
                cwd,
                provider: args.provider.provider.clone(),
                model: model_name,
                service: advertised_host_allowed(&args),
                directory,
                stop: metrics_stop.clone(),
            })))
        }
        None => None,
    };
    // A second process refused by the data dir's lock names this address (a shared
    // store takes no data-dir lock).
    if !shared {
        crate::data::record_node_owner(&dir, &node.listen_addr().to_string());
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "foya node {name} listening on {}", args.listen);
        let _ = out.flush();
    }
    // --- shard ownership: placement, claims, recovery, handoff and self-fence run
    // beside the node until a signal, a refusal or the loss of the lease.
    #[cfg(feature = "postgres")]
    let placement = async {
        match shard_node.as_mut() {
            Some(shards) => Some(shards.run(node.runtime()).await),
            None => std::future::pending().await,
        }
    };
    #[cfg(not(feature = "postgres"))]
    let placement = std::future::pending::<Option<String>>();
    let mut lost = None;
    let refused = tokio::select! {
        () = crate::signals::next(&mut signals) => None,
        e = node.refused() => Some(e),
        reason = placement => {
            lost = reason;
            None
        }
    };
    // A node with shards hands them all off first (new inputs refused, running turns
    // let finish within --handoff-drain, then cancelled), while peers still hear their
    // end.
    #[cfg(feature = "postgres")]
    if refused.is_none()
        && lost.is_none()
        && let Some(shards) = shard_node.as_mut()
    {
        shards.hand_off_all(node.runtime()).await;
    }
    if refused.is_none() && lost.is_none() {
        // Cancel the running turns while peers still hear their end, then leave.
        node.runtime()
            .drain(foya_actors::DEFAULT_SHUTDOWN_GRACE)
            .await;
    }
    #[cfg(feature = "postgres")]
    if let Some(shards) = shard_node.take() {
        // Release every shard (after the drain wrote the turns' ends) and end the
        // lease, so the other nodes claim at once.
        shards.shutdown().await;
    }
    // --- end of shard ownership's run
    // The HTTP service's connections may hold the runtime (so `shutdown` leaves it
    // running): it is closed by reference once the service stopped, as `foya serve` does.
    let http_runtime = http_task.as_ref().map(|_| node.shared_runtime());
    node.shutdown().await;
    metrics_stop.cancel();
    if let (Some(task), Some(runtime)) = (http_task, http_runtime) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
        runtime.close().await;
    }
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    if let Some(reason) = lost {
        anyhow::bail!(
            "node {name:?} lost its lease in the store ({reason}): it stopped writing and \
             dropped its sessions; a live node takes its shards over once it can reach the \
             store (when the store was away for every node, none is left: start the nodes \
             again once it is back). Start it again to rejoin."
        );
    }
    match refused {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

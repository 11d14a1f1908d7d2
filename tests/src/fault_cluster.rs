//! The fault harness of issue 42: `foya node` processes on one real PostgreSQL, the
//! simulated model over HTTP (`foya sim-server`: a delay per step, a `shell` call per
//! step whose every run appends a line to a side-effect file), a test-owned TCP forwarder
//! that can cut one node off PostgreSQL, process control (kill -9, SIGSTOP/SIGCONT,
//! SIGTERM, a node started later), a client that records what it was acknowledged, and
//! the invariant checker that reads the store after each run.
//!
//! The checker's rules, per session (a run passes when none is broken):
//! - every event a client was acknowledged (received from a subscription: committed) is in
//!   the store, unchanged, and every input whose submit succeeded is in the log once;
//! - seqs are dense from 1;
//! - the epoch never decreases along the session's seqs (no event committed under a
//!   stale epoch: `PgLog::epoch_regressions`);
//! - every `turn_started` is closed by exactly one `turn_complete` before the next turn,
//!   and every tool call of a turn has exactly one result (a real one, or "outcome
//!   unknown") before it closes;
//! - no tool call ran twice: the side-effect file holds, for each (session, step, call
//!   index), at most as many lines as the log has calls there, and at least as many as
//!   it has calls with a result of a finished run (not an error: the results the runtime
//!   writes for a call it stopped or lost track of — "cancelled", "outcome unknown",
//!   "not run" — are errors, and a call cancelled by a handoff may have been stopped
//!   before its side effect, so they bound nothing from below).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_actors::cluster::{ClientNode, ClusterClient, NodeConfig};
use foya_protocol::{
    ApprovalMode, Event, EventKind, Input, InputId, Seq, SessionConfig, SessionId, SessionUpdate,
};
use foya_storage::EventLog as _;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The cookie of every harness cluster.
pub const COOKIE: &str = "fault-harness-cookie";

/// The content prefix of a result the runtime writes for a call whose outcome it does not
/// know (recovery of an interrupted turn).
pub const OUTCOME_UNKNOWN: &str = "outcome unknown";

/// A free loopback port (the kernel's choice, let go).
#[must_use]
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------
// The TCP forwarder.

/// A TCP forwarder on loopback between a client and `target`, owned by the test: while
/// [`Forwarder::partition`]ed it stops moving bytes on every connection (new ones are
/// accepted and held silent, as a network that drops packets does: no reset, no FIN);
/// [`Forwarder::heal`] closes the connections held through the partition (as their
/// peers would time them out) and forwards new ones again. [`Forwarder::refuse`] closes
/// every connection at once and each new one as soon as it is accepted (a database that
/// stopped), until the heal. The next bytes a client sends can be passed on with the
/// connection closed before the server's answer reaches the client (a commit whose
/// acknowledgement is lost: [`WriteFault::Cut`]), after the client saw it closed
/// ([`WriteFault::Late`]), or not at all ([`WriteFault::Drop`]).
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    /// `true` while forwarding; bumped generation on each change.
    state: watch::Sender<bool>,
    faults: Arc<Faults>,
    accept: tokio::task::JoinHandle<()>,
}

/// The forwarder's other faults.
#[derive(Debug)]
struct Faults {
    /// `true` while refusing.
    refusing: watch::Sender<bool>,
    /// `true` while refusing new connections only ([`Forwarder::refuse_new`]).
    refusing_new: std::sync::atomic::AtomicBool,
    /// Connections closed at once while refusing.
    refused: std::sync::atomic::AtomicUsize,
    /// Armed by [`Forwarder::fail_next_write`].
    write: Mutex<Option<WriteFault>>,
    /// [`WriteFault::Late`] writes tried, each once the server answered or the
    /// connection ended.
    late: std::sync::atomic::AtomicUsize,
}

/// What becomes of the next bytes a client sends (its connection is closed each time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFault {
    /// Passed on; the connection closed once the server answered, the answer not passed.
    Cut,
    /// The connection closed at once; the bytes reach the server this much later.
    Late(Duration),
    /// The connection closed at once; the bytes never reach the server.
    Drop,
}

impl Forwarder {
    /// Starts forwarding `127.0.0.1:<free port>` to `target`.
    pub async fn start(target: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (state, _) = watch::channel(true);
        let faults = Arc::new(Faults {
            refusing: watch::channel(false).0,
            refusing_new: std::sync::atomic::AtomicBool::new(false),
            refused: std::sync::atomic::AtomicUsize::new(0),
            write: Mutex::new(None),
            late: std::sync::atomic::AtomicUsize::new(0),
        });
        let sender = state.clone();
        let shared = Arc::clone(&faults);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *shared.refusing.borrow()
                    || shared
                        .refusing_new
                        .load(std::sync::atomic::Ordering::SeqCst)
                {
                    shared
                        .refused
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    drop(client);
                    continue;
                }
                tokio::spawn(pipe(
                    client,
                    target,
                    sender.subscribe(),
                    Arc::clone(&shared),
                ));
            }
        });
        Forwarder {
            addr,
            state,
            faults,
            accept,
        }
    }

    /// A forwarder to the server of PostgreSQL URL `store`, and the same URL through it.
    pub async fn in_front_of(store: &str) -> (Forwarder, String) {
        let (host_port, rest) = split_store_url(store);
        let target = tokio::net::lookup_host(&host_port)
            .await
            .unwrap()
            .next()
            .unwrap();
        let forwarder = Forwarder::start(target).await;
        let through = store.replacen(&host_port, &forwarder.addr().to_string(), 1);
        assert!(through.ends_with(rest));
        (forwarder, through)
    }

    /// Where clients connect.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding (see the type's docs).
    pub fn partition(&self) {
        self.state.send_replace(false);
    }

    /// Forwards again (see the type's docs).
    pub fn heal(&self) {
        self.faults
            .refusing_new
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.faults.refusing.send_replace(false);
        self.state.send_replace(true);
    }

    /// Closes every connection and refuses new ones until [`Self::heal`].
    pub fn refuse(&self) {
        self.faults.refusing.send_replace(true);
    }

    /// Refuses new connections until [`Self::heal`]; those open go on (a server up but
    /// refusing connections: `max_connections` reached, `pg_hba.conf` changed).
    pub fn refuse_new(&self) {
        self.faults
            .refusing_new
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many connections were closed as they were accepted while refusing.
    #[must_use]
    pub fn refused(&self) -> usize {
        self.faults
            .refused
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The next bytes any client sends meet `fault`.
    pub fn fail_next_write(&self, fault: WriteFault) {
        *self.faults.write.lock().unwrap() = Some(fault);
    }

    /// How many [`WriteFault::Late`] writes were tried (each counted once the server
    /// answered it or the connection ended).
    #[must_use]
    pub fn late_writes(&self) -> usize {
        self.faults.late.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether a [`Self::fail_next_write`] is still armed.
    #[must_use]
    pub fn write_fault_pending(&self) -> bool {
        self.faults.write.lock().unwrap().is_some()
    }

    /// Whether it forwards now.
    #[must_use]
    pub fn forwarding(&self) -> bool {
        *self.state.borrow()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.accept.abort();
        // Ends every held connection.
        self.state.send_replace(true);
        self.faults.refusing.send_replace(true);
    }
}

/// One connection: forwarded until a partition, then held silent until the heal, then
/// closed; closed at once when the forwarder refuses; closed when a write fault is armed.
async fn pipe(
    client: TcpStream,
    target: SocketAddr,
    mut state: watch::Receiver<bool>,
    faults: Arc<Faults>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    if !*state.borrow_and_update() {
        // Accepted during a partition: silent, closed at the heal.
        let _ = state.wait_for(|f| *f).await;
        return;
    }
    let Ok(upstream) = TcpStream::connect(target).await else {
        return;
    };
    let mut refusing = faults.refusing.subscribe();
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    // Ends with the fault that met the client's bytes (and the bytes), if one did.
    let outbound = async {
        let mut buf = vec![0_u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => n,
            };
            let fault = faults.write.lock().unwrap().take();
            if let Some(fault) = fault {
                return Some((fault, buf[..n].to_vec()));
            }
            if to_server.write_all(&buf[..n]).await.is_err() {
                return None;
            }
        }
    };
    let inbound = tokio::io::copy(&mut from_server, &mut to_client);
    enum Ended {
        Closed,
        Fault(WriteFault, Vec<u8>),
        Partitioned,
    }
    let ended = tokio::select! {
        fault = outbound => fault.map_or(Ended::Closed, |(f, bytes)| Ended::Fault(f, bytes)),
        _ = inbound => Ended::Closed,
        r = refusing.wait_for(|r| *r) => {
            drop(r);
            Ended::Closed
        }
        r = state.wait_for(|f| !*f) => {
            drop(r);
            Ended::Partitioned
        }
    };
    if let Ended::Fault(fault, bytes) = ended {
        // The server's answer, read here and never passed on.
        let mut answer = Vec::new();
        match fault {
            WriteFault::Cut => {
                // The client loses the connection once the server answered.
                if to_server.write_all(&bytes).await.is_ok() {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        from_server.read_buf(&mut answer),
                    )
                    .await;
                }
                drop(to_client);
            }
            WriteFault::Late(delay) => {
                // The client loses the connection now; the bytes follow.
                drop(to_client);
                tokio::time::sleep(delay).await;
                if to_server.write_all(&bytes).await.is_ok() {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        from_server.read_buf(&mut answer),
                    )
                    .await;
                }
                faults
                    .late
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            WriteFault::Drop => drop(to_client),
        }
        return;
    }
    let partitioned = matches!(ended, Ended::Partitioned);
    if partitioned {
        // Keep both sockets open, move nothing, until the heal.
        let _ = state.wait_for(|f| *f).await;
    }
}

/// `host:port` of a `postgresql://user@host:port/db?…` URL, and what follows it.
#[must_use]
pub fn split_store_url(url: &str) -> (String, &str) {
    let after_scheme = url.split_once("://").unwrap().1;
    let after_user = after_scheme
        .split_once('@')
        .map_or(after_scheme, |(_, r)| r);
    let end = after_user.find('/').unwrap_or(after_user.len());
    (after_user[..end].to_owned(), &after_user[end..])
}

// ---------------------------------------------------------------------------------------
// The simulated model and the nodes.

/// How the simulated model behaves in a harness run.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Delay before each step's first token, ms.
    pub step_delay_ms: u64,
    /// Steps per turn (the last one answers with text; each other runs one `shell`).
    pub steps_per_turn: u32,
    /// How long each `shell` call sleeps after its side effect, ms (widens the window in
    /// which a fault finds a call running).
    pub tool_sleep_ms: u64,
    /// The side effect comes after the sleep instead (a call stopped during its sleep
    /// did nothing).
    pub effect_last: bool,
    /// The nodes' `--handoff-drain`, ms (`None`: the default, 10 s).
    pub handoff_drain_ms: Option<u64>,
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            step_delay_ms: 150,
            steps_per_turn: 5,
            tool_sleep_ms: 150,
            effect_last: false,
            handoff_drain_ms: None,
        }
    }
}

/// A `foya sim-server` child whose tool calls are `shell` commands appending
/// `<session dir name> <step> <call>` to `ran_log`.
#[derive(Debug)]
pub struct SimServer {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    _child: tokio::process::Child,
}

impl SimServer {
    /// Starts it.
    pub async fn start(workload: Workload, ran_log: &Path) -> SimServer {
        let sleep = format!(
            "{}.{:03}",
            workload.tool_sleep_ms / 1000,
            workload.tool_sleep_ms % 1000
        );
        let effect = format!(
            "echo \"$(basename \"$PWD\") {{step}} {{call}}\" >> '{}'",
            ran_log.display()
        );
        let command = if workload.effect_last {
            format!("sleep {sleep}; {effect}")
        } else {
            format!("{effect}; sleep {sleep}")
        };
        let args = serde_json::json!({ "command": command }).to_string();
        let mut child = tokio::process::Command::new(crate::foya_bin())
            .env("HOME", crate::foya_bin::test_home())
            .args(["sim-server", "--listen", "127.0.0.1:0"])
            .args(["--ttft-ms", &workload.step_delay_ms.to_string()])
            .args(["--steps-per-turn", &workload.steps_per_turn.to_string()])
            .args(["--tool-calls-per-step", "1", "--response-tokens", "8"])
            .args(["--tool-name", "shell", "--tool-args", &args])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("sim-server printed its address")
            .unwrap()
            .expect("sim-server exited");
        SimServer { url, _child: child }
    }
}

/// A `foya node` child.
#[derive(Debug)]
pub struct Node {
    /// Its name.
    pub name: String,
    /// Its `--listen` address.
    pub listen: SocketAddr,
    /// The store URL it was given.
    pub store: String,
    child: Option<tokio::process::Child>,
    stopped: bool,
}

impl Node {
    /// Its pid, while it runs.
    #[must_use]
    pub fn pid(&self) -> Option<i32> {
        self.child
            .as_ref()
            .and_then(tokio::process::Child::id)
            .and_then(|p| i32::try_from(p).ok())
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// kill -9, and waits for its exit.
    pub async fn kill9(&mut self) {
        if self.stopped {
            self.cont();
        }
        self.signal(nix::sys::signal::Signal::SIGKILL);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait().await;
        }
    }

    /// SIGSTOP.
    pub fn stop(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        self.stopped = true;
    }

    /// SIGCONT.
    pub fn cont(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
        self.stopped = false;
    }

    /// SIGTERM, and its exit status (within `timeout`; `None` past it).
    pub async fn term(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        if self.stopped {
            self.cont();
        }
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let mut child = self.child.take()?;
        match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                None
            }
        }
    }

    /// Whether the process still runs (not reaped).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

/// A cluster of `foya node`s on one store, the simulated model, and a client member.
pub struct Cluster {
    /// The test's directory (data dirs, the sessions' working directories, the
    /// side-effect file).
    pub dir: tempfile::TempDir,
    /// The store every node shares (unless given another URL, e.g. a forwarder's).
    pub store: String,
    /// The side-effect file of the tool calls.
    pub ran_log: PathBuf,
    /// The nodes, in start order; a killed node stays (not running).
    pub nodes: Vec<Node>,
    /// Listen addresses reserved for every node the run may start (they connect to each
    /// other and the client dials them all).
    pub addresses: Vec<SocketAddr>,
    sim: SimServer,
    client: Option<ClientNode>,
    /// [`Workload::handoff_drain_ms`].
    handoff_drain_ms: Option<u64>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("dir", &self.dir.path())
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// The node names of a cluster: `n1`, `n2`, ….
#[must_use]
pub fn node_name(index: usize) -> String {
    format!("n{}", index + 1)
}

impl Cluster {
    /// Starts `nodes` nodes (of `capacity` reserved addresses) on `store`, the simulated
    /// model with `workload`, and the client member; waits until the client sees every
    /// started node.
    pub async fn start(store: &str, nodes: usize, capacity: usize, workload: Workload) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let ran_log = dir.path().join("ran.log");
        std::fs::write(dir.path().join("cookie"), COOKIE).unwrap();
        let sim = SimServer::start(workload, &ran_log).await;
        let addresses = (0..capacity.max(nodes))
            .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
            .collect();
        let mut cluster = Cluster {
            dir,
            store: store.to_owned(),
            ran_log,
            nodes: Vec::new(),
            addresses,
            sim,
            client: None,
            handoff_drain_ms: workload.handoff_drain_ms,
        };
        for _ in 0..nodes {
            cluster.start_node(None).await;
        }
        let connect = cluster.addresses.iter().map(ToString::to_string).collect();
        let mut config = NodeConfig::new(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            COOKIE,
            connect,
            "fault-client",
        );
        config.heartbeat = Duration::from_millis(100);
        config.heartbeat_timeout = Duration::from_millis(1000);
        config.call_timeout = Duration::from_secs(5);
        config.gather_timeout = Duration::from_secs(2);
        let client = ClientNode::connect(config).await.unwrap();
        cluster.client = Some(client);
        let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        for name in names {
            cluster
                .client()
                .wait_for_node(&name, Duration::from_secs(60))
                .await
                .unwrap_or_else(|e| panic!("the client does not see node {name}: {e}"));
        }
        cluster
    }

    /// A fresh client (no cached placement: it asks every node where a session lives).
    #[must_use]
    pub fn client(&self) -> ClusterClient {
        self.client.as_ref().expect("the client member").client()
    }

    /// Starts the next node (index `nodes.len()`), on `store` (default: the cluster's),
    /// and waits for its "listening" line.
    pub async fn start_node(&mut self, store: Option<&str>) -> usize {
        let index = self.nodes.len();
        let name = node_name(index);
        let listen = self.addresses[index];
        let store = store.unwrap_or(&self.store).to_owned();
        let base_url = format!("{}/v1", self.sim.url);
        let mut command = tokio::process::Command::new(crate::foya_bin());
        command
            .env("HOME", crate::foya_bin::test_home())
            .env("OPENAI_API_KEY", "sk-test")
            .env_remove("FOYA_DATA_DIR")
            .env_remove("FOYA_STORE_URL")
            .args(["node", "--listen", &listen.to_string(), "--name", &name])
            .arg("--cookie-file")
            .arg(self.dir.path().join("cookie"))
            .args(["--provider", "openai-chat", "--model", "sim-1"])
            .args(["--base-url", &base_url])
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("{name}-data")))
            .args(["--store", &store]);
        if let Some(ms) = self.handoff_drain_ms {
            command.args([
                "--handoff-drain",
                &format!("{}.{:03}", ms / 1000, ms % 1000),
            ]);
        }
        for (i, peer) in self.addresses.iter().enumerate() {
            if i != index {
                command.args(["--connect", &peer.to_string()]);
            }
        }
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log"))).unwrap();
        let mut child = command
            .current_dir(self.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("node {name} did not start within 60 s"))
            .unwrap()
            .unwrap_or_else(|| panic!("node {name} exited before listening"));
        assert_eq!(line, format!("foya node {name} listening on {listen}"));
        // Keep reading stdout so the node never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.nodes.push(Node {
            name,
            listen,
            store,
            child: Some(child),
            stopped: false,
        });
        index
    }

    /// The last lines each node wrote to stderr (its log), and how it ended if it did:
    /// for a failure's reader.
    pub fn tails(&mut self) -> String {
        let mut out = String::new();
        for node in &mut self.nodes {
            let text = std::fs::read_to_string(self.dir.path().join(format!("{}.log", node.name)))
                .unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let state = if node.running() {
                "running"
            } else {
                "not running"
            };
            out.push_str(&format!(
                "\n--- {} ({state}), last lines of its log:\n",
                node.name
            ));
            for line in &lines[lines.len().saturating_sub(15)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Shuts the cluster down and panics with the nodes' [`Cluster::tails`] and then
    /// `message` (last, so that the end of a long test output, which is what a CI summary
    /// keeps, says what failed).
    pub async fn fail(mut self, message: &str) -> ! {
        let tails = self.tails();
        self.shutdown().await;
        panic!("the nodes' logs:{tails}\n{message}");
    }

    /// The working directory of the harness's session number `i`.
    #[must_use]
    pub fn session_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join("work").join(format!("s{i}"))
    }

    /// Stops the client member and every node still running (SIGTERM, then kill).
    pub async fn shutdown(mut self) {
        if let Some(client) = self.client.take() {
            client.shutdown().await;
        }
        for node in &mut self.nodes {
            let _ = node.term(Duration::from_secs(10)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------
// The load and what the client was acknowledged.

/// What clients were acknowledged, per session.
#[derive(Debug, Default)]
pub struct Acked {
    /// Events received from a subscription (committed), by seq.
    pub events: BTreeMap<Seq, Event>,
    /// Inputs whose submit succeeded.
    pub inputs: Vec<InputId>,
}

/// The sessions of a run and what their clients were acknowledged.
#[derive(Debug, Clone, Default)]
pub struct Load {
    /// The sessions, in creation order (session `i` works in `Cluster::session_dir(i)`).
    pub sessions: Vec<SessionId>,
    /// What was acknowledged.
    pub acked: Arc<Mutex<HashMap<SessionId, Acked>>>,
    changed: Arc<tokio::sync::Notify>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Load {
    /// Creates `count` sessions, round-robin through the running nodes, each in its own
    /// working directory, approval `bypass`; subscribes to each (following it wherever it
    /// runs) and records every event received.
    pub async fn create(cluster: &Cluster, count: usize) -> Load {
        let mut load = Load::default();
        load.add(cluster, count).await;
        load
    }

    /// Creates `count` more sessions (see [`Load::create`]).
    pub async fn add(&mut self, cluster: &Cluster, count: usize) {
        let running: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let client = cluster.client();
        for _ in 0..count {
            let i = self.sessions.len();
            let cwd = cluster.session_dir(i);
            std::fs::create_dir_all(&cwd).unwrap();
            let mut config = SessionConfig::new(cwd);
            config.approval_mode = ApprovalMode::Bypass;
            let node = &running[i % running.len()];
            // A node announces itself once it holds its shards: no `NoShard` to wait out.
            let id = client
                .create_session(Some(node), config)
                .await
                .unwrap_or_else(|e| panic!("creating session {i} on {node}: {e}"));
            self.sessions.push(id);
            self.acked.lock().unwrap().insert(id, Acked::default());
            self.follow(&client, id).await;
        }
    }

    /// Subscribes to `id` from its first event, recording every event received.
    async fn follow(&self, client: &ClusterClient, id: SessionId) {
        let mut sub = client.subscribe(id, Seq::FIRST).await.unwrap();
        let acked = self.acked.clone();
        let changed = self.changed.clone();
        let task = tokio::spawn(async move {
            while let Some(update) = sub.recv().await {
                if let SessionUpdate::Event(event) = update {
                    acked
                        .lock()
                        .unwrap()
                        .entry(event.session_id)
                        .or_default()
                        .events
                        .insert(event.seq, event);
                    changed.notify_waiters();
                }
            }
        });
        self.tasks.lock().unwrap().push(task);
    }

    /// Submits `text` to session `id` under `input_id` (a fresh client: it finds where the
    /// session lives now); records the input when accepted.
    ///
    /// # Errors
    /// The cluster's error, as text.
    pub async fn submit(
        &self,
        cluster: &Cluster,
        id: SessionId,
        input_id: InputId,
        text: &str,
    ) -> Result<(), String> {
        cluster
            .client()
            .submit_with_id(id, input_id, Input::text(text))
            .await
            .map_err(|e| e.to_string())?;
        let mut acked = self.acked.lock().unwrap();
        let entry = acked.entry(id).or_default();
        if !entry.inputs.contains(&input_id) {
            entry.inputs.push(input_id);
        }
        Ok(())
    }

    /// Submits one input to every session, all at once (so their turns run together and
    /// a fault finds them mid-turn), each retried under its id until accepted (a node
    /// handing the session's shard over refuses it for a moment).
    pub async fn submit_all(&self, cluster: &Cluster, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let submits = self.sessions.iter().map(|&id| async move {
            let input = InputId::new();
            loop {
                match self.submit(cluster, id, input, text).await {
                    Ok(()) => break,
                    Err(e) if Instant::now() > deadline => panic!("submit to {id}: {e}"),
                    // Retry pacing of a client refused during a handoff.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        });
        futures::future::join_all(submits).await;
    }

    /// Waits (at most `timeout`) until `pred` holds on what was acknowledged.
    pub async fn wait_acked(
        &self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&HashMap<SessionId, Acked>) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if pred(&self.acked.lock().unwrap()) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let seen: Vec<usize> = self
                    .acked
                    .lock()
                    .unwrap()
                    .values()
                    .map(|a| a.events.len())
                    .collect();
                panic!(
                    "not acknowledged within {timeout:?}: {what} (events acknowledged per \
                     session: {seen:?})"
                );
            }
        }
    }

    /// Takes every event committed in the store at `url` for the load's sessions as
    /// acknowledged (a committed event was acknowledged to its writer): called right
    /// before a fault, the checker then proves none of them is lost or changed.
    pub async fn snapshot(&self, url: &str) {
        let log = foya_storage_pg::PgLog::open(url, foya_storage_pg::PgOptions::default())
            .await
            .unwrap_or_else(|e| panic!("cannot open the store: {e}"));
        for id in &self.sessions {
            let events = log.read_from(*id, Seq::FIRST).await.unwrap();
            let mut acked = self.acked.lock().unwrap();
            let entry = acked.entry(*id).or_default();
            for e in events {
                entry.events.entry(e.seq).or_insert(e);
            }
        }
        log.close().await;
    }

    /// Waits (at most `timeout`) until at least `count` sessions are mid-turn past their
    /// first tool call in the store at `url` (polled: the log is the witness every node
    /// shares).
    ///
    /// # Errors
    /// Fewer were by `timeout`: what each session's log ends with.
    pub async fn wait_mid_tool(
        &self,
        url: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<(), String> {
        let log = foya_storage_pg::PgLog::open(url, foya_storage_pg::PgOptions::default())
            .await
            .unwrap_or_else(|e| panic!("cannot open the store: {e}"));
        let deadline = Instant::now() + timeout;
        loop {
            let mut logs = HashMap::new();
            for id in &self.sessions {
                let events = log.read_from(*id, Seq::FIRST).await.unwrap();
                logs.insert(
                    *id,
                    Acked {
                        events: events.into_iter().map(|e| (e.seq, e)).collect(),
                        inputs: Vec::new(),
                    },
                );
            }
            if mid_tool(&logs) >= count {
                break;
            }
            if Instant::now() >= deadline {
                // What each session's log ends with, for the failure's reader.
                let ends: Vec<String> = logs
                    .iter()
                    .map(|(id, a)| {
                        let last: Vec<&str> = a
                            .events
                            .values()
                            .rev()
                            .take(3)
                            .map(|e| e.kind.type_name())
                            .collect();
                        format!("{id}: {} events, last {last:?}", a.events.len())
                    })
                    .collect();
                log.close().await;
                return Err(format!(
                    "fewer than {count} sessions mid-turn within {timeout:?}: {}",
                    ends.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        log.close().await;
        Ok(())
    }

    /// Stops following.
    pub fn stop(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// The sessions mid-turn past their first tool call (a `tool_started` acknowledged, no
/// `turn_complete` after it), in what was acknowledged.
#[must_use]
pub fn mid_tool(acked: &HashMap<SessionId, Acked>) -> usize {
    acked
        .values()
        .filter(|a| {
            let mut mid = false;
            for e in a.events.values() {
                match e.kind {
                    EventKind::ToolStarted { .. } => mid = true,
                    EventKind::TurnComplete { .. } => mid = false,
                    _ => {}
                }
            }
            mid
        })
        .count()
}

/// The node owning each of `load`'s sessions now, from the store at `url`: the node
/// whose live lease holds the session's shard (`foya_shards.owner_lease`,
/// `foya_nodes.expires_at` on the database's clock). A session whose shard no live lease
/// holds is absent.
pub async fn owners(url: &str, load: &Load) -> HashMap<SessionId, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("the checker cannot connect to the store: {e}"));
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT s.session, n.node FROM foya_sessions s \
             JOIN foya_shards sh ON sh.shard = s.shard \
             JOIN foya_nodes n ON n.lease = sh.owner_lease \
             WHERE n.expires_at > clock_timestamp()",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("reading the shards' owners: {e}"));
    drop(client);
    let _ = driver.await;
    let wanted: std::collections::HashSet<SessionId> = load.sessions.iter().copied().collect();
    rows.iter()
        .filter_map(|row| {
            let session: uuid::Uuid = row.get(0);
            let node: String = row.get(1);
            let id = SessionId::from_bytes(*session.as_bytes());
            wanted.contains(&id).then_some((id, node))
        })
        .collect()
}

/// How many shards each node's live lease holds, from the store at `url`.
pub async fn shards_held(url: &str) -> BTreeMap<String, usize> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("the checker cannot connect to the store: {e}"));
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT n.node, count(*) FROM foya_shards sh \
             JOIN foya_nodes n ON n.lease = sh.owner_lease \
             WHERE n.expires_at > clock_timestamp() GROUP BY n.node",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("reading the shards' owners: {e}"));
    drop(client);
    let _ = driver.await;
    rows.iter()
        .map(|row| {
            let count: i64 = row.get(1);
            (row.get(0), usize::try_from(count).unwrap_or(0))
        })
        .collect()
}

/// Waits (at most `timeout`) until placement settled: every shard held by a live lease,
/// each of `nodes` holding some.
///
/// # Errors
/// Who held what at the deadline.
pub async fn wait_placed(url: &str, nodes: &[String], timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let total = {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let driver = tokio::spawn(connection);
        let count: i64 = client
            .query_one("SELECT count(*) FROM foya_shards", &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        drop(client);
        let _ = driver.await;
        usize::try_from(count).unwrap_or(0)
    };
    loop {
        let held = shards_held(url).await;
        let settled = held.values().sum::<usize>() == total
            && nodes.iter().all(|n| held.get(n).is_some_and(|c| *c > 0));
        if settled {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "placement did not settle within {timeout:?}: of {total} shards, the live \
                 leases hold {held:?} (the nodes must claim their shares)"
            ));
        }
        // Polling the store: the shard table is where ownership is recorded.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node owning most of `load`'s sessions, and those sessions.
///
/// # Errors
/// No live lease owns the shard of any of them.
pub async fn busiest(url: &str, load: &Load) -> Result<(String, Vec<SessionId>), String> {
    let mut by_node: BTreeMap<String, Vec<SessionId>> = BTreeMap::new();
    for (id, node) in owners(url, load).await {
        by_node.entry(node).or_default().push(id);
    }
    by_node
        .into_iter()
        .max_by_key(|(_, s)| s.len())
        .ok_or_else(|| {
            "no node holds the shard of any session (no live lease owns one in foya_shards): \
         the nodes do not claim shards"
                .to_owned()
        })
}

/// Submits `input_id` to each of `sessions` until it is accepted (a retry reuses the id,
/// so the store must take it once), from `since`; the time each took, or the sessions
/// that accepted nothing by `timeout`.
pub async fn probe_until_accepted(
    cluster: &Cluster,
    load: &Load,
    sessions: &[SessionId],
    since: Instant,
    timeout: Duration,
) -> Result<Vec<Duration>, String> {
    let probes: Vec<(SessionId, InputId)> = sessions.iter().map(|&s| (s, InputId::new())).collect();
    let mut waits = vec![None; probes.len()];
    let deadline = since + timeout;
    let mut last_error = BTreeMap::new();
    while waits.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, (session, input)) in probes.iter().enumerate() {
            if waits[i].is_some() {
                continue;
            }
            match load
                .submit(cluster, *session, *input, "probe after the fault")
                .await
            {
                Ok(()) => waits[i] = Some(since.elapsed()),
                Err(e) => {
                    last_error.insert(*session, e);
                }
            }
        }
        if waits.iter().any(Option::is_none) {
            // Retry pacing of a client that lost its node (not a synchronisation).
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let missing: Vec<String> = probes
        .iter()
        .zip(&waits)
        .filter(|(_, w)| w.is_none())
        .map(|((s, _), _)| {
            format!(
                "{s} ({})",
                last_error.get(s).map_or("no answer", String::as_str)
            )
        })
        .collect();
    if missing.is_empty() {
        Ok(waits.into_iter().flatten().collect())
    } else {
        Err(format!(
            "{} of {} sessions accepted no input within {timeout:?} of the fault: {}",
            missing.len(),
            probes.len(),
            missing.join("; ")
        ))
    }
}

/// The p-th percentile (0..=100) of `values` (nearest rank); zero when empty.
#[must_use]
pub fn percentile(values: &[Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

// ---------------------------------------------------------------------------------------
// The checker.

/// Whether a log is at rest: no open turn and no queued input left to run.
#[must_use]
pub fn at_rest(log: &[Event]) -> bool {
    let mut open = false;
    let mut queued = std::collections::HashSet::new();
    for e in log {
        match &e.kind {
            EventKind::TurnStarted { .. } => open = true,
            EventKind::TurnComplete { .. } => open = false,
            EventKind::InputQueued { input_id, .. } => {
                queued.insert(*input_id);
            }
            EventKind::UserMessage { input_id, .. } | EventKind::InputDropped { input_id, .. } => {
                queued.remove(input_id);
            }
            _ => {}
        }
    }
    !open && queued.is_empty()
}

/// The rules a session's log breaks (see the module docs), given what its clients were
/// acknowledged.
#[must_use]
pub fn check_log(id: SessionId, log: &[Event], acked: Option<&Acked>) -> Vec<String> {
    let mut broken = Vec::new();
    for (i, e) in log.iter().enumerate() {
        let want = Seq(i as u64 + 1);
        if e.seq != want {
            broken.push(format!(
                "{id}: seq {} at position {} (expected {})",
                e.seq.0, i, want.0
            ));
            break;
        }
    }
    if let Some(acked) = acked {
        let by_seq: HashMap<Seq, &Event> = log.iter().map(|e| (e.seq, e)).collect();
        for (seq, event) in &acked.events {
            match by_seq.get(seq) {
                None => broken.push(format!("{id}: acknowledged event {} is missing", seq.0)),
                Some(stored) if **stored != *event => broken.push(format!(
                    "{id}: acknowledged event {} differs from the stored one",
                    seq.0
                )),
                Some(_) => {}
            }
        }
        for input in &acked.inputs {
            let taken = log
                .iter()
                .filter(|e| {
                    matches!(&e.kind, EventKind::UserMessage { input_id, .. } if input_id == input)
                })
                .count();
            if taken != 1 {
                broken.push(format!(
                    "{id}: accepted input {input} ran {taken} times (expected once)"
                ));
            }
        }
    }
    // Turns closed once; every call of a turn answered once before it closes.
    let mut open: Option<Seq> = None;
    let mut calls: BTreeMap<String, usize> = BTreeMap::new();
    let close = |start: Seq, calls: &mut BTreeMap<String, usize>, broken: &mut Vec<String>| {
        for (call, results) in std::mem::take(calls) {
            if results != 1 {
                broken.push(format!(
                    "{id}: tool call {call} of the turn started at seq {} has {results} results",
                    start.0
                ));
            }
        }
    };
    for e in log {
        match &e.kind {
            EventKind::TurnStarted { .. } => {
                if let Some(start) = open {
                    broken.push(format!(
                        "{id}: the turn started at seq {} is never closed (another starts at {})",
                        start.0, e.seq.0
                    ));
                    close(start, &mut calls, &mut broken);
                }
                open = Some(e.seq);
            }
            EventKind::AssistantMessage(m) => {
                for call in &m.tool_calls {
                    calls.insert(call.id.to_string(), 0);
                }
            }
            EventKind::ToolMessage(m) => match calls.get_mut(&m.tool_call_id.to_string()) {
                Some(n) => *n += 1,
                None => broken.push(format!(
                    "{id}: seq {} answers tool call {} of no open call",
                    e.seq.0, m.tool_call_id
                )),
            },
            EventKind::TurnComplete { .. } => match open.take() {
                Some(start) => close(start, &mut calls, &mut broken),
                None => broken.push(format!(
                    "{id}: turn_complete at seq {} closes no open turn",
                    e.seq.0
                )),
            },
            _ => {}
        }
    }
    if let Some(start) = open {
        broken.push(format!(
            "{id}: the turn started at seq {} is never closed",
            start.0
        ));
    }
    broken
}

/// A call's place in its turn: (step, index of the call in its step).
type CallKey = (u32, u32);

/// Per (step, call index): calls in the log, and those with the result of a finished
/// run (not an error: "cancelled", "outcome unknown" and "not run" are errors).
fn calls_by_key(log: &[Event]) -> BTreeMap<CallKey, (usize, usize)> {
    let mut step = 0;
    let mut keys: HashMap<String, CallKey> = HashMap::new();
    let mut out: BTreeMap<CallKey, (usize, usize)> = BTreeMap::new();
    for e in log {
        match &e.kind {
            EventKind::StepStarted { step: s } => step = *s,
            EventKind::AssistantMessage(m) => {
                for (i, call) in m.tool_calls.iter().enumerate() {
                    let key = (step, u32::try_from(i).unwrap_or(u32::MAX));
                    keys.insert(call.id.to_string(), key);
                    out.entry(key).or_default().0 += 1;
                }
            }
            EventKind::ToolMessage(m) if !m.is_error => {
                if let Some(key) = keys.get(&m.tool_call_id.to_string()) {
                    out.entry(*key).or_default().1 += 1;
                }
            }
            _ => {}
        }
    }
    out
}

/// The side-effect file's lines, counted per (session directory name, step, call).
#[must_use]
pub fn ran_lines(ran_log: &Path) -> BTreeMap<(String, u32, u32), usize> {
    let text = std::fs::read_to_string(ran_log).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        if let (Some(dir), Some(step), Some(call)) = (parts.next(), parts.next(), parts.next())
            && let (Ok(step), Ok(call)) = (step.parse(), call.parse())
        {
            *out.entry((dir.to_owned(), step, call)).or_insert(0) += 1;
        }
    }
    out
}

/// The tool calls of session `id` (working in directory `dir_name`) that ran twice, or
/// that have a result but never ran (see the module docs).
#[must_use]
pub fn check_tool_runs(
    id: SessionId,
    dir_name: &str,
    log: &[Event],
    ran: &BTreeMap<(String, u32, u32), usize>,
) -> Vec<String> {
    let mut broken = Vec::new();
    let calls = calls_by_key(log);
    for ((dir, step, call), lines) in ran.range((dir_name.to_owned(), 0, 0)..) {
        if dir != dir_name {
            break;
        }
        let (logged, _) = calls.get(&(*step, *call)).copied().unwrap_or((0, 0));
        if *lines > logged {
            broken.push(format!(
                "{id}: the call of step {step} (#{call}) ran {lines} times for {logged} calls in the log"
            ));
        }
    }
    for ((step, call), (_, answered)) in calls {
        let lines = ran
            .get(&(dir_name.to_owned(), step, call))
            .copied()
            .unwrap_or(0);
        if lines < answered {
            broken.push(format!(
                "{id}: {answered} results of the call of step {step} (#{call}) but it ran {lines} times"
            ));
        }
    }
    broken
}

/// What the checker found in one run.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Every broken rule, one line each.
    pub broken: Vec<String>,
    /// Events in the checked sessions' logs.
    pub events: usize,
    /// Turns closed interrupted (the runtime stopped under them).
    pub interrupted: usize,
    /// Turns completed (status `completed`).
    pub completed: usize,
    /// Turns cancelled (status `cancelled`: a handoff, a shutdown).
    pub cancelled: usize,
    /// Results written as "outcome unknown".
    pub unknown: usize,
    /// Tool runs in the side-effect file.
    pub tool_runs: usize,
}

/// Reads every session of `load` from the store at `url` and checks it, with the epochs
/// of the whole store.
pub async fn check_store(url: &str, cluster: &Cluster, load: &Load) -> Verdict {
    let log = foya_storage_pg::PgLog::open(url, foya_storage_pg::PgOptions::default())
        .await
        .unwrap_or_else(|e| panic!("the checker cannot open the store: {e}"));
    let ran = ran_lines(&cluster.ran_log);
    let mut verdict = Verdict {
        tool_runs: ran.values().sum(),
        ..Verdict::default()
    };
    let acked = load
        .acked
        .lock()
        .unwrap()
        .drain()
        .collect::<HashMap<_, _>>();
    for (i, id) in load.sessions.iter().enumerate() {
        let events = log.read_from(*id, Seq::FIRST).await.unwrap();
        verdict.events += events.len();
        for e in &events {
            match &e.kind {
                EventKind::TurnComplete {
                    reason: Some(r), ..
                } if r.contains("interrupted") => verdict.interrupted += 1,
                EventKind::TurnComplete {
                    status: foya_protocol::TurnStatus::Completed,
                    ..
                } => verdict.completed += 1,
                EventKind::TurnComplete {
                    status: foya_protocol::TurnStatus::Cancelled,
                    ..
                } => verdict.cancelled += 1,
                EventKind::ToolMessage(m) if m.content.contains(OUTCOME_UNKNOWN) => {
                    verdict.unknown += 1;
                }
                _ => {}
            }
        }
        let before = verdict.broken.len();
        verdict
            .broken
            .extend(check_log(*id, &events, acked.get(id)));
        let dir = cluster.session_dir(i);
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        verdict
            .broken
            .extend(check_tool_runs(*id, &name, &events, &ran));
        if verdict.broken.len() > before {
            // The offending session's log, for the failure's reader.
            let epochs: HashMap<Seq, u64> = log
                .event_epochs(*id)
                .await
                .unwrap_or_default()
                .into_iter()
                .collect();
            let lines: Vec<String> = ran
                .iter()
                .filter(|((dir, _, _), _)| *dir == name)
                .map(|((_, step, call), n)| format!("step {step} #{call}: {n}"))
                .collect();
            println!("{id} ({name}) tool runs: {lines:?}; its log:");
            for e in &events {
                println!("{}", describe(e, epochs.get(&e.seq).copied()));
            }
        }
    }
    let regressions = log.epoch_regressions(100).await.unwrap();
    for r in regressions {
        verdict.broken.push(format!(
            "{}: seq {} committed under epoch {} after epoch {} (a stale owner wrote)",
            r.session, r.seq.0, r.epoch, r.previous
        ));
    }
    log.close().await;
    verdict
}

/// One line of a session's log for a failure's reader: seq, epoch, run, kind and its
/// gist.
#[must_use]
pub fn describe(e: &Event, epoch: Option<u64>) -> String {
    let run = e.run_id.map(|r| r.to_string()).unwrap_or_default();
    let run = run.get(run.len().saturating_sub(6)..).unwrap_or("");
    let what = match &e.kind {
        EventKind::AssistantMessage(m) => format!(
            "assistant_message calls {:?}",
            m.tool_calls
                .iter()
                .map(|c| c.id.to_string())
                .collect::<Vec<_>>()
        ),
        EventKind::ToolMessage(m) => {
            let content: String = m.content.chars().take(60).collect();
            format!("tool_message {} {content:?}", m.tool_call_id)
        }
        EventKind::TurnComplete { status, reason, .. } => {
            format!("turn_complete {status:?} {reason:?}")
        }
        EventKind::ToolStarted { .. } => format!("{:?}", e.kind),
        other => {
            let text = format!("{other:?}");
            text.chars().take(80).collect()
        }
    };
    format!(
        "  {:>3} e{} r{run} t{} {what}",
        e.seq.0,
        epoch.map_or_else(|| "?".to_owned(), |v| v.to_string()),
        e.at_ms
    )
}

/// Waits (at most `timeout`) until every session of `load` is at rest in the store.
///
/// # Errors
/// The sessions still busy at the deadline.
pub async fn wait_at_rest(url: &str, load: &Load, timeout: Duration) -> Result<(), String> {
    let log = foya_storage_pg::PgLog::open(url, foya_storage_pg::PgOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let result = loop {
        let mut busy = Vec::new();
        for id in &load.sessions {
            match log.read_from(*id, Seq::FIRST).await {
                Ok(events) if at_rest(&events) => {}
                Ok(_) => busy.push(id.to_string()),
                Err(e) => busy.push(format!("{id} (unreadable: {e})")),
            }
        }
        if busy.is_empty() {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(format!(
                "{} sessions still have an open turn or a queued input {timeout:?} after the \
                 fault: {}",
                busy.len(),
                busy.join(", ")
            ));
        }
        // Polling the store: the log is the only witness every node shares.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    log.close().await;
    result
}

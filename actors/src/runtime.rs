//! The embedding façade: [`Runtime`] and [`SessionHandle`]. ActorRefs never leave the
//! crate; a handle resolves its session through the registry on every call, so it keeps
//! working after the session is restarted or reloaded from the log.
//!
//! Bird's-eye flow: `Runtime::start` spawns the Supervisor; `create_session` writes
//! `session_created` and starts a SessionActor; `submit` lands in the session's FIFO;
//! the session spawns a TurnActor per input, which starts a stream task per model
//! request and runs tool calls on ToolActors; every event is committed by the session
//! and then broadcast to [`Subscription`]s.
//!
//! The façade sits on top: it builds the actors' shared deps (`kernel::RuntimeDeps`) from
//! a [`RuntimeConfig`] and re-exports the kernel's public types ([`RuntimeError`],
//! [`QueuedOnRestart`], [`WithoutApprover`]); nothing below imports it.

use crate::kernel::{ControlConfig, RuntimeDeps, actor_err, ask};
pub(crate) use crate::kernel::{QueuedOnRestart, RuntimeError, WithoutApprover};
use crate::options::ContextOptions;
use crate::provider::ModelClient;
use crate::provider::retry::RetryPolicy;
use crate::session::SessionMsg;
use crate::supervisor::actor::Registry;
use crate::supervisor::sub_agent::Spawner;
use crate::supervisor::{SupervisorActor, SupervisorArgs, SupervisorMsg};
use crate::tools::builtin::agent::{AgentTool, SubAgentLimits};
use crate::tools::{Tool, ToolRegistry};
use foya_protocol::{SessionConfig, SessionId, SessionSummary};
use foya_storage::EventLog as _;
use ractor::{Actor, ActorRef};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// What a runtime is built from.
#[derive(Debug)]
pub struct RuntimeConfig {
    /// The event store: the embedded redb [`foya_storage::Store`] (converts with `into`)
    /// or a shared engine ([`foya_storage::LogStore::shared`]).
    pub store: foya_storage::LogStore,
    /// The model client used when a session's `provider` is not in `models`.
    pub model: Arc<dyn ModelClient>,
    /// Model clients by `SessionConfig::provider`.
    pub models: HashMap<String, Arc<dyn ModelClient>>,
    /// The tools sessions may call.
    pub tools: Arc<ToolRegistry>,
    /// Retry policy of model requests, for a client whose
    /// [`ModelClient::retry_policy`] is `None` (a provider profile's own `retry` wins).
    pub retry: RetryPolicy,
    /// Capacity of each subscriber's channel (events + deltas); a subscriber that falls
    /// this far behind is cut off with `Notice::Lagged`. 0 counts as 1. Below
    /// [`MIN_SUBSCRIBER_BUFFER`] one burst of a fast stream cuts every subscriber off.
    pub subscriber_buffer: usize,
    /// Context compilation, compaction and title settings.
    pub context: crate::options::ContextOptions,
    /// Run-protection thresholds (duplicate calls, repeated failures, step cycles).
    pub protection: crate::turn::protection::Limits,
    /// In-process lifecycle hooks (every point; see `docs/hooks.md`), run in order before
    /// the command hooks of the same point.
    pub hooks: Vec<Arc<dyn crate::hooks::Hook>>,
    /// Command hooks by point (a `config.toml`'s `[hooks]`, parsed by
    /// [`HookCommands::parse`](crate::hooks::HookCommands::parse)).
    pub command_hooks: crate::hooks::HookCommands,
    /// Where each session's log is exported as JSONL for hooks (`transcript_path`);
    /// `None`: not exported, and `transcript_path` is empty.
    pub transcript_dir: Option<std::path::PathBuf>,
    /// The sandbox helper command hooks run under (policy `none`: its parent-death
    /// signal and subreaper tree-kill, as for the shell tool); `None`: plain `bash` in its
    /// own process group.
    pub hook_supervisor: Option<crate::tools::sandbox::SandboxRunner>,
    /// In-process stop hooks (the older API), run as `Stop` / `SubagentStop` hooks after
    /// [`Self::hooks`].
    pub stop_hooks: Vec<Arc<dyn crate::hooks::StopHook>>,
    /// Command stop hooks (the older API): `Stop` command hooks run after
    /// [`Self::command_hooks`]' own.
    pub stop_hook_commands: Vec<String>,
    /// Timeout of each of [`Self::stop_hook_commands`].
    pub stop_hook_timeout: std::time::Duration,
    /// Cap of stop-hook continuations per turn, tool steps in between included (default 8).
    pub max_hook_continuations: u32,
    /// When set, the built-in `agent` tool (sub-agents) is registered with these limits.
    pub sub_agents: Option<SubAgentLimits>,
    /// Where image attachments referenced by user inputs are read from (none: image
    /// references are sent to the model as "unavailable").
    pub attachments: Option<Arc<crate::attachments::AttachmentStore>>,
    /// What recovery does with inputs queued before a restart; default run them.
    pub queued_on_restart: QueuedOnRestart,
    /// How many events idle sessions may keep in memory in total, default
    /// [`DEFAULT_IDLE_LOG_EVENTS`]. A session running a turn holds its whole log in memory
    /// (every step is compiled from it); when it goes idle it keeps the log only if it
    /// fits what is left of this budget, else its next turn reads the log from the store
    /// once. An idle session that keeps its log also keeps the log's history fold (the
    /// folded messages, at most as large as the events they come from), so the memory
    /// this bounds is up to twice the events' size. 0: idle sessions hold no history.
    pub idle_log_events: usize,
    /// The provider name of [`Self::model`] (`openai`, `scripted`, a profile name):
    /// what a session created without a provider (`SessionConfig::provider` empty,
    /// e.g. through [`crate::cluster::ClusterClient::create_session`] with
    /// `SessionConfig::new(cwd)`) records as its provider, so that its stored config
    /// says what serves it. Default empty: recorded as given.
    pub default_provider: String,
    /// The model name [`Self::model`] uses: what a session without a model records when
    /// its provider is empty or [`Self::default_provider`]. Default empty.
    pub default_model: String,
    /// MCP tool servers shared by every session (none by default); each step of a turn
    /// offers the tools of the servers its session uses
    /// ([`foya_protocol::SessionConfig::mcp_servers`]). Stopped by [`Runtime::close`].
    #[cfg(feature = "mcp")]
    pub mcp: Option<Arc<crate::mcp::McpManager>>,
    /// The agent's instructions for a session created without its own
    /// ([`SessionConfig::instructions`]): recorded in that session's `session_created`,
    /// so the session keeps them after a restart. `None` (default): Foya's built-in
    /// coding-agent prompt alone.
    pub instructions: Option<foya_protocol::Instructions>,
    /// What a call that needs approval does while no approver is attached.
    pub without_approver: WithoutApprover,
    /// The embedder's values its tools reach through [`crate::tools::ToolContext::state`]
    /// (empty by default).
    pub tool_state: crate::tools::ToolState,
    /// How long a session stays loaded while idle and unwatched (no turn, nothing
    /// queued, no approval waiting, no subscriber) before it hibernates: its actor stops
    /// and its log and state leave memory, until the next call on it loads it from the
    /// log again. Default [`DEFAULT_HIBERNATE_AFTER`]; `None`: never.
    pub hibernate_after: Option<std::time::Duration>,
    /// Above this many loaded sessions, a session hibernates as soon as it is idle and
    /// unwatched (its turn ended, nothing queued, no approval waiting, no subscriber left,
    /// no title request), without waiting out `hibernate_after`: its log is already
    /// durable, and the next call loads it again (one log read). At or below it, an idle
    /// session stays loaded for `hibernate_after`, so the next turn of a session used
    /// again soon does not pay that read. Default [`DEFAULT_HIBERNATE_AT_ONCE_ABOVE`];
    /// `Some(0)`: always at once; `None`: never at once. Nothing hibernates while
    /// `hibernate_after` is `None`.
    pub hibernate_at_once_above: Option<usize>,
    /// Where the runtime keeps its live counts (sessions live and hibernated, turns
    /// running, queue depth, pending approvals): clone it before [`Runtime::start`] to
    /// read them from outside ([`StatsSource::read`](crate::kernel::StatsSource::read), a few atomic loads), or call
    /// [`Runtime::stats`]. A new one by default.
    pub stats: crate::kernel::StatsSource,
    /// Which sessions this runtime may run and write, and under which fence (a cluster
    /// node over a shared store: `foya-storage-pg`'s `ShardOwnership`). `None` (the
    /// default): every session, appends with `Fence::None` (a single node). With one:
    /// every append carries its session's shard fence; a session whose shard is not
    /// admitted is refused ([`RuntimeError::NotOwner`]); new sessions get ids in a shard
    /// this node holds (a sub-agent's child: its parent's); and a write the store refuses
    /// as fenced drops every loaded session of that shard without writing more.
    pub ownership: Option<Arc<dyn foya_storage::Ownership>>,
    /// How long a handoff ([`Runtime::hand_off`]: a cluster node giving a shard to
    /// another node, or stopping on SIGTERM) lets the sessions' running turns finish
    /// before it cancels them. Default [`DEFAULT_HANDOFF_DRAIN`].
    pub handoff_drain: std::time::Duration,
}

/// Default [`RuntimeConfig::handoff_drain`]: 10 s.
pub const DEFAULT_HANDOFF_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long [`Runtime::hand_off`] waits, once it cancelled the turns that outlived the
/// drain, for their `turn_complete{cancelled}` before it drops the sessions anyway.
pub const HANDOFF_CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How long [`Runtime::hand_off`] waits for its sessions to tell their subscribers
/// `Notice::Moved` and stop before it drops them anyway (a session still busy then).
const HANDOFF_RELEASE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// Default [`RuntimeConfig::hibernate_at_once_above`]: 1 000 loaded sessions.
pub const DEFAULT_HIBERNATE_AT_ONCE_ABOVE: usize = 1_000;

/// Default [`RuntimeConfig::hibernate_after`]: one minute.
pub const DEFAULT_HIBERNATE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// Default [`RuntimeConfig::idle_log_events`]: about 16 MiB of event headers (an event
/// is 248 bytes before its text), so that a steady stream of turns in a few hundred
/// sessions never reads history back from the store, while ten thousand one-off
/// sessions keep little once they are done.
pub const DEFAULT_IDLE_LOG_EVENTS: usize = 65_536;

/// Default [`RuntimeConfig::subscriber_buffer`].
pub const DEFAULT_SUBSCRIBER_BUFFER: usize = 1024;

/// The smallest [`RuntimeConfig::subscriber_buffer`] a turn's stream fits in (128): a
/// session sends the live deltas of one relayed batch of a model stream back to back,
/// without waiting for the subscriber (up to 64 stream events, each at most two deltas:
/// a tool call's first chunk also makes its `tool_call_queued`), so with a smaller
/// channel a fast stream overflows it and the subscriber is cut off with
/// `Notice::Lagged` however quickly it reads. The events of one commit are sent the same
/// way (a step's tool results may be committed together: one event per call, plus one).
pub const MIN_SUBSCRIBER_BUFFER: usize = 2 * crate::turn::provider::stream::MAX_BATCH;

impl RuntimeConfig {
    /// A configuration serving every session with `model`, the built-in tools without
    /// side effects only ([`ToolRegistry::read_only_builtin`]; ask for the others with
    /// [`ToolRegistry::builtin`] or [`ToolRegistry::builtin_with_sandbox`]), no project
    /// or user files read ([`ContextOptions::default`]), the default retry policy and a
    /// subscriber buffer of [`DEFAULT_SUBSCRIBER_BUFFER`].
    #[must_use]
    pub fn new(store: impl Into<foya_storage::LogStore>, model: Arc<dyn ModelClient>) -> Self {
        Self {
            store: store.into(),
            model,
            models: HashMap::new(),
            tools: Arc::new(ToolRegistry::read_only_builtin()),
            retry: RetryPolicy::default(),
            subscriber_buffer: DEFAULT_SUBSCRIBER_BUFFER,
            context: ContextOptions::default(),
            protection: crate::turn::protection::Limits::default(),
            hooks: Vec::new(),
            command_hooks: crate::hooks::HookCommands::default(),
            transcript_dir: None,
            hook_supervisor: None,
            stop_hooks: Vec::new(),
            stop_hook_commands: Vec::new(),
            stop_hook_timeout: crate::hooks::config::DEFAULT_TIMEOUT,
            max_hook_continuations: 8,
            sub_agents: None,
            attachments: None,
            queued_on_restart: QueuedOnRestart::Run,
            idle_log_events: DEFAULT_IDLE_LOG_EVENTS,
            default_provider: String::new(),
            default_model: String::new(),
            #[cfg(feature = "mcp")]
            mcp: None,
            instructions: None,
            tool_state: crate::tools::ToolState::new(),
            without_approver: WithoutApprover::default(),
            hibernate_after: Some(DEFAULT_HIBERNATE_AFTER),
            hibernate_at_once_above: Some(DEFAULT_HIBERNATE_AT_ONCE_ABOVE),
            stats: crate::kernel::StatsSource::default(),
            ownership: None,
            handoff_drain: DEFAULT_HANDOFF_DRAIN,
        }
    }
}

/// Longest wait of `Runtime::shutdown` for the actors to drop their store handles.
const SHUTDOWN_DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long [`Runtime::shutdown`] waits for cancelled turns to write their end.
pub const DEFAULT_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) supervisor: ActorRef<SupervisorMsg>,
    join: std::sync::Mutex<Option<JoinHandle<()>>>,
    pub(crate) registry: Registry,
    /// The façade's copy of the deps; taken (`None`) by [`Runtime::close`], so that a
    /// handle outliving its runtime holds no store (the file's lock is released) and
    /// answers [`RuntimeError::ShuttingDown`].
    deps: std::sync::RwLock<Option<Arc<RuntimeDeps>>>,
    /// Ends (`None`) once the actors' copy of the deps is dropped everywhere.
    actors_gone: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<std::convert::Infallible>>>,
    /// [`RuntimeConfig::stats`].
    stats: crate::kernel::StatsSource,
    /// [`RuntimeConfig::handoff_drain`].
    handoff_drain: std::time::Duration,
}

/// How [`Runtime::hand_off`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandOff {
    /// How many loaded sessions were handed off.
    pub sessions: usize,
    /// Every running turn ended within the drain (none was cancelled).
    pub drained: bool,
    /// Every turn ended (finished, or cancelled and its end written) before the
    /// sessions were dropped; `false`: one was still running after the cancel's grace
    /// (its next owner closes it as interrupted).
    pub ended: bool,
}

/// A running Foya runtime (one Supervisor and its sessions). The guide
/// ([`crate::guide`], `docs/embedding.md`) walks through every step.
///
/// ```
/// # async fn demo() -> anyhow::Result<()> {
/// use foya_actors::provider::scripted::ScriptedClient;
/// use foya_actors::{Runtime, RuntimeConfig};
/// use foya_protocol::{Input, SessionConfig};
/// use std::sync::Arc;
///
/// let model = Arc::new(ScriptedClient::from_script(serde_json::from_str(
///     r#"{"responses": [{"text": "Hi."}]}"#,
/// )?));
/// let store = foya_storage::Store::open_in_memory(Default::default())?;
/// let runtime = Runtime::start(RuntimeConfig::new(store, model)).await?;
/// let session = runtime.create_session(SessionConfig::new("/tmp")).await?;
/// assert_eq!(session.run(Input::text("Hello")).await?.text, "Hi.");
/// runtime.shutdown().await;
/// # Ok(()) }
/// # tokio::runtime::Runtime::new()?.block_on(demo())?;
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// A cheap, cloneable handle to one session.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    pub(crate) id: SessionId,
    pub(crate) inner: Arc<Inner>,
}

impl Inner {
    /// The deps, or [`RuntimeError::ShuttingDown`] once the runtime was closed.
    pub(crate) fn deps(&self) -> Result<Arc<RuntimeDeps>, RuntimeError> {
        self.deps
            .read()
            .ok()
            .and_then(|deps| deps.clone())
            .ok_or(RuntimeError::ShuttingDown)
    }

    /// The actor of session `id`, loading it if needed. A loaded session answers while
    /// this node holds its shard, even while the shard is handed off (its running turn
    /// finishes meanwhile: approvals, cancels and subscriptions still reach it); loading
    /// it needs its shard admitted, and so does a new input ([`Inner::admit`]).
    pub(crate) async fn session_actor(
        &self,
        id: SessionId,
    ) -> Result<ActorRef<SessionMsg>, RuntimeError> {
        let deps = self.deps()?;
        if let Some(actor) = self.registry.get(&id)
            && crate::session::is_alive(actor.get_status())
        {
            deps.fence_for(id, None)?;
            return Ok(actor.clone());
        }
        deps.admit(id, None)?;
        ask(&self.supervisor, |reply| SupervisorMsg::GetSession {
            id,
            reply,
        })
        .await
    }
}

impl Inner {
    /// Whether session `id` may take a new input here: [`RuntimeError::NotOwner`] while
    /// its shard is not held or is being handed off (the client retries on the next
    /// owner, with the same input id).
    pub(crate) fn admit(&self, id: SessionId) -> Result<(), RuntimeError> {
        self.deps()?.admit(id, None)
    }
}

/// Creates a session through `inner`'s supervisor, with the runtime's defaults where
/// `config` has none.
pub(crate) async fn create_session_in(
    inner: &Arc<Inner>,
    config: SessionConfig,
) -> Result<SessionHandle, RuntimeError> {
    let config = inner.deps()?.complete_config(config);
    let (id, _actor): (SessionId, ActorRef<SessionMsg>) =
        ask(&inner.supervisor, |reply| SupervisorMsg::CreateSession {
            config: Box::new(config),
            reply,
        })
        .await?;
    Ok(SessionHandle {
        id,
        inner: Arc::clone(inner),
    })
}

impl Runtime {
    /// [`RuntimeConfig::subscriber_buffer`] (0 counted as 1); the default once shut down.
    #[cfg(feature = "cluster")] // only the cluster's subscriptions use it
    pub(crate) fn subscriber_buffer(&self) -> usize {
        self.inner
            .deps()
            .map_or(DEFAULT_SUBSCRIBER_BUFFER, |deps| deps.subscriber_buffer)
    }

    /// Starts the Supervisor.
    ///
    /// # Errors
    /// [`RuntimeError::Actor`] when the actor system cannot start.
    pub async fn start(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let (alive, actors_gone) = tokio::sync::mpsc::channel(1);
        let registry: Registry = Arc::default();
        let stats = config.stats.clone();
        let handoff_drain = config.handoff_drain;
        let (fenced, fenced_shards) = tokio::sync::mpsc::unbounded_channel();
        if let Some(ownership) = config.ownership.clone() {
            tokio::spawn(drop_fenced_shards(
                fenced_shards,
                Arc::downgrade(&registry),
                ownership,
            ));
        }
        // The actors' copy of the deps: it holds the `agent` tool, whose spawner holds
        // these deps weakly.
        let actor_deps = Arc::new_cyclic(|deps| {
            let spawner = Arc::new(Spawner::new(deps.clone(), Arc::clone(&registry)));
            deps_of(config, spawner, alive, fenced)
        });
        let deps = Arc::new(RuntimeDeps {
            _actors_alive: None,
            ..(*actor_deps).clone()
        });
        let args = SupervisorArgs {
            deps: actor_deps,
            registry: Arc::clone(&registry),
        };
        let (supervisor, join) = Actor::spawn(None, SupervisorActor, args)
            .await
            .map_err(actor_err)?;
        let inner = Inner {
            supervisor,
            join: std::sync::Mutex::new(Some(join)),
            registry,
            deps: std::sync::RwLock::new(Some(deps)),
            actors_gone: std::sync::Mutex::new(Some(actors_gone)),
            stats,
            handoff_drain,
        };
        Ok(Runtime {
            inner: Arc::new(inner),
        })
    }

    /// Creates a session (`session_created` is committed when this returns). A config
    /// without a provider records [`RuntimeConfig::default_provider`], without a
    /// model (its provider empty or the default one) [`RuntimeConfig::default_model`],
    /// and without instructions [`RuntimeConfig::instructions`].
    ///
    /// # Errors
    /// [`RuntimeError::Storage`] when the store refuses the write.
    pub async fn create_session(
        &self,
        config: SessionConfig,
    ) -> Result<SessionHandle, RuntimeError> {
        create_session_in(&self.inner, config).await
    }

    /// A handle to a live session, loading it from the log (with recovery) if needed.
    ///
    /// # Errors
    /// [`RuntimeError::SessionNotFound`], [`RuntimeError::SessionDeleted`], storage errors.
    pub async fn session(&self, id: SessionId) -> Result<SessionHandle, RuntimeError> {
        self.inner.session_actor(id).await?;
        Ok(SessionHandle {
            id,
            inner: Arc::clone(&self.inner),
        })
    }

    /// Every session in the store (deleted ones flagged).
    ///
    /// # Errors
    /// [`RuntimeError::Storage`].
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>, RuntimeError> {
        self.inner
            .deps()?
            .store
            .list_sessions(foya_storage::Page::ALL)
            .await
            .map_err(|e| RuntimeError::Storage(crate::kernel::StorageError::of(e)))
    }

    /// Loads every session that has an unfinished turn or queued inputs (recovery runs on
    /// load); returns how many were loaded. It asks the store's recovery index which
    /// sessions those may be ([`foya_storage::Store::pending_sessions`]) and reads only
    /// their logs (once each, as the session loads): a store of a million idle sessions
    /// costs nothing here, and they stay unloaded until something asks for them.
    ///
    /// # Errors
    /// [`RuntimeError::Storage`].
    pub async fn recover_all(&self) -> Result<usize, RuntimeError> {
        let pending = self
            .inner
            .deps()?
            .store
            .pending_sessions()
            .await
            .map_err(|e| RuntimeError::Storage(crate::kernel::StorageError::of(e)))?;
        let mut loaded = 0;
        for id in pending {
            if self.inner.registry.contains_key(&id) {
                continue;
            }
            // Loading reads the log once and recovers the session in its start.
            match self.inner.session_actor(id).await {
                Ok(_) => loaded += 1,
                Err(RuntimeError::SessionDeleted(_) | RuntimeError::SessionNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(loaded)
    }

    /// The ids of the sessions loaded now (running, idle or queued; not hibernated).
    #[must_use]
    pub fn loaded_session_ids(&self) -> Vec<SessionId> {
        self.inner.registry.iter().map(|e| *e.key()).collect()
    }

    /// Drops the loaded sessions `which` selects **without writing anything**: their
    /// actors are killed at once (their turns, streams and tools' processes with them;
    /// an open turn stays open in the log, closed as interrupted by whichever node loads
    /// the session next). For a cluster node that lost a shard (fenced) or its lease
    /// (self-fence). Returns how many were dropped.
    pub fn drop_sessions(&self, which: impl Fn(SessionId) -> bool) -> usize {
        kill_sessions(&self.inner.registry, which)
    }

    /// Hands the loaded sessions `which` selects off to another node (a cluster node's
    /// graceful handoff), in three steps:
    ///
    /// 1. **Drain**: each session starts nothing more from its queue (an input that
    ///    reaches it meanwhile is queued in the log, for the next owner) and its running
    ///    turn goes on, for at most [`RuntimeConfig::handoff_drain`]: a turn that ends
    ///    within it ends as it would have (`completed`, `failed`…). The caller stops
    ///    admitting the sessions first (its ownership), so new inputs are refused with
    ///    [`RuntimeError::NotOwner`] (retry on the next owner); approvals, cancels and
    ///    subscriptions of the loaded sessions still work meanwhile.
    /// 2. **Cancel** what still runs, with `cause`'s reason (`turn_cancelled{reason}`,
    ///    e.g. `shard handed off to another node`; `turn_complete{cancelled}` committed
    ///    under the shard's fence), waiting at most [`HANDOFF_CANCEL_GRACE`].
    /// 3. **Drop** the sessions: each tells its subscribers `Notice::Moved` (resume on
    ///    the next owner) and stops, within 0.5 s; what is left then is dropped as by
    ///    [`Self::drop_sessions`].
    ///
    /// The caller releases their shard after. Returns how it went.
    pub async fn hand_off(
        &self,
        which: impl Fn(SessionId) -> bool,
        cause: foya_core::session::StopCause,
    ) -> HandOff {
        let sessions: Vec<ActorRef<SessionMsg>> = self
            .inner
            .registry
            .iter()
            .filter(|e| which(*e.key()))
            .map(|e| e.value().clone())
            .collect();
        let drains = sessions
            .iter()
            .map(|session| session.call(|reply| SessionMsg::Drain { reply }, None));
        let drained =
            tokio::time::timeout(self.inner.handoff_drain, futures::future::join_all(drains))
                .await
                .is_ok();
        let waits = sessions
            .iter()
            .map(|session| session.call(|reply| SessionMsg::Shutdown { cause, reply }, None));
        let ended = tokio::time::timeout(HANDOFF_CANCEL_GRACE, futures::future::join_all(waits))
            .await
            .is_ok();
        // Subscribers learn where the session goes on (`Notice::Moved`) rather than
        // seeing their channel end as if they had lagged.
        let releases = sessions.iter().map(|session| {
            session.call(
                |reply| SessionMsg::Release {
                    reason: cause.reason(),
                    reply,
                },
                None,
            )
        });
        let _ =
            tokio::time::timeout(HANDOFF_RELEASE_GRACE, futures::future::join_all(releases)).await;
        for session in &sessions {
            session.kill();
        }
        HandOff {
            sessions: sessions.len(),
            drained,
            ended,
        }
    }

    /// Stops taking new work and cancels every running turn, waiting at most `grace`
    /// for them to end. Returns whether every turn ended in time.
    ///
    /// From the call on, `create_session`, loading a session that is not live and
    /// `submit` fail with [`RuntimeError::ShuttingDown`]; queued inputs stay queued in
    /// the log (they run when the session is next loaded). Each running turn is cancelled
    /// through the normal cancel path (reason `runtime shutdown`): its stream stops, its
    /// tools' processes are killed, the unfinished calls get their cancelled results and
    /// `turn_complete{cancelled}` is committed (and broadcast to subscribers) before the
    /// wait for it ends. A turn still running after `grace` is left as it is (the next
    /// load closes it as interrupted). Other operations (subscribe, list, approvals)
    /// keep working until [`Self::shutdown`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops only the wait; the runtime stays closed to
    /// new work and the turns already told to cancel still end as described.
    pub async fn drain(&self, grace: std::time::Duration) -> bool {
        let sessions = ask(&self.inner.supervisor, |reply| SupervisorMsg::Drain {
            reply,
        })
        .await
        .unwrap_or_default();
        let waits = sessions.iter().map(|session| {
            session.call(
                |reply| SessionMsg::Shutdown {
                    cause: foya_core::session::StopCause::Shutdown,
                    reply,
                },
                None,
            )
        });
        let all = futures::future::join_all(waits);
        if tokio::time::timeout(grace, all).await.is_ok() {
            return true;
        }
        tracing::warn!("turns still running when the shutdown grace ended");
        false
    }

    /// [`Self::shutdown_within`] with [`DEFAULT_SHUTDOWN_GRACE`].
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future may leave actors running and the store open.
    pub async fn shutdown(self) {
        self.shutdown_within(DEFAULT_SHUTDOWN_GRACE).await;
    }

    /// Shuts down gracefully: [`Self::drain`] with `grace` (every running turn is
    /// cancelled and its `turn_complete{cancelled}` committed, waiting at most `grace`),
    /// then stops every actor and closes the store. A turn still running after `grace`
    /// stops where it is and is closed as interrupted on the next load.
    ///
    /// Returns once every session, turn and tool actor (and the tasks they started) has
    /// dropped its store handle — waiting at most 10 s for stragglers — and the store's
    /// writer has committed what was queued; so the redb file can be opened again at once,
    /// on any tokio runtime, even while `SessionHandle`s of this runtime are still alive:
    /// they hold no store any more, and every call on them fails with
    /// [`RuntimeError::ShuttingDown`].
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future may leave actors running and the store open.
    pub async fn shutdown_within(self, grace: std::time::Duration) {
        self.drain(grace).await;
        self.close().await;
    }

    /// The second half of [`Self::shutdown_within`], by reference: stops every actor
    /// (a turn still running stops where it is and is closed as interrupted on the next
    /// load; call [`Self::drain`] first to end turns cleanly) and closes the store, waiting
    /// as `shutdown_within` does. For a runtime shared by tasks that may still hold it
    /// (an HTTP server's open connections): the runtime then refuses every operation.
    /// Calling it again does nothing more.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future may leave actors running and the store open.
    pub async fn close(&self) {
        // From here on every handle of this runtime answers `ShuttingDown`.
        let deps = self.inner.deps.write().ok().and_then(|mut d| d.take());
        self.inner.supervisor.stop(Some("shutdown".into()));
        let join = self.inner.join.lock().ok().and_then(|mut j| j.take());
        if let Some(join) = join {
            let _ = join.await;
        }
        // The supervisor's end kills every actor below it, but each stops on its own task
        // (another worker thread): wait until all of them dropped their copy of the deps.
        let gone = self
            .inner
            .actors_gone
            .lock()
            .ok()
            .and_then(|mut g| g.take());
        if let Some(mut gone) = gone
            && tokio::time::timeout(SHUTDOWN_DRAIN_LIMIT, gone.recv())
                .await
                .is_err()
        {
            tracing::warn!("actors still held the store when the shutdown wait ended");
        }
        let Some(deps) = deps else {
            return;
        };
        #[cfg(feature = "mcp")]
        if let Some(mcp) = &deps.mcp {
            mcp.shutdown().await;
        }
        deps.store.close().await;
    }

    /// The runtime's live counts: sessions live and hibernated, turns running, queue
    /// depth, pending approvals. A few atomic loads (no actor is asked); the actors
    /// keep them as they change.
    #[must_use]
    pub fn stats(&self) -> crate::kernel::RuntimeStats {
        self.inner.stats.read()
    }

    /// The runtime's MCP servers, if any are configured (none once closed).
    #[cfg(feature = "mcp")]
    #[must_use]
    pub fn mcp(&self) -> Option<Arc<crate::mcp::McpManager>> {
        self.inner.deps().ok()?.mcp.clone()
    }

    /// The actor serving session `id` now, if any, for tests.
    #[cfg(test)]
    pub(crate) fn session_actor_now(&self, id: SessionId) -> Option<ActorRef<SessionMsg>> {
        self.inner.registry.get(&id).map(|a| a.clone())
    }

    /// Whether session `id` is loaded (its actor running), for tests.
    #[cfg(test)]
    pub(crate) fn is_loaded(&self, id: SessionId) -> bool {
        self.inner
            .registry
            .get(&id)
            .is_some_and(|a| crate::session::is_alive(a.get_status()))
    }

    /// How many sessions are loaded (their actors running), for tests.
    #[cfg(test)]
    pub(crate) fn loaded_sessions(&self) -> usize {
        self.inner
            .registry
            .iter()
            .filter(|a| crate::session::is_alive(a.value().get_status()))
            .count()
    }

    /// The `agent` tool, when sub-agents are on.
    #[cfg(test)]
    pub(crate) fn sub_agent_tool(&self) -> Option<Arc<crate::tools::builtin::agent::AgentTool>> {
        self.inner.deps().ok()?.sub_agents.clone()
    }
}

/// The actors' deps built from `config`, the `agent` tool (when sub-agents are on)
/// starting children through `spawner`.
fn deps_of(
    config: RuntimeConfig,
    spawner: Arc<Spawner>,
    alive: tokio::sync::mpsc::Sender<std::convert::Infallible>,
    fenced: tokio::sync::mpsc::UnboundedSender<u32>,
) -> RuntimeDeps {
    let control = ControlConfig {
        protection: config.protection,
        max_hook_continuations: config.max_hook_continuations,
    };
    let hooks = Arc::new(hooks_of(&config));
    let (tools, agent) = with_agent_tool(config.tools, config.sub_agents, spawner);
    RuntimeDeps {
        store: config.store,
        model: config.model,
        models: config.models,
        tools,
        retry: config.retry,
        subscriber_buffer: config.subscriber_buffer.max(1),
        context: config.context,
        control,
        attachments: config.attachments,
        queued_on_restart: config.queued_on_restart,
        sub_agents: agent,
        hooks,
        idle_logs: crate::log::IdleLogs::new(config.idle_log_events),
        default_provider: config.default_provider,
        default_model: config.default_model,
        #[cfg(feature = "mcp")]
        mcp: config.mcp,
        instructions: config.instructions,
        tool_state: config.tool_state,
        without_approver: config.without_approver,
        hibernate_after: config.hibernate_after,
        hibernate_at_once_above: config.hibernate_at_once_above,
        stats: config.stats,
        ownership: config.ownership,
        fenced: Some(fenced),
        _actors_alive: Some(alive),
    }
}

/// `tools` with the `agent` tool, starting children through `spawner`, when `limits` is
/// set; and that tool.
fn with_agent_tool(
    tools: Arc<ToolRegistry>,
    limits: Option<SubAgentLimits>,
    spawner: Arc<Spawner>,
) -> (Arc<ToolRegistry>, Option<Arc<AgentTool>>) {
    let Some(limits) = limits else {
        return (tools, None);
    };
    let agent = Arc::new(AgentTool::new(limits, spawner));
    let mut registry = Arc::unwrap_or_clone(tools);
    // Its schema is fixed (a unit test runs it through the registry): never refused.
    if let Err(e) = registry.register(Arc::clone(&agent) as Arc<dyn Tool>) {
        tracing::error!(error = %e, "the agent tool was refused");
    }
    (Arc::new(registry), Some(agent))
}

/// The runtime's hooks: in-process ones (then the older stop hooks), command ones (then
/// the older stop commands).
fn hooks_of(config: &RuntimeConfig) -> crate::hooks::Hooks {
    let mut in_process = config.hooks.clone();
    in_process.extend(config.stop_hooks.iter().map(|h| {
        Arc::new(crate::hooks::stop::StopAdapter(Arc::clone(h))) as Arc<dyn crate::hooks::Hook>
    }));
    let mut commands = config.command_hooks.clone();
    commands.extend(crate::hooks::HookCommands::stop_commands(
        &config.stop_hook_commands,
        config.stop_hook_timeout,
    ));
    crate::hooks::Hooks::new(in_process, commands, config.transcript_dir.clone())
        .supervised_by(config.hook_supervisor.clone())
}

/// Kills the registry's sessions `which` selects (no write); how many.
fn kill_sessions(registry: &Registry, which: impl Fn(SessionId) -> bool) -> usize {
    let doomed: Vec<(SessionId, ActorRef<SessionMsg>)> = registry
        .iter()
        .filter(|e| which(*e.key()))
        .map(|e| (*e.key(), e.value().clone()))
        .collect();
    for (id, actor) in &doomed {
        tracing::warn!(session.id = %id, "session dropped without writing (its shard is not ours)");
        actor.kill();
        registry.remove_if(id, |_, a| a.get_id() == actor.get_id());
    }
    doomed.len()
}

/// The runtime's task that drops every loaded session of a shard a write was fenced in
/// (`RuntimeDeps::report_fenced`); ends with the runtime (every sender dropped).
async fn drop_fenced_shards(
    mut fenced: tokio::sync::mpsc::UnboundedReceiver<u32>,
    registry: std::sync::Weak<dashmap::DashMap<SessionId, ActorRef<SessionMsg>>>,
    ownership: Arc<dyn foya_storage::Ownership>,
) {
    while let Some(shard) = fenced.recv().await {
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let dropped = kill_sessions(&registry, |id| ownership.shard_of(id, None) == shard);
        tracing::warn!(
            shard,
            dropped,
            "a write was fenced: the shard's sessions were dropped"
        );
    }
}

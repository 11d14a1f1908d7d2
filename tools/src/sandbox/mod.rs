//! Sandbox Runner: starts exec tools' processes confined by a [`SandboxPolicy`], each in
//! its own process group that is killed as a whole on cancel, timeout or drop — and when
//! the runtime's process dies (even by SIGKILL), by the helper that leads the group.
//!
//! Owns: the process side (which helper, which arguments, the private temp dir, the
//! process-group guard). The helper side (Landlock, running and supervising the program)
//! lives in `entry` and `supervise`.
//! Must not: run a process outside its own process group, or leave one running after the
//! guard is dropped or the runtime died.

mod entry;
mod outside;
mod remembered;
#[cfg_attr(not(feature = "landlock"), allow(dead_code))] // used under Landlock only
mod rules;
mod served;
mod server;
mod shield;
mod supervise;
mod tree;

pub use entry::{
    EXIT_EXEC_FAILED, EXIT_SANDBOX_UNAVAILABLE, EXIT_SANDBOX_USAGE, PolicyError, SANDBOX_EXEC_ARG,
    apply_policy, forbid_inspection, reset_inherited_state, sandbox_entry_if_requested,
};
pub use served::servers_cpu_time;
pub use shield::PLACEHOLDER_MODE;
pub use tree::{Process, processes};

use super::SandboxPolicy;
use entry::{SandboxInvocation, invocation_args};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Prefix of the private temp dirs the runner makes (`$TMPDIR/foya-sandbox-XXXXXX`); the
/// helper removes only a dir named so.
pub(crate) const TMP_PREFIX: &str = "foya-sandbox-";

/// Environment variable naming the sandbox helper binary (one that calls
/// [`sandbox_entry_if_requested`] first thing in `main`).
pub const SANDBOX_HELPER_ENV: &str = "FOYA_SANDBOX_HELPER";

/// File name of the small stand-alone sandbox helper (the `foya` package's second
/// binary, built beside `foya`), looked
/// for next to the runtime's executable by [`SandboxRunner::this_binary`].
pub const HELPER_BIN: &str = "foya-sandbox";

/// The helper to run for the executable `exe`: [`HELPER_BIN`] in the same directory when
/// it is a file there, else `exe` itself (re-executed as `exe __sandbox-exec ...`).
#[must_use]
pub(crate) fn beside(exe: &Path) -> PathBuf {
    exe.parent()
        .map(|dir| dir.join(HELPER_BIN))
        .filter(|small| small.is_file() && small.as_path() != exe)
        .unwrap_or_else(|| exe.to_path_buf())
}

/// Starts confined processes through a helper binary.
///
/// [`start`](Self::start) runs a call through the runner's persistent helper (one
/// `helper __sandbox-server`, started on first use and shared by the runner's clones,
/// which forks a fresh helper per call, see `server`), or, when that cannot start,
/// through a helper of its own; [`spawn`](Self::spawn) always starts a helper of its own.
#[derive(Debug, Clone)]
pub struct SandboxRunner {
    /// The helper binary, run as `helper __sandbox-exec ...`; `None`: no helper was set
    /// and every command fails with [`NO_HELPER`].
    helper: Option<PathBuf>,
    /// Which of the runtime's variables the commands receive.
    env: crate::env_policy::EnvPolicy,
    /// The persistent helper of this runner and its clones.
    server: std::sync::Arc<served::ServerSlot>,
}

impl PartialEq for SandboxRunner {
    /// The same helper and environment policy (whichever server each runs).
    fn eq(&self, other: &Self) -> bool {
        self.helper == other.helper && self.env == other.env
    }
}

impl Eq for SandboxRunner {}

/// Why a command cannot start when no sandbox helper was set.
pub const NO_HELPER: &str = "no sandbox helper is set, so commands cannot run: set \
     FOYA_SANDBOX_HELPER to a binary whose main calls \
     foya_actors::tools::sandbox::sandbox_entry_if_requested() first (the foya and \
     foya-sandbox binaries do), or build the tools with \
     ToolRegistry::builtin_with_sandbox(SandboxRunner::new(path))";

/// A command ready to spawn, plus the private temp dir that must live as long as the
/// process (it is deleted when this value is dropped; if this process dies first — even
/// by SIGKILL — the helper deletes it, see `supervise`).
#[derive(Debug)]
pub struct SandboxCommand {
    /// Set up with `process_group(0)`, stdin null, stdout and stderr piped,
    /// `kill_on_drop(true)`; working directory `cwd`.
    pub command: tokio::process::Command,
    /// The process's `TMPDIR` (`None` under [`SandboxPolicy::None`], where the inherited
    /// `TMPDIR` is kept).
    pub tmp_dir: Option<tempfile::TempDir>,
    /// Under `WorkspaceWrite`: removes, when dropped, the placeholders a killed helper
    /// left (see `shield::sweep`); keep it until the process group was killed.
    pub sweep: Option<Sweep>,
}

/// Removes unused shield placeholders of a working directory when dropped.
#[derive(Debug)]
pub struct Sweep {
    cwd: PathBuf,
    protect: Vec<PathBuf>,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        shield::sweep(&self.cwd, &self.protect);
    }
}

/// Whether a helper was already asked to say that the kernel gives no namespace for the
/// shield (`--say-fallback`): once per process.
static FALLBACK_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl SandboxRunner {
    /// A runner using `helper`.
    #[must_use]
    pub fn new(helper: impl Into<PathBuf>) -> Self {
        Self {
            helper: Some(helper.into()),
            env: crate::env_policy::EnvPolicy::default(),
            server: std::sync::Arc::default(),
        }
    }

    /// This runner, its commands receiving the runtime's environment under `policy`
    /// (default: [`EnvPolicy::default`](crate::env_policy::EnvPolicy), every
    /// variable but credential-shaped ones).
    #[must_use]
    pub fn with_env_policy(mut self, policy: crate::env_policy::EnvPolicy) -> Self {
        self.env = policy;
        self
    }

    /// A runner without a helper: every command fails with [`NO_HELPER`].
    #[must_use]
    pub fn unset() -> Self {
        Self {
            helper: None,
            env: crate::env_policy::EnvPolicy::default(),
            server: std::sync::Arc::default(),
        }
    }

    /// The helper from `FOYA_SANDBOX_HELPER`, else none: commands then fail with
    /// [`NO_HELPER`] (an embedder's own binary is never re-executed unasked).
    #[must_use]
    pub fn from_env() -> Self {
        let helper = std::env::var_os(SANDBOX_HELPER_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        Self {
            helper,
            env: crate::env_policy::EnvPolicy::default(),
            server: std::sync::Arc::default(),
        }
    }

    /// The helper from `FOYA_SANDBOX_HELPER`, else the small [`HELPER_BIN`] binary next
    /// to the current executable (`cargo build` puts both in `target/<profile>/`; an
    /// install copies both), else the current executable itself: for a binary whose
    /// `main` calls [`sandbox_entry_if_requested`] first (the `foya` CLI).
    ///
    /// The small helper starts several times cheaper than re-executing a large runtime
    /// binary, and every exec tool call starts one.
    #[must_use]
    pub fn this_binary() -> Self {
        let helper = Self::from_env()
            .helper
            .or_else(|| std::env::current_exe().ok().map(|exe| beside(&exe)))
            .unwrap_or_else(|| PathBuf::from("foya"));
        Self::new(helper)
    }

    /// Whether the helper can keep the protected paths read-only while the working
    /// directory stays writable (the kernel gives it a namespace; not when
    /// `FOYA_SANDBOX_NO_NAMESPACES` is set). Asked once per process (the helper's
    /// `__sandbox-probe`, a few milliseconds, blocking) and cached. Without a helper, or
    /// when the probe cannot run, `true`: nothing is known to be missing (and commands
    /// without a helper fail anyway).
    #[must_use]
    pub fn shield_available(&self) -> bool {
        static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ANSWER.get_or_init(|| {
            if std::env::var_os(shield::NO_NAMESPACES_ENV).is_some_and(|v| !v.is_empty()) {
                return false;
            }
            let Some(helper) = &self.helper else {
                return true;
            };
            // With no environment: it needs none, and the runtime's holds the user's
            // keys (a process of the same user could read a fresh process's).
            let status = std::process::Command::new(helper)
                .env_clear()
                .arg(entry::SANDBOX_PROBE_ARG)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            !matches!(
                status.map(|s| s.code()),
                Ok(Some(entry::EXIT_NO_NAMESPACES))
            )
        })
    }

    /// The helper binary, if one is set.
    #[must_use]
    pub fn helper(&self) -> Option<&Path> {
        self.helper.as_deref()
    }

    /// Prepares `program args` to run in `cwd` under `policy`.
    ///
    /// Every policy runs `helper __sandbox-exec --policy <json> --cwd <cwd> --tmp <tmp>
    /// [--tmp-private] --parent <this pid> -- program args`: the helper applies Landlock
    /// (nothing under `SandboxPolicy::None`, which also keeps the inherited `TMPDIR`), runs
    /// the program as its child and kills the whole process group when this process dies
    /// (see `supervise`); then it also removes the private temp dir (`--tmp-private`,
    /// every policy but `None`). Spawn the returned command and wrap the child's pid in a
    /// [`ProcessGroupGuard`] at once.
    ///
    /// The helper's parent-death signal fires when the *thread* that spawned it exits:
    /// spawn from a thread that lives as long as the call (a tokio worker or the caller's
    /// thread, not a `spawn_blocking` thread that may retire while the command runs).
    ///
    /// `protect`: paths inside `cwd` that stay read-only under
    /// [`SandboxPolicy::WorkspaceWrite`] (see `rules`); ignored by the other policies.
    ///
    /// # Errors
    /// No helper is set ([`NO_HELPER`]); the private temp dir could not be created.
    pub fn spawn(
        &self,
        policy: SandboxPolicy,
        cwd: &Path,
        protect: &[PathBuf],
        program: impl Into<OsString>,
        args: &[OsString],
    ) -> std::io::Result<SandboxCommand> {
        // A helper of its own takes them as arguments.
        let remembered = match policy {
            SandboxPolicy::WorkspaceWrite { .. } => remembered::for_arguments(cwd),
            _ => Vec::new(),
        };
        let (helper, invocation, tmp_dir, sweep) =
            self.prepare(policy, cwd, protect, remembered, program.into(), args)?;
        let mut command = self.helper_command(helper, &invocation);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(SandboxCommand {
            command,
            tmp_dir,
            sweep,
        })
    }

    /// Starts `program args` in `cwd` under `policy` (as [`spawn`](Self::spawn) prepares
    /// it), its stdin `/dev/null`, its stdout and stderr `output` (in that order): through
    /// the runner's persistent helper, which is started on the first call (and again
    /// after it died), else — when it cannot start — through a helper of its own. Either
    /// way the call's helper leads the command's process group (wrap
    /// [`SandboxProcess::id`] in a [`ProcessGroupGuard`] at once) and ends like the
    /// program.
    ///
    /// Dropping the returned call (or this future) before the command ended kills it.
    ///
    /// # Errors
    /// No helper is set ([`NO_HELPER`]); the private temp dir could not be created; the
    /// helper could not be started; the persistent helper refused the call or died
    /// before it started it (the command did not run).
    pub async fn start(
        &self,
        policy: SandboxPolicy,
        cwd: &Path,
        protect: &[PathBuf],
        program: impl Into<OsString>,
        args: &[OsString],
        output: (OwnedFd, OwnedFd),
    ) -> std::io::Result<SandboxCall> {
        let (stdout, stderr) = output;
        if writes_workspace(policy) {
            remembered::list_once(cwd).await?;
        }
        let remembered = remembered_for(policy, cwd);
        let (helper, invocation, tmp_dir, sweep) =
            self.prepare(policy, cwd, protect, remembered, program.into(), args)?;
        let env = self.env.environment(std::env::vars_os());
        let served = self
            .server
            .call(
                helper,
                &self.env,
                &invocation_args(&invocation),
                &env,
                &stdout,
                &stderr,
            )
            .await;
        let process = match served {
            Some(call) => SandboxProcess(Helper::Served(call?)),
            None => {
                let mut command = self.helper_command(helper, &invocation);
                command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
                let child = command.spawn();
                // Our copies of stdout and stderr go with it (end of file once the
                // command's group is gone).
                drop(command);
                SandboxProcess(Helper::Spawned(child?))
            }
        };
        Ok(SandboxCall {
            process,
            tmp_dir,
            sweep,
        })
    }

    /// The helper, the invocation, the private temp dir and the sweep of a call;
    /// `remembered`: the nested protected paths `cwd` held when this process first let a
    /// command write in it (see `remembered`), protected as `protect` is.
    fn prepare(
        &self,
        policy: SandboxPolicy,
        cwd: &Path,
        protect: &[PathBuf],
        remembered: Vec<PathBuf>,
        program: OsString,
        args: &[OsString],
    ) -> std::io::Result<(
        &Path,
        SandboxInvocation,
        Option<tempfile::TempDir>,
        Option<Sweep>,
    )> {
        let helper = self
            .helper
            .as_ref()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, NO_HELPER))?;
        let (tmp, tmp_dir) = match policy {
            SandboxPolicy::None => (std::env::temp_dir(), None),
            SandboxPolicy::ReadOnly
            | SandboxPolicy::WorkspaceWrite { .. }
            | SandboxPolicy::WorkspaceAndProtected { .. } => {
                let tmp_dir = tempfile::Builder::new().prefix(TMP_PREFIX).tempdir()?;
                (tmp_dir.path().to_path_buf(), Some(tmp_dir))
            }
        };
        let shielded = matches!(policy, SandboxPolicy::WorkspaceWrite { .. });
        let mut protect = protect.to_vec();
        protect.extend(remembered);
        let say_fallback =
            shielded && !FALLBACK_SAID.swap(true, std::sync::atomic::Ordering::Relaxed);
        let invocation = SandboxInvocation {
            policy,
            cwd: cwd.to_path_buf(),
            tmp,
            tmp_private: tmp_dir.is_some(),
            say_fallback,
            protect: if shielded {
                protect.clone()
            } else {
                Vec::new()
            },
            program,
            args: args.to_vec(),
            parent: Some(std::process::id()),
            env: None,
        };
        let sweep = shielded.then(|| Sweep {
            cwd: cwd.to_path_buf(),
            protect,
        });
        Ok((helper, invocation, tmp_dir, sweep))
    }

    /// A helper of its own for `invocation`, in its own process group, in `cwd`, with the
    /// runner's environment, killed when dropped; stdio still to set.
    fn helper_command(
        &self,
        helper: &Path,
        invocation: &SandboxInvocation,
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(helper);
        command.args(invocation_args(invocation));
        // The runtime's credentials stay out (`tools::env_policy`).
        self.env.apply(&mut command);
        command
            .current_dir(&invocation.cwd)
            .process_group(0)
            .kill_on_drop(true);
        command
    }
}

/// Whether commands under `policy` may write in their working directory (and so plant
/// what hides a nested protected path from a later call's listing): every policy but
/// `read-only` (`none` too: a session may run a sandboxed command after it).
fn writes_workspace(policy: SandboxPolicy) -> bool {
    !matches!(policy, SandboxPolicy::ReadOnly)
}

/// The remembered protected paths a call under `policy` in `cwd` protects (see
/// `remembered`): none but under `workspace-write`, the policy that shields them, where
/// `cwd` is listed first (blocking) if no caller did ([`remember_protected_paths`]).
fn remembered_for(policy: SandboxPolicy, cwd: &Path) -> Vec<PathBuf> {
    match policy {
        SandboxPolicy::WorkspaceWrite { .. } => remembered::for_call(cwd),
        SandboxPolicy::ReadOnly
        | SandboxPolicy::None
        | SandboxPolicy::WorkspaceAndProtected { .. } => Vec::new(),
    }
}

/// Lists `cwd` for nested protected paths unless this process did (off the async
/// workers), and remembers them for every later sandboxed command there: call it before
/// anything the model drives first writes in `cwd` (a tool server started there; the
/// file tools and [`SandboxRunner::start`] call it themselves). What a write plants
/// afterwards (a `CACHEDIR.TAG`, 20 000 folders) then cannot hide those paths from a
/// command's shield.
///
/// # Errors
/// The listing's thread failed: nothing is remembered, and nothing should be started.
pub async fn remember_protected_paths(cwd: &Path) -> std::io::Result<()> {
    remembered::list_once(cwd).await
}

/// [`remember_protected_paths`], blocking (for work on the blocking pool).
pub(crate) fn remember_protected_paths_now(cwd: &Path) {
    remembered::list(cwd);
}

/// Whether this process listed `cwd` for [`remember_protected_paths`] (for tests).
#[cfg(test)]
pub(crate) fn protected_paths_remembered(cwd: &Path) -> bool {
    remembered::is_listed(&std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf()))
}

/// A command started by [`SandboxRunner::start`], plus what must live as long as it (see
/// [`SandboxCommand`]): keep `tmp_dir` and `sweep` until the process group was killed.
#[derive(Debug)]
pub struct SandboxCall {
    /// The call's helper.
    pub process: SandboxProcess,
    /// The command's private `TMPDIR` (`None` under [`SandboxPolicy::None`]).
    pub tmp_dir: Option<tempfile::TempDir>,
    /// Under `WorkspaceWrite`: removes placeholders a killed helper left.
    pub sweep: Option<Sweep>,
}

/// The helper of one call: a child of the persistent helper, or a helper of its own.
#[derive(Debug)]
pub struct SandboxProcess(Helper);

#[derive(Debug)]
enum Helper {
    Spawned(tokio::process::Child),
    Served(served::ServedCall),
}

impl SandboxProcess {
    /// The helper's pid, which is the command's process group id (`None` when a helper
    /// of its own was already reaped).
    #[must_use]
    pub fn id(&self) -> Option<u32> {
        match &self.0 {
            Helper::Spawned(child) => child.id(),
            Helper::Served(call) => call.id(),
        }
    }

    /// Whether the call runs in a child of the persistent helper.
    #[must_use]
    pub fn is_served(&self) -> bool {
        matches!(self.0, Helper::Served(_))
    }

    /// Waits until the helper ended (the way its program did).
    ///
    /// # Errors
    /// The helper could not be waited for; the persistent helper died during the call
    /// (the command died with it).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match &mut self.0 {
            Helper::Spawned(child) => child.wait().await,
            Helper::Served(call) => call.wait().await,
        }
    }
}

/// Kills a whole process group with `SIGKILL` when dropped (or on [`kill`](Self::kill)),
/// and, while its leader has not been reaped, the leader's whole process tree first.
///
/// The group id is the pid of a child spawned with `process_group(0)` (the sandbox
/// helper). Killing the group takes down every process the child started that stayed in
/// its group; killing the leader's tree (`tree::kill_tree`) also takes those that left
/// it (`setsid`), which stay below the helper because it is a child subreaper. The tree
/// is only walked while the leader is unreaped (alive or a zombie), so its pid cannot
/// have been reused: call [`leader_reaped`](Self::leader_reaped) once the child was
/// waited for.
#[derive(Debug)]
pub struct ProcessGroupGuard {
    pgid: Option<Pid>,
    leader_reaped: bool,
}

impl ProcessGroupGuard {
    /// Guards the group led by `pid` (`None`: the child already exited before its pid was
    /// read; nothing to kill).
    #[must_use]
    pub fn new(pid: Option<u32>) -> Self {
        let pgid = pid
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p > 1)
            .map(Pid::from_raw);
        Self {
            pgid,
            leader_reaped: false,
        }
    }

    /// Records that the leader was waited for: from now on only the group is killed (the
    /// leader's pid may be reused, and the helper already killed its own tree when the
    /// program ended).
    pub fn leader_reaped(&mut self) {
        self.leader_reaped = true;
    }

    /// The guarded process group id.
    #[must_use]
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw)
    }

    /// Sends `SIGKILL` to the leader's process tree (unless it was reaped) and to the
    /// group now. Idempotent; a group that is already gone is fine. Reads `/proc` when the
    /// tree is walked (a few milliseconds; only on cancel, timeout or drop).
    pub fn kill(&self) {
        if let Some(pgid) = self.pgid {
            if !self.leader_reaped {
                tree::kill_tree(pgid.as_raw());
            }
            // ESRCH (group already gone) is the expected outcome after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{HELPER_BIN, beside};

    #[test]
    fn the_small_helper_next_to_the_executable_is_preferred() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("foya");
        std::fs::write(&exe, "").unwrap();
        // Alone: the executable re-executes itself.
        assert_eq!(beside(&exe), exe);
        // A directory of that name is not a helper.
        std::fs::create_dir(dir.path().join(HELPER_BIN)).unwrap();
        assert_eq!(beside(&exe), exe);
        std::fs::remove_dir(dir.path().join(HELPER_BIN)).unwrap();
        std::fs::write(dir.path().join(HELPER_BIN), "").unwrap();
        assert_eq!(beside(&exe), dir.path().join(HELPER_BIN));
        // The helper itself does not look for another.
        let helper = dir.path().join(HELPER_BIN);
        assert_eq!(beside(&helper), helper);
    }
}

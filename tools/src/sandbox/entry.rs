//! The sandbox entry point: the helper side of the Sandbox Runner.
//!
//! Owns: parsing `__sandbox-exec --policy <json> --cwd <dir> --tmp <dir> [--tmp-private]
//! [--parent <pid>] -- <program> <args>`, applying the policy with Linux Landlock to the
//! calling thread (which then starts the program), and running the program as its child
//! under `supervise` (the group dies with the runtime). Must not: ever run the program without the requested confinement — when
//! the kernel lacks a needed Landlock feature the helper exits with
//! [`EXIT_SANDBOX_UNAVAILABLE`] and a `foya-sandbox:` message on stderr.

use super::SandboxPolicy;
#[cfg(feature = "landlock")]
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `argv[1]` that selects the sandbox entry point.
pub const SANDBOX_EXEC_ARG: &str = "__sandbox-exec";

/// Exit code when the kernel cannot enforce the requested policy (Landlock missing, too
/// old an ABI, or the ruleset could not be applied). The program did not run.
pub const EXIT_SANDBOX_UNAVAILABLE: i32 = 121;

/// Exit code when the helper's own arguments are malformed. The program did not run.
pub const EXIT_SANDBOX_USAGE: i32 = 122;

/// `argv[1]` that asks the helper whether the kernel gives it the namespaces of the
/// shield: exit 0 when it does, [`EXIT_NO_NAMESPACES`] when not.
pub(crate) const SANDBOX_PROBE_ARG: &str = "__sandbox-probe";

/// Exit code of [`SANDBOX_PROBE_ARG`] when the kernel gives no namespace.
pub(crate) const EXIT_NO_NAMESPACES: i32 = 123;

/// Exit code when `exec` of the program failed (not found, not executable).
pub const EXIT_EXEC_FAILED: i32 = 127;

#[cfg(feature = "landlock")]
/// Landlock ABI whose file-system rights are enforced (V3: adds `truncate`, so a sandboxed
/// process cannot truncate files it may not write).
const FS_ABI: ABI = ABI::V3;

#[cfg(feature = "landlock")]
/// Landlock ABI whose TCP bind/connect rights are enforced when network is denied.
const NET_ABI: ABI = ABI::V4;

#[cfg(feature = "landlock")]
/// Character devices a confined process may always open for writing: writing to them
/// changes nothing on disk.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The parsed helper command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SandboxInvocation {
    /// Policy to apply.
    pub policy: SandboxPolicy,
    /// Working directory (writable under `WorkspaceWrite`); the program starts there.
    pub cwd: PathBuf,
    /// Private temp dir (writable under `WorkspaceWrite`); exported as `TMPDIR`.
    pub tmp: PathBuf,
    /// `tmp` was made for this call alone (`--tmp-private`): the helper removes it when
    /// the runtime dies, since the runtime that would have removed it is gone. Never set
    /// for a shared directory (the inherited `TMPDIR` under `SandboxPolicy::None`).
    pub tmp_private: bool,
    /// `--say-fallback`: when the kernel gives no namespace for the shield, say so on
    /// stderr (the runtime asks once per process, so the person and the model read it
    /// once).
    pub say_fallback: bool,
    /// Paths inside `cwd` that stay read-only (`--protect`, repeated) besides the
    /// protected names the helper finds itself: hook scripts (see `shield`, `rules`).
    pub protect: Vec<PathBuf>,
    /// Program to exec.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Pid of the runtime that started the helper (`--parent`, optional): when it is
    /// no longer the helper's parent at start, the program is not run. (Under the
    /// persistent helper, `server`, the pid of the server that forked the call.)
    pub parent: Option<u32>,
    /// The program's whole environment (`TMPDIR` is still set over it); `None`: the
    /// helper's own, as the runtime passed it (a helper started per call). The
    /// persistent helper sets it per call.
    pub env: Option<Vec<(OsString, OsString)>>,
}

impl SandboxInvocation {
    /// Whether `name` is set and not empty in the program's environment.
    pub(crate) fn var_set(&self, name: &str) -> bool {
        match &self.env {
            Some(env) => env.iter().any(|(k, v)| k == name && !v.is_empty()),
            None => std::env::var_os(name).is_some_and(|v| !v.is_empty()),
        }
    }
}

/// Runs the sandbox entry point when `argv[1]` is [`SANDBOX_EXEC_ARG`]; otherwise returns
/// at once. Call it first thing in `main` of every binary that may serve as the helper.
///
/// When requested it never returns: it runs the confined program as its child and ends
/// the way the program ended (see `supervise`), or exits with [`EXIT_SANDBOX_USAGE`], [`EXIT_SANDBOX_UNAVAILABLE`] or
/// [`EXIT_EXEC_FAILED`] after writing a `foya-sandbox: ...` line to stderr.
pub fn sandbox_entry_if_requested() {
    let mut argv = std::env::args_os();
    let _argv0 = argv.next();
    let first = argv.next();
    if first.as_deref() == Some(std::ffi::OsStr::new(SANDBOX_PROBE_ARG)) {
        match super::shield::probe() {
            Ok(()) => std::process::exit(0),
            Err(why) => fail(EXIT_NO_NAMESPACES, &why),
        }
    }
    if first.as_deref() == Some(std::ffi::OsStr::new(super::server::SERVER_ARG)) {
        reset_inherited_state();
        super::server::serve(argv)
    }
    if first.as_deref() != Some(std::ffi::OsStr::new(SANDBOX_EXEC_ARG)) {
        return;
    }
    reset_inherited_state();
    let invocation = match parse_invocation(argv) {
        Ok(invocation) => invocation,
        Err(message) => fail(EXIT_SANDBOX_USAGE, &message),
    };
    super::supervise::run(&invocation, Prebuilt::default())
}

/// Undoes what whatever started this process left behind for its children: marks every
/// descriptor above stderr close-on-exec, so that none it inherited (a shell's
/// redirection, a CI runner's job-server pipes, an embedder's open files) reaches a
/// program it starts, and unblocks every signal, so that an inherited mask (a launcher
/// that blocked SIGTERM or SIGHUP) neither keeps the helper alive when its runtime dies
/// nor reaches a command. A command, a hook, an MCP server or the sandbox helper get their
/// standard streams and what the runtime hands them explicitly, nothing else. The helper
/// calls it at its start (as the server, or per call); the `foya` binary calls it first
/// thing. Descriptors opened later by Rust are close-on-exec already.
pub fn reset_inherited_state() {
    close_fds::CloseFdsBuilder::new().cloexecfrom(3);
    // The calling thread's mask, before any other thread starts (they inherit it).
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
}

/// Makes this process non-dumpable: processes of the same user can no longer read its
/// `/proc/<pid>/environ`, `mem` or descriptors without `CAP_SYS_PTRACE`, and it writes no
/// core dump. The runtime's environment holds the user's API keys, which the environment
/// policy keeps out of every command, hook and MCP server; without this any of them (a
/// hook and an MCP server run unsandboxed) could read them back from
/// `/proc/<runtime>/environ`. (Codex CLI's process hardening does the same.) The
/// `foya` binary calls it first thing; an embedder whose process holds keys should too.
pub fn forbid_inspection() {
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// Writes `foya-sandbox: <message>` to stderr and exits with `code`.
pub(super) fn fail(code: i32, message: &str) -> ! {
    eprintln!("foya-sandbox: {message}");
    exit_now(code)
}

/// Ends the process with `code` at once (`_exit`): the helper buffers nothing (stderr is
/// unbuffered, stdout unused) and registers no exit handler, so the C library's and the
/// loader's exit work (`atexit` handlers, each library's destructors, the symbol lookups
/// they need: pages a forked call's child would fault in only to exit) is skipped.
pub(super) fn exit_now(code: i32) -> ! {
    signal_hook::low_level::exit(code)
}

/// Builds the helper's arguments (everything after `argv[0]`) for an invocation.
#[must_use]
pub(crate) fn invocation_args(invocation: &SandboxInvocation) -> Vec<OsString> {
    let policy = serde_json::to_string(&invocation.policy).unwrap_or_default();
    let mut out: Vec<OsString> = vec![
        SANDBOX_EXEC_ARG.into(),
        "--policy".into(),
        policy.into(),
        "--cwd".into(),
        invocation.cwd.clone().into(),
        "--tmp".into(),
        invocation.tmp.clone().into(),
    ];
    if invocation.tmp_private {
        out.push("--tmp-private".into());
    }
    if invocation.say_fallback {
        out.push("--say-fallback".into());
    }
    for path in &invocation.protect {
        out.extend(["--protect".into(), path.clone().into()]);
    }
    if let Some(parent) = invocation.parent {
        out.extend(["--parent".into(), parent.to_string().into()]);
    }
    out.extend(["--".into(), invocation.program.clone()]);
    out.extend(invocation.args.iter().cloned());
    out
}

/// Why a sandbox policy could not be applied ([`apply_policy`]): Landlock missing or
/// lacking a feature the policy needs, a path that cannot be opened for a rule, or a
/// build without the `landlock` feature. The command is not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// Parses the arguments after [`SANDBOX_EXEC_ARG`].
///
/// # Errors
/// A message naming the missing or malformed argument.
pub(crate) fn parse_invocation(
    args: impl IntoIterator<Item = OsString>,
) -> Result<SandboxInvocation, String> {
    let mut args = args.into_iter();
    let (mut policy, mut cwd, mut tmp, mut parent) = (None, None, None, None);
    let (mut tmp_private, mut say_fallback) = (false, false);
    let mut protect = Vec::new();
    loop {
        let Some(flag) = args.next() else {
            return Err("missing `-- <program>`".to_owned());
        };
        let flag = flag.to_string_lossy().into_owned();
        if flag == "--" {
            break;
        }
        if flag == "--tmp-private" {
            tmp_private = true;
            continue;
        }
        if flag == "--say-fallback" {
            say_fallback = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("missing value for {flag}"))?;
        match flag.as_str() {
            "--policy" => {
                let text = value.to_string_lossy();
                policy = Some(
                    serde_json::from_str::<SandboxPolicy>(&text)
                        .map_err(|e| format!("invalid --policy {text:?}: {e}"))?,
                );
            }
            "--cwd" => cwd = Some(PathBuf::from(value)),
            "--tmp" => tmp = Some(PathBuf::from(value)),
            "--protect" => protect.push(PathBuf::from(value)),
            "--parent" => {
                let text = value.to_string_lossy();
                parent = Some(
                    text.parse::<u32>()
                        .map_err(|e| format!("invalid --parent {text:?}: {e}"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let program = args.next().ok_or("missing program after `--`")?;
    Ok(SandboxInvocation {
        policy: policy.ok_or("missing --policy")?,
        cwd: cwd.ok_or("missing --cwd")?,
        tmp: tmp.ok_or("missing --tmp")?,
        tmp_private,
        say_fallback,
        protect,
        program,
        args: args.collect(),
        parent,
        env: None,
    })
}

/// Confines the calling thread (and every process it later starts) per `policy`: Landlock
/// and `no_new_privs` apply to the thread that sets them and are inherited by its
/// children, so the helper confines a thread of its own and starts the program from it.
///
/// Read and execute are allowed everywhere. `WorkspaceWrite` allows writes beneath `cwd`
/// and `tmp` and to the writable devices (`/dev/null`, …) — all of `cwd` when `shielded`
/// (its protected paths are read-only mounts, see `shield`), else `cwd` minus `protect`
/// and the protected names (see `rules`); `ReadOnly` only to the devices. TCP bind and
/// connect are denied (no allowed port) unless `WorkspaceWrite { network: true }`.
/// `None` applies nothing.
///
/// # Errors
/// A message when Landlock is unavailable or lacks a feature the policy needs
/// (`CompatLevel::HardRequirement`): file-system rules need ABI ≥ 3, network rules ABI ≥ 4.
#[cfg(feature = "landlock")]
pub fn apply_policy(
    policy: SandboxPolicy,
    cwd: &Path,
    tmp: &Path,
    protect: &[PathBuf],
    shielded: bool,
) -> Result<(), PolicyError> {
    restrict(
        policy,
        cwd,
        tmp,
        protect,
        shielded,
        &mut Prebuilt::default(),
    )
    .map_err(PolicyError)
}

/// Landlock rulesets built ahead of the calls that enforce them: the persistent helper
/// builds `ReadOnly`'s once (its rules name no path of a call: read everywhere, write
/// only to the devices), and each call's child only enforces it on the thread that
/// starts the program ([`restrict`]); every other policy's rules name the call's working
/// and temp directories (and, without the shield, what a listing of the workspace
/// found), so they are built per call. A domain enforced from a ruleset is a copy: what
/// happens to the ruleset afterwards changes no running command.
#[derive(Debug, Default)]
pub(crate) struct Prebuilt {
    #[cfg(feature = "landlock")]
    read_only: Option<landlock::RulesetCreated>,
}

impl Prebuilt {
    /// `ReadOnly`'s ruleset, built now; none when the kernel cannot build it (each call
    /// then builds its own and fails with the reason).
    pub(crate) fn read_only() -> Self {
        #[cfg(feature = "landlock")]
        {
            let rules = build(
                SandboxPolicy::ReadOnly,
                Path::new("/"),
                Path::new("/"),
                &[],
                false,
            );
            Self {
                read_only: rules.ok().flatten(),
            }
        }
        #[cfg(not(feature = "landlock"))]
        Self {}
    }

    /// Whether `ReadOnly`'s ruleset is built (for tests).
    #[cfg(test)]
    pub(crate) fn has_read_only(&self) -> bool {
        #[cfg(feature = "landlock")]
        return self.read_only.is_some();
        #[cfg(not(feature = "landlock"))]
        false
    }
}

/// Confines the calling thread per `policy` ([`apply_policy`]), with the ruleset of
/// `prebuilt` when it holds the policy's (taken: it is enforced once).
///
/// # Errors
/// [`apply_policy`]'s.
pub(crate) fn apply_prebuilt(
    policy: SandboxPolicy,
    cwd: &Path,
    tmp: &Path,
    protect: &[PathBuf],
    shielded: bool,
    prebuilt: &mut Prebuilt,
) -> Result<(), PolicyError> {
    #[cfg(feature = "landlock")]
    return restrict(policy, cwd, tmp, protect, shielded, prebuilt).map_err(PolicyError);
    #[cfg(not(feature = "landlock"))]
    {
        let _ = prebuilt;
        apply_policy(policy, cwd, tmp, protect, shielded)
    }
}

/// [`apply_policy`]'s work, its refusal as text.
#[cfg(feature = "landlock")]
fn restrict(
    policy: SandboxPolicy,
    cwd: &Path,
    tmp: &Path,
    protect: &[PathBuf],
    shielded: bool,
    prebuilt: &mut Prebuilt,
) -> Result<(), String> {
    let ready = match policy {
        SandboxPolicy::ReadOnly => prebuilt.read_only.take(),
        _ => None,
    };
    let created = match ready {
        Some(created) => created,
        None => match build(policy, cwd, tmp, protect, shielded)? {
            Some(created) => created,
            None => return Ok(()),
        },
    };
    let status = created.restrict_self().map_err(landlock_err)?;
    // Partly enforced is fine only when the kernel lacks signal scoping (all the rest is
    // a hard requirement, which fails before).
    let without_scoping = ABI::from(status.landlock) < ABI::V6;
    let enforced = status.ruleset == RulesetStatus::FullyEnforced
        || (status.ruleset == RulesetStatus::PartiallyEnforced && shielded && without_scoping);
    if !enforced {
        return Err(format!(
            "Landlock did not fully enforce the sandbox (status {:?}); the command was not run",
            status.ruleset
        ));
    }
    Ok(())
}

#[cfg(feature = "landlock")]
fn landlock_err(e: landlock::RulesetError) -> String {
    format!(
        "cannot apply the Landlock sandbox ({e}); it needs Landlock ABI >= 3 \
         (>= 4 to deny network). The command was not run."
    )
}

/// The ruleset of `policy` for a call, not yet enforced; `None` under
/// [`SandboxPolicy::None`].
#[cfg(feature = "landlock")]
fn build(
    policy: SandboxPolicy,
    cwd: &Path,
    tmp: &Path,
    protect: &[PathBuf],
    shielded: bool,
) -> Result<Option<landlock::RulesetCreated>, String> {
    let (writable, network): (Vec<super::rules::WriteRule>, bool) = match policy {
        SandboxPolicy::None => return Ok(None),
        SandboxPolicy::ReadOnly => (Vec::new(), false),
        // The protected paths are read-only mounts (`shield`): the whole directory.
        SandboxPolicy::WorkspaceWrite { network } if shielded => (
            vec![
                super::rules::WriteRule::all_beneath(cwd),
                super::rules::WriteRule::all_beneath(tmp),
            ],
            network,
        ),
        // No namespaces: Landlock alone keeps them read-only (and the directories on the
        // way to them closed to new entries, see `rules`).
        SandboxPolicy::WorkspaceWrite { network } => {
            let mut protect = protect.to_vec();
            protect.extend(
                crate::protected::PROTECTED_DIRS
                    .iter()
                    .chain(crate::protected::INSTRUCTION_FILES)
                    .map(|name| cwd.join(name)),
            );
            protect.extend(super::shield::found_below(cwd));
            let mut rules = super::rules::write_rules(cwd, &protect);
            rules.push(super::rules::WriteRule::all_beneath(tmp));
            (rules, network)
        }
        SandboxPolicy::WorkspaceAndProtected { network } => (
            vec![
                super::rules::WriteRule::all_beneath(cwd),
                super::rules::WriteRule::all_beneath(tmp),
            ],
            network,
        ),
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(FS_ABI))
        .map_err(landlock_err)?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(NET_ABI))
            .map_err(landlock_err)?;
    }
    // No signal leaves the sandbox: a command could otherwise stop the persistent server
    // that every call of its runtime shares (SIGSTOP: every later call hangs), or kill its
    // helper (`kill -9 $PPID`) and outlive it with a daemon — and, where the shield's
    // placeholders live as long as the helper, create a protected name once the
    // placeholder is removed. Its own processes are in its domain and signal each other
    // as usual. Nor does a connection to an abstract Unix socket made outside it (an X
    // server's, a session bus's, any local service listening on one, which may act for
    // the command outside the sandbox); pathname sockets are files, ruled as such. Where
    // the kernel has no scoping (before ABI 6, Linux 6.12) these alone are left out.
    ruleset = ruleset
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(landlock_err)?
        .set_compatibility(CompatLevel::HardRequirement);
    let mut created = ruleset.create().map_err(landlock_err)?;
    let open = |path: &Path| {
        PathFd::new(path)
            .map_err(|e| format!("cannot open {} for the sandbox: {e}", path.display()))
    };
    created = created
        .add_rule(PathBeneath::new(
            open(Path::new("/"))?,
            AccessFs::from_read(FS_ABI),
        ))
        .map_err(landlock_err)?;
    for rule in &writable {
        let access = if rule.file_only {
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate
        } else {
            AccessFs::from_all(FS_ABI)
        };
        // A file or directory removed since the rules were listed needs no rule.
        let fd = match PathFd::new(&rule.path) {
            Ok(fd) => fd,
            Err(_) if rule.file_only || rule.path != cwd => continue,
            Err(_) => open(&rule.path)?,
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(landlock_err)?;
    }
    let device_access = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    for device in WRITABLE_DEVICES {
        // A missing device is fine (containers without /dev/tty): nothing to allow.
        if let Ok(fd) = PathFd::new(device) {
            created = created
                .add_rule(PathBeneath::new(fd, device_access))
                .map_err(landlock_err)?;
        }
    }
    Ok(Some(created))
}

/// Built without the `landlock` feature, nothing can confine the program: every policy
/// but `None` is refused, so a sandboxed command never runs unconfined.
///
/// # Errors
/// For every policy but [`SandboxPolicy::None`].
#[cfg(not(feature = "landlock"))]
pub fn apply_policy(
    policy: SandboxPolicy,
    _cwd: &Path,
    _tmp: &Path,
    _protect: &[PathBuf],
    _shielded: bool,
) -> Result<(), PolicyError> {
    match policy {
        SandboxPolicy::None => Ok(()),
        _ => Err(PolicyError(
            "this build of foya-actors has no Landlock sandbox (built without the \
                  `landlock` feature); the command was not run"
                .to_owned(),
        )),
    }
}

/// Whether any of this process's user ids (real, effective, saved, file system) is root's,
/// and whether any of its group ids (the same four, and the supplementary groups) is:
/// what a program started now may become (a shell resets its effective ids to the real
/// ones). Read once per process (they do not change in the helper) from
/// `/proc/self/status`; without it, from the real and effective ids alone.
pub(crate) fn root_ids() -> (bool, bool) {
    static IDS: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *IDS.get_or_init(|| {
        use rustix::process::{getegid, geteuid, getgid, getgroups, getuid};
        let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
            let user = getuid().is_root() || geteuid().is_root();
            let group = getgid().is_root()
                || getegid().is_root()
                || getgroups().is_ok_and(|groups| groups.iter().any(|g| g.is_root()));
            return (user, group);
        };
        let has_root = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .is_some_and(|ids| ids.split_whitespace().any(|id| id == "0"))
        };
        (has_root("Uid:"), has_root("Gid:") || has_root("Groups:"))
    })
}

/// Keeps the calling thread (and what it starts) from doing what no Landlock rule
/// covers, with one seccomp program (built once per process, installed per call; it
/// needs `no_new_privs`, which Landlock sets):
///
/// - **`confined` (every policy but `None`): no set-user-ID file left behind** (nor, with
///   root among the helper's ids, a set-group-ID one). Landlock rules paths, not modes:
///   a command that may write the workspace could `chmod 4755` (or create with that
///   mode, through `open`, `openat`, `creat` or `mknod`) a program there, which another
///   user of the machine could then run as the command's user (as root, as root).
///   Those calls fail with `EPERM` when they ask for `S_ISUID` (and `S_ISGID` when root
///   is among the helper's user ids, real and saved ones too, or its group ids and
///   groups: [`root_ids`]); every other mode works (`chmod +x`, `chmod 600`,
///   `install -m 755`). `S_ISGID` stays allowed for other groups: `chmod` of a
///   directory that has it (a group-shared project) passes it back, so refusing it
///   broke plain `chmod 755` and `git init --shared` there. `openat2` (whose mode the
///   filter cannot read) and `io_uring_setup` (whose ring opens files with a mode)
///   answer `ENOSYS`, so callers fall back to `openat`.
/// - **`shielded`: no other process's resource limits** (`prlimit64` with a pid other
///   than 0, which a same-user process may do without ptrace): a shielded command could
///   otherwise lower its helper's open-file limit, blinding the helper's kill of the
///   command's process tree, and outlive it to create a protected name once the
///   placeholder is removed (or lower its CPU limit to kill it). `ulimit` and
///   `setrlimit` (pid 0) keep working.
///
/// - **`confined` too: no typing into the terminal.** `ioctl` with `TIOCSTI` (which
///   pushes characters into a terminal's input: the command shares the runtime's
///   controlling terminal, so it could type a command into the TUI or, once `foya`
///   exits, into the user's shell) or `TIOCLINUX` fails with `EPERM`.
/// - **`offline` (network off): no socket but a Unix or netlink one.** Landlock rules
///   TCP `connect` and `bind` alone: under "network off" a command still sent UDP (a
///   DNS query to any resolver carries any text), raw IP and link-layer packets as root
///   (`CAP_NET_RAW` is kept for `ping`), connected to any TCP server through an MPTCP
///   socket (`IPPROTO_MPTCP`, which falls back to TCP; found on Linux 6.18), and served
///   on a TCP port of every interface (`listen` on a socket never bound binds it itself,
///   past Landlock). `socket` fails with `EPERM` for every family but `AF_UNIX` and
///   `AF_NETLINK`, as Codex CLI's network filter does.
///
/// # Errors
/// A message when the program cannot be built or installed.
#[cfg(feature = "landlock")]
pub(crate) fn confine_syscalls(
    confined: bool,
    shielded: bool,
    offline: bool,
) -> Result<(), String> {
    let Some(program) = filters::program(confined, shielded, offline) else {
        return Ok(());
    };
    let program = program.as_ref().map_err(Clone::clone)?;
    seccompiler::apply_filter(program)
        .map_err(|e| format!("cannot install the seccomp filter: {e}"))
}

/// Builds the programs [`confine_syscalls`] installs, so that a process forked after it
/// (each call of the persistent helper) installs one without building it.
#[cfg(feature = "landlock")]
pub(crate) fn prepare_syscall_filters() {
    let _ = root_ids();
    // The ones a call installs: every confining policy is `confined`.
    for (shielded, offline) in [(false, false), (false, true), (true, false), (true, true)] {
        let _ = filters::program(true, shielded, offline);
    }
}

/// Without Landlock no filter is installed.
#[cfg(not(feature = "landlock"))]
pub(crate) fn prepare_syscall_filters() {}

/// The programs [`confine_syscalls`] installs.
#[cfg(feature = "landlock")]
mod filters {
    use nix::libc;
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch, sock_filter,
    };
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    type Built = OnceLock<Result<BpfProgram, String>>;

    /// The program for `confined`, `shielded` and `offline` (none for none of them),
    /// built on first use.
    pub(super) fn program(
        confined: bool,
        shielded: bool,
        offline: bool,
    ) -> Option<&'static Result<BpfProgram, String>> {
        static BUILT: [Built; 8] = [const { OnceLock::new() }; 8];
        let index = usize::from(confined) | usize::from(shielded) << 1 | usize::from(offline) << 2;
        if index == 0 {
            return None;
        }
        Some(BUILT[index].get_or_init(|| build(confined, shielded, offline)))
    }

    fn failed(e: &dyn std::fmt::Display) -> String {
        format!("cannot build the seccomp filter: {e}")
    }

    /// Argument `index` (a 32-bit `mode_t` or `int` flags) has every bit of `bits`.
    fn has(index: u8, bits: u32) -> Result<SeccompCondition, String> {
        SeccompCondition::new(
            index,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(u64::from(bits)),
            u64::from(bits),
        )
        .map_err(|e| failed(&e))
    }

    fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
        SeccompRule::new(conditions).map_err(|e| failed(&e))
    }

    /// `rules` matched answer `action`; the rest is allowed. A call of another
    /// architecture (`int 0x80` on x86-64) kills the process (the filter's architecture
    /// check).
    fn compile(
        rules: BTreeMap<i64, Vec<SeccompRule>>,
        action: SeccompAction,
    ) -> Result<BpfProgram, String> {
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| failed(&e))?;
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch)
            .map_err(|e| failed(&e))?;
        BpfProgram::try_from(filter).map_err(|e| failed(&e))
    }

    /// `first` then `then` as one program (one for the kernel to compile and install
    /// per call, a part of each call's cost): each
    /// "allow" answer of `first` becomes a jump to the start of `then`. Both are
    /// complete programs (their own architecture check), and classic BPF jumps only
    /// forward, so `first`'s own jumps keep their targets.
    fn chain(mut first: BpfProgram, then: BpfProgram) -> BpfProgram {
        #[allow(clippy::cast_possible_truncation)]
        let (ret, jump) = (
            (libc::BPF_RET | libc::BPF_K) as u16,
            (libc::BPF_JMP | libc::BPF_JA) as u16,
        );
        let len = first.len();
        for (i, insn) in first.iter_mut().enumerate() {
            if insn.code == ret && insn.k == libc::SECCOMP_RET_ALLOW {
                let past = u32::try_from(len - i - 1).unwrap_or(u32::MAX);
                *insn = sock_filter {
                    code: jump,
                    jt: 0,
                    jf: 0,
                    k: past,
                };
            }
        }
        first.extend(then);
        first
    }

    /// On x86-64, every call of the x32 ABI (its number with `__X32_SYSCALL_BIT`, the
    /// same architecture in a filter's eyes, on kernels that enable that ABI) answers
    /// `ENOSYS`: else `chmod` under its x32 number would pass the rules. (Ruling each
    /// call under both numbers doubled the program, and its cost per call.)
    fn x32_absent() -> BpfProgram {
        #[allow(clippy::cast_possible_truncation)]
        let code = |c: u32| c as u16;
        let stmt = |c: u32, k: u32| sock_filter {
            code: code(c),
            jt: 0,
            jf: 0,
            k,
        };
        if cfg!(target_arch = "x86_64") {
            vec![
                // The call's number (`seccomp_data.nr`, offset 0).
                stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
                // x32: the next instruction; else the one after it.
                sock_filter {
                    code: code(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K),
                    jt: 0,
                    jf: 1,
                    k: 0x4000_0000,
                },
                stmt(
                    libc::BPF_RET | libc::BPF_K,
                    libc::SECCOMP_RET_ERRNO | libc::ENOSYS.unsigned_abs(),
                ),
                stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
            ]
        } else {
            Vec::new()
        }
    }

    fn build(confined: bool, shielded: bool, offline: bool) -> Result<BpfProgram, String> {
        let mut refused = BTreeMap::new();
        if confined {
            set_id_rules(&mut refused, may_take_the_root_group())?;
            refused.insert(libc::SYS_ioctl, terminal_rules()?);
        }
        if offline {
            refused.insert(libc::SYS_socket, offline_socket_rules()?);
        }
        if shielded {
            let other_pid = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)
                .map_err(|e| failed(&e))?;
            refused.insert(libc::SYS_prlimit64, vec![rule(vec![other_pid])?]);
        }
        let refused = chain(
            x32_absent(),
            compile(refused, SeccompAction::Errno(libc::EPERM.unsigned_abs()))?,
        );
        if !confined {
            return Ok(refused);
        }
        // Answered as on a kernel without them: their mode cannot be read by a filter.
        let absent = [libc::SYS_openat2, libc::SYS_io_uring_setup]
            .into_iter()
            .map(|call| (call, Vec::new()))
            .collect();
        let absent = compile(absent, SeccompAction::Errno(libc::ENOSYS.unsigned_abs()))?;
        Ok(chain(refused, absent))
    }

    /// Argument `index` (a 32-bit `int`) compared by `op` with `value`.
    fn arg(index: u8, op: SeccompCmpOp, value: i32) -> Result<SeccompCondition, String> {
        SeccompCondition::new(
            index,
            SeccompCmpArgLen::Dword,
            op,
            u64::from(value.unsigned_abs()),
        )
        .map_err(|e| failed(&e))
    }

    /// The `socket` calls refused with the network off: any family but Unix and
    /// netlink (IPv4 and IPv6 included: whatever Landlock's TCP rules do not cover —
    /// UDP, raw, MPTCP, a `listen` that binds a fresh socket itself — cannot start).
    fn offline_socket_rules() -> Result<Vec<SeccompRule>, String> {
        Ok(vec![rule(vec![
            arg(0, SeccompCmpOp::Ne, libc::AF_UNIX)?,
            arg(0, SeccompCmpOp::Ne, libc::AF_NETLINK)?,
        ])?])
    }

    /// The `ioctl` requests that type into a terminal (`TIOCSTI`) or act on the console
    /// (`TIOCLINUX`): the request is compared as the 32-bit number the kernel reads, so
    /// bits set above it do not pass.
    fn terminal_rules() -> Result<Vec<SeccompRule>, String> {
        [libc::TIOCSTI, libc::TIOCLINUX]
            .into_iter()
            .map(|request| {
                let request = i32::try_from(request).map_err(|e| failed(&e))?;
                rule(vec![arg(1, SeccompCmpOp::Eq, request)?])
            })
            .collect()
    }

    /// Whether a program started now could make a file of group root: with root among its
    /// user ids (root may change its group, or a file's) or among its groups.
    fn may_take_the_root_group() -> bool {
        let (user, group) = super::root_ids();
        user || group
    }

    /// The calls that ask for `S_ISUID` (and `S_ISGID` when `root_group`).
    fn set_id_rules(
        rules: &mut BTreeMap<i64, Vec<SeccompRule>>,
        root_group: bool,
    ) -> Result<(), String> {
        let set_id: &[u32] = if root_group {
            &[libc::S_ISUID, libc::S_ISGID]
        } else {
            &[libc::S_ISUID]
        };
        #[allow(clippy::cast_sign_loss)]
        const CREATE: [u32; 2] = [libc::O_CREAT as u32, libc::O_TMPFILE as u32];
        // Calls whose mode is argument `index`, whatever their flags.
        let mut moded = vec![
            (libc::SYS_fchmod, 1),
            (libc::SYS_fchmodat, 2),
            (libc::SYS_fchmodat2, 2),
            (libc::SYS_mknodat, 2),
        ];
        #[cfg(target_arch = "x86_64")]
        moded.extend([
            (libc::SYS_chmod, 1),
            (libc::SYS_creat, 1),
            (libc::SYS_mknod, 1),
        ]);
        for (call, index) in moded {
            for bit in set_id {
                rules
                    .entry(call)
                    .or_default()
                    .push(rule(vec![has(index, *bit)?])?);
            }
        }
        // Calls whose mode (argument `mode`) counts only with a creating flag
        // (argument `flags`): without one the register holds anything.
        let mut opening = vec![(libc::SYS_openat, 2, 3)];
        #[cfg(target_arch = "x86_64")]
        opening.push((libc::SYS_open, 1, 2));
        for (call, flags, mode) in opening {
            for create in CREATE {
                for bit in set_id {
                    rules
                        .entry(call)
                        .or_default()
                        .push(rule(vec![has(flags, create)?, has(mode, *bit)?])?);
                }
            }
        }
        Ok(())
    }
}

/// Without Landlock no sandboxed command runs (see `apply_policy`): nothing to do.
///
/// # Errors
/// Never.
#[cfg(not(feature = "landlock"))]
pub(crate) fn confine_syscalls(
    _confined: bool,
    _shielded: bool,
    _offline: bool,
) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{SandboxInvocation, invocation_args, parse_invocation};
    use crate::SandboxPolicy;
    use std::ffi::OsString;
    use std::path::PathBuf;

    /// `ReadOnly`'s ruleset, built once (as the persistent helper does), confines each
    /// thread it is enforced on — a copy per call, taken when enforced — and no other:
    /// the thread that built it still writes, a second copy confines a second thread,
    /// and a call under another policy gets that policy's rules, not the prebuilt ones.
    #[cfg(feature = "landlock")]
    #[test]
    fn a_prebuilt_read_only_ruleset_confines_each_call_that_enforces_it() {
        use super::{Prebuilt, apply_prebuilt};
        let built = Prebuilt::read_only();
        assert!(built.has_read_only(), "Landlock is needed for this test");
        let dir = tempfile::tempdir().unwrap();
        let copy = || Prebuilt {
            read_only: built.read_only.as_ref().map(|r| r.try_clone().unwrap()),
        };
        let attempt = |policy: SandboxPolicy, name: &str, mut prebuilt: Prebuilt| {
            let path = dir.path().join(name);
            let tmp = dir.path().to_path_buf();
            std::thread::scope(|scope| {
                scope
                    .spawn(move || {
                        apply_prebuilt(policy, &tmp, &tmp, &[], false, &mut prebuilt).unwrap();
                        let taken = !prebuilt.has_read_only();
                        (taken, std::fs::write(&path, "x").is_ok())
                    })
                    .join()
                    .unwrap()
            })
        };
        assert_eq!(attempt(SandboxPolicy::ReadOnly, "a", copy()), (true, false));
        let both = SandboxPolicy::WorkspaceAndProtected { network: false };
        // Another policy: its own rules (the working directory writable); the prebuilt
        // ruleset is left alone.
        assert_eq!(attempt(both, "b", copy()), (false, true));
        assert_eq!(attempt(SandboxPolicy::ReadOnly, "c", copy()), (true, false));
        // Without a prebuilt ruleset the call builds the same rules.
        let none = Prebuilt::default();
        assert_eq!(attempt(SandboxPolicy::ReadOnly, "d", none), (true, false));
        std::fs::write(dir.path().join("e"), "x").unwrap();
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["b", "e"]);
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn invocation_round_trips_through_its_arguments() {
        let invocation = SandboxInvocation {
            policy: SandboxPolicy::WorkspaceWrite { network: false },
            cwd: PathBuf::from("/w"),
            tmp: PathBuf::from("/t"),
            tmp_private: true,
            say_fallback: true,
            protect: vec![PathBuf::from("/w/.git")],
            program: "bash".into(),
            args: os(&["-c", "echo --policy x"]),
            parent: Some(42),
            env: None,
        };
        let args = invocation_args(&invocation);
        assert_eq!(
            args,
            os(&[
                "__sandbox-exec",
                "--policy",
                r#"{"workspace-write":{"network":false}}"#,
                "--cwd",
                "/w",
                "--tmp",
                "/t",
                "--tmp-private",
                "--say-fallback",
                "--protect",
                "/w/.git",
                "--parent",
                "42",
                "--",
                "bash",
                "-c",
                "echo --policy x",
            ])
        );
        assert_eq!(parse_invocation(args.into_iter().skip(1)), Ok(invocation));
    }

    #[test]
    fn malformed_arguments_are_named() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--policy", "\"read-only\"", "--cwd", "/w", "--tmp", "/t"],
                "missing `-- <program>`",
            ),
            (
                &[
                    "--policy",
                    "\"read-only\"",
                    "--cwd",
                    "/w",
                    "--tmp",
                    "/t",
                    "--",
                ],
                "missing program after `--`",
            ),
            (
                &["--cwd", "/w", "--tmp", "/t", "--", "ls"],
                "missing --policy",
            ),
            (
                &["--policy", "\"none\"", "--tmp", "/t", "--", "ls"],
                "missing --cwd",
            ),
            (
                &["--policy", "\"none\"", "--cwd", "/w", "--", "ls"],
                "missing --tmp",
            ),
            (&["--cwd"], "missing value for --cwd"),
            (&["--net", "x", "--", "ls"], "unknown argument \"--net\""),
            (
                &["--parent", "x", "--", "ls"],
                "invalid --parent \"x\": invalid digit found in string",
            ),
            (
                &["--policy", "open", "--", "ls"],
                "invalid --policy \"open\": expected value at line 1 column 1",
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(
                parse_invocation(os(args)),
                Err((*expected).to_owned()),
                "{args:?}"
            );
        }
    }
}
/// The kernel compiles a call's seccomp program each time one is installed (a part of
/// each sandboxed call's cost, measured in docs/benchmarks.md): it stays small.
#[cfg(all(test, feature = "landlock"))]
#[test]
fn each_seccomp_program_stays_small() {
    for index in 1..8 {
        let (set_id, shielded, offline) = (index & 1 != 0, index & 2 != 0, index & 4 != 0);
        let program = filters::program(set_id, shielded, offline)
            .and_then(|built| built.as_ref().ok())
            .unwrap_or_else(|| panic!("no program for {set_id} {shielded} {offline}"));
        assert!(
            program.len() < 320,
            "{set_id} {shielded} {offline}: {} instructions",
            program.len()
        );
    }
    assert!(filters::program(false, false, false).is_none());
}

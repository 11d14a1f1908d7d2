//! The helper's supervision of the tool's processes: the helper does not `exec` the
//! program; it stays the leader of the tool's process group, runs the program as its
//! child and kills the whole group when the runtime that started it dies.
//!
//! Owns: confining the program (Landlock on a thread of its own, which starts it; see
//! `start_confined`), being the child subreaper of the program (its orphans stay in the
//! helper's tree, see `tree`), killing that tree when the program ends or on a watched
//! signal (then also removing the call's private temp dir, which a dead runtime no longer
//! can), parent-death detection (`PR_SET_PDEATHSIG` with [`PARENT_DEATH_SIGNAL`], caught
//! by a signal handler; a parent that died before the signal was armed is caught by
//! comparing `getppid()` with the pid the runtime passed in `--parent`), killing the
//! group, and passing the program's exit status on as the helper's own.
//! Must not: leave a process of the group running after the runtime died, remove a temp
//! dir that was not made for the call (`--tmp-private`, named `foya-sandbox-…`), or kill a
//! group it does not lead (a helper started by hand, not in its own group, kills only its
//! child and itself).
//!
//! Why not `exec`: `PR_SET_PDEATHSIG` survives `execve` but is cleared in every forked
//! child, so a shell's own children (`sleep 100` inside `bash -c`) would outlive a
//! SIGKILLed runtime. Only a process that notices the parent's death and then kills the
//! whole group covers them. (`unsafe` is forbidden, so a `pre_exec` hook is not an option.)
//! Why handlers, not a blocked mask and `sigwait`: a blocked mask is inherited by the
//! program, handlers are reset to the default by `execve`.
//! Why no async runtime: the helper waits for two things (the program's exit, a stop
//! signal), which one `poll(2)` on a pidfd and a self-pipe covers; a tokio runtime's
//! drivers and the pages they touch cost more than the rest of the helper (see
//! docs/benchmarks.md, "Real tools").

use super::entry::{Prebuilt, SandboxInvocation, apply_prebuilt, exit_now, fail};
use super::shield::{self, Entered, Shield};
use super::{EXIT_EXEC_FAILED, EXIT_SANDBOX_UNAVAILABLE, TMP_PREFIX};
use super::{SandboxPolicy, tree};
use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{Signal, kill, killpg, raise};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid, getppid};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::io::PipeReader;
use std::os::fd::AsFd as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The signal the kernel sends the helper when the thread that spawned it (in the
/// runtime's process) exits, e.g. when the runtime is SIGKILLed. Receiving it — or
/// `SIGTERM` from anyone — makes the helper SIGKILL the tool's process group.
pub(crate) const PARENT_DEATH_SIGNAL: Signal = Signal::SIGHUP;

/// How often the helper looks at its child when the kernel has no `pidfd_open` (Linux
/// before 5.3): the only case where the child's exit does not wake the helper at once.
const POLL_WITHOUT_PIDFD: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 20_000_000,
};

/// Runs the invocation's program under its policy and supervision; never returns.
///
/// Order: handlers for [`PARENT_DEATH_SIGNAL`] and `SIGTERM` first (so an early signal is
/// not lost or fatal), then `PR_SET_PDEATHSIG`, then the `--parent` check, then Landlock
/// (on the thread that starts the program), then the program. Exits like the program did
/// (see `exit_like`); on a watched signal the group is killed (the helper with it).
///
/// No async runtime: one thread waits in `poll(2)` on the program's pidfd and on a
/// self-pipe the signal handlers write to (`signal_hook::low_level::pipe`). The handlers
/// are reset by `execve`, and no signal is blocked, so the program starts with the default
/// dispositions and an empty signal mask.
pub(crate) fn run(invocation: &SandboxInvocation, prebuilt: Prebuilt) -> ! {
    let stop = match watch_stop_signals() {
        Ok(stop) => stop,
        Err(e) => fail(
            EXIT_SANDBOX_UNAVAILABLE,
            &format!("cannot watch for the runtime's death: {e}"),
        ),
    };
    if let Err(e) = prctl::set_pdeathsig(PARENT_DEATH_SIGNAL) {
        fail(
            EXIT_SANDBOX_UNAVAILABLE,
            &format!("cannot set the parent-death signal: {e}"),
        );
    }
    // Orphans of the program (a daemon that double-forked, a `setsid` child whose parent
    // exited) are re-parented to the helper, so its tree still holds them.
    if let Err(e) = prctl::set_child_subreaper(true) {
        fail(
            EXIT_SANDBOX_UNAVAILABLE,
            &format!("cannot become the child subreaper of the command: {e}"),
        );
    }
    // The runtime may have died before the signal was armed; then it never comes.
    if let Some(parent) = invocation.parent
        && u32::try_from(getppid().as_raw()).ok() != Some(parent)
    {
        remove_private_tmp(invocation);
        fail(
            EXIT_SANDBOX_UNAVAILABLE,
            &format!("the runtime (pid {parent}) is gone; the command was not run"),
        );
    }
    let shield = match enter_shield(invocation) {
        Ok(shield) => shield,
        Err(message) => {
            remove_private_tmp(invocation);
            fail(EXIT_SANDBOX_UNAVAILABLE, &message)
        }
    };
    let seal = match may_seal(invocation, shield.is_some()) {
        Ok(seal) => seal,
        Err(message) => {
            remove_private_tmp(invocation);
            fail(EXIT_SANDBOX_UNAVAILABLE, &message)
        }
    };
    let child = match start_confined(invocation, shield.is_some(), seal, prebuilt) {
        Ok(child) => child,
        Err((code, message)) => {
            if let Some(shield) = shield {
                shield.release();
            }
            fail(code, &message)
        }
    };
    supervise(child, stop, invocation, shield)
}

/// Under `WorkspaceWrite`, the protected paths become read-only mounts in namespaces of
/// the helper's own (`shield`; the helper has one thread here, as the kernel requires).
/// `None`: no shield (another policy, or the kernel gives no namespace: then Landlock
/// alone keeps them, closing the working directory's top level, and the command's
/// output says so when the runtime asked for it with `--say-fallback`).
///
/// # Errors
/// The namespaces were entered but the protected paths could not be shielded.
fn enter_shield(invocation: &SandboxInvocation) -> Result<Option<Shield>, String> {
    if !matches!(invocation.policy, SandboxPolicy::WorkspaceWrite { .. }) {
        return Ok(None);
    }
    let switched_off = invocation.var_set(shield::NO_NAMESPACES_ENV);
    match shield::enter(&invocation.cwd, &invocation.protect, switched_off)? {
        Entered::Shielded(shield) => {
            if let Some(note) = &shield.note {
                eprintln!("foya-sandbox: note: {note}");
            }
            Ok(Some(shield))
        }
        Entered::Unavailable(why) => {
            if invocation.say_fallback {
                eprintln!(
                    "foya-sandbox: {why}; the protected paths (.git, .foya, AGENTS.md, …) are \
                     kept read-only by Landlock alone, so sandboxed commands cannot create, \
                     delete or rename entries directly in the working directory (in its \
                     subfolders they can, and the file tools can)"
                );
            }
            Ok(None)
        }
    }
}

/// Whether the thread that starts the command can make the rest of the file system
/// read-only for it (`outside::seal`): under every policy but `None`, where the kernel
/// gives the namespaces. An ordinary user's helper enters a user namespace for it here,
/// while it has one thread (under `WorkspaceWrite` the shield's: without the shield the
/// kernel refused it, or it is switched off).
///
/// # Errors
/// A user namespace was entered but its ids could not be mapped.
fn may_seal(invocation: &SandboxInvocation, shielded: bool) -> Result<bool, String> {
    let switched_off = invocation.var_set(shield::NO_NAMESPACES_ENV);
    match invocation.policy {
        SandboxPolicy::None => Ok(false),
        SandboxPolicy::WorkspaceWrite { .. } => Ok(shielded),
        SandboxPolicy::ReadOnly | SandboxPolicy::WorkspaceAndProtected { .. } => Ok(!switched_off
            && (rustix::process::getuid().is_root() || super::outside::enter_user_namespace()?)),
    }
}

/// A pipe that becomes readable when [`PARENT_DEATH_SIGNAL`] or `SIGTERM` arrives.
fn watch_stop_signals() -> std::io::Result<PipeReader> {
    let (reader, writer) = std::io::pipe()?;
    let writer = OwnedFd::from(writer);
    signal_hook::low_level::pipe::register(PARENT_DEATH_SIGNAL as i32, writer.try_clone()?)?;
    signal_hook::low_level::pipe::register(Signal::SIGTERM as i32, writer)?;
    Ok(reader)
}

/// Waits until the program ends (then ends like it) or a stop signal arrives (then kills
/// everything; see [`kill_all`]).
fn supervise(
    mut child: Child,
    stop: PipeReader,
    invocation: &SandboxInvocation,
    mut shield: Option<Shield>,
) -> ! {
    let pid = i32::try_from(child.id()).ok().map(Pid::from_raw);
    // Readable once the child has exited (it stays unreaped until `try_wait`).
    let exited = pid
        .and_then(|pid| rustix::process::Pid::from_raw(pid.as_raw()))
        .and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
    loop {
        let mut fds = vec![PollFd::new(&stop, PollFlags::IN)];
        if let Some(exited) = &exited {
            fds.push(PollFd::new(exited, PollFlags::IN));
        }
        let timeout = exited.is_none().then_some(&POLL_WITHOUT_PIDFD);
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            // A signal interrupted the wait: look again (its byte is in the pipe).
            Err(rustix::io::Errno::INTR) => continue,
            // Cannot happen with two valid descriptors; never leave the group unwatched.
            Err(e) => {
                eprintln!("foya-sandbox: cannot wait for the command ({e}); killing it");
                kill_all(pid, invocation, shield.take())
            }
        }
        if !fds[0].revents().is_empty() {
            kill_all(pid, invocation, shield.take());
        }
        if fds.get(1).is_none_or(|fd| !fd.revents().is_empty()) {
            match child.try_wait() {
                Ok(Some(status)) => end_with(status, shield.take()),
                Ok(None) => {}
                Err(e) => fail(
                    EXIT_EXEC_FAILED,
                    &format!("cannot wait for the command: {e}"),
                ),
            }
        }
    }
}

/// The program ended with `status`: what it left running (in the group or not) ends with
/// it, the shield's placeholders go, then the helper ends like it. As the subreaper, the
/// helper has a child whenever anything is left; with none (the usual case) there is no
/// tree to read from /proc.
fn end_with(status: ExitStatus, shield: Option<Shield>) -> ! {
    if !matches!(
        waitpid(None, Some(WaitPidFlag::WNOHANG)),
        Err(Errno::ECHILD)
    ) {
        tree::kill_tree(getpid().as_raw());
        if shield.is_some() {
            reap_all();
        }
    }
    if let Some(shield) = shield {
        shield.release();
    }
    exit_like(status)
}

/// Most time spent reaping the killed tree before the placeholders are removed (a process
/// stuck in the kernel must not keep the helper; the runtime's sweep removes them later).
const REAP_LIMIT: Duration = Duration::from_secs(1);

/// Reaps every child (the killed tree, re-parented to the helper) until none is left or
/// [`REAP_LIMIT`] passed: a process that still runs could hold a placeholder open.
fn reap_all() {
    let deadline = Instant::now() + REAP_LIMIT;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Applies the policy to a thread of its own and starts the program from it (under
/// `SandboxPolicy::None`, which confines nothing, the calling thread starts it).
///
/// Landlock and `no_new_privs` bind the thread that sets them and every process it starts
/// afterwards, not the helper's other threads: the program runs confined while the
/// helper's main thread keeps the rights to kill the program's tree and to remove the
/// private temp dir when the runtime dies (removing a directory takes a right on its
/// parent, which no policy grants).
///
/// # Errors
/// `(exit code, message)`: [`EXIT_SANDBOX_UNAVAILABLE`] when the policy cannot be applied
/// (the program did not run), [`EXIT_EXEC_FAILED`] when the program cannot be started.
fn start_confined(
    invocation: &SandboxInvocation,
    shielded: bool,
    seal: bool,
    mut prebuilt: Prebuilt,
) -> Result<Child, (i32, String)> {
    // Nothing to confine (`SandboxPolicy::None` applies no Landlock and has no shield):
    // the helper's thread starts the program itself, as the confined thread would.
    if invocation.policy == SandboxPolicy::None && !shielded {
        drop(prebuilt);
        return spawn_program(invocation, false);
    }
    let started = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                // Before Landlock, which refuses mount calls.
                let sealed = seal
                    && seal_outside(invocation)
                        .map_err(|message| (EXIT_SANDBOX_UNAVAILABLE, message))?;
                apply_prebuilt(
                    invocation.policy,
                    &invocation.cwd,
                    &invocation.tmp,
                    &invocation.protect,
                    shielded,
                    &mut prebuilt,
                )
                .map_err(|e| (EXIT_SANDBOX_UNAVAILABLE, e.0))?;
                // A ruleset built for another policy goes before the program starts.
                drop(prebuilt);
                // Shielded, the program must not hold `CAP_SYS_ADMIN` (in its user namespace
                // too): it could undo the shield's mounts (Landlock refuses mount calls, but
                // not `mount_setattr` or `setns`).
                drop_capabilities(shielded || seal)
                    .map_err(|message| (EXIT_SANDBOX_UNAVAILABLE, message))?;
                let offline = match invocation.policy {
                    SandboxPolicy::None => false,
                    SandboxPolicy::ReadOnly => true,
                    SandboxPolicy::WorkspaceWrite { network }
                    | SandboxPolicy::WorkspaceAndProtected { network } => !network,
                };
                super::entry::confine_syscalls(
                    invocation.policy != SandboxPolicy::None,
                    shielded,
                    offline,
                )
                .map_err(|message| (EXIT_SANDBOX_UNAVAILABLE, message))?;
                spawn_program(invocation, sealed)
            })
            .join()
    });
    started.unwrap_or_else(|_| {
        Err((
            EXIT_SANDBOX_UNAVAILABLE,
            "the thread starting the command panicked; the command was not run".to_owned(),
        ))
    })
}

/// Makes everything but the call's writable roots (the working directory when the
/// policy writes it, the private temp dir) read-only for the calling thread and what it
/// starts (`outside`): Landlock alone leaves modes, owners, ACLs, extended attributes and
/// times outside them changeable (`chmod 666 /etc/shadow` as root). Where the kernel
/// refuses the thread a mount namespace, Landlock alone rules, as before.
///
/// `true`: sealed (`false`: no namespace here).
///
/// # Errors
/// A mount failed once the namespace was entered: the command must not run.
fn seal_outside(invocation: &SandboxInvocation) -> Result<bool, String> {
    // What Landlock lets the policy write beneath (`ReadOnly`: nothing).
    let writable: &[&std::path::Path] = match invocation.policy {
        SandboxPolicy::WorkspaceWrite { .. } | SandboxPolicy::WorkspaceAndProtected { .. } => {
            &[&invocation.cwd, &invocation.tmp]
        }
        SandboxPolicy::ReadOnly | SandboxPolicy::None => &[],
    };
    match super::outside::seal(writable)? {
        super::outside::Sealed::ReadOnly => Ok(true),
        super::outside::Sealed::Unavailable => Ok(false),
    }
}

/// What a confined program run as root keeps of its capabilities: the set container
/// runtimes give root in a container (Docker's default) less `CAP_MKNOD`, `CAP_FSETID`
/// and `CAP_SETFCAP` — owning, reading and writing any file, changing users, signals,
/// raw sockets (`ping`), low ports, `chroot`. Every other capability is dropped from the
/// bounding set of the thread that starts the program (as root, what the program gets
/// at `execve`), among them the ones attacks used or would use:
///
/// - `CAP_SYS_ADMIN` or `CAP_PERFMON`: a root program in a Landlock domain still read
///   another process's `/proc/<pid>/environ` (the runtime's, with the user's API keys:
///   found on Linux 6.18); `CAP_SYS_PTRACE` inspects other processes;
/// - `CAP_SETFCAP`: a file capability it set (`setcap cap_sys_ptrace+ep ./py` in the
///   workspace) would give another user of the machine what the command lacks;
/// - `CAP_FSETID`: without it, writing a set-ID program clears its set-ID bits (see
///   `confine_syscalls`);
/// - `CAP_MKNOD`: a device node it made in the workspace (`mknod disk b 7 0`) is
///   writable there under Landlock's rule for the workspace, and by anyone it chose;
/// - `CAP_SYS_RAWIO`, `CAP_DAC_READ_SEARCH` (`open_by_handle_at`), `CAP_SYS_MODULE`,
///   `CAP_BPF`, `CAP_NET_ADMIN`, `CAP_SYS_TIME`, `CAP_SYS_BOOT`, …: ways around a
///   sandbox or into the machine that no agent's command needs.
///
/// The thread's inheritable and ambient sets are emptied too: at `execve` root's
/// capabilities are its bounding set *or* its inheritable set, and an ordinary user's are
/// its ambient set, and what started Foya may have left capabilities in those (a
/// container runtime's inheritable set, `pam_cap`, systemd's `AmbientCapabilities`): the
/// bounding set alone kept none of them out. Without `CAP_SETPCAP` (not root) nothing is
/// dropped from the bounding set, and nothing needs to be: with empty inheritable and
/// ambient sets such a program has no capability, and `no_new_privs` (set with Landlock)
/// keeps file capabilities from granting any at `execve`.
///
/// `shielded`: the helper holds capabilities in a user namespace of its own (or is root),
/// and the program must lose them even when its ids are not root's.
///
/// # Errors
/// A message when a capability the program could hold cannot be dropped, or the
/// inheritable or ambient set cannot be emptied (the program must not run).
fn drop_capabilities(shielded: bool) -> Result<(), String> {
    use rustix::thread::{
        CapabilitySet, capabilities, capability_is_in_bounding_set,
        remove_capability_from_bounding_set, set_capabilities,
    };
    let failed = |e: rustix::io::Errno| format!("cannot empty the command's capabilities: {e}");
    // A helper whose real or saved user id is root's but whose effective one is not
    // (started through `setpriv --euid`) has its capabilities permitted, not effective:
    // made effective, so that it can drop them (its command would get them back at
    // `execve`, its real id being root's).
    let mut sets = capabilities(None).map_err(failed)?;
    if sets.effective != sets.permitted {
        sets.effective = sets.permitted;
        set_capabilities(None, sets).map_err(failed)?;
    }
    let kept = CapabilitySet::CHOWN
        | CapabilitySet::DAC_OVERRIDE
        | CapabilitySet::FOWNER
        | CapabilitySet::KILL
        | CapabilitySet::SETGID
        | CapabilitySet::SETUID
        | CapabilitySet::SETPCAP
        | CapabilitySet::NET_BIND_SERVICE
        | CapabilitySet::NET_RAW
        | CapabilitySet::SYS_CHROOT
        | CapabilitySet::AUDIT_WRITE;
    let dropped = CapabilitySet::all().difference(kept);
    // Without `CAP_SETPCAP` (an ordinary user) nothing can be dropped: not tried.
    let mut all_dropped = sets.effective.contains(CapabilitySet::SETPCAP);
    if all_dropped {
        for capability in dropped.iter() {
            all_dropped &= remove_capability_from_bounding_set(capability).is_ok();
        }
    }
    // What was not dropped matters when the command may be root, or is shielded: then it
    // must not run.
    if !all_dropped && (shielded || super::entry::root_ids().0) {
        for capability in dropped.iter() {
            // A capability the kernel does not know (`EINVAL`) cannot be held.
            let held = match capability_is_in_bounding_set(capability) {
                Ok(held) => held,
                Err(e) => e != rustix::io::Errno::INVAL,
            };
            if held {
                let why = if sets.effective.contains(CapabilitySet::SETPCAP) {
                    ""
                } else {
                    " (the helper has no CAP_SETPCAP)"
                };
                return Err(format!(
                    "cannot drop {capability:?} from the command's capabilities{why}; the \
                     command was not run: run Foya as an ordinary user, or with CAP_SETPCAP"
                ));
            }
        }
    }
    match rustix::thread::clear_ambient_capability_set() {
        // A kernel without ambient capabilities (before 4.3) has none to clear.
        Ok(()) | Err(rustix::io::Errno::INVAL) => {}
        Err(e) => return Err(failed(e)),
    }
    // The sets read above (dropping from the bounding set or the ambient set changes
    // neither the effective, permitted nor inheritable set).
    if !sets.inheritable.is_empty() {
        sets.inheritable = CapabilitySet::empty();
        set_capabilities(None, sets).map_err(failed)?;
    }
    Ok(())
}

/// Starts the program from the calling thread (confined or not, as the policy needs),
/// in its working directory, with the call's environment.
fn spawn_program(invocation: &SandboxInvocation, sealed: bool) -> Result<Child, (i32, String)> {
    let mut command = std::process::Command::new(&invocation.program);
    command.args(&invocation.args).current_dir(&invocation.cwd);
    // A descriptor opened before the seal points into the writable mounts outside: the
    // null device the runtime gives as stdin (or as any stdio) is opened again here, on
    // the read-only mounts, else `chmod 000 /proc/self/fd/0` (or `fchmod(0)`) as root
    // changed the machine's `/dev/null`.
    if sealed {
        if is_null_device(std::io::stdin().as_fd()) {
            command.stdin(std::process::Stdio::null());
        }
        if is_null_device(std::io::stdout().as_fd()) {
            command.stdout(std::process::Stdio::null());
        }
        if is_null_device(std::io::stderr().as_fd()) {
            command.stderr(std::process::Stdio::null());
        }
    }
    if let Some(env) = &invocation.env {
        command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    if invocation.policy != SandboxPolicy::None {
        command.env("TMPDIR", &invocation.tmp);
    }
    command.spawn().map_err(|e| {
        (
            EXIT_EXEC_FAILED,
            format!("cannot execute {:?}: {e}", invocation.program),
        )
    })
}

/// Whether `fd` is the null device (character device 1:3).
fn is_null_device(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|stat| {
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::CharacterDevice
            && rustix::fs::major(stat.st_rdev) == 1
            && rustix::fs::minor(stat.st_rdev) == 3
    })
}

/// Removes the invocation's temp dir when it is private to this call (`--tmp-private`,
/// under a policy that made one, named like the runner names them): the runtime that
/// would have removed it is gone. Errors are ignored (a dir already gone is the usual
/// case when the runtime is alive and removed it itself).
fn remove_private_tmp(invocation: &SandboxInvocation) {
    let named_as_private = invocation
        .tmp
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(TMP_PREFIX));
    if invocation.tmp_private && invocation.policy != SandboxPolicy::None && named_as_private {
        let _ = std::fs::remove_dir_all(&invocation.tmp);
    }
}

/// Stops the helper's process tree (everything the program started, in its group or
/// not), removes the private temp dir (nothing in the tree can write to it any more),
/// SIGKILLs the tree, releases the shield once the tree is reaped, then SIGKILLs its
/// process group when it leads one, else only `child`; then itself. (The temp dir goes
/// before the command dies: whoever waits for the command's end finds it gone, also
/// when the helper is a child of the persistent helper, whose command line does not
/// name the command.)
fn kill_all(child: Option<Pid>, invocation: &SandboxInvocation, shield: Option<Shield>) -> ! {
    let stopped = tree::stop_tree(getpid().as_raw());
    remove_private_tmp(invocation);
    tree::kill_stopped(&stopped);
    if let Some(shield) = shield {
        reap_all();
        shield.release();
    }
    let group = getpgrp();
    if group == getpid() {
        let _ = killpg(group, Signal::SIGKILL);
    }
    if let Some(child) = child {
        let _ = kill(child, Signal::SIGKILL);
    }
    let _ = raise(Signal::SIGKILL);
    exit_now(128 + Signal::SIGKILL as i32)
}

/// Ends the helper the way the program ended: the same exit code, or death by the same
/// signal. A signal the helper handles or ignores (`SIGHUP`, `SIGTERM`; `SIGPIPE`, which
/// Rust ignores) becomes exit code `128 + signal` instead.
fn exit_like(status: ExitStatus) -> ! {
    if let Some(code) = status.code() {
        exit_now(code);
    }
    let number = status.signal().unwrap_or_default();
    if let Ok(signal) = Signal::try_from(number)
        && !matches!(
            signal,
            PARENT_DEATH_SIGNAL | Signal::SIGTERM | Signal::SIGPIPE
        )
    {
        let _ = raise(signal);
    }
    exit_now(128 + number)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{SandboxInvocation, SandboxPolicy, remove_private_tmp};
    use std::path::Path;

    fn invocation(policy: SandboxPolicy, tmp: &Path, tmp_private: bool) -> SandboxInvocation {
        SandboxInvocation {
            policy,
            cwd: "/".into(),
            tmp: tmp.to_path_buf(),
            tmp_private,
            say_fallback: false,
            protect: Vec::new(),
            program: "true".into(),
            args: Vec::new(),
            parent: None,
            env: None,
        }
    }

    #[test]
    fn only_a_private_foya_sandbox_dir_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let private = root.path().join("foya-sandbox-abc123");
        let shared = root.path().join("shared");
        for dir in [&private, &shared] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("file"), "x").unwrap();
        }
        let write = SandboxPolicy::WorkspaceWrite { network: false };
        // Not marked private, no policy, or not named by the runner: kept.
        remove_private_tmp(&invocation(write, &private, false));
        remove_private_tmp(&invocation(SandboxPolicy::None, &private, true));
        remove_private_tmp(&invocation(write, &shared, true));
        let exists = |d: &Path| d.exists();
        assert_eq!((exists(&private), exists(&shared)), (true, true));
        remove_private_tmp(&invocation(SandboxPolicy::ReadOnly, &private, true));
        assert_eq!((exists(&private), exists(&shared)), (false, true));
    }
}

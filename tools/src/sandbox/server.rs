//! The persistent sandbox helper: one long-lived helper process per Sandbox Runner
//! (`<helper> __sandbox-server --parent <pid>`), which forks a fresh child per call; the
//! child does exactly what a helper started for the call does (`supervise::run`: its own
//! process group, namespaces and mounts, Landlock and seccomp on the thread that starts
//! the program, subreaper, kill of the whole tree at the end), so a call pays a `fork`
//! instead of the `execve` and start of a new helper.
//!
//! Owns: the server's loop (requests on the socket the runtime passed as its stdin, one
//! `poll(2)` over that socket, each call's pidfd and each call's reply socket), forking a
//! call's child and setting it up as a fresh helper (its stdio from the request, no other
//! descriptor of the server's, its own group and working directory, the call's
//! environment), reporting the child's pid (with a pidfd of it, which still names the
//! child should the server die) and its end to the runtime, its own CPU time
//! and its reaped children's when asked ([`Usage`]: the commands are no longer waited-for
//! children of the runtime, so `getrusage(RUSAGE_CHILDREN)` there misses them until the
//! server itself is reaped), and the wire format both sides use ([`encode_request`],
//! [`Reply`], [`Usage`]).
//!
//! Must not: run anything of a call in its own process (no Landlock, seccomp, namespace
//! or mount of a call ever applies to the server: only the forked child applies them), fork
//! with a second thread (a child of a multi-threaded process could find a lock held by a
//! thread that does not exist in it; the one thread it starts, in `warm_up`, is joined
//! before it takes a call), outlive the runtime (its socket's end of file
//! ends it, and each call's child has the server as its parent-death signal's source,
//! so it kills its command and removes its placeholders and temp dir then), or signal a
//! process it has reaped (a call's child is reaped only once the runtime closed the
//! call's socket, so the runtime may still walk its tree by pid; the server signals it
//! through its pidfd).
//!
//! Reachability: the server has no name in the file system or the abstract namespace;
//! its socket is an inherited socket pair, close-on-exec everywhere, closed in every
//! call's child before its program starts. A sandboxed program cannot `ptrace` it or take
//! its descriptors (`pidfd_getfd`): Landlock denies both across domains.

use super::entry::{Prebuilt, SANDBOX_EXEC_ARG, SandboxInvocation, parse_invocation};
use nix::sys::signal::Signal as NixSignal;
use rustix::event::{PollFd, PollFlags, poll};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, send, sendmsg,
};
use rustix::process::{WaitId, WaitIdOptions, waitid};
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::fs::FileExt as _;

/// `argv[1]` that starts the persistent helper.
pub(crate) const SERVER_ARG: &str = "__sandbox-server";

/// What the server sends on its socket once it is ready for calls.
pub(crate) const READY: &[u8] = b"foya-sandbox-server 1";

/// Descriptors a request carries: the call's reply socket, stdout, stderr, the request.
pub(crate) const REQUEST_FDS: usize = 4;

/// First byte of a usage request on the control socket (then an 8-byte nonce).
pub(crate) const USAGE_REQUEST: u8 = b'u';

/// The server's CPU time when asked: on the control socket, after every call released
/// by then was reaped (so its CPU, and its command's, is in `children`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Usage {
    /// The request's nonce, echoed.
    pub(crate) nonce: u64,
    /// The server's own user + system CPU time, microseconds (`RUSAGE_SELF`).
    pub(crate) own_us: u64,
    /// Its reaped children's (each call's helper with what it reaped: the command),
    /// microseconds (`RUSAGE_CHILDREN`).
    pub(crate) children_us: u64,
}

impl Usage {
    const TAG: u8 = b'U';

    pub(crate) fn request(nonce: u64) -> [u8; 9] {
        let mut out = [USAGE_REQUEST; 9];
        out[1..].copy_from_slice(&nonce.to_le_bytes());
        out
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![Self::TAG];
        for n in [self.nonce, self.own_us, self.children_us] {
            out.extend(n.to_le_bytes());
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let (&tag, body) = bytes.split_first()?;
        if tag != Self::TAG || body.len() != 24 {
            return None;
        }
        let n = |i: usize| {
            Some(u64::from_le_bytes(
                body.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(Self {
            nonce: n(0)?,
            own_us: n(1)?,
            children_us: n(2)?,
        })
    }

    /// This process's figures now.
    fn now(nonce: u64) -> Self {
        use nix::sys::resource::{UsageWho, getrusage};
        let micros = |who| {
            getrusage(who).map_or(0, |usage| {
                let tv = |t: nix::sys::time::TimeVal| {
                    u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000
                        + u64::try_from(t.tv_usec()).unwrap_or(0)
                };
                tv(usage.user_time()) + tv(usage.system_time())
            })
        };
        Self {
            nonce,
            own_us: micros(UsageWho::RUSAGE_SELF),
            children_us: micros(UsageWho::RUSAGE_CHILDREN),
        }
    }
}

/// Largest request accepted (arguments and environment), bytes.
const MAX_REQUEST: u64 = 64 << 20;

/// What the server tells the runtime about a call, on the call's own socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The call's child runs: its pid (also its process group id). Sent with a pidfd
    /// of the child (`SCM_RIGHTS`).
    Started(i32),
    /// The child exited with this code.
    Exited(i32),
    /// The child was killed by this signal.
    Killed(i32),
    /// The call could not start (the command did not run): why.
    Failed(String),
}

impl Reply {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (tag, body) = match self {
            Self::Started(n) => (b'S', n.to_le_bytes().to_vec()),
            Self::Exited(n) => (b'X', n.to_le_bytes().to_vec()),
            Self::Killed(n) => (b'K', n.to_le_bytes().to_vec()),
            Self::Failed(why) => (b'F', why.as_bytes().to_vec()),
        };
        let mut out = vec![tag];
        out.extend(body);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let (&tag, body) = bytes.split_first()?;
        let number = || Some(i32::from_le_bytes(body.try_into().ok()?));
        match tag {
            b'S' => number().map(Self::Started),
            b'X' => number().map(Self::Exited),
            b'K' => number().map(Self::Killed),
            b'F' => Some(Self::Failed(String::from_utf8_lossy(body).into_owned())),
            _ => None,
        }
    }
}

/// A request's bytes: the helper's arguments (as a helper started per call gets them,
/// `__sandbox-exec …`), then the program's environment. Each item is its length (u32,
/// little-endian) and its bytes.
pub(crate) fn encode_request(args: &[OsString], env: &[(OsString, OsString)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut item = |bytes: &[u8]| {
        out.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    item(&u32::try_from(args.len()).unwrap_or(0).to_le_bytes());
    for arg in args {
        item(arg.as_bytes());
    }
    item(&u32::try_from(env.len()).unwrap_or(0).to_le_bytes());
    for (name, value) in env {
        item(name.as_bytes());
        item(value.as_bytes());
    }
    out
}

/// A request's arguments and environment.
pub(crate) type Decoded = (Vec<OsString>, Vec<(OsString, OsString)>);

/// The arguments and the environment of [`encode_request`]'s bytes.
///
/// # Errors
/// A message when the bytes are cut short or malformed.
pub(crate) fn decode_request(bytes: &[u8]) -> Result<Decoded, String> {
    let mut rest = bytes;
    let mut item = || -> Result<Vec<u8>, String> {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or("the request is cut short")?;
        let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|e| e.to_string())?;
        if tail.len() < len {
            return Err("the request is cut short".to_owned());
        }
        let (item, tail) = tail.split_at(len);
        rest = tail;
        Ok(item.to_vec())
    };
    let count = |bytes: Vec<u8>| -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            bytes
                .try_into()
                .map_err(|_| "a malformed count in the request")?,
        ))
    };
    let n_args = count(item()?)?;
    let mut args = Vec::new();
    for _ in 0..n_args {
        args.push(OsString::from_vec(item()?));
    }
    let n_env = count(item()?)?;
    let mut env = Vec::new();
    for _ in 0..n_env {
        let name = OsString::from_vec(item()?);
        env.push((name, OsString::from_vec(item()?)));
    }
    Ok((args, env))
}

/// One running call, as the server keeps it.
#[derive(Debug)]
struct Call {
    /// The child's pidfd: readable once it exited; it is reaped through it.
    pidfd: OwnedFd,
    /// The call's reply socket; the runtime closing its end releases the call.
    socket: OwnedFd,
    /// The child exited (and the runtime was told).
    exited: bool,
    /// The runtime closed its end of the call's socket.
    released: bool,
}

/// Runs the server on the socket that is its stdin; never returns. Exits when the runtime
/// closes its end (the runtime ended, even by SIGKILL, or dropped its runner).
pub(crate) fn serve(args: impl Iterator<Item = OsString>) -> ! {
    let parent = parse_parent(args);
    let mut control = match take_control() {
        Ok(control) => control,
        Err(e) => super::entry::fail(
            super::entry::EXIT_SANDBOX_USAGE,
            &format!("the sandbox server has no socket on its stdin: {e}"),
        ),
    };
    // The server pins no directory (a call's child enters its own).
    let _ = std::env::set_current_dir("/");
    if let Some(parent) = parent
        && u32::try_from(nix::unistd::getppid().as_raw()).ok() != Some(parent)
    {
        std::process::exit(super::entry::EXIT_SANDBOX_UNAVAILABLE);
    }
    // Without pidfds (Linux before 5.3) the server could not watch its calls: the runtime
    // then starts a helper per call.
    let me = rustix::process::getpid();
    if rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty()).is_err() {
        std::process::exit(super::entry::EXIT_SANDBOX_UNAVAILABLE);
    }
    // Built once: `ReadOnly`'s rules name nothing of a call (see `Prebuilt`).
    let mut prebuilt = Prebuilt::read_only();
    warm_up();
    if send(&control, READY, SendFlags::NOSIGNAL).is_err() {
        std::process::exit(0);
    }
    let mut calls: Vec<Call> = Vec::new();
    loop {
        // Only what is still awaited: a closed socket would be ready again and again.
        let mut fds = vec![PollFd::new(&control, PollFlags::IN)];
        let mut watched: Vec<(usize, bool)> = Vec::new();
        for (index, call) in calls.iter().enumerate() {
            if !call.exited {
                fds.push(PollFd::new(&call.pidfd, PollFlags::IN));
                watched.push((index, true));
            }
            if !call.released {
                fds.push(PollFd::new(&call.socket, PollFlags::IN));
                watched.push((index, false));
            }
        }
        match poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => std::process::exit(EXIT_SERVER_FAILED),
        }
        let control_ready = !fds[0].revents().is_empty();
        let ready: Vec<(usize, bool)> = fds[1..]
            .iter()
            .zip(watched)
            .filter(|(fd, _)| !fd.revents().is_empty())
            .map(|(_, which)| which)
            .collect();
        drop(fds);
        for (index, exited) in ready {
            let Some(call) = calls.get_mut(index) else {
                continue;
            };
            if exited {
                call.exited = true;
                if !call.released {
                    let _ = send(
                        &call.socket,
                        &end_of(&call.pidfd).encode(),
                        SendFlags::NOSIGNAL,
                    );
                }
            } else {
                call.released = true;
                if !call.exited {
                    // The runtime dropped the call (cancel, a dropped future): the child
                    // kills the command's tree and removes its placeholders and temp dir.
                    let _ = rustix::process::pidfd_send_signal(
                        &call.pidfd,
                        rustix::process::Signal::TERM,
                    );
                }
            }
        }
        // Reaped only now: until the runtime released the call, its pid stays the
        // child's.
        calls.retain(|call| {
            let done = call.exited && call.released;
            if done {
                let _ = waitid(WaitId::PidFd(call.pidfd.as_fd()), WaitIdOptions::EXITED);
            }
            !done
        });
        if control_ready {
            match receive(&control) {
                Received::Request(request) => {
                    let server = Server {
                        control: &mut control,
                        prebuilt: &mut prebuilt,
                    };
                    if let Some(call) = start(request, server, &mut calls) {
                        calls.push(call);
                    }
                }
                // Answered after this round's reaping: every call the runtime released
                // before it asked is counted.
                Received::Usage(nonce) => {
                    let _ = send(&control, &Usage::now(nonce).encode(), SendFlags::NOSIGNAL);
                }
                Received::Nothing => {}
                // The runtime is gone: each call's child gets its parent-death signal
                // when this process ends and kills its command.
                Received::Closed => std::process::exit(0),
            }
        }
    }
}

/// Does once, in the server, what each call's child would otherwise do first in its copy
/// of the server's memory, paying for it there in page faults and system calls: start a
/// first thread (the C library's thread set-up; the symbols it binds or looks up lazily,
/// `__pthread_get_minstack`, `_dl_allocate_tls`; a thread stack and a malloc arena, both
/// kept by the library for the next thread: each call's Landlock thread), and consolidate
/// the allocator's freed small chunks (which the first large allocation — a call's
/// request — would do, writing to many of the pages it shares with the server). The
/// thread is joined before the server takes a call: it forks with one thread.
fn warm_up() {
    let thread = std::thread::Builder::new().spawn(|| drop(std::hint::black_box(vec![0_u8; 64])));
    if let Ok(thread) = thread {
        let _ = thread.join();
    }
    // The calls' seccomp programs, built once here rather than in each call, and the
    // mount table each call's seal reads.
    super::entry::prepare_syscall_filters();
    super::outside::keep_mount_table();
    // Above the small bins (1 KiB), below the threshold for a mapping of its own (128 KiB).
    drop(std::hint::black_box(Vec::<u8>::with_capacity(64 << 10)));
}

/// Exit code of the server when it cannot wait any more (never expected).
const EXIT_SERVER_FAILED: i32 = 125;

fn parse_parent(mut args: impl Iterator<Item = OsString>) -> Option<u32> {
    while let Some(arg) = args.next() {
        if arg == "--parent" {
            return args.next()?.to_str()?.parse().ok();
        }
    }
    None
}

/// The socket on stdin, as a close-on-exec descriptor of its own; stdin becomes
/// `/dev/null`.
fn take_control() -> std::io::Result<OwnedFd> {
    let control = std::io::stdin().as_fd().try_clone_to_owned()?;
    rustix::net::sockopt::socket_type(&control)?;
    let null = std::fs::File::open("/dev/null")?;
    rustix::stdio::dup2_stdin(&null)?;
    Ok(control)
}

/// How the child behind `pidfd` ended (it has exited; not reaped).
fn end_of(pidfd: &OwnedFd) -> Reply {
    let status = waitid(
        WaitId::PidFd(pidfd.as_fd()),
        WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
    );
    match status {
        Ok(Some(status)) => match (status.exit_status(), status.terminating_signal()) {
            (Some(code), _) => Reply::Exited(code),
            (None, Some(signal)) => Reply::Killed(signal),
            (None, None) => Reply::Failed("the call's helper ended in an unknown way".into()),
        },
        Ok(None) | Err(_) => Reply::Failed("cannot read how the call's helper ended".into()),
    }
}

/// A received request: its descriptors and bytes.
#[derive(Debug)]
struct Request {
    socket: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    body: OwnedFd,
}

#[derive(Debug)]
enum Received {
    Request(Request),
    /// A usage request with its nonce.
    Usage(u64),
    /// A message without the descriptors a request has (ignored).
    Nothing,
    Closed,
}

fn receive(control: &OwnedFd) -> Received {
    let mut byte = [0_u8; 16];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(REQUEST_FDS))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let received = recvmsg(
        control,
        &mut [IoSliceMut::new(&mut byte)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC,
    );
    let msg = match received {
        Ok(msg) => msg,
        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => return Received::Nothing,
        Err(_) => return Received::Closed,
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Received::Closed;
    }
    if fds.is_empty()
        && msg.bytes == 9
        && byte[0] == USAGE_REQUEST
        && let Ok(nonce) = <[u8; 8]>::try_from(&byte[1..9])
    {
        return Received::Usage(u64::from_le_bytes(nonce));
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next(), fds.next()) {
        (Some(socket), Some(stdout), Some(stderr), Some(body)) => Received::Request(Request {
            socket,
            stdout,
            stderr,
            body,
        }),
        _ => Received::Nothing,
    }
}

/// Reads and checks a request's invocation (`server`: the pid of the server, the parent
/// to check). Done in the call's child, as a helper started for the call parses its own
/// arguments: the server allocates (and frees) nothing per call, so after each fork it
/// writes — and copies — fewer of the pages it shares with its running calls.
fn invocation_of(body: OwnedFd, server: u32) -> Result<SandboxInvocation, String> {
    let file = std::fs::File::from(body);
    // Read at once, from its start (the offset is the runtime's too: it is left alone).
    let size = rustix::fs::fstat(&file).map_or(0, |stat| stat.st_size);
    let size = u64::try_from(size).unwrap_or(0).min(MAX_REQUEST);
    let mut bytes = vec![0_u8; usize::try_from(size).unwrap_or(0)];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    let (args, env) = decode_request(&bytes)?;
    let mut args = args.into_iter();
    if args.next().as_deref() != Some(std::ffi::OsStr::new(SANDBOX_EXEC_ARG)) {
        return Err("the request is not a sandboxed command".to_owned());
    }
    let mut invocation = parse_invocation(args)?;
    invocation.parent = Some(server);
    invocation.env = Some(env);
    Ok(invocation)
}

/// What of the server a call's start uses.
struct Server<'a> {
    /// The control socket (replaced by `/dev/null` in the child).
    control: &'a mut OwnedFd,
    /// Rulesets built ahead; the child takes its copy's.
    prebuilt: &'a mut Prebuilt,
}

/// Forks the call's child; `None` when it could not start (the runtime was told why).
fn start(request: Request, server: Server<'_>, calls: &mut Vec<Call>) -> Option<Call> {
    let Request {
        socket,
        stdout,
        stderr,
        body,
    } = request;
    let fail = |socket: &OwnedFd, why: String| {
        let _ = send(socket, &Reply::Failed(why).encode(), SendFlags::NOSIGNAL);
    };
    let me = std::process::id();
    super::outside::refresh_mount_table();
    // Sound: this process has one thread (`warm_up` joined its own), so the child finds every lock
    // and the allocator as this thread left them.
    match fork::fork() {
        Ok(fork::Fork::Child) => {
            // Nothing of the server stays open in the child: a fresh helper has only its
            // stdio. (Its socket becomes `/dev/null` — the server's stdin, which the
            // child keeps as its own — close-on-exec: the runtime's end must see the
            // server's death, and no call must hold it.)
            let closed = rustix::io::dup3(
                rustix::stdio::stdin(),
                server.control,
                rustix::io::DupFlags::CLOEXEC,
            );
            calls.clear();
            drop(socket);
            if let Err(e) = closed {
                super::entry::fail(
                    super::entry::EXIT_SANDBOX_UNAVAILABLE,
                    &format!("cannot close the sandbox server's socket in the call: {e}"),
                );
            }
            // This process's copy: the server keeps its own.
            let prebuilt = std::mem::take(server.prebuilt);
            child(body, me, stdout, stderr, prebuilt)
        }
        Ok(fork::Fork::Parent(pid)) => {
            drop((stdout, stderr, body));
            let child = nix::unistd::Pid::from_raw(pid);
            // Also set in the child; whichever runs first, the group exists when the
            // runtime learns the pid.
            let _ = nix::unistd::setpgid(child, child);
            let pidfd = rustix::process::Pid::from_raw(pid)
                .ok_or(rustix::io::Errno::SRCH)
                .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()));
            let pidfd = match pidfd {
                Ok(pidfd) => pidfd,
                Err(e) => {
                    // Cannot watch it: it must not run.
                    let _ = nix::sys::signal::kill(child, NixSignal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(child, None);
                    fail(&socket, format!("cannot watch the call's helper: {e}"));
                    return None;
                }
            };
            // With a copy of the pidfd: should this server die during the call, the
            // runtime still holds the child exactly (its pid is then no longer kept
            // from reuse) and waits for it to kill its tree.
            let _ = send_with_fd(&socket, &Reply::Started(pid).encode(), pidfd.as_fd());
            Some(Call {
                pidfd,
                socket,
                exited: false,
                released: false,
            })
        }
        Err(e) => {
            fail(&socket, format!("cannot fork the call's helper: {e}"));
            None
        }
    }
}

/// Sends `bytes` on `socket` with a copy of `fd` (`SCM_RIGHTS`), without raising SIGPIPE.
fn send_with_fd(socket: &OwnedFd, bytes: &[u8], fd: BorrowedFd<'_>) -> rustix::io::Result<usize> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    sendmsg(
        socket,
        &[IoSlice::new(bytes)],
        &mut ancillary,
        SendFlags::NOSIGNAL,
    )
}

/// The call's child: made like a helper started for the call (its own process group,
/// the call's stdio and working directory, its arguments read from the request), then
/// that helper's work; never returns. A request it cannot read ends it with
/// [`EXIT_SANDBOX_USAGE`](super::entry::EXIT_SANDBOX_USAGE) and the reason on the call's
/// stderr, as a helper given malformed arguments does.
fn child(body: OwnedFd, server: u32, stdout: OwnedFd, stderr: OwnedFd, prebuilt: Prebuilt) -> ! {
    let me = nix::unistd::Pid::from_raw(0);
    let _ = nix::unistd::setpgid(me, me);
    // Its stdin is the server's: `/dev/null` (see `take_control`).
    let stdio =
        rustix::stdio::dup2_stdout(&stdout).and_then(|()| rustix::stdio::dup2_stderr(&stderr));
    drop((stdout, stderr));
    if let Err(e) = stdio {
        super::entry::fail(
            super::entry::EXIT_SANDBOX_UNAVAILABLE,
            &format!("cannot set up the command's output: {e}"),
        );
    }
    let invocation = match invocation_of(body, server) {
        Ok(invocation) => invocation,
        Err(why) => super::entry::fail(
            super::entry::EXIT_SANDBOX_USAGE,
            &format!("the sandbox server refused the call: {why}"),
        ),
    };
    if let Err(e) = std::env::set_current_dir(&invocation.cwd) {
        super::entry::fail(
            super::entry::EXIT_EXEC_FAILED,
            &format!(
                "cannot enter the working directory {}: {e}",
                invocation.cwd.display()
            ),
        );
    }
    super::supervise::run(&invocation, prebuilt)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{Reply, Usage, decode_request, encode_request};
    use std::ffi::OsString;

    #[test]
    fn a_request_round_trips_through_its_bytes() {
        let args: Vec<OsString> = ["__sandbox-exec", "", "bash", "-c", "echo 'a\nb'"]
            .into_iter()
            .map(OsString::from)
            .collect();
        let env = vec![
            (OsString::from("PATH"), OsString::from("/bin")),
            (OsString::from("EMPTY"), OsString::new()),
        ];
        let bytes = encode_request(&args, &env);
        assert_eq!(decode_request(&bytes), Ok((args, env)));
        assert_eq!(
            decode_request(&bytes[..bytes.len() - 1]),
            Err("the request is cut short".to_owned())
        );
    }

    #[test]
    fn replies_round_trip() {
        for reply in [
            Reply::Started(4242),
            Reply::Exited(0),
            Reply::Exited(127),
            Reply::Killed(9),
            Reply::Failed("why".into()),
        ] {
            assert_eq!(Reply::decode(&reply.encode()), Some(reply));
        }
        assert_eq!(Reply::decode(b"S12"), None);
        let usage = Usage {
            nonce: 7,
            own_us: 1_234,
            children_us: 56_789,
        };
        assert_eq!(Usage::decode(&usage.encode()), Some(usage));
        assert_eq!(Usage::decode(&usage.encode()[..20]), None);
        assert_eq!(Usage::request(7)[0], super::USAGE_REQUEST);
        assert_eq!(Reply::decode(b""), None);
    }
}

//! The runtime's side of the persistent sandbox helper (`server`): starting it on first
//! use, sending it a call, and reading the call's pid and end.
//!
//! Owns: one server per [`SandboxRunner`](super::SandboxRunner) (shared by its clones),
//! started on the first call, restarted on the next call after it died, given up for the
//! runner's lifetime when it cannot start (then every call starts a helper of its own,
//! as before); a call's own socket pair (its end of file before the call's end is the
//! server's death: the call fails with a clear error and the server is started again
//! for the next call). Must not: retry a call the server may have received (only one
//! that was never delivered is sent again), or keep the server alive once the runner and
//! every call are dropped (its socket closes, and the process is killed at once and
//! reaped just after on a thread of its own, never blocking an async worker, so it is not
//! left a zombie and its CPU time moves into the runtime's `RUSAGE_CHILDREN`, which
//! [`servers_cpu_time`] waits for), or let a call end before its helper killed the
//! command's tree when the server died during the call (the helper holds what left the
//! command's group; see `ServedCall::end_orphaned`).
//!
//! CPU accounting: a call's command is a child of the server, not of the runtime, so
//! `getrusage(RUSAGE_CHILDREN)` in the runtime counts it only once the server is reaped.
//! [`servers_cpu_time`] asks every live server of this process for its own CPU time and
//! its reaped children's; added to `RUSAGE_CHILDREN` it gives what a helper per call
//! gave.
//!
//! Shutdown: the server ends when the runtime does, however it ends: its socket's end of
//! file (the kernel closes the runtime's end when the runtime exits, even by SIGKILL)
//! ends it, and each call's helper has the server as its parent-death signal's source.
//! (`PR_SET_PDEATHSIG` on the server itself would fire when the runtime *thread* that
//! spawned it ends, and tokio's blocking threads end when idle.)

use super::server::{READY, REQUEST_FDS, Reply, SERVER_ARG, Usage, encode_request};
use crate::env_policy::EnvPolicy;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType, recvmsg, sendmsg, socketpair,
};
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// How long a starting server may take to say it is ready before the runner gives up on
/// it (and starts a helper per call).
const READY_LIMIT: Duration = Duration::from_secs(10);

/// How long a live server may take to answer a usage request before it is left out of
/// [`servers_cpu_time`].
const USAGE_LIMIT: Duration = Duration::from_secs(5);

/// How long the helper of a call whose server died may take to kill its command's tree
/// and end, before the runtime kills that tree itself (the helper is stuck).
const ORPHAN_LIMIT: Duration = Duration::from_secs(5);

/// Every server this process started that may still run (dropped ones are skipped).
static SERVERS: Mutex<Vec<Weak<Connection>>> = Mutex::new(Vec::new());

/// How many dropped servers are killed but not reaped yet (on a thread of their own):
/// their CPU time is in no figure until they are.
static REAPING: Mutex<usize> = Mutex::new(0);

/// Woken each time a dropped server was reaped.
static REAPED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// The CPU time (user + system) of every live persistent helper of this process: its
/// own and that of the calls it reaped (each call's helper with its command). Add it to
/// `getrusage(RUSAGE_CHILDREN)`, read after it, for the CPU of every child process,
/// served or not: a server counts here while it runs and in `RUSAGE_CHILDREN` once it was
/// dropped and reaped (it is killed as it is dropped and reaped just after on a thread of
/// its own; this waits for those reaps first). A server that does not answer within 5 s
/// is left out, and so is one not reaped within 5 s of its drop (a warning says so).
pub async fn servers_cpu_time() -> Duration {
    if tokio::time::timeout(USAGE_LIMIT, reaped()).await.is_err() {
        tracing::warn!(
            "a dropped persistent sandbox helper is not reaped yet; its CPU time is left out \
             of the count"
        );
    }
    let live: Vec<Arc<Connection>> = {
        let mut servers = SERVERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        servers.retain(|server| server.strong_count() > 0);
        servers.iter().filter_map(Weak::upgrade).collect()
    };
    let mut total = Duration::ZERO;
    for server in live {
        match server.usage().await {
            Ok(usage) => {
                total += Duration::from_micros(usage.own_us.saturating_add(usage.children_us));
            }
            Err(e) => tracing::warn!(
                pid = server.pid,
                "the persistent sandbox helper's CPU time is left out of the count: {e}"
            ),
        }
    }
    total
}

/// The server of one runner and its clones.
#[derive(Debug, Default)]
pub(crate) struct ServerSlot {
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    NotStarted,
    Running(Arc<Connection>),
    /// The server could not start: calls start a helper each.
    Unavailable,
}

/// A running server.
#[derive(Debug)]
struct Connection {
    /// (A sequenced-packet socket; tokio's datagram socket does its reads and writes.)
    control: UnixDatagram,
    /// Killed when the last holder drops it (the socket's end of file ends it anyway),
    /// then reaped on a thread of its own (`None` only once dropped).
    process: Option<std::process::Child>,
    /// Its pid (for messages).
    pid: u32,
    /// A call saw the server die, or a request could not be delivered.
    dead: AtomicBool,
    /// One usage request at a time on the control socket (the guard holds no data).
    asking: tokio::sync::Mutex<()>,
    /// The next usage request's nonce (a late answer to an abandoned request is skipped).
    nonce: AtomicU64,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SIGKILL ends the single-threaded server (stopped or not) at once; reaped so that
        // no zombie is left and its CPU time (with its calls') moves into the runtime's
        // `RUSAGE_CHILDREN`, as it left `servers_cpu_time` (which waits for the reap). Not
        // here: the last holder is often an async task, and `wait` blocks until the
        // kernel has torn the process down.
        if let Some(process) = self.process.take() {
            reap(process);
        }
    }
}

/// Why a call was not delivered to the server (it did not run; it may be sent again).
#[derive(Debug)]
struct NotDelivered;

impl ServerSlot {
    /// Starts `args` (the helper's `__sandbox-exec …` arguments) with `env` through the
    /// server, its stdout and stderr `stdout` and `stderr`; `None` when no server can run
    /// (the caller starts a helper for the call instead).
    ///
    /// Returns once the server forked the call's helper (its pid is known).
    pub(crate) async fn call(
        &self,
        helper: &Path,
        env_policy: &EnvPolicy,
        args: &[OsString],
        env: &[(OsString, OsString)],
        stdout: &OwnedFd,
        stderr: &OwnedFd,
    ) -> Option<std::io::Result<ServedCall>> {
        let request = encode_request(args, env);
        for _ in 0..2 {
            let connection = self.connection(helper, env_policy).await?;
            match connection.send(&request, stdout, stderr).await {
                Ok(call) => return Some(call.started().await),
                Err(NotDelivered) => connection.dead.store(true, Ordering::Relaxed),
            }
        }
        Some(Err(std::io::Error::other(
            "the sandbox server stopped taking calls just after it started; the command \
             was not run",
        )))
    }

    /// The running server, started now when there is none (or it died).
    async fn connection(&self, helper: &Path, env: &EnvPolicy) -> Option<Arc<Connection>> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Running(running) if !running.dead.load(Ordering::Relaxed) => {
                return Some(Arc::clone(running));
            }
            State::Unavailable => return None,
            State::Running(_) | State::NotStarted => {}
        }
        match Connection::start(helper, env).await {
            Ok(connection) => {
                let connection = Arc::new(connection);
                SERVERS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Arc::downgrade(&connection));
                *state = State::Running(Arc::clone(&connection));
                Some(connection)
            }
            Err(e) => {
                tracing::warn!(
                    helper = %helper.display(),
                    "the persistent sandbox helper cannot start ({e}); each command starts \
                     a helper of its own"
                );
                *state = State::Unavailable;
                None
            }
        }
    }
}

/// A close-on-exec sequenced-packet socket pair: ours non-blocking (tokio reads and
/// writes it), theirs as the server or the call's child gets it.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (ours, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::io::ioctl_fionbio(&ours, true)?;
    Ok((ours, theirs))
}

impl Connection {
    async fn start(helper: &Path, env: &EnvPolicy) -> std::io::Result<Self> {
        let (ours, theirs) = seqpacket_pair()?;
        let mut command = tokio::process::Command::new(helper);
        env.apply(&mut command);
        // A std child: reaped right after its SIGKILL when dropped (on a thread of its
        // own, which `servers_cpu_time` waits for), not left to tokio's background
        // reaping.
        let command = command.as_std_mut();
        command
            .arg(SERVER_ARG)
            .arg("--parent")
            .arg(std::process::id().to_string())
            .current_dir("/")
            // Not in the terminal's foreground group: Ctrl-C is the runtime's to handle.
            .process_group(0)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = command.spawn()?;
        let pid = process.id();
        // Built now, so that whatever fails below kills and reaps the process.
        let control = datagram(ours);
        let (control, process) = match control {
            Ok(control) => (control, process),
            Err(e) => {
                reap(process);
                return Err(e);
            }
        };
        let mut buf = [0_u8; 64];
        let ready = tokio::time::timeout(READY_LIMIT, control.recv(&mut buf)).await;
        let connection = Self {
            control,
            process: Some(process),
            pid,
            dead: AtomicBool::new(false),
            asking: tokio::sync::Mutex::new(()),
            nonce: AtomicU64::new(0),
        };
        match ready {
            Ok(Ok(n)) if buf.get(..n) == Some(READY) => Ok(connection),
            Ok(Ok(_)) => Err(std::io::Error::other(
                "the helper does not know `__sandbox-server` (it ended or answered \
                 something else)",
            )),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::other(format!(
                "it did not say it was ready within {} s",
                READY_LIMIT.as_secs()
            ))),
        }
    }

    /// The server's CPU time and its reaped calls', asked on the control socket.
    async fn usage(&self) -> std::io::Result<Usage> {
        let _one = self.asking.lock().await;
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed);
        let ask = async {
            self.control
                .async_io(Interest::WRITABLE, || {
                    send_now(&self.control, &Usage::request(nonce))
                })
                .await?;
            let mut buf = [0_u8; 64];
            loop {
                let n = self.control.recv(&mut buf).await?;
                if n == 0 {
                    return Err(std::io::Error::other("the server has ended"));
                }
                // An answer to an earlier request given up on is skipped.
                match buf.get(..n).and_then(Usage::decode) {
                    Some(usage) if usage.nonce == nonce => return Ok(usage),
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(USAGE_LIMIT, ask).await {
            Ok(answer) => answer,
            Err(_) => Err(std::io::Error::other(format!(
                "it did not answer within {} s",
                USAGE_LIMIT.as_secs()
            ))),
        }
    }

    /// Sends one call: its own socket pair (the server gets one end), its stdout and
    /// stderr, and its request in a memory file.
    async fn send(
        self: &Arc<Self>,
        request: &[u8],
        stdout: &OwnedFd,
        stderr: &OwnedFd,
    ) -> Result<ServedCall, NotDelivered> {
        let prepared = (|| -> std::io::Result<(OwnedFd, OwnedFd, OwnedFd)> {
            let (ours, theirs) = seqpacket_pair()?;
            let body =
                rustix::fs::memfd_create("foya-sandbox-call", rustix::fs::MemfdFlags::CLOEXEC)?;
            let mut file = std::fs::File::from(body);
            file.write_all(request)?;
            Ok((ours, theirs, OwnedFd::from(file)))
        })();
        // Not a server's fault, but nothing was delivered: the caller's next try (or its
        // fallback) reports the same error if it persists.
        let (ours, theirs, body) = prepared.map_err(|_| NotDelivered)?;
        let sent = self
            .control
            .async_io(Interest::WRITABLE, || {
                let fds = [theirs.as_fd(), stdout.as_fd(), stderr.as_fd(), body.as_fd()];
                let mut space =
                    [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(REQUEST_FDS))];
                let mut ancillary = SendAncillaryBuffer::new(&mut space);
                ancillary.push(SendAncillaryMessage::ScmRights(&fds));
                sendmsg(
                    &self.control,
                    &[IoSlice::new(b"c")],
                    &mut ancillary,
                    SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                )
                .map_err(std::io::Error::from)
            })
            .await;
        drop((theirs, body));
        match sent {
            Ok(_) => {
                let socket = datagram(ours).map_err(|_| NotDelivered)?;
                Ok(ServedCall {
                    socket,
                    pid: None,
                    helper: None,
                    orphaned_until: None,
                    status: None,
                    server: Arc::clone(self),
                })
            }
            Err(_) => Err(NotDelivered),
        }
    }
}

/// A call running in a child of the server.
#[derive(Debug)]
pub(crate) struct ServedCall {
    /// The runtime's end of the call's socket: closing it releases the call (the server
    /// kills what still runs, then reaps the call's helper).
    socket: UnixDatagram,
    pid: Option<u32>,
    /// The call's helper's pidfd, sent by the server with its pid: readable once the
    /// helper exited; it still names the helper once the server died (the pid then
    /// does not: the helper is no longer kept unreaped).
    helper: Option<OwnedFd>,
    /// When the server was found dead during the call: the latest time for its helper
    /// to end by itself (see [`end_orphaned`](Self::end_orphaned)).
    orphaned_until: Option<tokio::time::Instant>,
    status: Option<ExitStatus>,
    server: Arc<Connection>,
}

impl ServedCall {
    /// Waits for the server's word that the call's helper runs.
    async fn started(mut self) -> std::io::Result<Self> {
        match self.next().await {
            Some(Reply::Started(pid)) => {
                self.pid = u32::try_from(pid).ok();
                Ok(self)
            }
            Some(Reply::Failed(why)) => Err(std::io::Error::other(why)),
            _ => {
                self.server.dead.store(true, Ordering::Relaxed);
                Err(std::io::Error::other(
                    "the sandbox server ended before it started the command; it is started \
                     again for the next call",
                ))
            }
        }
    }

    /// The pid of the call's helper, the leader of the command's process group.
    pub(crate) fn id(&self) -> Option<u32> {
        self.pid
    }

    /// Waits for the call's helper to end (it ends the way the program did).
    ///
    /// # Cancel safety
    /// Cancel safe: a reply is read whole or not at all.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = match self.next().await {
            Some(Reply::Exited(code)) => ExitStatus::from_raw((code & 0xff) << 8),
            Some(Reply::Killed(signal)) => ExitStatus::from_raw(signal & 0x7f),
            Some(Reply::Failed(why)) => return Err(std::io::Error::other(why)),
            Some(Reply::Started(_)) | None => {
                self.server.dead.store(true, Ordering::Relaxed);
                self.end_orphaned().await;
                return Err(std::io::Error::other(
                    "the sandbox server died during the call, and the command with it; \
                     it is started again for the next call",
                ));
            }
        };
        self.status = Some(status);
        Ok(status)
    }

    /// The server died during the call. Its child, the call's helper, got its
    /// parent-death signal and kills the command's whole tree, what left the group
    /// included (it is that tree's subreaper): waits until the helper ended, so that the
    /// group kill that follows the call cannot kill the helper before it killed its tree
    /// (the runtime sees the socket's end of file before the kernel sends the signal; a
    /// `setsid` process would be re-parented to init and outlive the call). It is sent
    /// `SIGTERM` too (the same work). A helper that has not ended within
    /// [`ORPHAN_LIMIT`] (stuck; a stopped one is continued by the kernel, its group being
    /// orphaned) has its tree stopped and killed from here, and is killed.
    ///
    /// # Cancel safety
    /// Cancel safe: called again, it waits for the same deadline.
    async fn end_orphaned(&mut self) {
        let Some(helper) = &self.helper else {
            return;
        };
        let deadline = *self
            .orphaned_until
            .get_or_insert_with(|| tokio::time::Instant::now() + ORPHAN_LIMIT);
        let _ = rustix::process::pidfd_send_signal(helper, rustix::process::Signal::TERM);
        // Waited for on a blocking thread (`poll(2)` on the pidfd; the workspace has no
        // `unsafe` to register it with tokio), which ends by the deadline.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if let Ok(watched) = helper.try_clone() {
            let _ = tokio::task::spawn_blocking(move || wait_exit(&watched, left)).await;
        }
        if !has_exited(helper) {
            if let Some(pid) = self.pid.and_then(|pid| i32::try_from(pid).ok()) {
                let stopped = super::tree::stop_tree(pid);
                super::tree::kill_stopped(&stopped);
            }
            let _ = rustix::process::pidfd_send_signal(helper, rustix::process::Signal::KILL);
        }
    }

    /// The next reply (with the helper's pidfd when it carries one); `None` at end of
    /// file (the server is gone) or on an error.
    async fn next(&mut self) -> Option<Reply> {
        let mut buf = [0_u8; 4096];
        let socket = &self.socket;
        let (n, fd) = socket
            .async_io(Interest::READABLE, || receive(socket, &mut buf))
            .await
            .ok()?;
        let reply = Reply::decode(buf.get(..n)?)?;
        if let (Reply::Started(_), Some(fd)) = (&reply, fd) {
            self.helper = Some(fd);
        }
        Some(reply)
    }
}

/// One message of a call's socket without blocking, and the descriptor it carries.
fn receive(socket: &UnixDatagram, buf: &mut [u8]) -> std::io::Result<(usize, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let msg = recvmsg(
        socket,
        &mut [IoSliceMut::new(buf)],
        &mut ancillary,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    let mut fd = None;
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            for right in rights {
                fd = fd.or(Some(right));
            }
        }
    }
    Ok((msg.bytes, fd))
}

/// Whether the process behind `pidfd` has exited (its pidfd is readable).
fn has_exited(pidfd: &OwnedFd) -> bool {
    wait_exit(pidfd, Duration::ZERO)
}

/// Waits at most `limit` for the process behind `pidfd` to exit (blocking); whether it
/// has.
fn wait_exit(pidfd: &OwnedFd, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout = Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// Kills a server and reaps it on a thread of its own (the caller never waits; see
/// [`servers_cpu_time`] for who does).
fn reap(mut process: std::process::Child) {
    let _ = process.kill();
    if matches!(process.try_wait(), Ok(Some(_)) | Err(_)) {
        return;
    }
    *REAPING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
    let reaper = std::thread::Builder::new()
        .name("foya-sandbox-reap".to_owned())
        .spawn(move || {
            let _ = process.wait();
            reaped_one();
        });
    if let Err(e) = reaper {
        // The process is dropped unreaped: a zombie until this process ends.
        tracing::warn!("cannot reap the persistent sandbox helper: {e}");
        reaped_one();
    }
}

/// Counts one reap (or one given up) done, and wakes [`reaped`].
fn reaped_one() {
    let mut reaping = REAPING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *reaping = reaping.saturating_sub(1);
    drop(reaping);
    REAPED.notify_waiters();
}

/// Waits until every dropped server was reaped.
async fn reaped() {
    loop {
        let notified = REAPED.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let reaping = *REAPING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if reaping == 0 {
            return;
        }
        notified.await;
    }
}

/// Sends `bytes` on `socket` without blocking or raising SIGPIPE.
fn send_now(socket: &UnixDatagram, bytes: &[u8]) -> std::io::Result<usize> {
    rustix::net::send(socket, bytes, SendFlags::NOSIGNAL | SendFlags::DONTWAIT)
        .map_err(std::io::Error::from)
}

/// A non-blocking sequenced-packet socket, driven by tokio as a datagram socket (both
/// keep message boundaries; `recv` and `send` are the same calls).
fn datagram(socket: OwnedFd) -> std::io::Result<UnixDatagram> {
    UnixDatagram::from_std(std::os::unix::net::UnixDatagram::from(socket))
}

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
//! every call are dropped (its socket closes, and the process is killed).

use super::server::{READY, REQUEST_FDS, Reply, SERVER_ARG, encode_request};
use crate::env_policy::EnvPolicy;
use rustix::net::{
    AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
    sendmsg, socketpair,
};
use std::ffi::OsString;
use std::io::{IoSlice, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// How long a starting server may take to say it is ready before the runner gives up on
/// it (and starts a helper per call).
const READY_LIMIT: Duration = Duration::from_secs(10);

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
    /// Killed when the last holder drops it (the socket's end of file ends it anyway).
    _process: tokio::process::Child,
    /// A call saw the server die, or a request could not be delivered.
    dead: AtomicBool,
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

impl Connection {
    async fn start(helper: &Path, env: &EnvPolicy) -> std::io::Result<Self> {
        let (ours, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?;
        rustix::io::ioctl_fionbio(&ours, true)?;
        let mut command = tokio::process::Command::new(helper);
        command
            .arg(SERVER_ARG)
            .arg("--parent")
            .arg(std::process::id().to_string());
        env.apply(&mut command);
        command
            .current_dir("/")
            // Not in the terminal's foreground group: Ctrl-C is the runtime's to handle.
            .process_group(0)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let process = command.spawn()?;
        let control = datagram(ours)?;
        let mut buf = [0_u8; 64];
        let ready = tokio::time::timeout(READY_LIMIT, control.recv(&mut buf)).await;
        match ready {
            Ok(Ok(n)) if buf.get(..n) == Some(READY) => Ok(Self {
                control,
                _process: process,
                dead: AtomicBool::new(false),
            }),
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

    /// Sends one call: its own socket pair (the server gets one end), its stdout and
    /// stderr, and its request in a memory file.
    async fn send(
        self: &Arc<Self>,
        request: &[u8],
        stdout: &OwnedFd,
        stderr: &OwnedFd,
    ) -> Result<ServedCall, NotDelivered> {
        let prepared = (|| -> std::io::Result<(OwnedFd, OwnedFd, OwnedFd)> {
            let (ours, theirs) = socketpair(
                AddressFamily::UNIX,
                SocketType::SEQPACKET,
                SocketFlags::CLOEXEC,
                None,
            )?;
            rustix::io::ioctl_fionbio(&ours, true)?;
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
                return Err(std::io::Error::other(
                    "the sandbox server died during the call, and the command with it; \
                     it is started again for the next call",
                ));
            }
        };
        self.status = Some(status);
        Ok(status)
    }

    /// The next reply; `None` at end of file (the server is gone) or on an error.
    async fn next(&mut self) -> Option<Reply> {
        let mut buf = [0_u8; 4096];
        let n = self.socket.recv(&mut buf).await.ok()?;
        Reply::decode(buf.get(..n)?)
    }
}

/// A non-blocking sequenced-packet socket, driven by tokio as a datagram socket (both
/// keep message boundaries; `recv` and `send` are the same calls).
fn datagram(socket: OwnedFd) -> std::io::Result<UnixDatagram> {
    UnixDatagram::from_std(std::os::unix::net::UnixDatagram::from(socket))
}

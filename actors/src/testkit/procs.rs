//! Processes seen through `/proc`: the tests find a tool's child processes by a marker
//! in their command line (`exec -a MARKER …`) to check they run, and are gone after a
//! cancel, a signal or a crash; they wait for a process to exit on its pidfd.

/// Live (not zombie) processes whose command line contains `marker`, as
/// `(pid, argv[0])`, sorted by pid.
#[must_use]
pub fn marked(marker: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let (Ok(cmdline), Ok(stat)) = (
            std::fs::read(entry.path().join("cmdline")),
            std::fs::read_to_string(entry.path().join("stat")),
        ) else {
            continue; // exited meanwhile
        };
        // The state follows the parenthesised command name: "pid (comm) S ...".
        let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
        let cmdline = String::from_utf8_lossy(&cmdline).into_owned();
        if state != Some("Z") && cmdline.contains(marker) {
            let argv0 = cmdline.split('\0').next().unwrap_or_default().to_owned();
            out.push((pid, argv0));
        }
    }
    out.sort();
    out
}

/// Waits until the processes [`marked`] with `marker` satisfy `done` (e.g. the command
/// renamed by `exec -a` runs), polling `/proc` until `deadline`; returns them.
///
/// # Panics
/// When `deadline` passes first, naming `what` and the processes seen.
#[must_use]
pub fn wait_marked(
    marker: &str,
    deadline: std::time::Instant,
    what: &str,
    done: impl Fn(&[(i32, String)]) -> bool,
) -> Vec<(i32, String)> {
    loop {
        let now = marked(marker);
        if done(&now) {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}; marked processes: {now:?}"
        );
        // /proc has no change notification: a short poll under the caller's deadline.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits (until `deadline`) for a command renamed `marker` by `exec -a` to run (the shell
/// has printed what precedes the `exec` before it becomes the command); returns the pids
/// of every process [`marked`] with `marker` then.
///
/// # Panics
/// When it does not run by `deadline`.
#[must_use]
pub fn wait_running(marker: &str, deadline: std::time::Instant) -> Vec<i32> {
    wait_marked(marker, deadline, "the command to run", |now| {
        now.iter().any(|(_, argv0)| argv0 == marker)
    })
    .into_iter()
    .map(|(pid, _)| pid)
    .collect()
}

/// The parent of `pid` (`/proc/<pid>/stat`), if it still runs.
#[must_use]
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised command name: state, then the parent's pid.
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Pids of the live processes whose command line contains `marker` (see [`marked`]).
#[must_use]
pub fn processes_with(marker: &str) -> Vec<u32> {
    marked(marker)
        .into_iter()
        .filter_map(|(pid, _)| u32::try_from(pid).ok())
        .collect()
}

/// Waits until every process of `pids` has exited (a zombie counts as exited), or
/// `deadline` passes; returns whether they all exited. It waits on each process's pidfd
/// (readable once the process terminates, `pidfd_open(2)`), so no polling is involved;
/// a pid that no longer exists has exited.
#[must_use]
pub fn wait_exited(pids: &[i32], deadline: std::time::Instant) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    for &pid in pids {
        let Some(pid) = Pid::from_raw(pid) else {
            continue;
        };
        let Ok(fd) = pidfd_open(pid, PidfdFlags::empty()) else {
            continue; // gone already (ESRCH)
        };
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let timeout = Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(n) if n > 0 => break,
                Ok(_) => return false,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return false,
            }
        }
    }
    true
}

/// Whether `pid` is gone: no such process, or a zombie awaiting its reaper.
#[must_use]
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name: "pid (comm) S ...".
        Ok(stat) => {
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
                == Some('Z')
        }
    }
}

/// Waits until `pid` has exited (on its pidfd, on a blocking thread), under the global
/// [`TIMEOUT`](super::TIMEOUT).
///
/// # Panics
/// When it did not exit in time.
pub async fn wait_gone(pid: i32) {
    let deadline = std::time::Instant::now() + super::TIMEOUT;
    let exited = tokio::task::spawn_blocking(move || wait_exited(&[pid], deadline))
        .await
        .unwrap();
    assert!(exited, "process {pid} did not exit");
}

//! Owns killing a process tree: every live descendant of a process, including those that
//! left its process group (`setsid`, `setpgid`), which a group kill misses.
//!
//! The sandbox helper makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so a
//! tool's process whose parent exited is re-parented to the helper instead of to init:
//! while the helper lives, everything the tool started is below it in the process tree.
//! [`kill_tree`] freezes that tree with `SIGSTOP` (a stopped process cannot fork, so the
//! set stops growing), then `SIGKILL`s it. Parents are read from `/proc/<pid>/stat`
//! (`proc(5)`); no `unsafe` and no `pidfd` needed.
//!
//! Must not: signal a process outside the tree (pids are read fresh each round and only
//! followed down from the root), or loop forever (bounded rounds).

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet};

/// Most rounds of looking for new descendants before killing what was found (each round
/// stops what it found; a tree stops growing once all of it is stopped).
const MAX_ROUNDS: usize = 16;

/// One live (not zombie) process, as `/proc/<pid>/stat` shows it (`proc(5)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Process id.
    pub pid: i32,
    /// Parent's process id.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
}

/// Every live (not zombie) process, read from `/proc` now (processes that exit while it
/// is read are left out).
#[must_use]
pub fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses, so
            // read after the last ')'.
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse::<i32>().ok()?;
            let pgrp = fields.next()?.parse::<i32>().ok()?;
            (state != "Z" && state != "X").then_some(Process { pid, ppid, pgrp })
        })
        .collect()
}

/// The live descendants of `root` (not `root` itself), from one look at `/proc`.
#[must_use]
pub(crate) fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in processes() {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if let Some(kids) = children.get(&pid) {
            for &kid in kids {
                if kid != root && !out.contains(&kid) {
                    out.push(kid);
                    stack.push(kid);
                }
            }
        }
    }
    out
}

/// Stops and then `SIGKILL`s every live descendant of `root` (not `root` itself).
/// Returns how many processes were killed. Processes that exit meanwhile are fine
/// (`ESRCH` is ignored).
pub(crate) fn kill_tree(root: i32) -> usize {
    let stopped = stop_tree(root);
    kill_stopped(&stopped);
    stopped.len()
}

/// `SIGSTOP`s every live descendant of `root` (not `root` itself), round after round
/// until no new one appears (a stopped process cannot fork): the frozen tree, to
/// [`kill_stopped`].
pub(crate) fn stop_tree(root: i32) -> HashSet<i32> {
    let mut found: HashSet<i32> = HashSet::new();
    for _ in 0..MAX_ROUNDS {
        let new: Vec<i32> = descendants(root)
            .into_iter()
            .filter(|pid| !found.contains(pid))
            .collect();
        if new.is_empty() {
            break;
        }
        for &pid in &new {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
            found.insert(pid);
        }
    }
    found
}

/// `SIGKILL`s the processes [`stop_tree`] stopped.
pub(crate) fn kill_stopped(stopped: &HashSet<i32>) {
    for &pid in stopped {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn this_process_is_below_its_parent_and_a_leaf_has_no_descendants() {
        let me = i32::try_from(std::process::id()).unwrap();
        let parent = nix::unistd::getppid().as_raw();
        assert!(descendants(parent).contains(&me));
        let this = processes().into_iter().find(|p| p.pid == me).unwrap();
        assert_eq!(
            (this.ppid, this.pgrp),
            (parent, nix::unistd::getpgrp().as_raw())
        );
        // A process that does not exist has no descendants, and killing its tree
        // signals nothing.
        assert_eq!(descendants(i32::MAX), Vec::<i32>::new());
        assert_eq!(kill_tree(i32::MAX), 0);
    }
}

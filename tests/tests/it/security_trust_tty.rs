//! The first-use trust question at a real pseudo-terminal: `foya run` in a project with
//! an untrusted `.foya/config.toml` asks whether to trust it; a `y` records the trust
//! (the project's stop hook then runs, and `foya trust --list` names it), an `n` leaves
//! it ignored. Synchronisation is only by reading the terminal, under one timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya, scripted};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(120);
const QUESTION: &str = "Trust this project and apply it? [y/N] ";

/// Runs `foya run` at a terminal in a fresh project, answers the trust question with
/// `answer`; whether the project's stop hook ran, and the trusted projects listed after.
fn answer_with(answer: &str) -> (bool, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let (home, data, work) = (
        tmp.path().join("home"),
        tmp.path().join("data"),
        tmp.path().join("work"),
    );
    std::fs::create_dir_all(work.join(".foya")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        work.join(".foya/config.toml"),
        "[hooks]\nstop = [\"touch hook-ran\"]\n",
    )
    .unwrap();
    let script = tmp.path().join("s.json");
    std::fs::write(&script, r#"{"responses": [{"text": "done"}]}"#).unwrap();
    foya_tests::foya_bin::foya_bin();
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut keys = std::fs::File::from(pty.master);
    let slave: OwnedFd = pty.slave;
    let child = scripted("run", "auto", &script, &data, &work)
        .env("HOME", &home)
        .arg("go")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = keys.try_clone().unwrap();
    let (tx, screen) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            if tx
                .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                .is_err()
            {
                break;
            }
        }
    });
    let deadline = Instant::now() + TIMEOUT;
    let mut shown = String::new();
    while !shown.contains(QUESTION) {
        let left = deadline.saturating_duration_since(Instant::now());
        match screen.recv_timeout(left) {
            Ok(chunk) => shown.push_str(&chunk),
            Err(_) => panic!("no trust question; the terminal showed:\n{shown}"),
        }
    }
    keys.write_all(format!("{answer}\n").as_bytes()).unwrap();
    let status = foya_tests::child::wait_exit(child, deadline);
    assert_eq!(status.code(), Some(0), "{shown}");
    while let Ok(chunk) = screen.recv_timeout(Duration::from_millis(1)) {
        shown.push_str(&chunk);
    }
    let listed = foya()
        .env("HOME", &home)
        .args(["trust", "--list"])
        .output()
        .unwrap();
    (
        work.join("hook-ran").exists(),
        String::from_utf8_lossy(&listed.stdout).into_owned(),
        shown,
    )
}

#[test]
fn a_yes_at_the_first_use_question_trusts_the_project() {
    let (hook_ran, listed, shown) = answer_with("y");
    assert!(hook_ran, "{shown}");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(shown.contains("foya: trusting "), "{shown}");
}

#[test]
fn a_no_leaves_the_project_config_ignored() {
    let (hook_ran, listed, shown) = answer_with("n");
    assert!(!hook_ran, "{shown}");
    assert_eq!(listed, "");
    assert!(
        shown.contains("this project is not trusted; run `foya trust "),
        "{shown}"
    );
}

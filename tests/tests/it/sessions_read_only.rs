//! `foya sessions list` and `foya sessions show` only read: on a cleanly closed store
//! they leave `foya.redb` byte for byte as it was (every output form, and a session that
//! is not stored). A store whose writer was SIGKILLed mid-turn needs recovery before
//! redb reads it: they read it through a private copy that redb repairs (one dimmed note
//! on stderr), list and show every event the killed run printed, and leave the file as
//! it is (the next command that writes repairs it).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_storage::{OpenError, ReadOnlyStore};
use foya_tests::child::{outcome, read_until, spawn_json_lines};
use foya_tests::foya_bin::{foya, output_in, scripted};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// One global bound for a test's waits on its child.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The store file of data dir `data`.
fn store_file(data: &Path) -> std::path::PathBuf {
    data.join("foya.redb")
}

/// Runs `foya ARGS --data-dir DATA` and asserts the store file still holds `bytes`;
/// returns exit code, stdout and stderr.
fn unchanged_after(data: &Path, bytes: &[u8], args: &[&str]) -> (Option<i32>, String, String) {
    let out = outcome(&output_in(foya(), args, data));
    let now = std::fs::read(store_file(data)).unwrap();
    assert!(
        now == bytes,
        "`foya {}` changed the store ({} bytes before, {} after); it said {out:?}",
        args.join(" "),
        bytes.len(),
        now.len()
    );
    out
}

fn write_script(dir: &Path, responses: &[Value]) -> std::path::PathBuf {
    let path = dir.join("script.json");
    std::fs::write(&path, json!({ "responses": responses }).to_string()).unwrap();
    path
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn list_and_show_leave_a_cleanly_closed_store_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let script = write_script(tmp.path(), &[json!({"text": "hello there"})]);
    let out = scripted("run", "bypass", &script, &data, tmp.path())
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let bytes = std::fs::read(store_file(&data)).unwrap();

    let (code, stdout, stderr) = unchanged_after(&data, &bytes, &["sessions", "list", "--json"]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    let listed = json_lines(&stdout);
    assert_eq!(listed.len(), 1, "{stdout}");
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    let last_seq = listed[0]["last_seq"].as_u64().unwrap();

    let (code, stdout, stderr) = unchanged_after(&data, &bytes, &["sessions", "list"]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    assert!(
        stdout.starts_with(&format!("{id}  {last_seq:>5} events  ")),
        "{stdout}"
    );

    let (code, stdout, stderr) =
        unchanged_after(&data, &bytes, &["sessions", "show", &id, "--json"]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    let events = json_lines(&stdout);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=last_seq).collect::<Vec<_>>());
    assert_eq!(events.last().unwrap()["status"], "completed");

    let (code, stdout, stderr) = unchanged_after(&data, &bytes, &["sessions", "show", &id]);
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    assert!(
        stdout.lines().any(|l| l.ends_with("hello there")),
        "{stdout}"
    );

    let unknown = "01930000-0000-7000-8000-0000000000ab";
    let out = unchanged_after(&data, &bytes, &["sessions", "show", unknown]);
    assert_eq!(
        out,
        (
            Some(1),
            String::new(),
            format!("foya: no session {unknown}\n")
        )
    );
}

#[test]
fn a_store_left_by_a_killed_run_is_read_through_a_repaired_copy_and_left_as_it_is() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // A slow answer: the run is killed while it streams, its first events committed.
    let script = write_script(
        tmp.path(),
        &[
            json!({"text": "one two three four five six seven eight.", "chunk_chars": 4, "delay_ms": 100}),
        ],
    );
    foya_tests::foya_bin(); // built before the clock starts
    let deadline = Instant::now() + TIMEOUT;
    let mut run = spawn_json_lines(
        scripted("run", "bypass", &script, &data, tmp.path()).args(["--json", "start"]),
    );
    let mut printed = read_until(&run.lines, deadline, |l| l["type"] == "text_delta");
    run.child.kill().unwrap(); // SIGKILL: the store is never closed
    run.child.wait().unwrap();
    // What it printed before dying was committed too.
    printed.extend(run.lines.iter());
    let persisted: Vec<&Value> = printed.iter().filter(|l| l.get("seq").is_some()).collect();
    assert!(!persisted.is_empty(), "{printed:#?}");
    let id = persisted[0]["session_id"].as_str().unwrap().to_owned();
    // The state under test: redb reads this file only after its repair.
    let path = store_file(&data);
    match ReadOnlyStore::open(&path) {
        Err(OpenError::NeedsRecovery { .. }) => {}
        other => panic!("expected a store needing recovery, got {other:?}"),
    }

    // Several readers at once: each reads a repaired private copy and says so; none is
    // refused as if a writer held the file, and none writes it.
    let bytes = std::fs::read(&path).unwrap();
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let mut command = foya();
            command
                .args(["sessions", "list", "--json", "--data-dir"])
                .arg(&data)
                .env_remove("FOYA_DATA_DIR")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            command.spawn().unwrap()
        })
        .collect();
    let outcomes: Vec<_> = readers
        .into_iter()
        .map(|child| outcome(&child.wait_with_output().unwrap()))
        .collect();
    let note = format!(
        "foya: {} was not closed by its last writer (killed): showing it as redb's repair \
         keeps it, from a private copy (the file is left as it is; the next command that \
         writes repairs it)\n",
        path.display()
    );
    for (code, stdout, stderr) in &outcomes {
        assert!(
            *code == Some(0) && *stderr == note && *stdout == outcomes[0].1,
            "{outcomes:#?}"
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a reader wrote the store"
    );
    let stdout = &outcomes[0].1;
    let listed = json_lines(stdout);
    assert_eq!(listed.len(), 1, "{stdout}");
    assert_eq!(listed[0]["id"], id.as_str());
    let last_seq = listed[0]["last_seq"].as_u64().unwrap();
    assert!(
        last_seq >= persisted.len() as u64,
        "{listed:?} {persisted:#?}"
    );

    let (code, stdout, stderr) =
        unchanged_after(&data, &bytes, &["sessions", "show", &id, "--json"]);
    assert_eq!((code, stderr.as_str()), (Some(0), note.as_str()));
    let log = json_lines(&stdout);
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=last_seq).collect::<Vec<_>>());
    for event in &persisted {
        let seq = usize::try_from(event["seq"].as_u64().unwrap()).unwrap();
        assert_eq!(&&log[seq - 1], event, "a printed event changed or was lost");
    }
    // The next writer repairs it; reading then needs no copy.
    let out = output_in(foya(), &["sessions", "title", &id, "named"], &data);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let bytes = std::fs::read(&path).unwrap();
    let out = unchanged_after(&data, &bytes, &["sessions", "list", "--json"]);
    assert_eq!(json_lines(&out.1)[0]["title"], "named");
    assert_eq!((out.0, out.2.as_str()), (Some(0), ""));
}

#[test]
fn list_and_show_print_untrusted_text_without_terminal_controls() {
    // A project directory and a model answer carrying escape sequences (retitle the
    // window, clear the screen, write the clipboard) and a bidirectional override.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let project = tmp.path().join("p\u{1b}]0;owned\u{7}roject");
    std::fs::create_dir(&project).unwrap();
    let hostile = "ok \u{1b}[2J\u{1b}]52;c;ZXZpbA==\u{7} \u{202e}done";
    let script = write_script(tmp.path(), &[json!({ "text": hostile })]);
    let out = scripted("run", "bypass", &script, &data, &project)
        .arg("hi")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let list = outcome(&output_in(foya(), &["sessions", "list", "--json"], &data)).1;
    let id = json_lines(&list)[0]["id"].as_str().unwrap().to_owned();
    for (args, shown) in [
        (vec!["sessions", "list"], "p^[]0;owned^Groject"),
        (
            vec!["sessions", "show", &id],
            "ok ^[[2J^[]52;c;ZXZpbA==^G <U+202E>done",
        ),
    ] {
        let (code, stdout, stderr) = outcome(&output_in(foya(), &args, &data));
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            !stdout.contains(['\u{1b}', '\u{7}', '\u{202e}']),
            "`foya {}` printed terminal controls: {stdout:?}",
            args.join(" ")
        );
        assert!(stdout.contains(shown), "{stdout}");
    }
}

#[test]
fn list_and_show_name_acknowledged_events_an_older_copy_of_the_store_lacks() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let script = write_script(tmp.path(), &[json!({"text": "hello there"})]);
    let run = || {
        let out = scripted("run", "bypass", &script, &data, tmp.path())
            .args(["--json", "hi"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        json_lines(&String::from_utf8_lossy(&out.stdout))
            .into_iter()
            .find_map(|l| l["session_id"].as_str().map(str::to_owned))
            .unwrap()
    };
    run();
    let older = std::fs::read(store_file(&data)).unwrap();
    let gone = run();
    // An older copy of the file put in place of the newer one, cleanly closed both.
    std::fs::write(store_file(&data), &older).unwrap();
    let warning = format!("foya: warning: session {gone} is gone: it was acknowledged up to seq");
    for args in [&["sessions", "list"][..], &["sessions", "show", &gone][..]] {
        let (_, _, stderr) = unchanged_after(&data, &older, args);
        assert!(stderr.contains(&warning), "{stderr}");
    }
}

/// The modes of the entries `dir` holds, by name.
fn modes(dir: &Path) -> std::collections::BTreeMap<String, u32> {
    // The file mode bits, `0o755` for `rwxr-xr-x`.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let mode = e.metadata().unwrap().permissions().mode() & 0o777;
            (e.file_name().to_string_lossy().into_owned(), mode)
        })
        .collect()
}

#[test]
fn private_copies_of_the_store_and_a_salvage_target_are_readable_by_the_user_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // A prompt larger than a pipe's buffer: `sessions show` blocks printing it, while the
    // copy it reads exists.
    let prompt = "x".repeat(100_000);
    let script = write_script(
        tmp.path(),
        &[
            json!({"text": "one two three four five six seven eight.", "chunk_chars": 4, "delay_ms": 100}),
        ],
    );
    foya_tests::foya_bin(); // built before the clock starts
    let deadline = Instant::now() + TIMEOUT;
    let mut run = spawn_json_lines(
        scripted("run", "bypass", &script, &data, tmp.path()).args(["--json", &prompt]),
    );
    let printed = read_until(&run.lines, deadline, |l| l["type"] == "text_delta");
    run.child.kill().unwrap(); // SIGKILL: the store is never closed
    run.child.wait().unwrap();
    let id = printed
        .iter()
        .find_map(|l| l["session_id"].as_str())
        .unwrap()
        .to_owned();
    let path = store_file(&data);

    // A store whose writer was killed (read through a repaired copy), then one cut short
    // (read as salvage reads it): while `show` prints, every temporary directory it made
    // is the user's alone (the data dir is 0700: a copy must not be less private).
    for (label, cut, code) in [("killed", 0, 0), ("cut short", 1, 4)] {
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - cut]).unwrap();
        let tmpdir = tmp.path().join(format!("tmp-{cut}"));
        std::fs::create_dir(&tmpdir).unwrap();
        let mut show = foya()
            .args(["sessions", "show", &id, "--json", "--data-dir"])
            .arg(&data)
            .env("TMPDIR", &tmpdir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        std::io::Read::read_exact(show.stdout.as_mut().unwrap(), &mut first).unwrap();
        let during = modes(&tmpdir);
        let out = show.wait_with_output().unwrap();
        let (status, stdout, stderr) = outcome(&out);
        assert_eq!(status, Some(code), "{label}: {stderr}");
        assert!(
            stdout.contains(&prompt),
            "{label}: the prompt was not shown"
        );
        assert!(!during.is_empty(), "{label}: no private copy was made");
        assert!(
            during.values().all(|mode| *mode == 0o700),
            "{label}: temporary entries open to others while `show` ran: {:?}",
            during
                .iter()
                .map(|(name, mode)| format!("{name} {mode:o}"))
                .collect::<Vec<_>>()
        );
    }

    // A salvage target the command creates is private too.
    let to = tmp.path().join("salvaged");
    let out = output_in(
        foya(),
        &["store", "salvage", "--to", to.to_str().unwrap()],
        &data,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mode = modes(tmp.path())["salvaged"];
    assert_eq!(mode, 0o700, "salvage created its target with mode {mode:o}");
}

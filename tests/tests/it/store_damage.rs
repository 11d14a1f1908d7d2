//! Fault injection on the event store, through the real `foya` binary and real files. A
//! fixture data dir is built once: four sessions whose turns completed (each with a tool
//! call) and one whose turn was SIGKILLed mid-tool (so its file also needs redb's
//! repair). Every line `foya run --json` printed with a seq was acknowledged. Each case
//! copies the fixture, damages `foya.redb` and runs `store check`, `store salvage`,
//! `sessions list`, `sessions show` and `run --session` on it. Checked for every case:
//! no command panics (exit 101 never appears, no panic message) and a failing one says
//! why on a `foya: ` line; `store check` exits 4 for every damage that touches data;
//! salvage names every acknowledged session, copies only events identical to the
//! acknowledged ones, and flags every session it could not copy whole (no acknowledged
//! event disappears unreported); salvaged sessions take a new turn (the killed one's
//! interrupted turn is closed the usual way first). And damage hides nothing salvage can
//! read: on a cut tail, an emptied file, a damaged header and a deterministic sample of
//! bit flips, `sessions list` and `show` show exactly what salvage copies and write
//! nothing; `run` and `serve` refuse, naming `foya store repair`, which keeps the damaged
//! file and after which a check still names what was lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::foya;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One bound for the fixture's killed run.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The fixture, built once per test binary.
struct Fixture {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    work: PathBuf,
    script_text: PathBuf,
    /// Persisted events each session's run printed (acknowledged), by session id.
    acknowledged: BTreeMap<String, Vec<Value>>,
    /// The session whose turn was killed mid-tool.
    killed: String,
}

fn run(fx_data: &Path, work: &Path, script: &Path, session: Option<&str>) -> Output {
    let mut command = foya();
    command
        .args([
            "run",
            "--provider",
            "scripted",
            "--approval",
            "bypass",
            "--json",
        ])
        .arg("--script")
        .arg(script)
        .arg("--data-dir")
        .arg(fx_data)
        .arg("--cwd")
        .arg(work);
    if let Some(id) = session {
        command.args(["--session", id]);
    }
    command.arg("go").output().unwrap()
}

fn persisted(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("seq").is_some())
        .collect()
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let (data, work) = (tmp.path().join("data"), tmp.path().join("work"));
        std::fs::create_dir_all(&work).unwrap();
        let write = |name: &str, responses: Value| {
            let path = tmp.path().join(name);
            std::fs::write(&path, json!({ "responses": responses }).to_string()).unwrap();
            path
        };
        let tool_turn = write(
            "tool.json",
            json!([
                {"tool_calls": [{"id": "c1", "name": "shell", "arguments": {"command": "echo hello"}}]},
                {"text": "done"}
            ]),
        );
        // A scripted model answers response N+1 after N assistant messages: enough for a
        // new turn on any fixture session.
        let script_text = write("text.json", Value::Array(vec![json!({"text": "again"}); 6]));
        let killed_turn = write(
            "killed.json",
            json!([{"tool_calls": [{"id": "k1", "name": "shell",
                "arguments": {"command": "echo $$ >> runs.log; exec sleep 30"}}]}]),
        );
        let mut acknowledged = BTreeMap::new();
        for _ in 0..4 {
            let out = run(&data, &work, &tool_turn, None);
            assert!(out.status.success(), "{out:?}");
            let events = persisted(&out.stdout);
            let id = events[0]["session_id"].as_str().unwrap().to_owned();
            acknowledged.insert(id, events);
        }
        // The fifth turn is SIGKILLed while its tool runs.
        let mut command = foya();
        command
            .args(["run", "--provider", "scripted", "--approval", "bypass", "--json"])
            .arg("--script")
            .arg(&killed_turn)
            .arg("--data-dir")
            .arg(&data)
            .arg("--cwd")
            .arg(&work)
            .arg("go");
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<Value>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str(&line)
                    && tx.send(value).is_err()
                {
                    break;
                }
            }
        });
        let deadline = Instant::now() + TIMEOUT;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).expect("the killed run's tool_started");
            let started = line["type"] == "tool_started";
            lines.push(line);
            if started {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        while let Ok(line) = rx.recv_timeout(TIMEOUT) {
            lines.push(line);
        }
        for pid in std::fs::read_to_string(work.join("runs.log"))
            .unwrap_or_default()
            .lines()
        {
            let _ = std::process::Command::new("kill").args(["-9", pid]).status();
        }
        let events: Vec<Value> = lines.into_iter().filter(|v| v.get("seq").is_some()).collect();
        let killed = events[0]["session_id"].as_str().unwrap().to_owned();
        acknowledged.insert(killed.clone(), events);
        Fixture {
            _tmp: tmp,
            data,
            work,
            script_text,
            acknowledged,
            killed,
        }
    })
}

/// `foya ARGS --data-dir DATA`: code, stdout, stderr; fails the test on a panic.
fn foya_in(data: &Path, args: &[&str]) -> (i32, String, String) {
    let out = foya()
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(code, 101, "{args:?} panicked: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{args:?}: {stderr}"
    );
    if code != 0 {
        assert!(
            stderr.lines().any(|l| l.starts_with("foya: ")),
            "{args:?} exited {code} without a foya: line: {stderr}"
        );
    }
    (code, stdout, stderr)
}

/// What salvage printed for one session: events copied, and whether whole.
fn salvage_lines(stdout: &str) -> BTreeMap<String, (u64, bool)> {
    let mut out = BTreeMap::new();
    for line in stdout.lines().filter(|l| !l.starts_with("note: ")) {
        let (id, rest) = line.split_once("  ").unwrap();
        let copied = rest
            .strip_prefix("copied ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let whole = rest.starts_with("copied ") && rest.ends_with(" events");
        out.insert(id.to_owned(), (copied, whole));
    }
    out
}

/// Copies the fixture, damages its store file with `damage`, runs every command.
/// Returns `store check`'s exit code and the salvage per session.
fn case(label: &str, damage: impl FnOnce(&mut Vec<u8>)) -> (i32, BTreeMap<String, (u64, bool)>) {
    let fx = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for entry in std::fs::read_dir(&fx.data).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), data.join(entry.file_name())).unwrap();
        }
    }
    let file = data.join("foya.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    damage(&mut bytes);
    std::fs::write(&file, &bytes).unwrap();

    let (check, check_out, _) = foya_in(&data, &["store", "check"]);
    assert!(check == 0 || check == 4, "{label}: check exited {check}");
    let new = tmp.path().join("new");
    let new_arg = new.to_str().unwrap();
    let (salvage, stdout, _) = foya_in(&data, &["store", "salvage", "--to", new_arg]);
    assert!(
        salvage == 0 || salvage == 4,
        "{label}: salvage exited {salvage}"
    );
    let salvaged = salvage_lines(&stdout);
    eprintln!(
        "case {label}: check exit {check}, salvage exit {salvage}, copied {salvaged:?}\n{check_out}"
    );
    // The old file was not written.
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "{label}");
    for (id, acked) in &fx.acknowledged {
        let Some((copied, whole)) = salvaged.get(id) else {
            panic!("{label}: salvage does not name {id}: {stdout}");
        };
        // Never more than was acknowledged (a killed turn's unacknowledged tail aside),
        // and a session short of its acknowledged events is flagged.
        if (*copied as usize) < acked.len() {
            assert!(
                !whole,
                "{label}: {id} lost acknowledged events unreported: {stdout}"
            );
            assert_eq!(salvage, 4, "{label}");
        }
        if *copied == 0 {
            continue;
        }
        let (code, log, _) = foya_in(&new, &["sessions", "show", id, "--json"]);
        assert_eq!(code, 0, "{label}");
        let log: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(log.len() as u64, *copied, "{label}");
        for (got, want) in log.iter().zip(acked) {
            assert_eq!(got, want, "{label}: a salvaged event differs");
        }
    }
    // Salvaged sessions take a new turn: the killed one (its interrupted turn is closed
    // first) and one whose turn completed.
    let complete = fx.acknowledged.keys().find(|id| **id != fx.killed).unwrap();
    for id in [&fx.killed, complete] {
        if salvaged.get(id).is_some_and(|(copied, _)| *copied > 0) {
            let out = run(&new, &fx.work, &fx.script_text, Some(id));
            assert!(out.status.success(), "{label}: new turn on {id}: {out:?}");
            let events = persisted(&out.stdout);
            let last = events.last().unwrap();
            assert_eq!(last["type"], "turn_complete", "{label}");
            assert_eq!(last["status"], "completed", "{label}");
        }
    }
    // Reading and running on the damaged dir: values, never a panic. The first read
    // repairs a file that needs it; a session it lists with fewer events than were
    // acknowledged is named on stderr (lost, or unreadable).
    let (list, listed, stderr) = foya_in(&data, &["sessions", "list", "--json"]);
    assert!(list == 0 || list == 4, "{label}: list exited {list}");
    for line in listed.lines() {
        let summary: Value = serde_json::from_str(line).unwrap();
        let id = summary["id"].as_str().unwrap();
        let Some(acked) = fx.acknowledged.get(id) else {
            continue;
        };
        if summary["last_seq"].as_u64().unwrap() < acked.len() as u64 {
            assert!(
                stderr.lines().any(|l| l.contains(id) && l.contains("lost")),
                "{label}: {id} lists fewer events than were acknowledged, unreported: {stderr}"
            );
        }
    }
    for id in fx.acknowledged.keys() {
        foya_in(&data, &["sessions", "show", id]);
    }
    foya_in(
        &data,
        &[
            "run",
            "--provider",
            "scripted",
            "--approval",
            "bypass",
            "--script",
            fx.script_text.to_str().unwrap(),
            "--session",
            &fx.killed,
            "go",
        ],
    );
    (check, salvaged)
}

/// Whether every acknowledged session was copied whole.
fn all_whole(salvaged: &BTreeMap<String, (u64, bool)>) -> bool {
    fixture()
        .acknowledged
        .keys()
        .all(|id| salvaged.get(id).is_some_and(|(_, whole)| *whole))
}

#[test]
fn truncation_and_overwritten_tails_are_reported_and_salvaged() {
    let len = std::fs::metadata(fixture().data.join("foya.redb"))
        .unwrap()
        .len() as usize;
    // Undamaged (its last writer killed, so it needs redb's repair): sound.
    let (check, salvaged) = case("no damage", |_| {});
    assert_eq!(check, 0);
    assert!(all_whole(&salvaged), "{salvaged:?}");
    let (check, salvaged) = case("truncate 1 byte", |b| b.truncate(len - 1));
    assert_eq!(check, 4);
    assert!(all_whole(&salvaged), "{salvaged:?}");
    let (check, salvaged) = case("truncate 4 KiB", |b| b.truncate(len - 4096));
    assert_eq!(check, 4);
    assert!(all_whole(&salvaged), "{salvaged:?}");
    let (check, _) = case("truncate to half", |b| b.truncate(len / 2));
    assert_eq!(check, 4);
    let (_, salvaged) = case("random last 4 KiB", |b| {
        let mut x = 0x9e37_79b9_u32;
        for byte in &mut b[len - 4096..] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *byte = x as u8;
        }
    });
    // The killed writer's last page is not part of the commit redb's repair keeps: what
    // the store holds is sound (the check may pass: nothing acknowledged is missing, which
    // it compares against the journal) and every event survives.
    assert!(all_whole(&salvaged), "{salvaged:?}");
}

#[test]
fn bit_flips_in_every_early_page_and_random_pages_never_panic() {
    let len = std::fs::metadata(fixture().data.join("foya.redb"))
        .unwrap()
        .len() as usize;
    let mut offsets: Vec<usize> = (0..16).map(|page| page * 4096 + 64).collect();
    offsets.extend([12288, 16384]);
    let mut x = 42u64;
    for _ in 0..6 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        offsets.push(((x >> 33) as usize % (len / 4096)) * 4096 + (x as usize % 4096));
    }
    for offset in offsets.into_iter().filter(|o| *o < len) {
        let (check, salvaged) = case(&format!("bit flip at {offset}"), |b| b[offset] ^= 0x10);
        // Damage that hits data is reported; a flip in a free page changes nothing read.
        assert!(check == 4 || all_whole(&salvaged), "flip at {offset}");
    }
    for offset in [4096, 8192] {
        let (check, salvaged) = case(&format!("16 inverted bytes at {offset}"), |b| {
            b[offset..offset + 16].iter_mut().for_each(|x| *x = !*x);
        });
        assert!(check == 4 || all_whole(&salvaged), "invert at {offset}");
    }
}

#[test]
fn zeroed_regions_foreign_files_and_newer_formats_are_reported() {
    let len = std::fs::metadata(fixture().data.join("foya.redb"))
        .unwrap()
        .len() as usize;
    // Pages of the fixture's committed trees (where they lie depends on the writes: the
    // recovery index, then the listing index, moved them by a page).
    let (check, _) = case("zeroed 16-24 KiB", |b| b[16384..24576].fill(0));
    assert_eq!(check, 4);
    let (check, _) = case("zeroed middle", |b| b[len / 2..len / 2 + 8192].fill(0));
    assert!(check == 4 || check == 0);
    let (check, salvaged) = case("empty file", Vec::clear);
    assert_eq!(check, 4);
    assert!(salvaged.values().all(|(copied, _)| *copied == 0));
    let (check, _) = case("not a redb file", |b| {
        *b = b"these are my notes, not a database\n".repeat(300);
    });
    assert_eq!(check, 4);
    let (check, _) = case("newer format version", |b| {
        b[64] = 9;
        b[64 + 128] = 9;
    });
    assert_eq!(check, 4);
}

/// A copy of the fixture's data dir whose store file `damage` changed; returns the temp
/// dir (kept alive), the data dir and the damaged bytes.
fn damaged_copy(damage: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let fx = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    for entry in std::fs::read_dir(&fx.data).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), data.join(entry.file_name())).unwrap();
        }
    }
    let file = data.join("foya.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    damage(&mut bytes);
    std::fs::write(&file, &bytes).unwrap();
    (tmp, data, bytes)
}

/// What `sessions list --json` lists (last seq by session id), its exit code and stderr.
fn listed(data: &Path) -> (i32, BTreeMap<String, u64>, String) {
    let (code, stdout, stderr) = foya_in(data, &["sessions", "list", "--json"]);
    let listed = stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_str().unwrap().to_owned(),
                v["last_seq"].as_u64().unwrap(),
            )
        })
        .collect();
    (code, listed, stderr)
}

/// What `store salvage` copies of `data` into `to`: its exit code and the events copied
/// by session id (the sessions copied at all).
fn salvaged(data: &Path, to: &Path) -> (i32, BTreeMap<String, u64>) {
    let (code, stdout, _) = foya_in(data, &["store", "salvage", "--to", to.to_str().unwrap()]);
    assert!(code == 0 || code == 4, "salvage exited {code}");
    let copied = salvage_lines(&stdout)
        .into_iter()
        .filter(|(_, (copied, _))| *copied > 0)
        .map(|(id, (copied, _))| (id, copied))
        .collect();
    (code, copied)
}

/// The store's files of a data dir (`foya.redb*`: the database, its journal, losses,
/// files moved aside) and their lengths and digests.
fn files(data: &Path) -> BTreeMap<String, (usize, u64)> {
    use std::hash::{Hash as _, Hasher as _};
    std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .filter(|e| e.file_name().to_string_lossy().starts_with("foya.redb"))
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes.len(), hasher.finish()),
            )
        })
        .collect()
}

/// `foya run --session ID go` on `data` (scripted, one text answer).
fn run_on(data: &Path, id: &str) -> (i32, String, String) {
    let fx = fixture();
    foya_in(
        data,
        &[
            "run",
            "--provider",
            "scripted",
            "--approval",
            "bypass",
            "--script",
            fx.script_text.to_str().unwrap(),
            "--cwd",
            fx.work.to_str().unwrap(),
            "--session",
            id,
            "go",
        ],
    )
}

/// `foya serve` on `data`: its exit code and stderr when it refuses, `None` when it
/// started (it is then killed).
fn serve_on(data: &Path) -> Option<(i32, String)> {
    let fx = fixture();
    let mut child = foya()
        .args(["serve", "--provider", "scripted", "--script"])
        .arg(&fx.script_text)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .current_dir(&fx.work)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    if first.starts_with("http://") {
        child.kill().unwrap();
        child.wait().unwrap();
        return None;
    }
    let out = child.wait_with_output().unwrap();
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn a_cut_tail_after_a_kill_reads_as_salvage_reads_it_and_repair_is_the_way_on() {
    let fx = fixture();
    let len = std::fs::metadata(fx.data.join("foya.redb")).unwrap().len() as usize;
    // Cuts that reach committed pages: the file's tail may be free pages (which pages
    // end it is redb's layout, the listing index's writes moved it), whose cut loses
    // nothing; half the file always holds committed ones.
    let half = len / 2 / 4096 * 4096;
    for cut in [half, half + 16384] {
        let (tmp, data, bytes) = damaged_copy(|b| b.truncate(len - cut));
        let before = files(&data);
        let new = tmp.path().join("salvaged");
        let (_, copied) = salvaged(&data, &new);
        assert!(!copied.is_empty(), "cut {cut}: salvage copied nothing");

        // Reading commands show exactly what salvage copies, event for event, and say
        // the store is damaged.
        let (code, list, stderr) = listed(&data);
        assert_eq!(list, copied, "cut {cut}: {stderr}");
        assert_eq!(code, 4, "cut {cut}: {stderr}");
        assert!(
            stderr.contains("`foya store repair`"),
            "cut {cut}: {stderr}"
        );
        for id in copied.keys() {
            let (code, shown, _) = foya_in(&data, &["sessions", "show", id, "--json"]);
            assert_eq!(code, 4, "cut {cut}");
            let (code, want, _) = foya_in(&new, &["sessions", "show", id, "--json"]);
            assert_eq!(code, 0, "cut {cut}");
            assert_eq!(shown, want, "cut {cut}: {id}");
        }
        // They wrote nothing.
        assert_eq!(files(&data), before, "cut {cut}");

        // `run` and `serve` refuse, naming the way on.
        let (code, _, stderr) = run_on(&data, &fx.killed);
        assert_eq!(code, 4, "cut {cut}: {stderr}");
        assert!(
            stderr.contains("`foya store repair`"),
            "cut {cut}: {stderr}"
        );
        let (code, stderr) = serve_on(&data).expect("serve refuses a damaged store");
        assert_eq!(code, 4, "cut {cut}: {stderr}");
        assert!(
            stderr.contains("`foya store repair`"),
            "cut {cut}: {stderr}"
        );
        assert_eq!(files(&data), before, "cut {cut}");

        // `store repair` puts what salvage reads in place and keeps the damaged file.
        let (code, _, stderr) = foya_in(&data, &["store", "repair"]);
        assert_eq!(code, 0, "cut {cut}: {stderr}");
        let kept: Vec<_> = files(&data)
            .into_keys()
            .filter(|name| name.starts_with("foya.redb.damaged-") && !name.ends_with(".acks"))
            .collect();
        assert_eq!(kept.len(), 1, "cut {cut}: {stderr}");
        assert!(
            std::fs::read(data.join(&kept[0])).unwrap() == bytes,
            "cut {cut}: the damaged file is not kept as it was"
        );
        assert!(stderr.contains(&kept[0]), "cut {cut}: {stderr}");
        let (code, list, stderr) = listed(&data);
        assert_eq!((code, &list), (0, &copied), "cut {cut}: {stderr}");
        let (code, _, stderr) = foya_in(&data, &["store", "check"]);
        assert_eq!(code, 0, "cut {cut}: {stderr}");
        // The killed session takes a new turn; the server starts.
        let (code, _, stderr) = run_on(&data, &fx.killed);
        assert_eq!(code, 0, "cut {cut}: {stderr}");
        assert_eq!(serve_on(&data), None, "cut {cut}");
    }
}

#[test]
fn an_emptied_store_is_not_started_over_by_a_reading_command() {
    let fx = fixture();
    let (_tmp, data, _) = damaged_copy(Vec::clear);
    let before = files(&data);
    let (code, list, stderr) = listed(&data);
    assert_eq!(code, 4, "{stderr}");
    assert!(list.is_empty(), "{list:?}");
    assert!(!stderr.contains("repaired"), "{stderr}");
    for id in fx.acknowledged.keys() {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(id.as_str()) && l.contains("cannot be read")),
            "{id} is not named: {stderr}"
        );
        let (code, _, _) = foya_in(&data, &["sessions", "show", id]);
        assert_eq!(code, 4);
    }
    // Nothing was written: no fresh database, the journal as it was, nothing moved.
    assert_eq!(files(&data), before);
    let (code, stdout, _) = foya_in(&data, &["store", "check"]);
    assert_eq!(code, 4, "{stdout}");
    // A writer does not start over either.
    let (code, _, stderr) = run_on(&data, &fx.killed);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("empty"), "{stderr}");
    assert!(stderr.contains("`foya store repair`"), "{stderr}");
    assert_eq!(files(&data), before);

    // Starting over is `store repair`'s: the empty file is kept, every acknowledged
    // session is named as lost, and the check after it still names them.
    let (code, _, stderr) = foya_in(&data, &["store", "repair"]);
    assert_eq!(code, 0, "{stderr}");
    for id in fx.acknowledged.keys() {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(id.as_str()) && l.contains("is gone")),
            "{id}: {stderr}"
        );
    }
    assert!(
        files(&data)
            .iter()
            .any(|(name, (len, _))| name.starts_with("foya.redb.damaged-") && *len == 0),
        "{:?}",
        files(&data).keys()
    );
    let (code, stdout, stderr) = foya_in(&data, &["store", "check"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for id in fx.acknowledged.keys() {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("reported earlier: ") && l.contains(id.as_str())),
            "{id}: {stdout}"
        );
    }
    assert!(
        stderr.contains("lost acknowledged events earlier"),
        "{stderr}"
    );
}

#[test]
fn a_damaged_header_is_named_as_damage_and_read_as_salvage_reads_it() {
    let (tmp, data, _) = damaged_copy(|b| {
        b[64] = 9;
        b[64 + 128] = 9;
    });
    // Salvage recovers everything, and the reading commands show it.
    let (salvage, copied) = salvaged(&data, &tmp.path().join("new"));
    assert_eq!(salvage, 0);
    let (code, list, stderr) = listed(&data);
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(list, copied, "{stderr}");
    for stderr in [stderr, run_on(&data, &fixture().killed).2] {
        assert!(stderr.contains("header is damaged"), "{stderr}");
        assert!(!stderr.contains("newer format"), "{stderr}");
        assert!(
            !stderr.contains("the foya version that wrote it"),
            "{stderr}"
        );
    }
}

#[test]
fn bit_flips_hide_nothing_salvage_reads() {
    let len = std::fs::metadata(fixture().data.join("foya.redb"))
        .unwrap()
        .len() as usize;
    // A deterministic sample: every 31st bit of the header (its first 320 bytes), and
    // every 16381st bit of the rest of the file (a prime: each lands at another offset
    // of its page).
    let mut bits: Vec<usize> = (0..320 * 8).step_by(31).collect();
    bits.extend((320 * 8..len * 8).step_by(16381));
    let mut hidden = Vec::new();
    for bit in bits {
        let (tmp, data, _) = damaged_copy(|b| b[bit / 8] ^= 1 << (bit % 8));
        let (salvage, copied) = salvaged(&data, &tmp.path().join("new"));
        let (code, list, stderr) = listed(&data);
        assert!(code == 0 || code == 4, "bit {bit}: list exited {code}");
        // What salvage copies is listed, nothing else; a list that says the store is
        // sound (exit 0) means salvage copies every session whole.
        if list != copied || (code == 0 && salvage != 0) {
            hidden.push(format!(
                "bit {bit}: list exit {code} {list:?}, salvage exit {salvage} {copied:?}: {stderr}"
            ));
        }
    }
    assert!(
        hidden.is_empty(),
        "{} flips:\n{}",
        hidden.len(),
        hidden.join("\n")
    );
}

#[test]
fn a_damaged_key_that_turns_the_index_back_stops_salvage_there_instead_of_looping() {
    let fx = fixture();
    // A cleanly closed copy (a title on a completed session: that writer repairs and
    // closes it), so redb walks its pages without verifying their checksums.
    let (tmp, data, _) = damaged_copy(|_| {});
    let titled = fx.acknowledged.keys().find(|id| **id != fx.killed).unwrap();
    assert_eq!(foya_in(&data, &["sessions", "title", titled, "named"]).0, 0);
    let clean = std::fs::read(data.join("foya.redb")).unwrap();
    // Every stored key `(session, seq)` of an event — a leaf's entry or a branch page's
    // separator — as redb lays it out (both little-endian).
    let mut places = Vec::new();
    for id in fx.acknowledged.keys() {
        let key = u128::from_str_radix(&id.replace('-', ""), 16)
            .unwrap()
            .to_le_bytes();
        for (at, window) in clean.windows(24).enumerate() {
            let seq = u64::from_le_bytes(window[16..].try_into().unwrap());
            if window[..16] == key && (1..100).contains(&seq) {
                places.push(at);
            }
        }
    }
    assert!(places.len() > 20, "{places:?}");
    // One flipped bit makes that seq 1024 larger: the index then returns a seq before
    // the one asked from, for some keys. Salvage must end every time.
    let deadline = Instant::now() + Duration::from_secs(300);
    for (n, at) in places.into_iter().enumerate() {
        let copy = tmp.path().join(format!("flip-{n}"));
        std::fs::create_dir(&copy).unwrap();
        for name in ["foya.redb.acks", "foya.redb.losses"] {
            if data.join(name).exists() {
                std::fs::copy(data.join(name), copy.join(name)).unwrap();
            }
        }
        let mut bytes = clean.clone();
        bytes[at + 17] ^= 0x04;
        std::fs::write(copy.join("foya.redb"), &bytes).unwrap();
        let child = foya()
            .args(["store", "salvage", "--data-dir"])
            .arg(&copy)
            .arg("--to")
            .arg(copy.join("salvaged"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut child = child;
            let _ = tx.send(child.wait());
        });
        let Ok(Ok(status)) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        else {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("salvage did not end with a bit flipped at byte {}", at + 17);
        };
        assert!(
            matches!(status.code(), Some(0 | 4)),
            "salvage exited {status} with a bit flipped at byte {}",
            at + 17
        );
        std::fs::remove_dir_all(&copy).unwrap();
    }
}

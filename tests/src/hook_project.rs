//! A trusted project with lifecycle hooks for the `hooks*` end-to-end tests: a working
//! directory whose `.foya/config.toml` holds `[hooks]`, hook scripts under
//! `.foya/hooks/`, a data dir, and a log file the logging hooks append their stdin to.

use crate::foya_bin::{only_session_log, scripted, trust_project};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A Python hook that appends its stdin JSON to the file named by its argument, with
/// `_transcript_types`: the `type` of every line of the `transcript_path` it was given.
pub const LOG_PY: &str = r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
types = []
if data.get("transcript_path"):
    with open(data["transcript_path"]) as f:
        types = [json.loads(line)["type"] for line in f]
data["_transcript_types"] = types
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(data) + "\n")
"#;

/// A bash hook that appends its stdin JSON (one line) to the file named by `$1`.
pub const LOG_SH: &str = "#!/bin/bash\n{ cat; echo; } >> \"$1\"\n";

/// A project for hook tests.
#[derive(Debug)]
pub struct HookProject {
    /// Keeps the directories.
    pub tmp: tempfile::TempDir,
    /// The session's working directory (the project root: it holds `.foya`).
    pub work: PathBuf,
    /// The data dir.
    pub data: PathBuf,
    /// Where the logging hooks write.
    pub log: PathBuf,
}

impl HookProject {
    /// A trusted project whose `.foya/config.toml` is `config` (`LOG` in it is replaced
    /// by the log file's path); [`LOG_PY`] and [`LOG_SH`] are `.foya/hooks/log.py` and
    /// `.foya/hooks/log.sh`, and `scripts` more files there (name, body).
    ///
    /// # Panics
    /// When the files cannot be written or `foya trust` fails.
    #[must_use]
    pub fn new(config: &str, scripts: &[(&str, &str)]) -> Self {
        #[expect(clippy::expect_used, reason = "test harness")]
        let tmp = tempfile::tempdir().expect("temp dir");
        #[expect(clippy::expect_used, reason = "test harness")]
        let root = std::fs::canonicalize(tmp.path()).expect("canonical temp dir");
        let (work, data, log) = (
            root.join("work"),
            root.join("data"),
            root.join("hooks.jsonl"),
        );
        let hooks = work.join(".foya/hooks");
        let write = |path: PathBuf, text: &str| {
            #[expect(clippy::expect_used, reason = "test harness")]
            std::fs::write(&path, text).expect("write a project file");
        };
        #[expect(clippy::expect_used, reason = "test harness")]
        std::fs::create_dir_all(&hooks).expect("create .foya/hooks");
        write(
            work.join(".foya/config.toml"),
            &config.replace("LOG", &log.display().to_string()),
        );
        write(hooks.join("log.py"), LOG_PY);
        write(hooks.join("log.sh"), LOG_SH);
        for (name, body) in scripts {
            write(hooks.join(name), body);
        }
        trust_project(&work);
        Self {
            tmp,
            work,
            data,
            log,
        }
    }

    /// Writes a scripted-provider script of `responses` and returns its path.
    ///
    /// # Panics
    /// When it cannot be written.
    #[must_use]
    pub fn script(&self, name: &str, responses: &Value) -> PathBuf {
        let path = self.tmp.path().join(name);
        let script = serde_json::json!({ "responses": responses });
        #[expect(clippy::expect_used, reason = "test harness")]
        std::fs::write(&path, script.to_string()).expect("write the script");
        path
    }

    /// `foya run --provider scripted --approval APPROVAL --script SCRIPT ARGS…` in the
    /// project; its output.
    #[must_use]
    pub fn run(&self, approval: &str, script: &Path, args: &[&str]) -> Output {
        let mut command = self.command(approval, script);
        #[expect(clippy::expect_used, reason = "test harness")]
        command.args(args).output().expect("run foya")
    }

    /// The command [`Self::run`] runs, without its arguments (to add environment).
    #[must_use]
    pub fn command(&self, approval: &str, script: &Path) -> std::process::Command {
        let mut command = scripted("run", approval, script, &self.data, &self.work);
        command.env("RUST_LOG", "warn");
        command
    }

    /// `foya run PROVIDER… --approval APPROVAL --data-dir D --cwd W ARGS…` in the
    /// project (a real provider protocol, e.g. against a mock server); its output.
    #[must_use]
    pub fn run_with(&self, provider: &[&str], approval: &str, args: &[&str]) -> Output {
        let mut command = crate::foya_bin::foya();
        #[expect(clippy::expect_used, reason = "test harness")]
        command
            .arg("run")
            .args(provider)
            .args(["--approval", approval, "--data-dir"])
            .arg(&self.data)
            .arg("--cwd")
            .arg(&self.work)
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("run foya")
    }

    /// The persisted events of the project's only session.
    #[must_use]
    pub fn events(&self) -> Vec<Value> {
        only_session_log(&self.data)
    }

    /// The JSON lines the logging hooks wrote (empty when none ran).
    ///
    /// # Panics
    /// When a line is not JSON.
    #[must_use]
    pub fn logged(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

/// The `hook_ran` events of `events`.
#[must_use]
pub fn hook_runs(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["type"] == "hook_ran").collect()
}

/// The `(hook_event, decision)` of every `hook_ran` of `events`.
#[must_use]
pub fn decisions(events: &[Value]) -> Vec<(String, String)> {
    hook_runs(events)
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (field("hook_event"), field("decision"))
        })
        .collect()
}

/// The `tool_message` of call `id`.
///
/// # Panics
/// When there is none.
#[must_use]
pub fn result_of<'a>(events: &'a [Value], id: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_message" && e["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// The last event's `reason` (the `turn_complete` of a run).
#[must_use]
pub fn last_reason(events: &[Value]) -> Value {
    events
        .iter()
        .rev()
        .find(|e| e["type"] == "turn_complete")
        .map(|e| e["reason"].clone())
        .unwrap_or(Value::Null)
}

/// Succeeds or says why (stderr).
///
/// # Panics
/// When the command failed.
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

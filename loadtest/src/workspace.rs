//! The load test's generated workspace: a README plus one small file for each tool call
//! the simulated model asks for in a turn, so every call of a long turn reads a file of
//! its own (distinct calls, which run protection lets run) and finds it.

use anyhow::Context as _;
use foya_actors::provider::sim::SimConfig;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

/// The arguments the load test gives the simulator's `read_file` calls unless its config
/// asks for others: call `c` of step `s` reads `docs/step-s-call-c.md`.
pub(crate) const TOOL_ARGS: &str = r#"{"path": "docs/step-{step}-call-{call}.md"}"#;

/// The workspace's README (what the simulator's default arguments read).
const README: &str =
    "# Load-test workspace\n\nA generated project that the simulated model reads.\n";

/// Words the generated files are made of, picked by step and call.
const TOPICS: [&str; 8] = [
    "parser",
    "scheduler",
    "cache",
    "retry",
    "index",
    "codec",
    "gateway",
    "sandbox",
];

/// Gives `config` the load test's distinct arguments ([`TOOL_ARGS`]) when it calls
/// `read_file` with the simulator's default arguments (the same call every time, which
/// run protection stops at the third); a config with arguments of its own keeps them.
pub(crate) fn use_distinct_calls(config: &mut SimConfig) {
    let default = SimConfig::default();
    if config.tool_name == default.tool_name
        && config.tool_args == default.tool_args
        && let Ok(args) = serde_json::from_str(TOOL_ARGS)
    {
        config.tool_args = args;
    }
}

/// Most tool calls of one turn the workspace is generated for: `(steps − 1) × calls per
/// step` above it is refused before anything is written (a file per call; the simulator
/// plans a turn's calls up front).
pub(crate) const MAX_CALLS_PER_TURN: u64 = 10_000;

/// Creates the workspace in a new temporary directory: `README.md` and, when `config`
/// calls `read_file`, the file each call of a turn names (its `path` argument, when
/// relative and inside the workspace), a few lines each.
///
/// # Errors
/// The directory or a file cannot be created.
pub(crate) fn create(config: &SimConfig) -> anyhow::Result<tempfile::TempDir> {
    let steps = config.tool_steps();
    let calls = u64::from(steps.end - steps.start) * u64::from(config.tool_calls_per_step);
    anyhow::ensure!(
        calls <= MAX_CALLS_PER_TURN,
        "a turn of {calls} tool calls is more than the load test supports ({MAX_CALLS_PER_TURN}); \
         lower --steps-per-turn or --tool-calls-per-step"
    );
    let dir = tempfile::Builder::new()
        .prefix("foya-loadtest-ws")
        .tempdir()
        .context("cannot create the workspace")?;
    std::fs::write(dir.path().join("README.md"), README)
        .context("cannot write the workspace README")?;
    for (path, step, call) in read_paths(config) {
        let file = dir.path().join(&path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&file, contents(step, call))
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(dir)
}

/// The distinct relative paths `config`'s `read_file` calls name in a turn, with the
/// step and call that first names each (the README excepted: it is always written).
fn read_paths(config: &SimConfig) -> Vec<(PathBuf, u32, u32)> {
    if config.tool_name != "read_file" {
        return Vec::new();
    }
    let mut seen = BTreeSet::new();
    let mut paths = Vec::new();
    for step in config.tool_steps() {
        for call in 0..config.tool_calls_per_step {
            let args = config.tool_call_args(step, call);
            let Some(path) = args.get("path").and_then(|p| p.as_str()) else {
                continue;
            };
            let path = PathBuf::from(path);
            let inside = path
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
            if inside && path != Path::new("README.md") && seen.insert(path.clone()) {
                paths.push((path, step, call));
            }
        }
    }
    paths
}

/// A few lines that differ from file to file.
fn contents(step: u32, call: u32) -> String {
    let n = step as usize * 7 + call as usize;
    let topic = TOPICS[n % TOPICS.len()];
    let other = TOPICS[(n / TOPICS.len() + 3) % TOPICS.len()];
    let mut text = format!("# Step {step}, call {call}: the {topic}\n\n");
    for line in 0..=(n % 4) {
        let _ = writeln!(
            text,
            "- note {}: the {topic} talks to the {other} ({} ms budget)",
            line + 1,
            (n + line) * 5 % 97 + 3
        );
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_call_of_a_long_turn_has_its_own_file() {
        let mut config = SimConfig {
            steps_per_turn: 8,
            tool_calls_per_step: 3,
            ..SimConfig::default()
        };
        use_distinct_calls(&mut config);
        let dir = create(&config).unwrap();
        let mut texts = BTreeSet::new();
        for step in 1..8 {
            for call in 0..3 {
                let name = format!("docs/step-{step}-call-{call}.md");
                let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
                assert!(
                    text.starts_with(&format!("# Step {step}, call {call}: the ")),
                    "{text}"
                );
                texts.insert(text);
            }
        }
        assert_eq!(texts.len(), 21, "all different");
        let docs = std::fs::read_dir(dir.path().join("docs")).unwrap().count();
        assert_eq!(docs, 21);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("README.md")).unwrap(),
            README
        );
    }

    #[test]
    fn a_config_with_arguments_of_its_own_keeps_them_and_gets_its_files() {
        let args = serde_json::json!({"path": "src/s{step}/c{call}.rs"});
        let mut config = SimConfig {
            steps_per_turn: 3,
            tool_calls_per_step: 2,
            tool_args: args.clone(),
            ..SimConfig::default()
        };
        use_distinct_calls(&mut config);
        assert_eq!(config.tool_args, args);
        let paths: Vec<_> = read_paths(&config).into_iter().map(|p| p.0).collect();
        let expected: Vec<PathBuf> = [
            "src/s1/c0.rs",
            "src/s1/c1.rs",
            "src/s2/c0.rs",
            "src/s2/c1.rs",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(paths, expected);
        // Paths outside the workspace are never written; the README always is.
        for path in ["/etc/x", "../x", "README.md"] {
            config.tool_args = serde_json::json!({ "path": path });
            assert_eq!(read_paths(&config), Vec::new(), "{path}");
        }
        // Another tool: nothing to write.
        config.tool_name = "list_dir".into();
        config.tool_args = args;
        assert_eq!(read_paths(&config), Vec::new());
    }
}

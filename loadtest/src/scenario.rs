//! `foya loadtest --scenario FILE`: one file (`.toml`, or `.json` by its extension) that
//! describes the turn a load test runs — the sessions' approval mode, the store's
//! durability and the simulated model's behaviour (`[sim]`, the fields of `SimConfig`) —
//! so a comparison turn (one `shell` call, then a final answer) is written down once and
//! run the same way everywhere. A flag given beside it overrides the file's value.
//!
//! ```toml
//! approval = "bypass"          # read-only (default) | ask | auto-edit | auto | bypass
//! durability = "immediate"     # none (default) | immediate
//! [sim]
//! steps_per_turn = 2           # one tool-calling step, then the final answer
//! tool_calls_per_step = 1
//! tool_name = "shell"
//! tool_args = { command = "cat README.md" }
//! ```

use super::DurabilityArg;
use super::sim_args::{from_table, read_table};
use foya_actors::provider::sim::SimConfig;
use foya_protocol::ApprovalMode;
use serde::Deserialize;
use std::path::Path;

/// A scenario file's fields; each is optional (the load test's default then applies).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    approval: Option<ApprovalMode>,
    durability: Option<DurabilityArg>,
    sim: Option<serde_json::Value>,
}

/// What a scenario file sets.
#[derive(Debug, Default)]
pub(crate) struct Scenario {
    /// The sessions' approval mode.
    pub(crate) approval: Option<ApprovalMode>,
    /// The store's durability.
    pub(crate) durability: Option<DurabilityArg>,
    /// The simulator's configuration, and whether it names the tool calls (as a
    /// `--sim-config` file does).
    pub(crate) sim: Option<(SimConfig, bool)>,
}

/// Reads the scenario file at `path`.
///
/// # Errors
/// An unreadable file, one that is not TOML/JSON of the fields above (an unknown field
/// included), or a `[sim]` value its flag would refuse.
pub(crate) fn load(path: &Path) -> anyhow::Result<Scenario> {
    let what = "scenario";
    let table = read_table(path, what)?;
    let fields: Fields = serde_json::from_value(table)
        .map_err(|e| anyhow::anyhow!("invalid {what} {}: {e}", path.display()))?;
    let sim = match fields.sim {
        Some(sim) => {
            let origin = format!("[sim] of the scenario {}", path.display());
            Some(from_table(sim, &origin)?)
        }
        None => None,
    };
    Ok(Scenario {
        approval: fields.approval,
        durability: fields.durability,
        sim,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_toml_and_a_json_scenario_describe_the_same_shell_turn() {
        let dir = tempfile::tempdir().unwrap();
        let toml = write(
            &dir,
            "s.toml",
            "approval = \"bypass\"\ndurability = \"immediate\"\n[sim]\nsteps_per_turn = 2\n\
             tool_name = \"shell\"\ntool_args = { command = \"true\" }\n",
        );
        let json = write(
            &dir,
            "s.json",
            r#"{"approval": "bypass", "durability": "immediate",
                "sim": {"steps_per_turn": 2, "tool_name": "shell", "tool_args": {"command": "true"}}}"#,
        );
        for path in [toml, json] {
            let scenario = load(&path).unwrap();
            assert_eq!(scenario.approval, Some(ApprovalMode::Bypass));
            assert_eq!(scenario.durability, Some(DurabilityArg::Immediate));
            let (sim, chooses) = scenario.sim.unwrap();
            assert!(chooses);
            assert_eq!(
                (sim.steps_per_turn, sim.tool_name.as_str(), sim.tool_args),
                (2, "shell", serde_json::json!({"command": "true"}))
            );
        }
    }

    #[test]
    fn unknown_fields_and_refused_values_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let typo = write(&dir, "typo.toml", "aproval = \"bypass\"\n");
        let error = load(&typo).unwrap_err().to_string();
        assert!(
            error.contains("invalid scenario") && error.contains("aproval"),
            "{error}"
        );
        let mode = write(&dir, "mode.toml", "approval = \"yolo\"\n");
        assert!(load(&mode).is_err());
        let steps = write(&dir, "steps.toml", "[sim]\nsteps_per_turn = 0\n");
        let error = format!("{:#}", load(&steps).unwrap_err());
        assert!(
            error.starts_with("invalid value '0' for 'steps_per_turn' in [sim] of the scenario"),
            "{error}"
        );
        assert!(load(&dir.path().join("missing.toml")).is_err());
    }
}

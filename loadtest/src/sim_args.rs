//! The simulated provider's knobs as command-line flags (shared by `foya loadtest` and
//! `foya sim-server`): an optional config file, then each flag overrides one field. A
//! field of the file is refused where its flag is (`steps_per_turn` 0, an error rate
//! outside `0..=1`, a negative or infinite `tokens_per_s`, `tool_args` that are not a
//! JSON object), with the same reason.

use anyhow::Context as _;
use clap::Args;
use foya_actors::provider::sim::SimConfig;
use std::path::PathBuf;

/// Flags that shape the simulated model ([`SimConfig`]); unset flags keep the value from
/// `--sim-config` (or the default).
#[derive(Debug, Clone, Default, Args)]
pub struct SimArgs {
    /// Simulator configuration file (`.toml` or `.json`, the fields of `SimConfig`).
    #[arg(long = "sim-config", alias = "config", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Time to first token, in milliseconds.
    #[arg(long)]
    pub(crate) ttft_ms: Option<u64>,
    /// Output speed after the first token, tokens per second (0: unpaced).
    #[arg(long)]
    pub(crate) tokens_per_s: Option<f64>,
    /// Answer length of the final step, in tokens.
    #[arg(long)]
    pub(crate) response_tokens: Option<u32>,
    /// Tool calls in each step before the last.
    #[arg(long)]
    pub(crate) tool_calls_per_step: Option<u32>,
    /// Steps per turn, the final text step included (at least 1).
    #[arg(long, value_parser = foya_cli::values::positive_u32)]
    pub(crate) steps_per_turn: Option<u32>,
    /// Reasoning tokens streamed at the start of every step.
    #[arg(long)]
    pub(crate) reasoning_tokens: Option<u32>,
    /// Probability (0..=1) that a request attempt is rate limited (HTTP 429).
    #[arg(long)]
    pub(crate) error_rate_rate_limited: Option<f64>,
    /// Probability (0..=1) that a request attempt is rejected as overloaded.
    #[arg(long)]
    pub(crate) error_rate_overloaded: Option<f64>,
    /// Probability (0..=1) that a request attempt overflows the context window.
    #[arg(long)]
    pub(crate) error_rate_context_overflow: Option<f64>,
    /// Probability (0..=1) that a response stream is cut before its end.
    #[arg(long)]
    pub(crate) error_rate_stream_cut: Option<f64>,
    /// The retry-after a rate-limited answer asks for, in milliseconds.
    #[arg(long)]
    pub(crate) retry_after_ms: Option<u64>,
    /// Seed of every random choice of the simulator.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Name of the tool the simulator calls (default `read_file`).
    #[arg(long)]
    pub(crate) tool_name: Option<String>,
    /// Arguments of the simulator's tool calls, a JSON object in which `{step}` (step
    /// number in the turn, from 1) and `{call}` (index of the call in its step, from 0)
    /// are filled in in every string. Default: for `foya loadtest`,
    /// '{"path": "docs/step-{step}-call-{call}.md"}' (one file per call in its
    /// workspace); for `foya sim-server`, '{"path": "README.md"}' (the same call every
    /// time).
    #[arg(long, value_name = "JSON", value_parser = tool_args)]
    pub(crate) tool_args: Option<serde_json::Value>,
}

/// `--tool-args`: a JSON object.
fn tool_args(s: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) => Err(NOT_AN_OBJECT.to_owned()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// Why tool arguments that are not a JSON object are refused.
const NOT_AN_OBJECT: &str = "must be a JSON object";

impl SimArgs {
    /// The flags given that set the simulated model's behaviour (not `--sim-config`),
    /// as typed: with an HTTP provider the server's own settings decide it, so
    /// `foya loadtest` says these only shape its workspace.
    pub(crate) fn behaviour_flags(&self) -> Vec<&'static str> {
        [
            ("--ttft-ms", self.ttft_ms.is_some()),
            ("--tokens-per-s", self.tokens_per_s.is_some()),
            ("--response-tokens", self.response_tokens.is_some()),
            ("--tool-calls-per-step", self.tool_calls_per_step.is_some()),
            ("--steps-per-turn", self.steps_per_turn.is_some()),
            ("--reasoning-tokens", self.reasoning_tokens.is_some()),
            (
                "--error-rate-rate-limited",
                self.error_rate_rate_limited.is_some(),
            ),
            (
                "--error-rate-overloaded",
                self.error_rate_overloaded.is_some(),
            ),
            (
                "--error-rate-context-overflow",
                self.error_rate_context_overflow.is_some(),
            ),
            (
                "--error-rate-stream-cut",
                self.error_rate_stream_cut.is_some(),
            ),
            ("--retry-after-ms", self.retry_after_ms.is_some()),
            ("--seed", self.seed.is_some()),
            ("--tool-name", self.tool_name.is_some()),
            ("--tool-args", self.tool_args.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// The configuration: the file (if any) with the flags applied on top.
    ///
    /// # Errors
    /// An unreadable or invalid config file (also a field its flag would refuse), or an
    /// error rate outside `0..=1`.
    pub(crate) fn to_config(&self) -> anyhow::Result<SimConfig> {
        self.to_config_and_choice().map(|(config, _)| config)
    }

    /// [`Self::to_config`], and whether the tool calls were chosen explicitly:
    /// `--tool-name` or `--tool-args`, or a `tool_name` or `tool_args` field in the
    /// `--sim-config` file (even one equal to the default). `foya loadtest` gives its own
    /// distinct-call template only when not.
    ///
    /// # Errors
    /// As [`Self::to_config`].
    pub(crate) fn to_config_and_choice(&self) -> anyhow::Result<(SimConfig, bool)> {
        let base = match &self.config {
            Some(path) => Some(load(path)?),
            None => None,
        };
        self.over(base)
    }

    /// The flags applied over `base` (a configuration read from a file, and whether that
    /// file named the tool calls), else over the default; the choice as
    /// [`Self::to_config_and_choice`] gives it.
    ///
    /// # Errors
    /// A value its flag refuses.
    pub(crate) fn over(
        &self,
        base: Option<(SimConfig, bool)>,
    ) -> anyhow::Result<(SimConfig, bool)> {
        let (mut config, file_chooses) = base.unwrap_or_default();
        let chosen = file_chooses || self.tool_name.is_some() || self.tool_args.is_some();
        set(&mut config.ttft_ms, self.ttft_ms);
        set(&mut config.tokens_per_s, self.tokens_per_s);
        set(&mut config.response_tokens, self.response_tokens);
        set(&mut config.tool_calls_per_step, self.tool_calls_per_step);
        set(&mut config.steps_per_turn, self.steps_per_turn);
        set(&mut config.reasoning_tokens, self.reasoning_tokens);
        set(&mut config.retry_after_ms, self.retry_after_ms);
        set(&mut config.seed, self.seed);
        set(&mut config.tool_name, self.tool_name.clone());
        set(&mut config.tool_args, self.tool_args.clone());
        let rates = &mut config.error_rates;
        set(&mut rates.rate_limited, self.error_rate_rate_limited);
        set(&mut rates.overloaded, self.error_rate_overloaded);
        set(
            &mut rates.context_overflow,
            self.error_rate_context_overflow,
        );
        set(&mut rates.stream_cut, self.error_rate_stream_cut);
        // The file's values were checked as it was read: a bad value is a flag's.
        if let Some(bad) = refused(&config) {
            let flag = bad.field.replace('_', "-");
            anyhow::bail!("--{flag} {}, got {}", bad.why, bad.value);
        }
        Ok((config, chosen))
    }
}

/// A value of [`SimConfig`] that its flag refuses.
#[derive(Debug)]
struct Refused {
    /// The field (`steps_per_turn`, `error_rate_stream_cut`, …): the flag without `--`
    /// and with `_` for `-`.
    field: &'static str,
    /// The value, as written.
    value: String,
    /// Why it is refused (`must be at least 1`).
    why: String,
}

/// The first value of `config` that its flag would refuse, if any.
fn refused(config: &SimConfig) -> Option<Refused> {
    let at_least_one = [("steps_per_turn", config.steps_per_turn)];
    for (field, n) in at_least_one {
        if let Err(why) = foya_cli::values::at_least_one(u64::from(n)) {
            let value = n.to_string();
            return Some(Refused {
                field,
                value,
                why: why.0,
            });
        }
    }
    let r = &config.error_rates;
    let rates = [
        ("error_rate_rate_limited", r.rate_limited),
        ("error_rate_overloaded", r.overloaded),
        ("error_rate_context_overflow", r.context_overflow),
        ("error_rate_stream_cut", r.stream_cut),
    ];
    for (field, rate) in rates {
        if !(0.0..=1.0).contains(&rate) {
            let why = "must be between 0 and 1".to_owned();
            let value = rate.to_string();
            return Some(Refused { field, value, why });
        }
    }
    if !config.tool_args.is_object() {
        let value = config.tool_args.to_string();
        let why = NOT_AN_OBJECT.to_owned();
        return Some(Refused {
            field: "tool_args",
            value,
            why,
        });
    }
    let speed = config.tokens_per_s;
    if !(speed >= 0.0 && speed.is_finite()) {
        let why = "must be a finite number >= 0".to_owned();
        let value = speed.to_string();
        return Some(Refused {
            field: "tokens_per_s",
            value,
            why,
        });
    }
    None
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

/// Reads a `--sim-config` file: the configuration, and whether it names the tool calls
/// (a `tool_name` or `tool_args` field).
fn load(path: &std::path::Path) -> anyhow::Result<(SimConfig, bool)> {
    let table = read_table(path, "simulator config")?;
    from_table(table, &format!("the simulator config {}", path.display()))
}

/// Reads a `.toml` or `.json` file (by its extension; TOML unless `.json`) as one JSON
/// value, so both formats share one typed path. `what` names the file in errors.
pub(crate) fn read_table(path: &std::path::Path, what: &str) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let value = if is_json {
        serde_json::from_str(&text).map_err(anyhow::Error::from)
    } else {
        toml::from_str::<toml::Table>(&text)
            .map_err(anyhow::Error::from)
            .and_then(|t| serde_json::to_value(t).map_err(anyhow::Error::from))
    };
    value.with_context(|| format!("invalid {what} {}", path.display()))
}

/// A simulator configuration from its fields (`table`, an object), and whether they name
/// the tool calls; `origin` says where they came from in errors (`the simulator config
/// sim.toml`, `[sim] of the scenario s.toml`).
pub(crate) fn from_table(
    table: serde_json::Value,
    origin: &str,
) -> anyhow::Result<(SimConfig, bool)> {
    let chooses = table
        .as_object()
        .is_some_and(|t| t.contains_key("tool_name") || t.contains_key("tool_args"));
    let config: SimConfig =
        serde_json::from_value(table).with_context(|| format!("invalid {origin}"))?;
    if let Some(Refused { field, value, why }) = refused(&config) {
        // Named as the file names it: `error_rates.stream_cut`, not the flag's name.
        let field = field.replacen("error_rate_", "error_rates.", 1);
        anyhow::bail!("invalid value '{value}' for '{field}' in {origin}: {why}");
    }
    Ok((config, chooses))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn behaviour_flags_name_the_flags_given_as_typed() {
        assert!(SimArgs::default().behaviour_flags().is_empty());
        let given = SimArgs {
            steps_per_turn: Some(8),
            tool_calls_per_step: Some(3),
            config: Some(PathBuf::from("sim.toml")),
            ..SimArgs::default()
        };
        assert_eq!(
            given.behaviour_flags(),
            ["--tool-calls-per-step", "--steps-per-turn"]
        );
    }

    #[test]
    fn tool_calls_are_explicit_when_a_flag_or_a_file_field_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            Some(path)
        };
        let cases = [
            (SimArgs::default(), false),
            (
                SimArgs {
                    // Equal to the simulator's default, still a choice.
                    tool_args: Some(serde_json::json!({"path": "README.md"})),
                    ..SimArgs::default()
                },
                true,
            ),
            (
                SimArgs {
                    tool_name: Some("read_file".to_owned()),
                    ..SimArgs::default()
                },
                true,
            ),
            (
                SimArgs {
                    config: file("a.toml", "seed = 3\n"),
                    ..SimArgs::default()
                },
                false,
            ),
            (
                SimArgs {
                    config: file("b.toml", "[tool_args]\npath = \"README.md\"\n"),
                    ..SimArgs::default()
                },
                true,
            ),
            (
                SimArgs {
                    config: file("c.json", r#"{"tool_name": "read_file"}"#),
                    ..SimArgs::default()
                },
                true,
            ),
        ];
        for (i, (args, explicit)) in cases.into_iter().enumerate() {
            assert_eq!(args.to_config_and_choice().unwrap().1, explicit, "case {i}");
        }
        let bad = SimArgs {
            config: file("d.toml", "seed = ["),
            ..SimArgs::default()
        };
        assert!(bad.to_config_and_choice().is_err());
    }
}

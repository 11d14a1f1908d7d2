//! Shared start-up of the commands that run sessions (`run`, `chat`, `serve`, `node`):
//! the model client for `--provider`, and the working directory.

use crate::args::ProviderArgs;
use anyhow::Context as _;
use foya_actors::provider::ModelClient;
use foya_actors::provider::scripted::Script;
use foya_actors::provider::sim::{SimClient, SimConfig};
use foya_actors::tools::ToolRegistry;
use foya_actors::tools::env_policy::EnvPolicy;
use foya_actors::tools::sandbox::SandboxRunner;
use foya_actors::{ContextOptions, RuntimeConfig, WithoutApprover};
use foya_config::provider::ConfigError;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Builds the model client for `--provider`; returns it with the model name.
///
/// # Errors
/// A missing or unreadable script, an unknown profile, an invalid configuration (a
/// missing API key included), `--seed` without `--provider sim`, `--base-url` with it,
/// `--script` without `--provider scripted`.
pub fn model_client(
    args: &ProviderArgs,
    cwd: &Path,
) -> anyhow::Result<(Arc<dyn ModelClient>, String)> {
    // The project's own config applies only once the user trusted the project.
    crate::trust::announce(cwd);
    anyhow::ensure!(
        args.seed.is_none() || args.provider == SIM,
        "--seed is for --provider sim (the simulated model's random choices)"
    );
    anyhow::ensure!(
        args.script.is_none() || args.provider == SCRIPTED,
        "--script is for --provider scripted (its model responses); --provider {} would \
         ignore it",
        args.provider
    );
    if args.provider == SIM {
        anyhow::ensure!(
            args.base_url.is_none(),
            "--provider sim runs the simulated model in process and takes no --base-url (for \
             the simulator over HTTP start `foya sim-server` and give its address to \
             --provider openai-chat, anthropic or openai-responses)"
        );
        let config = SimConfig {
            seed: args.seed.unwrap_or_default(),
            ..SimConfig::default()
        };
        let model = args.model.clone().unwrap_or_else(|| config.model.clone());
        return Ok((Arc::new(SimClient::new(config)), model));
    }
    if args.provider == SCRIPTED {
        let script = args
            .script
            .as_deref()
            .context("--provider scripted needs --script FILE")?;
        let client =
            foya_actors::provider::scripted::ScriptedClient::from_script(load_script(script)?)
                .with_source(script.display().to_string());
        return Ok((
            Arc::new(client),
            args.model.clone().unwrap_or_else(|| SCRIPTED.into()),
        ));
    }
    let profile = foya_config::provider::ProviderConfig::load(cwd)?
        .resolve(
            &args.provider,
            args.base_url.as_deref(),
            args.model.as_deref(),
        )
        .map_err(with_own_providers)?;
    let model = profile.model.clone();
    let client =
        foya_actors::provider::http::HttpModelClient::new(profile).map_err(|e| match e {
            ConfigError::MissingApiKey { .. } => anyhow::anyhow!(
                "{e} (or, with no key, `--provider sim`: the built-in simulated model)"
            ),
            other => other.into(),
        })?;
    Ok((Arc::new(client), model))
}

/// The provider name of the scripted model (`--script FILE`), handled here rather than by
/// the provider profiles.
pub const SCRIPTED: &str = "scripted";

/// The provider name of the simulated model in process ([`SimClient`] with the default
/// [`SimConfig`] and `--seed`), handled here and by `foya loadtest` (its default) rather
/// than by the provider profiles.
pub const SIM: &str = "sim";

/// An unknown-profile error that also names [`SCRIPTED`] and [`SIM`], which these
/// commands accept.
fn with_own_providers(e: ConfigError) -> ConfigError {
    also_known(also_known(e, SCRIPTED), SIM)
}

/// An unknown-profile error that also names `name`, a provider the command handles
/// itself (`scripted` and `sim` for run/chat/serve/node, `sim` for the load test).
pub fn also_known(e: ConfigError, name: &str) -> ConfigError {
    match e {
        ConfigError::UnknownProfile {
            name: asked,
            mut known,
            searched,
        } => {
            known.push(name.to_owned());
            known.sort();
            known.dedup();
            ConfigError::UnknownProfile {
                name: asked,
                known,
                searched,
            }
        }
        other => other,
    }
}

/// Reads and parses a `--script` file; the error names the file once and its cause once
/// (`cannot read script x.json: No such file or directory (os error 2)`).
///
/// # Errors
/// The file cannot be read or is not a script (JSON `{"responses": [...]}`).
pub fn load_script(path: &Path) -> anyhow::Result<Script> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read script {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse script {}", path.display()))
}

/// `--cwd`, else the current directory; canonicalised.
///
/// # Errors
/// No current directory, the directory does not exist, or it is not a directory.
pub fn working_dir(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    let cwd = match arg {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("no current directory")?,
    };
    let canonical = std::fs::canonicalize(&cwd)
        .with_context(|| format!("working directory {} does not exist", cwd.display()))?;
    anyhow::ensure!(
        canonical.is_dir(),
        "working directory {} is not a directory",
        cwd.display()
    );
    Ok(canonical)
}

/// The runtime configuration of the CLI's commands: [`RuntimeConfig::new`] plus what
/// an embedder must ask for and a coding agent needs: every built-in tool (`shell`
/// sandboxed by the small `foya-sandbox` helper next to this binary, else by this
/// binary's own `__sandbox-exec`: [`SandboxRunner::this_binary`]), command hooks run
/// by the same helper, both under the user's [`shell_environment`], the project's files
/// and the user's `~/.config/foya` ([`ContextOptions::with_files`]).
///
/// # Errors
/// The user's `[shell_environment]` cannot be read ([`shell_environment`]).
pub fn runtime_config(
    store: impl Into<foya_storage::LogStore>,
    model: Arc<dyn ModelClient>,
) -> anyhow::Result<RuntimeConfig> {
    let runner = SandboxRunner::this_binary().with_env_policy(shell_environment()?);
    Ok(RuntimeConfig {
        tools: Arc::new(ToolRegistry::builtin_with_sandbox(runner.clone())),
        hook_supervisor: Some(runner),
        context: ContextOptions::with_files(),
        // Whoever approves is attached (chat, a web view) or nobody will be (`run`).
        without_approver: WithoutApprover::Deny,
        ..RuntimeConfig::new(store, model)
    })
}

/// The telemetry the standard `OTEL_*` variables and the `[telemetry]` table of the
/// user's `~/.config/foya/config.toml` ask for (`docs/observability.md`), started; `None`
/// when they ask for nothing. `metrics_by_default`: a server that serves `/metrics` keeps
/// metrics unless the table says `metrics = false`.
///
/// # Errors
/// The file cannot be read or its table is invalid, the OTLP protocol is not
/// `http/protobuf`, or the exporter cannot be built.
pub fn telemetry(metrics_by_default: bool) -> anyhow::Result<Option<foya_telemetry::Telemetry>> {
    let file = foya_config::provider::user_file();
    let config = foya_telemetry::TelemetryConfig::load(file.as_deref(), metrics_by_default)?;
    foya_telemetry::Telemetry::start(config)
}

/// The environment policy of shell commands and hooks: table `[shell_environment]` of
/// the user's `~/.config/foya/config.toml` (a project's file cannot set it: it would
/// decide which of the user's credentials its own commands see), else the default
/// (every variable but credential-shaped ones; `docs/security.md`).
///
/// # Errors
/// The file cannot be read or parsed, or the table is not a valid policy (the message
/// names the file and the key).
pub fn shell_environment() -> anyhow::Result<EnvPolicy> {
    let Some(path) = foya_config::provider::user_file() else {
        return Ok(EnvPolicy::default());
    };
    shell_environment_in(&path)
}

/// [`shell_environment`] of the config file `path`.
fn shell_environment_in(path: &Path) -> anyhow::Result<EnvPolicy> {
    let Some(text) = foya_config::provider::read_optional(path)? else {
        return Ok(EnvPolicy::default());
    };
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))?;
    let Some(value) = table.get("shell_environment") else {
        return Ok(EnvPolicy::default());
    };
    value
        .clone()
        .try_into::<EnvPolicy>()
        .map_err(|e| anyhow::anyhow!("{}: [shell_environment] {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{ConfigError, with_own_providers, working_dir};

    #[test]
    fn the_shell_environment_is_read_from_the_users_file_with_clear_errors() {
        use foya_actors::tools::env_policy::{EnvPolicy, Inherit};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        assert_eq!(
            super::shell_environment_in(&file).unwrap(),
            EnvPolicy::default()
        );
        std::fs::write(&file, "[hooks]\n").unwrap();
        assert_eq!(
            super::shell_environment_in(&file).unwrap(),
            EnvPolicy::default()
        );
        std::fs::write(
            &file,
            "[shell_environment]\ninherit = \"none\"\ninclude = [\"PATH\"]\n",
        )
        .unwrap();
        let policy = super::shell_environment_in(&file).unwrap();
        assert_eq!(
            (policy.inherit, policy.include),
            (Inherit::None, vec!["PATH".to_owned()])
        );
        std::fs::write(&file, "[shell_environment]\ninherit = \"most\"\n").unwrap();
        let err = super::shell_environment_in(&file).unwrap_err().to_string();
        assert!(
            err.contains("[shell_environment]") && err.contains("config.toml"),
            "{err}"
        );
    }

    #[test]
    fn the_working_directory_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file.txt");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(
            working_dir(Some(dir.path())).unwrap(),
            std::fs::canonicalize(dir.path()).unwrap()
        );
        assert_eq!(
            working_dir(Some(&file)).unwrap_err().to_string(),
            format!("working directory {} is not a directory", file.display())
        );
        let missing = dir.path().join("missing");
        assert_eq!(
            working_dir(Some(&missing)).unwrap_err().to_string(),
            format!("working directory {} does not exist", missing.display())
        );
    }

    #[test]
    fn the_unknown_profile_error_names_scripted_and_sim_too() {
        let e = with_own_providers(ConfigError::UnknownProfile {
            name: "nope".into(),
            known: vec!["anthropic".into(), "openai".into(), "openai-chat".into()],
            searched: vec![
                "/home/u/.config/foya/config.toml".into(),
                "/p/.foya/config.toml".into(),
            ],
        });
        assert_eq!(
            e.to_string(),
            "unknown provider profile `nope` (define [profiles.nope] in \
             /home/u/.config/foya/config.toml or /p/.foya/config.toml or use one of: \
             anthropic, openai, openai-chat, scripted, sim)"
        );
    }
}

//! Provider profiles: which protocol, endpoint, model, key variable, limits and retry
//! policy a model client uses, loaded from TOML.
//!
//! Files: `~/.config/foya/config.toml` (global) and `<project root>/.foya/config.toml` (project);
//! a project profile overrides the global one of the same name field by field. Built-in
//! profiles `openai` and `anthropic` exist without any file. A protocol kind name
//! (`openai-chat`, `anthropic`, `openai-responses`) with `--base-url`/`--model` selects a
//! protocol directly, without a profile.
//!
//! ```toml
//! [profiles.local]
//! kind = "openai-chat"
//! base_url = "http://127.0.0.1:8000/v1"
//! model = "qwen3"
//! context_window = 32768
//! idle_timeout_ms = 60000
//! vision = false  # the model takes no images: inputs with images are refused at submit
//! [profiles.local.retry]
//! max_attempts = 2
//! ```

mod project_guard;

pub use foya_providers::profile::{
    ANTHROPIC_IDLE_TIMEOUT_MS, ConfigError, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS,
    ProviderProfile,
};
use foya_providers::retry::RetryPolicy;
use foya_providers::wire::ProviderKind;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One `[profiles.NAME]` table as written; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileToml {
    /// `openai-chat`, `anthropic` or `openai-responses`.
    pub kind: Option<ProviderKind>,
    /// Base URL.
    pub base_url: Option<String>,
    /// Model.
    pub model: Option<String>,
    /// API key variable name.
    pub api_key_env: Option<String>,
    /// Whether a missing key is allowed.
    pub api_key_optional: Option<bool>,
    /// Context window in tokens.
    pub context_window: Option<u64>,
    /// Maximum output tokens.
    pub max_output_tokens: Option<u32>,
    /// Extra headers (merged with the overridden profile's).
    pub extra_headers: Option<BTreeMap<String, String>>,
    /// Idle timeout in milliseconds.
    pub idle_timeout_ms: Option<u64>,
    /// Connect timeout in milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// Retry policy (missing fields take their defaults): a table, `[profiles.NAME.retry]`
    /// or inline (`retry = { max_attempts = 3 }`); anything else is refused saying so.
    #[serde(default, deserialize_with = "retry_table")]
    pub retry: Option<RetryPolicy>,
    /// Whether the model accepts images.
    pub vision: Option<bool>,
    /// Most images per request.
    pub max_images: Option<usize>,
    /// Most bytes of base64 image data per request.
    pub max_image_bytes: Option<u64>,
}

/// What a profile's `retry` must be, for the error when it is something else (`retry =
/// 3`): the parser's `invalid type: integer `3`, expected …` ends with it.
const RETRY_EXPECTED: &str = "a table of retry settings, e.g. `retry = { max_attempts = 3 }` \
     or a `[profiles.NAME.retry]` section with `max_attempts = 3` (keys: max_attempts, \
     base_delay_ms, max_delay_ms)";

/// Deserializes `retry` as a [`RetryPolicy`] table; a value of another type is refused
/// with [`RETRY_EXPECTED`] instead of serde's `expected struct RetryPolicy`. The table's
/// own errors (a wrong field type, an unknown key) are the policy's, with their spans.
fn retry_table<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RetryPolicy>, D::Error> {
    struct Table;
    impl<'de> serde::de::Visitor<'de> for Table {
        type Value = RetryPolicy;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(RETRY_EXPECTED)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RetryPolicy, A::Error> {
            RetryPolicy::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Table).map(Some)
}

impl ProfileToml {
    /// Field-by-field override: `other`'s set fields win.
    fn merge(&mut self, other: Self) {
        macro_rules! take { ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* } }
        take!(
            kind,
            base_url,
            model,
            api_key_env,
            api_key_optional,
            context_window,
            max_output_tokens,
            idle_timeout_ms,
            connect_timeout_ms,
            retry,
            vision,
            max_images,
            max_image_bytes
        );
        if let Some(h) = other.extra_headers {
            self.extra_headers
                .get_or_insert_with(BTreeMap::new)
                .extend(h);
        }
    }
}

/// The configuration file's shape.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ProviderConfig {
    /// Profiles by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileToml>,
    /// The files [`Self::load_files`] looked for, in order, whether they existed or not
    /// (named by an unknown-profile error); empty for a parsed text.
    #[serde(skip)]
    pub searched: Vec<PathBuf>,
    /// Hosts a trusted project's config may point a keyed profile at (`allowed_hosts =
    /// ["gateway.internal"]`), read from the user's own config only: a project file's
    /// list is ignored. See `project_guard`.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The project file applied over the user's config, with its profiles as written
    /// (set by [`Self::load`] for a trusted project only).
    #[serde(skip)]
    pub project: Option<(PathBuf, BTreeMap<String, ProfileToml>)>,
    /// The profiles of the user's own files, before the project's were merged in.
    #[serde(skip)]
    pub user_profiles: BTreeMap<String, ProfileToml>,
    /// `[context]`: how the runtime treats the context window. The CLI reads it from a
    /// trusted project's file only ([`project_auto_compact`]).
    #[serde(default)]
    pub context: ContextToml,
}

/// Table `[context]` of a config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ContextToml {
    /// `auto_compact = false`: the runtime never compacts on its own (`--no-auto-compact`).
    #[serde(default)]
    pub auto_compact: Option<bool>,
}

/// `[context] auto_compact` of the project's config file for `cwd` ([`project_file`]),
/// when the project is `trusted` and its file sets it; `None` otherwise (an untrusted
/// project's file is not read).
///
/// # Errors
/// As [`read_optional`] and [`ProviderConfig::parse`].
pub fn project_auto_compact(cwd: &Path, trusted: bool) -> Result<Option<bool>, ConfigError> {
    if !trusted {
        return Ok(None);
    }
    let path = project_file(cwd);
    let Some(text) = read_optional(&path)? else {
        return Ok(None);
    };
    Ok(ProviderConfig::parse(&text, &path)?.context.auto_compact)
}

/// The user's own config file: `config.toml` in the user config directory
/// (`files::user_config_file`: `$XDG_CONFIG_HOME/foya`, else
/// `~/.config/foya`; `None` without a home).
#[must_use]
pub fn user_file() -> Option<PathBuf> {
    crate::files::user_config_file("config.toml")
}

/// The project's config file for working directory `cwd`: `.foya/config.toml` at its
/// [`foya_context::project_root`] (nearest ancestor with `.git` or `.foya`). It also
/// holds the CLI's `[hooks]`.
#[must_use]
pub fn project_file(cwd: &Path) -> PathBuf {
    foya_context::project_root(cwd).join(".foya/config.toml")
}

/// A config file's text, or `None` when it does not exist.
///
/// # Errors
/// [`ConfigError::Read`] when it cannot be read, or is not a regular file (a directory;
/// a FIFO, whose read would block): refused without reading it.
pub fn read_optional(path: &Path) -> Result<Option<String>, ConfigError> {
    crate::files::read_optional(path).map_err(|e| ConfigError::Read {
        path: e.path,
        message: e.message,
    })
}

/// The parser's message, prefixed with where it is (`line L, column C`, from the error's
/// byte span) and the line itself, so a wrong type names its key.
fn parse_message(text: &str, error: &toml::de::Error) -> String {
    let Some(start) = error.span().map(|span| span.start.min(text.len())) else {
        return error.message().to_owned();
    };
    let before = text.get(..start).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let source = text[line_start..].lines().next().unwrap_or_default().trim();
    format!(
        "line {line}, column {column} (`{source}`): {}",
        error.message()
    )
}

impl ProviderConfig {
    /// Parses one file's text (`path` is for messages).
    ///
    /// # Errors
    /// [`ConfigError::Parse`] when the text is not a valid config, or a profile's retry
    /// policy fails [`RetryPolicy::check`] (`[profiles.NAME.retry] max_attempts = 0: …`).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: parse_message(text, &e),
        })?;
        for (name, profile) in &config.profiles {
            if let Some(Err(why)) = profile.retry.map(|r| r.check()) {
                return Err(ConfigError::Parse {
                    path: path.to_owned(),
                    message: format!("[profiles.{name}.retry] {why}"),
                });
            }
        }
        Ok(config)
    }

    /// Loads and merges the given files in order (later ones override); missing files are
    /// skipped.
    ///
    /// # Errors
    /// [`ConfigError::Read`] / [`ConfigError::Parse`] for an unreadable or invalid file.
    pub fn load_files(paths: &[PathBuf]) -> Result<Self, ConfigError> {
        let mut config = Self {
            searched: paths.to_vec(),
            ..Self::default()
        };
        for path in paths {
            let Some(text) = read_optional(path)? else {
                continue;
            };
            let parsed = Self::parse(&text, path)?;
            config.allowed_hosts.extend(parsed.allowed_hosts);
            for (name, profile) in parsed.profiles {
                config.profiles.entry(name).or_default().merge(profile);
            }
        }
        config.user_profiles = config.profiles.clone();
        Ok(config)
    }

    /// Loads `~/.config/foya/config.toml` then, when the user trusted the project
    /// ([`crate::trust::is_trusted`]), the project's `.foya/config.toml` (at
    /// [`foya_context::project_root`] of `cwd`: its nearest ancestor with `.git` or
    /// `.foya`). An untrusted project's file is not read (the CLI says so once).
    ///
    /// # Errors
    /// As [`Self::load_files`].
    pub fn load(cwd: &Path) -> Result<Self, ConfigError> {
        Self::load_with(user_file().as_deref(), cwd, crate::trust::is_trusted(cwd))
    }

    /// [`Self::load`] with the user's file `global` and whether the project of `cwd` is
    /// `trusted` given.
    ///
    /// # Errors
    /// As [`Self::load_files`].
    pub fn load_with(
        global: Option<&Path>,
        cwd: &Path,
        trusted: bool,
    ) -> Result<Self, ConfigError> {
        let project = project_file(cwd);
        let global: Vec<PathBuf> = global.map(Path::to_path_buf).into_iter().collect();
        let mut config = Self::load_files(&global)?;
        config.searched.push(project.clone());
        if trusted && let Some(text) = read_optional(&project)? {
            let parsed = Self::parse(&text, &project)?;
            for (name, profile) in parsed.profiles.clone() {
                config.profiles.entry(name).or_default().merge(profile);
            }
            config.project = Some((project, parsed.profiles));
        }
        Ok(config)
    }

    /// Resolves a profile name or protocol kind name with optional overrides, reading
    /// `OPENAI_BASE_URL` from the process environment.
    ///
    /// # Errors
    /// [`ConfigError::UnknownProfile`], or [`ConfigError::Missing`] when a custom profile
    /// lacks `kind`/`base_url` or a direct protocol selection lacks a model.
    pub fn resolve(
        &self,
        name_or_kind: &str,
        base_url_override: Option<&str>,
        model_override: Option<&str>,
    ) -> Result<ProviderProfile, ConfigError> {
        self.resolve_with_env(name_or_kind, base_url_override, model_override, &|k| {
            std::env::var(k).ok()
        })
    }

    /// Every name [`Self::resolve`] accepts: the configured profiles, the built-in
    /// profiles ([`ProviderProfile::BUILTIN`]) and the protocol kinds, sorted, once each.
    #[must_use]
    pub(crate) fn known_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .profiles
            .keys()
            .cloned()
            .chain(ProviderProfile::BUILTIN.iter().map(|n| (*n).to_owned()))
            .chain(ProviderKind::ALL.iter().map(|k| k.as_str().to_owned()))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// [`Self::resolve`] with an explicit environment lookup (tests).
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub fn resolve_with_env(
        &self,
        name_or_kind: &str,
        base_url_override: Option<&str>,
        model_override: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProviderProfile, ConfigError> {
        let configured = self.profiles.get(name_or_kind);
        let mut profile = match (
            configured,
            ProviderProfile::builtin(name_or_kind),
            ProviderKind::from_name(name_or_kind),
        ) {
            (Some(t), builtin, kind) => {
                let kind = t
                    .kind
                    .or(builtin.as_ref().map(|b| b.kind))
                    .or(kind)
                    .ok_or_else(|| ConfigError::Missing {
                        profile: name_or_kind.to_owned(),
                        field: "kind",
                    })?;
                let mut p = builtin.filter(|b| b.kind == kind).unwrap_or_else(|| {
                    let mut p = ProviderProfile::for_kind(kind, "");
                    if t.base_url.is_some() {
                        p.api_key_env = None;
                    }
                    p
                });
                name_or_kind.clone_into(&mut p.name);
                apply(&mut p, t.clone());
                p
            }
            (None, Some(mut builtin), _) => {
                // Pointed elsewhere (a local server, a gateway): the key is sent when it
                // is set, and its absence is the server's business, not a local error.
                builtin.api_key_optional = base_url_override.is_some();
                builtin
            }
            (None, None, Some(kind)) => {
                let mut p = ProviderProfile::for_kind(kind, "");
                p.api_key_optional = base_url_override.is_some();
                p
            }
            (None, None, None) => {
                return Err(ConfigError::UnknownProfile {
                    name: name_or_kind.to_owned(),
                    known: self.known_names(),
                    searched: self.searched.clone(),
                });
            }
        };
        let explicit_base = configured.is_some_and(|t| t.base_url.is_some());
        if let Some(url) = base_url_override {
            url.clone_into(&mut profile.base_url);
        } else if profile.kind == ProviderKind::OpenaiChat
            && !explicit_base
            && let Some(url) = env("OPENAI_BASE_URL").filter(|u| !u.is_empty())
        {
            profile.base_url = url;
        }
        if let Some(model) = model_override {
            model.clone_into(&mut profile.model);
        }
        profile.base_url = profile.base_url.trim_end_matches('/').to_owned();
        if profile.model.is_empty() {
            return Err(ConfigError::Missing {
                profile: profile.name,
                field: "model",
            });
        }
        project_guard::check(self, name_or_kind, &profile, base_url_override, env)?;
        Ok(profile)
    }
}

fn apply(p: &mut ProviderProfile, t: ProfileToml) {
    if let Some(v) = t.base_url {
        p.base_url = v;
    }
    if let Some(v) = t.model {
        p.model = v;
    }
    if t.api_key_env.is_some() {
        p.api_key_env = t.api_key_env;
    }
    if let Some(v) = t.api_key_optional {
        p.api_key_optional = v;
    }
    if let Some(v) = t.context_window {
        p.context_window = v;
    }
    if t.max_output_tokens.is_some() {
        p.max_output_tokens = t.max_output_tokens;
    }
    if let Some(h) = t.extra_headers {
        p.extra_headers.extend(h);
    }
    if let Some(v) = t.idle_timeout_ms {
        p.idle_timeout_ms = v;
    }
    if let Some(v) = t.connect_timeout_ms {
        p.connect_timeout_ms = v;
    }
    if let Some(v) = t.retry {
        p.retry = Some(v);
    }
    if let Some(n) = t.max_images {
        p.images.max_images = n;
    }
    if let Some(n) = t.max_image_bytes {
        p.images.max_bytes = n;
    }
    if let Some(v) = t.vision {
        p.vision = v;
    }
}

/// Loads the configuration for the current directory and resolves `name_or_kind`.
///
/// # Errors
/// As [`ProviderConfig::load`] and [`ProviderConfig::resolve`].
pub fn resolve(
    name_or_kind: &str,
    base_url_override: Option<&str>,
    model_override: Option<&str>,
) -> Result<ProviderProfile, ConfigError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    ProviderConfig::load(&cwd)?.resolve(name_or_kind, base_url_override, model_override)
}

#[cfg(test)]
mod tests;

//! The provider profile: which protocol, endpoint, model, key variable, limits and retry
//! policy an HTTP model client uses ([`ProviderProfile`]), and the errors of building one
//! ([`ConfigError`]). Loading profiles from files is `foya-config`'s.

use crate::ImageBudget;
use crate::retry::RetryPolicy;
use crate::wire::ProviderKind;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Default idle timeout (no bytes for this long fails the stream) for Anthropic, whose
/// extended thinking can be silent for minutes: 300 s.
pub const ANTHROPIC_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Default idle timeout for the other protocols: 120 s.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Default connect timeout: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;

/// A resolved provider profile. Its `Debug` shows `base_url` as
/// [`crate::redact::display_url`] does (no userinfo, query or fragment, which may carry
/// a key); `extra_headers` values are not shown (gateway keys).
#[derive(Clone, PartialEq)]
pub struct ProviderProfile {
    /// Profile name (`openai`, a `[profiles.NAME]`, or the kind name when selected directly).
    pub name: String,
    /// Wire protocol.
    pub kind: ProviderKind,
    /// Base URL without a trailing slash (`https://api.openai.com/v1`, `https://api.anthropic.com`).
    pub base_url: String,
    /// Model name sent in requests.
    pub model: String,
    /// Name of the environment variable holding the API key; `None`: no key is sent.
    pub api_key_env: Option<String>,
    /// When true, a missing key is not an error (local servers); no key is sent then.
    pub api_key_optional: bool,
    /// Context window of the model in tokens.
    pub context_window: u64,
    /// Default maximum output tokens, when set.
    pub max_output_tokens: Option<u32>,
    /// Extra headers sent with every request (e.g. `OpenAI-Organization`, gateway keys).
    pub extra_headers: BTreeMap<String, String>,
    /// Fail the stream after this many milliseconds without bytes.
    pub idle_timeout_ms: u64,
    /// TCP/TLS connect timeout in milliseconds.
    pub connect_timeout_ms: u64,
    /// Retry policy of this provider's model requests (TOML `[profiles.NAME.retry]`);
    /// `None`: the runtime's (`RuntimeConfig::retry`). Reaches the turn
    /// through `ModelClient::retry_policy` (feature `client`).
    pub retry: Option<RetryPolicy>,
    /// Whether the model accepts image inputs (TOML `vision`, default `true`). When false,
    /// an input with images is refused at submit (`RuntimeError::ImagesNotSupported`).
    pub vision: bool,
    /// How many images, and bytes of them, one request may carry (TOML `max_images`,
    /// `max_image_bytes`; defaults [`ImageBudget::default`]).
    pub images: ImageBudget,
}

impl std::fmt::Debug for ProviderProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderProfile")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &crate::redact::display_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("api_key_optional", &self.api_key_optional)
            .field("context_window", &self.context_window)
            .field("max_output_tokens", &self.max_output_tokens)
            .field(
                "extra_headers",
                &self.extra_headers.keys().collect::<Vec<_>>(),
            )
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("retry", &self.retry)
            .field("vision", &self.vision)
            .field("images", &self.images)
            .finish()
    }
}

impl ProviderProfile {
    /// The defaults of a protocol kind (endpoint, key variable, timeouts), for `model`.
    #[must_use]
    pub fn for_kind(kind: ProviderKind, model: impl Into<String>) -> Self {
        let (base_url, key, idle, window) = match kind {
            ProviderKind::Anthropic => (
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
                ANTHROPIC_IDLE_TIMEOUT_MS,
                200_000,
            ),
            ProviderKind::OpenaiChat | ProviderKind::OpenaiResponses => (
                "https://api.openai.com/v1",
                "OPENAI_API_KEY",
                DEFAULT_IDLE_TIMEOUT_MS,
                128_000,
            ),
        };
        Self {
            name: kind.as_str().to_owned(),
            kind,
            base_url: base_url.to_owned(),
            model: model.into(),
            api_key_env: Some(key.to_owned()),
            api_key_optional: false,
            context_window: window,
            max_output_tokens: None,
            extra_headers: BTreeMap::new(),
            idle_timeout_ms: idle,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            retry: None,
            vision: true,
            images: ImageBudget::default(),
        }
    }

    /// The names of the built-in profiles ([`Self::builtin`]).
    pub const BUILTIN: [&'static str; 2] = ["openai", "anthropic"];

    /// Built-in profiles: `openai` (openai-chat, `gpt-4.1`) and `anthropic`
    /// (`claude-sonnet-4-5`).
    #[must_use]
    pub fn builtin(name: &str) -> Option<Self> {
        let mut p = match name {
            "openai" => Self::for_kind(ProviderKind::OpenaiChat, "gpt-4.1"),
            "anthropic" => Self::for_kind(ProviderKind::Anthropic, "claude-sonnet-4-5"),
            _ => return None,
        };
        name.clone_into(&mut p.name);
        Some(p)
    }
}

/// Where a missing profile field can come from, after the field's name.
fn missing_hint(field: &str) -> &'static str {
    match field {
        "model" => ": set it in the profile or pass --model",
        "base_url" => ": set it in the profile or pass --base-url",
        "kind" => ": set it in the profile (openai-chat, anthropic or openai-responses)",
        _ => "",
    }
}

/// A configuration error (one line, fit to show to a user). Never contains a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A config file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// A config file is not valid TOML or has wrong field types.
    #[error("invalid config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// No profile or protocol kind has this name.
    #[error(
        "unknown provider profile `{name}` (define [profiles.{name}]{} or use one of: {})",
        in_files(.searched), .known.join(", ")
    )]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// Every name that resolves (configured profiles, built-in profiles, protocol
        /// kinds, and whatever the caller adds), sorted.
        known: Vec<String>,
        /// The config files that were looked for, in load order (`ProviderConfig::searched` of `foya-config`).
        searched: Vec<PathBuf>,
    },
    /// A profile lacks a required field.
    #[error("provider profile `{profile}` needs `{field}`{}", missing_hint(.field))]
    Missing {
        /// The profile.
        profile: String,
        /// The missing field.
        field: &'static str,
    },
    /// The API key variable is not set.
    #[error("provider profile `{profile}` needs an API key: set the environment variable {env}")]
    MissingApiKey {
        /// The profile.
        profile: String,
        /// The variable to set.
        env: String,
    },
    /// A trusted project's config points a profile that sends the user's key at a host
    /// the user did not allow.
    #[error(
        "{file} points provider profile `{profile}` at {host}, which would receive your API \
         key{}; refused. If that host is yours, allow it in your own config \
         (~/.config/foya/config.toml): allowed_hosts = [\"{host}\"]",
        .key_env.as_ref().map(|k| format!(" (from {k})")).unwrap_or_default()
    )]
    UnallowedHost {
        /// The profile.
        profile: String,
        /// The host the project points it at.
        host: String,
        /// The project's config file.
        file: PathBuf,
        /// Where the key comes from, when from an environment variable.
        key_env: Option<String>,
    },
    /// The HTTP client could not be built or a header is invalid.
    #[error("provider profile `{profile}`: {message}")]
    Invalid {
        /// The profile.
        profile: String,
        /// What is wrong.
        message: String,
    },
}

/// ` in A or B` (which config files a profile can be defined in), or nothing.
fn in_files(searched: &[PathBuf]) -> String {
    let names: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
    match names.as_slice() {
        [] => String::new(),
        names => format!(" in {}", names.join(" or ")),
    }
}

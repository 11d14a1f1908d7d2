//! The environment of every process the runtime starts for a model or a project: exec
//! tools' commands (`shell`), command hooks and stdio MCP servers. One rule, here; the
//! sandbox runner applies it where it builds the child's command
//! (`SandboxRunner::spawn`), the hook runner where it runs a hook
//! without one, and an MCP server starts from `EnvPolicy::mcp_server`.
//!
//! Owns: which of the runtime's variables a child receives. Must not: read a config file
//! (the CLI reads `[shell_environment]` of the user's config and hands the policy over).
//!
//! Why: the runtime's environment holds the user's credentials (provider keys, database
//! passwords, tokens, webhook URLs); a command a model runs — which a prompt injection
//! may steer — or a project's hook must not be able to print or send them.

use serde::Deserialize;
use std::ffi::{OsStr, OsString};

/// What a child inherits of the runtime's environment before `include` and the excludes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inherit {
    /// Every variable (the default).
    #[default]
    All,
    /// The [`CORE_VARS`] and `LC_*` only.
    Core,
    /// Nothing (only what `include` names).
    None,
}

/// The variables of `inherit = "core"`, and what a stdio MCP server gets before its own
/// `env_vars` and `env` (as the MCP SDKs' default environment and Codex's MCP client
/// do): what a program needs to find programs, its home, its user, its locale, its
/// terminal, its temp dir and its time zone. `LC_*` too ([`is_core`]).
pub const CORE_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "USERNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TMPDIR",
    "TEMP", "TMP", "TZ",
];

/// The default excludes: a variable whose name matches one of these (any case) is not
/// passed, unless `include` names it. Codex CLI's default excludes (`*KEY*`, `*SECRET*`,
/// `*TOKEN*`) and the other shapes credentials come in.
pub const CREDENTIAL_NAMES: &[&str] = &[
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSWORD*",
    "*PASSWD*",
    "*PASSPHRASE*",
    "*_PWD",
    "*_PASS",
    "*_PAT",
    "*AUTH*",
    "*CREDENTIAL*",
    "*WEBHOOK*",
];

/// Which of the runtime's variables a child process receives (`[shell_environment]` of
/// the user's config for the CLI; [`super::sandbox::SandboxRunner::with_env_policy`] for
/// an embedder). In order: start from `inherit`; add the variables whose names match
/// `include`; drop, unless `include` names them, those that look like credentials (when
/// `default_excludes`: a name matching [`CREDENTIAL_NAMES`], or a value holding a URL
/// with a password, `scheme://user:password@host`); drop those matching `exclude`
/// (always). Patterns match whole names, any case, `*` standing for any characters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvPolicy {
    /// `all` (default), `core` or `none`.
    pub inherit: Inherit,
    /// Patterns of variables passed in addition, credential-shaped or not (naming one is
    /// a deliberate choice, e.g. `["SSH_AUTH_SOCK"]`).
    pub include: Vec<String>,
    /// Patterns of variables never passed.
    pub exclude: Vec<String>,
    /// Whether credential-shaped names and values are dropped (default `true`).
    pub default_excludes: bool,
}

impl Default for EnvPolicy {
    fn default() -> Self {
        Self {
            inherit: Inherit::All,
            include: Vec::new(),
            exclude: Vec::new(),
            default_excludes: true,
        }
    }
}

impl EnvPolicy {
    /// The policy a stdio MCP server starts from: [`CORE_VARS`] and `LC_*`, without
    /// credential-shaped values; its configured `env_vars` and `env` are added after.
    #[must_use]
    pub fn mcp_server() -> Self {
        Self {
            inherit: Inherit::Core,
            ..Self::default()
        }
    }

    /// The variables of `vars` (the runtime's environment) a child receives.
    #[must_use]
    pub fn environment(
        &self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Vec<(OsString, OsString)> {
        vars.into_iter()
            .filter(|(name, value)| self.passes(name, value))
            .collect()
    }

    /// Replaces `command`'s environment with [`Self::environment`] of this process's.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command
            .env_clear()
            .envs(self.environment(std::env::vars_os()));
    }

    /// Whether the variable `name=value` is passed.
    fn passes(&self, name: &OsStr, value: &OsStr) -> bool {
        let name = name.to_string_lossy();
        let included = self.include.iter().any(|p| matches(p, &name));
        let inherited = match self.inherit {
            Inherit::All => true,
            Inherit::Core => is_core(&name),
            Inherit::None => false,
        };
        if !(inherited || included) {
            return false;
        }
        if self.exclude.iter().any(|p| matches(p, &name)) {
            return false;
        }
        included || !self.default_excludes || !looks_like_credential(&name, value)
    }
}

/// Whether `name` is one of [`CORE_VARS`] or `LC_*`.
#[must_use]
pub fn is_core(name: &str) -> bool {
    CORE_VARS.contains(&name) || name.starts_with("LC_")
}

/// Query parameters that carry a credential though their names match no
/// [`CREDENTIAL_NAMES`] pattern: a signed URL's signature (Azure SAS `sig`, S3's
/// `X-Amz-Signature`) and short password names.
const CREDENTIAL_PARAMS: &[&str] = &["SIG", "*SIGNATURE*", "PWD", "PASS", "PASSWD"];

/// Whether `name=value` looks like a credential: its name matches
/// [`CREDENTIAL_NAMES`] (any case), or its value holds a URL with a password or a
/// credential in its query.
#[must_use]
pub(crate) fn looks_like_credential(name: &str, value: &OsStr) -> bool {
    CREDENTIAL_NAMES.iter().any(|p| matches(p, name)) || has_url_password(&value.to_string_lossy())
}

/// Whether `text` holds a URL whose authority carries a password
/// (`postgres://user:pw@host/db`, `https://user:pw@host`) or whose query has a
/// credential-shaped parameter (`?api_key=…`, `&access_token=…`, `&sig=…`).
fn has_url_password(text: &str) -> bool {
    text.match_indices("://").any(|(at, sep)| {
        let rest = &text[at + sep.len()..];
        let url = rest
            .split([' ', '\t', '\n', '\r', ',', ';', '"', '\'', '<', '>'])
            .next()
            .unwrap_or("");
        let authority = url.split(['/', '?', '#']).next().unwrap_or("");
        let password = authority
            .rsplit_once('@')
            .is_some_and(|(userinfo, _)| userinfo.contains(':'));
        let query = url
            .split_once('?')
            .map_or("", |(_, q)| q.split('#').next().unwrap_or(""));
        password
            || query.split('&').any(|param| {
                let key = param.split('=').next().unwrap_or("");
                !key.is_empty()
                    && CREDENTIAL_NAMES
                        .iter()
                        .chain(CREDENTIAL_PARAMS)
                        .any(|p| matches(p, key))
            })
    })
}

/// Whether `pattern` (`*` any characters, any case) matches the whole of `name`.
fn matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.to_uppercase().chars().collect();
    let name: Vec<char> = name.to_uppercase().chars().collect();
    // The classic two-pointer wildcard match, backtracking to the last `*`.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(c) if *c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| (OsString::from(n), OsString::from(v)))
            .collect()
    }

    fn names(policy: &EnvPolicy, pairs: &[(&str, &str)]) -> Vec<String> {
        policy
            .environment(env(pairs))
            .into_iter()
            .map(|(n, _)| n.to_string_lossy().into_owned())
            .collect()
    }

    const ENV: &[(&str, &str)] = &[
        ("PATH", "/usr/bin"),
        ("HOME", "/home/u"),
        ("LC_TIME", "C"),
        ("PWD", "/w"),
        ("OLDPWD", "/"),
        ("FOO", "bar"),
        ("OPENAI_API_KEY", "sk-1"),
        ("my_secret", "x"),
        ("Gh_Token", "x"),
        ("PGPASSWORD", "x"),
        ("MYSQL_PWD", "x"),
        ("SMTP_PASS", "x"),
        ("DB_PASSWORD", "x"),
        ("DATABASE_URL", "postgres://app:hunter2@db:5432/app"),
        ("PLAIN_URL", "https://example.com/x?a=b:c@d"),
        ("USER_URL", "ssh://git@github.com/x"),
        ("GITHUB_PAT", "x"),
        ("NPM_AUTH", "x"),
        ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/x"),
        ("DOCKER_AUTH_CONFIG", "{}"),
        ("AWS_CREDENTIALS_FILE", "x"),
    ];

    #[test]
    fn the_default_passes_everything_but_credentials() {
        assert_eq!(
            names(&EnvPolicy::default(), ENV),
            [
                "PATH",
                "HOME",
                "LC_TIME",
                "PWD",
                "OLDPWD",
                "FOO",
                "PLAIN_URL",
                "USER_URL"
            ]
        );
    }

    #[test]
    fn core_and_none_start_smaller_and_include_adds_even_a_credential() {
        let core = EnvPolicy {
            inherit: Inherit::Core,
            ..EnvPolicy::default()
        };
        assert_eq!(names(&core, ENV), ["PATH", "HOME", "LC_TIME"]);
        assert_eq!(
            names(&EnvPolicy::mcp_server(), ENV),
            ["PATH", "HOME", "LC_TIME"]
        );
        let none = EnvPolicy {
            inherit: Inherit::None,
            include: vec!["foo".into(), "GITHUB_*".into()],
            ..EnvPolicy::default()
        };
        assert_eq!(names(&none, ENV), ["FOO", "GITHUB_PAT"]);
    }

    #[test]
    fn exclude_always_wins_and_default_excludes_can_be_turned_off() {
        let policy = EnvPolicy {
            include: vec!["GITHUB_PAT".into()],
            exclude: vec!["*_url".into(), "GITHUB_PAT".into(), "LC_*".into()],
            default_excludes: false,
            ..EnvPolicy::default()
        };
        let passed = names(&policy, ENV);
        assert!(passed.contains(&"OPENAI_API_KEY".to_owned()), "{passed:?}");
        assert!(
            !passed
                .iter()
                .any(|n| n.ends_with("_URL") || n == "GITHUB_PAT" || n == "LC_TIME")
        );
    }

    #[test]
    fn patterns_match_whole_names_in_any_case() {
        assert!(matches("*KEY*", "openai_api_key"));
        assert!(matches("*_PWD", "MYSQL_PWD"));
        assert!(!matches("*_PWD", "OLDPWD"));
        assert!(!matches("*_PAT", "PATH"));
        assert!(matches("A*B*C", "AxxBxxBxC"));
        assert!(!matches("A*B", "AxBx"));
        assert!(matches("*", ""));
        assert!(!matches("FOO", "FOOD"));
    }

    #[test]
    fn a_url_with_a_password_is_a_credential_wherever_it_is() {
        for value in [
            "postgres://app:hunter2@db/app",
            "mysql://root:@localhost",
            "proxy1,http://u:p@proxy:3128",
            "see https://user:pw@host/x",
            "https://maps.example/api?key=AIza1",
            "https://acct.blob.example/c?sv=2020-01-01&sig=abc%3D",
            "https://s3.example/o?X-Amz-Credential=a&X-Amz-Signature=b",
            "x=\"https://h/cb?access_token=t#frag\"",
            "https://h/x?user=a&pwd=b",
        ] {
            assert!(has_url_password(value), "{value}");
        }
        for value in [
            "https://host/a:b@c",
            "ssh://git@host/x",
            "user:pw@host",
            "plain",
            "https://example.com/search?q=rust&page=2",
            "https://h/x?next=a#key=b",
        ] {
            assert!(!has_url_password(value), "{value}");
        }
    }

    #[test]
    fn a_policy_reads_from_toml_with_defaults() {
        let policy: EnvPolicy =
            toml::from_str("inherit = \"core\"\ninclude = [\"SSH_AUTH_SOCK\"]\n").unwrap();
        assert_eq!(policy.inherit, Inherit::Core);
        assert!(policy.default_excludes);
        let err = toml::from_str::<EnvPolicy>("inherit = \"some\"\n").unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
        assert!(toml::from_str::<EnvPolicy>("inclde = []\n").is_err());
    }
}

//! Even a trusted project cannot send the user's key to another host.
//!
//! Owns: the check that a profile a project's config changed (`base_url`,
//! `extra_headers`, `api_key_env`, `kind`) and that sends a key from the user's
//! environment (its key variable is set) or from the user's own config (an `extra_headers` gateway key) only
//! talks to a host the user chose: the host the profile has without the project file
//! (built-in, `~/.config/foya/config.toml`, `OPENAI_BASE_URL`, `--base-url`), or one in
//! the user's own `allowed_hosts`. A project profile that sends no key is free to point
//! anywhere. Must not: do I/O.

use super::{ConfigError, ProfileToml, ProviderConfig, ProviderProfile};

/// Checks `profile` (resolved from `config` for `name`).
///
/// # Errors
/// [`ConfigError::UnallowedHost`] when a project change points a keyed profile at a
/// host the user did not choose.
pub(super) fn check(
    config: &ProviderConfig,
    name: &str,
    profile: &ProviderProfile,
    base_url_override: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let Some((file, project_profiles)) = &config.project else {
        return Ok(());
    };
    let Some(changed) = project_profiles
        .get(name)
        .filter(|t| touches_destination(t))
    else {
        return Ok(());
    };
    let user_headers = config
        .user_profiles
        .get(name)
        .and_then(|t| t.extra_headers.as_ref())
        .is_some_and(|h| !h.is_empty());
    // A key variable that is not set sends nothing (a local server's optional key).
    let env_key = profile
        .api_key_env
        .as_deref()
        .and_then(env)
        .is_some_and(|v| !v.is_empty());
    let sends_key = env_key || user_headers;
    if !sends_key && changed.extra_headers.is_none() {
        return Ok(());
    }
    let host = host_of(&profile.base_url);
    let user_side = ProviderConfig {
        profiles: config.user_profiles.clone(),
        user_profiles: config.user_profiles.clone(),
        allowed_hosts: config.allowed_hosts.clone(),
        searched: Vec::new(),
        project: None,
        context: config.context.clone(),
    };
    let user_host = user_side
        .resolve_with_env(name, base_url_override, None, env)
        .ok()
        .map(|p| host_of(&p.base_url));
    let allowed = user_host.as_deref() == Some(host.as_str())
        || config
            .allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(&host));
    if !sends_key || allowed {
        return Ok(());
    }
    Err(ConfigError::UnallowedHost {
        profile: name.to_owned(),
        host,
        file: file.clone(),
        key_env: profile.api_key_env.clone(),
    })
}

/// Whether a project's profile table changes where requests go or what they carry.
fn touches_destination(t: &ProfileToml) -> bool {
    t.base_url.is_some() || t.extra_headers.is_some() || t.api_key_env.is_some() || t.kind.is_some()
}

/// `host[:port]` of a base URL, lower-cased (`http://127.0.0.1:9/v1` → `127.0.0.1:9`);
/// the whole text when it has no scheme.
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::{ConfigError, ProviderConfig};
    use std::path::Path;

    fn with_project(user: &str, project: &str) -> ProviderConfig {
        let mut config = ProviderConfig::parse(user, Path::new("user.toml")).unwrap();
        config.user_profiles = config.profiles.clone();
        let parsed = ProviderConfig::parse(project, Path::new("/p/.foya/config.toml")).unwrap();
        for (name, t) in parsed.profiles.clone() {
            let mut merged = config.profiles.remove(&name).unwrap_or_default();
            merged = merge(merged, t);
            config.profiles.insert(name, merged);
        }
        config.project = Some(("/p/.foya/config.toml".into(), parsed.profiles));
        config
    }

    fn merge(mut a: super::ProfileToml, b: super::ProfileToml) -> super::ProfileToml {
        if b.base_url.is_some() {
            a.base_url = b.base_url;
        }
        if b.kind.is_some() {
            a.kind = b.kind;
        }
        if b.api_key_env.is_some() {
            a.api_key_env = b.api_key_env;
        }
        if b.model.is_some() {
            a.model = b.model;
        }
        if let Some(h) = b.extra_headers {
            a.extra_headers.get_or_insert_default().extend(h);
        }
        a
    }

    fn env(key: &str) -> Option<String> {
        (key == "OPENAI_API_KEY").then(|| "sk-user".to_owned())
    }

    #[test]
    fn a_project_cannot_point_the_users_key_at_another_host() {
        let evil = "[profiles.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
        let config = with_project("", evil);
        let err = config
            .resolve_with_env("openai", None, None, &env)
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::UnallowedHost {
                profile: "openai".into(),
                host: "127.0.0.1:9".into(),
                file: "/p/.foya/config.toml".into(),
                key_env: Some("OPENAI_API_KEY".into()),
            }
        );
        assert_eq!(
            err.to_string(),
            "/p/.foya/config.toml points provider profile `openai` at 127.0.0.1:9, which would \
             receive your API key (from OPENAI_API_KEY); refused. If that host is yours, allow \
             it in your own config (~/.config/foya/config.toml): allowed_hosts = [\"127.0.0.1:9\"]"
        );
        // A new project profile reading the user's variable is the same attack.
        let new = "[profiles.x]\nkind = \"openai-chat\"\nbase_url = \"http://evil/v1\"\n\
                   model = \"m\"\napi_key_env = \"OPENAI_API_KEY\"\n";
        assert!(
            with_project("", new)
                .resolve_with_env("x", None, None, &env)
                .is_err()
        );
        // Headers on a user's gateway profile pointed elsewhere.
        let user = "[profiles.gw]\nkind = \"openai-chat\"\nbase_url = \"https://gw.corp/v1\"\n\
                    model = \"m\"\nextra_headers = { x-gw-key = \"secret\" }\n";
        let moved = "[profiles.gw]\nbase_url = \"https://evil/v1\"\n";
        assert!(
            with_project(user, moved)
                .resolve_with_env("gw", None, None, &env)
                .is_err()
        );
    }

    #[test]
    fn the_user_can_allow_a_host_and_keyless_profiles_go_anywhere() {
        let evil = "[profiles.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
        let allowed = with_project("allowed_hosts = [\"127.0.0.1:9\"]\n", evil);
        assert!(allowed.resolve_with_env("openai", None, None, &env).is_ok());
        let local = "[profiles.local]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8000/v1\"\nmodel = \"q\"\n";
        let profile = with_project("", local)
            .resolve_with_env("local", None, None, &env)
            .unwrap();
        assert_eq!(profile.api_key_env, None);
        // Changing only the model of the user's profile is fine.
        let model = "[profiles.openai]\nmodel = \"gpt-x\"\n";
        assert!(
            with_project("", model)
                .resolve_with_env("openai", None, None, &env)
                .is_ok()
        );
        // The user's own --base-url is the user's choice.
        assert!(
            with_project("", evil)
                .resolve_with_env("openai", Some("http://127.0.0.1:9/v1"), None, &env)
                .is_ok()
        );
    }
}

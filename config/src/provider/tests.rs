//! Loader and resolver tests with temporary config files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn project_file_overrides_global_per_profile_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let global = write(
        dir.path(),
        "home/config.toml",
        r#"
[profiles.local]
kind = "openai-chat"
base_url = "http://127.0.0.1:8000/v1/"
model = "qwen3"
context_window = 32768
extra_headers = { "x-a" = "1" }
vision = false
max_images = 8
[profiles.local.retry]
max_attempts = 2
"#,
    );
    let project = write(
        dir.path(),
        "proj/.foya/config.toml",
        r#"
[profiles.local]
model = "qwen3-coder"
idle_timeout_ms = 5000
extra_headers = { "x-b" = "2" }
max_image_bytes = 1000000
"#,
    );
    let config =
        ProviderConfig::load_files(&[global, project, dir.path().join("missing.toml")]).unwrap();
    let p = config
        .resolve_with_env("local", None, None, &no_env)
        .unwrap();
    let mut headers = BTreeMap::new();
    headers.insert("x-a".to_owned(), "1".to_owned());
    headers.insert("x-b".to_owned(), "2".to_owned());
    assert_eq!(
        p,
        ProviderProfile {
            name: "local".into(),
            kind: ProviderKind::OpenaiChat,
            base_url: "http://127.0.0.1:8000/v1".into(),
            model: "qwen3-coder".into(),
            api_key_env: None,
            api_key_optional: false,
            context_window: 32768,
            max_output_tokens: None,
            extra_headers: headers,
            idle_timeout_ms: 5000,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            retry: Some(RetryPolicy {
                max_attempts: 2,
                ..RetryPolicy::default()
            }),
            vision: false,
            images: foya_providers::ImageBudget {
                max_images: 8,
                max_bytes: 1_000_000,
            },
        }
    );
}

#[test]
fn builtins_kind_names_and_openai_base_url_env() {
    let config = ProviderConfig::default();
    let anthropic = config
        .resolve_with_env("anthropic", None, Some("claude-x"), &no_env)
        .unwrap();
    assert_eq!(
        (
            anthropic.kind,
            anthropic.base_url.as_str(),
            anthropic.model.as_str(),
            anthropic.api_key_env.as_deref()
        ),
        (
            ProviderKind::Anthropic,
            "https://api.anthropic.com",
            "claude-x",
            Some("ANTHROPIC_API_KEY")
        )
    );
    assert_eq!(anthropic.idle_timeout_ms, ANTHROPIC_IDLE_TIMEOUT_MS);

    let env = |k: &str| (k == "OPENAI_BASE_URL").then(|| "http://gw.local/v1".to_owned());
    let openai = config.resolve_with_env("openai", None, None, &env).unwrap();
    assert_eq!(
        (openai.base_url.as_str(), openai.model.as_str()),
        ("http://gw.local/v1", "gpt-4.1")
    );

    let direct = config
        .resolve_with_env(
            "openai-responses",
            Some("http://127.0.0.1:9/v1"),
            Some("m"),
            &no_env,
        )
        .unwrap();
    assert_eq!(
        (
            direct.name.as_str(),
            direct.kind,
            direct.base_url.as_str(),
            direct.api_key_optional
        ),
        (
            "openai-responses",
            ProviderKind::OpenaiResponses,
            "http://127.0.0.1:9/v1",
            true
        )
    );
    // A built-in profile pointed at another server needs no key (e.g. `foya sim-server`);
    // at its own URL it does.
    let local = config
        .resolve_with_env("anthropic", Some("http://127.0.0.1:9"), None, &no_env)
        .unwrap();
    assert_eq!(
        (local.base_url.as_str(), local.api_key_optional),
        ("http://127.0.0.1:9", true)
    );
    let own = config
        .resolve_with_env("anthropic", None, None, &no_env)
        .unwrap();
    assert!(!own.api_key_optional);
    let missing = config.resolve_with_env("openai-chat", Some("http://x"), None, &no_env);
    assert_eq!(
        missing,
        Err(ConfigError::Missing {
            profile: "openai-chat".into(),
            field: "model"
        })
    );
    assert_eq!(
        missing.unwrap_err().to_string(),
        "provider profile `openai-chat` needs `model`: set it in the profile or pass --model"
    );
    assert_eq!(
        config.resolve_with_env("nope", None, None, &no_env),
        Err(ConfigError::UnknownProfile {
            name: "nope".into(),
            known: config.known_names(),
            searched: config.searched.clone(),
        })
    );
}

#[test]
fn the_unknown_profile_error_lists_every_name_that_resolves() {
    let no_env = |_: &str| None;
    let config = ProviderConfig::default();
    let err = config
        .resolve_with_env("nope", None, None, &no_env)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown provider profile `nope` (define [profiles.nope] or use one of: anthropic, \
         openai, openai-chat, openai-responses)"
    );
    for name in config.known_names() {
        assert!(
            !matches!(
                config.resolve_with_env(&name, Some("http://x"), Some("m"), &no_env),
                Err(ConfigError::UnknownProfile { .. })
            ),
            "{name}"
        );
    }
    for name in ProviderProfile::BUILTIN {
        assert!(ProviderProfile::builtin(name).is_some(), "{name}");
    }
}

#[test]
fn invalid_file_and_missing_kind_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.toml",
        "[profiles.x]\nkind = \"carrier-pigeon\"\n",
    );
    let err = ProviderConfig::load_files(std::slice::from_ref(&bad)).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Parse { path, .. } if *path == bad),
        "{err}"
    );
    let misspelt = write(
        dir.path(),
        "misspelt.toml",
        "[profiles.x]\nkind = \"anthropic\"\n[profiles.x.retry]\nmax_attempt = 1\n",
    );
    let err = ProviderConfig::load_files(std::slice::from_ref(&misspelt)).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Parse { path, message }
            if *path == misspelt && message.contains("unknown field `max_attempt`")),
        "{err}"
    );
    let wrong_type = write(
        dir.path(),
        "type.toml",
        "[profiles.x]\nkind = \"anthropic\"\n\n[profiles.x.retry]\nmax_attempts = \"3\"\n",
    );
    let err = ProviderConfig::load_files(std::slice::from_ref(&wrong_type)).unwrap_err();
    assert_eq!(
        err,
        ConfigError::Parse {
            path: wrong_type.clone(),
            message: "line 5, column 16 (`max_attempts = \"3\"`): invalid type: string \"3\", \
                      expected u32"
                .into()
        }
    );
    let zero = write(
        dir.path(),
        "zero.toml",
        "[profiles.x]\nkind = \"anthropic\"\n[profiles.x.retry]\nmax_attempts = 0\n",
    );
    let err = ProviderConfig::load_files(std::slice::from_ref(&zero)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid config {}: [profiles.x.retry] max_attempts = 0: it counts every attempt, \
             the first included, so it is at least 1 (1 disables retries)",
            zero.display()
        )
    );
    let nokind = write(dir.path(), "nokind.toml", "[profiles.x]\nmodel = \"m\"\n");
    let config = ProviderConfig::load_files(&[nokind]).unwrap();
    assert_eq!(
        config.resolve_with_env("x", None, None, &no_env),
        Err(ConfigError::Missing {
            profile: "x".into(),
            field: "kind"
        })
    );
}

#[test]
fn the_project_file_is_found_from_a_subdirectory_of_the_project() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj");
    write(
        &root,
        ".foya/config.toml",
        "[profiles.from-subdir-test]\nkind = \"anthropic\"\nbase_url = \"http://127.0.0.1:9/\"\nmodel = \"m\"\n",
    );
    let deep = root.join("src/deep");
    std::fs::create_dir_all(&deep).unwrap();
    // `..` is resolved lexically, like the context's project root.
    for cwd in [deep.clone(), deep.join("../deep"), root.clone()] {
        let profile = ProviderConfig::load_with(None, &cwd, true)
            .unwrap()
            .resolve_with_env("from-subdir-test", None, None, &no_env)
            .unwrap();
        assert_eq!(
            (
                profile.kind,
                profile.base_url.as_str(),
                profile.model.as_str()
            ),
            (ProviderKind::Anthropic, "http://127.0.0.1:9", "m"),
            "{}",
            cwd.display()
        );
    }
    // A nested repository is a project of its own: the outer file is not its config.
    let nested = root.join("vendor/lib");
    std::fs::create_dir_all(nested.join(".git")).unwrap();
    // An untrusted project's file is not applied.
    assert!(matches!(
        ProviderConfig::load_with(None, &root, false)
            .unwrap()
            .resolve_with_env("from-subdir-test", None, None, &no_env),
        Err(ConfigError::UnknownProfile { .. })
    ));
    assert!(matches!(
        ProviderConfig::load_with(None, &nested, true)
            .unwrap()
            .resolve_with_env("from-subdir-test", None, None, &no_env),
        Err(ConfigError::UnknownProfile { .. })
    ));
}

#[test]
fn a_config_path_that_is_not_a_regular_file_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::create_dir(&path).unwrap();
    let err = ProviderConfig::load_files(std::slice::from_ref(&path)).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Read { path: p, message } if *p == path && message == "not a regular file"),
        "{err:?}"
    );
}

#[test]
fn the_unknown_profile_error_names_the_files_a_profile_can_be_defined_in() {
    let dir = tempfile::tempdir().unwrap();
    let global = write(
        dir.path(),
        "home/config.toml",
        "[profiles.other]\nkind = \"anthropic\"\n",
    );
    let project = dir.path().join("proj/.foya/config.toml"); // not there
    let config = ProviderConfig::load_files(&[global.clone(), project.clone()]).unwrap();
    assert_eq!(config.searched, vec![global.clone(), project.clone()]);
    let err = config
        .resolve_with_env("nope", None, None, &|_: &str| None)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "unknown provider profile `nope` (define [profiles.nope] in {} or {} or use one \
             of: anthropic, openai, openai-chat, openai-responses, other)",
            global.display(),
            project.display()
        )
    );
}

#[test]
fn a_profiles_debug_hides_url_credentials_and_header_values() {
    let mut profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "m");
    profile.base_url = "http://user:PWSECRET@127.0.0.1:1/v1?key=QSECRET".into();
    profile
        .extra_headers
        .insert("x-gateway-key".into(), "HSECRET".into());
    let debug = format!("{profile:?}");
    assert!(
        debug.contains("base_url: \"http://[redacted]@127.0.0.1:1/v1\""),
        "{debug}"
    );
    assert!(
        debug.contains("extra_headers: [\"x-gateway-key\"]"),
        "{debug}"
    );
    for secret in ["PWSECRET", "QSECRET", "HSECRET"] {
        assert!(!debug.contains(secret), "{debug}");
    }
}

/// `retry = 3` (a number where a table belongs) says what a retry setting looks like,
/// with the line, column and source line of the mistake; the inline-table form it
/// suggests loads.
#[test]
fn a_retry_that_is_not_a_table_says_what_is_expected() {
    let path = Path::new("config.toml");
    let text = "[profiles.x]\nkind = \"anthropic\"\nretry = 3\n";
    assert_eq!(
        ProviderConfig::parse(text, path),
        Err(ConfigError::Parse {
            path: path.to_owned(),
            message: "line 3, column 9 (`retry = 3`): invalid type: integer `3`, expected \
                      a table of retry settings, e.g. `retry = { max_attempts = 3 }` or a \
                      `[profiles.NAME.retry]` section with `max_attempts = 3` (keys: \
                      max_attempts, base_delay_ms, max_delay_ms)"
                .into()
        })
    );
    let inline = "[profiles.x]\nkind = \"anthropic\"\nretry = { max_attempts = 3 }\n";
    let config = ProviderConfig::parse(inline, path).unwrap();
    assert_eq!(
        config.profiles["x"].retry,
        Some(RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        })
    );
}

/// Absurd retry values are refused at load, naming the profile's table and the key; the
/// limits themselves load.
#[test]
fn absurd_retry_policies_are_refused_naming_the_key() {
    let path = Path::new("config.toml");
    let load = |retry: &str| {
        let text = format!("[profiles.x]\nkind = \"anthropic\"\n[profiles.x.retry]\n{retry}\n");
        ProviderConfig::parse(&text, path).map(|c| c.profiles["x"].retry.unwrap())
    };
    let refused = |message: &str| {
        Err(ConfigError::Parse {
            path: path.to_owned(),
            message: format!("[profiles.x.retry] {message}"),
        })
    };
    assert_eq!(
        load("max_attempts = 4000000000"),
        refused(
            "max_attempts = 4000000000: at most 100 (every attempt, the first included); \
             more only prolong an outage"
        )
    );
    assert_eq!(
        load("max_attempts = 101"),
        refused(
            "max_attempts = 101: at most 100 (every attempt, the first included); more only \
             prolong an outage"
        )
    );
    assert_eq!(
        load("base_delay_ms = 0\nmax_delay_ms = 0"),
        refused(
            "base_delay_ms = 0: at least 1 (with 0 every retry is sent at once, a busy loop \
             against a failing server)"
        )
    );
    assert_eq!(
        load("base_delay_ms = 5000\nmax_delay_ms = 100"),
        refused(
            "max_delay_ms = 100 is below base_delay_ms = 5000: it caps every wait, so it is \
             at least the base delay"
        )
    );
    // The default base delay (1000 ms) counts when only the cap is given.
    assert_eq!(
        load("max_delay_ms = 10"),
        refused(
            "max_delay_ms = 10 is below base_delay_ms = 1000: it caps every wait, so it is at \
             least the base delay"
        )
    );
    assert_eq!(
        load("max_delay_ms = 3600001"),
        refused("max_delay_ms = 3600001: at most 3600000 (one hour)")
    );
    assert_eq!(
        load("max_attempts = 100\nbase_delay_ms = 1\nmax_delay_ms = 3600000"),
        Ok(RetryPolicy {
            max_attempts: 100,
            base_delay_ms: 1,
            max_delay_ms: 3_600_000,
        })
    );
    assert_eq!(
        load("base_delay_ms = 250\nmax_delay_ms = 250"),
        Ok(RetryPolicy {
            base_delay_ms: 250,
            max_delay_ms: 250,
            ..RetryPolicy::default()
        })
    );
}

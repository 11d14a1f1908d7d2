//! The reference in `docs/` cannot drift from the code: every command and subcommand the
//! real `foya` binary lists in its `--help`, and every long flag each of them takes, is
//! documented in `docs/cli.md` under that command's own heading; every route (method and
//! path), parameter, body field and enumerated value of the service's `openapi.json` is
//! named in `docs/http-api.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use foya_tests::foya_bin::foya;
use std::collections::BTreeSet;

/// A file of the repository's `docs/` folder.
fn doc(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `foya <path…> --help`, which must succeed.
fn help(path: &[String]) -> String {
    let out = foya().args(path).arg("--help").output().unwrap();
    assert!(
        out.status.success(),
        "foya {} --help failed: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of a help text's section (`Commands:`, `Options:`), up to the next section.
fn section<'a>(help: &'a str, title: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != title)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

/// The subcommand names a help text lists (not clap's own `help`).
fn subcommands(help: &str) -> Vec<String> {
    section(help, "Commands:")
        .into_iter()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The long flags a help text lists (not `--help` and `--version`): the `--name` tokens
/// at the start of each option line (indented by 2 or 6 spaces; descriptions are
/// indented further).
fn long_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in section(help, "Options:") {
        let indent = line.len() - line.trim_start().len();
        if indent > 6 || !line.trim_start().starts_with('-') {
            continue;
        }
        for token in line.split_whitespace() {
            let token = token.trim_end_matches(',');
            if !(token.starts_with('-') || token.starts_with('<') || token.starts_with('[')) {
                break;
            }
            if let Some(name) = token.strip_prefix("--") {
                let name = name.split('=').next().unwrap_or(name);
                if name != "help" && name != "version" {
                    flags.insert(format!("--{name}"));
                }
            }
        }
    }
    flags
}

/// Every command path of the binary, depth first (`["run"]`, `["sessions", "list"]`, …),
/// with its help text; the root (`[]`) first.
fn command_tree() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut todo = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        let text = help(&path);
        for sub in subcommands(&text).into_iter().rev() {
            let mut child = path.clone();
            child.push(sub);
            todo.push(child);
        }
        out.push((path, text));
    }
    out
}

/// The text of the section of `doc` whose heading names `` `foya <path>` ``, up to the
/// next heading of the same or a higher level; `None` when no heading names it.
fn doc_section<'a>(doc: &'a str, path: &[String]) -> Option<String> {
    let name = if path.is_empty() {
        "`foya`".to_owned()
    } else {
        format!("`foya {}`", path.join(" "))
    };
    let level = |l: &str| l.chars().take_while(|c| *c == '#').count();
    let lines: Vec<&'a str> = doc.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with('#') && l.contains(&name))?;
    let own = level(lines[start]);
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.starts_with('#') && level(l) <= own)
        .map_or(lines.len(), |i| start + 1 + i);
    Some(lines[start..end].join("\n"))
}

/// Whether `text` names `flag` as a whole word (`--json` is not found in `--json-x`).
fn names_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| {
        let next = text[i + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

/// What of `tree` the doc `cli` leaves out: one line per missing command heading or flag.
fn missing_from_cli_doc(tree: &[(Vec<String>, String)], cli: &str) -> Vec<String> {
    let mut missing = Vec::new();
    for (path, text) in tree {
        let shown = format!("foya {}", path.join(" "));
        let Some(section) = doc_section(cli, path) else {
            missing.push(format!("no heading naming `{}`", shown.trim_end()));
            continue;
        };
        for flag in long_flags(text) {
            if !names_flag(&section, &flag) {
                missing.push(format!("`{}` {flag}", shown.trim_end()));
            }
        }
    }
    missing
}

#[test]
fn every_command_subcommand_and_flag_of_the_help_is_in_docs_cli_md() {
    let tree = command_tree();
    // The walk must have found the command tree, not an empty help.
    let paths: Vec<String> = tree.iter().map(|(p, _)| p.join(" ")).collect();
    for expected in [
        "run",
        "chat",
        "serve",
        "sessions list",
        "sessions show",
        "node",
    ] {
        assert!(
            paths.iter().any(|p| p == expected),
            "{expected} in {paths:?}"
        );
    }
    let run_flags = long_flags(&tree.iter().find(|(p, _)| p == &["run"]).unwrap().1);
    for expected in [
        "--provider",
        "--data-dir",
        "--approval",
        "--json",
        "--session",
    ] {
        assert!(run_flags.contains(expected), "{expected} in {run_flags:?}");
    }
    let missing = missing_from_cli_doc(&tree, &doc("cli.md"));
    assert!(
        missing.is_empty(),
        "docs/cli.md lacks what `foya --help` shows:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_check_fails_when_a_flag_or_a_command_is_left_out() {
    let tree = command_tree();
    let cli = doc("cli.md");
    // Removing every mention of `--durability` from the doc is caught for each command
    // that takes it.
    let without_flag = cli.replace("--durability", "--d");
    let missing = missing_from_cli_doc(&tree, &without_flag);
    assert!(
        missing.iter().any(|m| m == "`foya run` --durability"),
        "{missing:?}"
    );
    assert!(
        missing.iter().any(|m| m == "`foya loadtest` --durability"),
        "{missing:?}"
    );
    // A flag documented under another command does not count for this one.
    let run = doc_section(&cli, &["run".to_owned()]).unwrap();
    assert!(names_flag(&run, "--json"));
    assert!(!names_flag(&run, "--compare-bare"));
    // A command whose heading is gone is caught.
    let without_heading = cli.replace("`foya sessions title`", "`sessions title`");
    let missing = missing_from_cli_doc(&tree, &without_heading);
    assert!(
        missing.contains(&"no heading naming `foya sessions title`".to_owned()),
        "{missing:?}"
    );
}

/// The route names, parameter names, schema property names and enumerated string values
/// of the OpenAPI document, as `docs/http-api.md` must show them.
fn openapi_names() -> (Vec<String>, BTreeSet<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("serve/src/openapi.json");
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut routes = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if method != "parameters" {
                routes.push(format!("`{} {path}`", method.to_uppercase()));
            }
        }
    }
    let mut names = BTreeSet::new();
    collect_names(&spec, &mut names);
    (routes, names)
}

/// Parameter names, property names and enum values anywhere below `value`.
fn collect_names(value: &serde_json::Value, names: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(props) = map.get("properties").and_then(|p| p.as_object()) {
                names.extend(props.keys().cloned());
            }
            if let Some(values) = map.get("enum").and_then(|e| e.as_array()) {
                names.extend(values.iter().filter_map(|v| v.as_str().map(str::to_owned)));
            }
            if map.contains_key("in")
                && let Some(name) = map.get("name").and_then(|n| n.as_str())
            {
                names.insert(name.to_owned());
            }
            map.values().for_each(|v| collect_names(v, names));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_names(v, names)),
        _ => {}
    }
}

#[test]
fn every_route_parameter_and_field_of_openapi_json_is_in_docs_http_api_md() {
    let (routes, names) = openapi_names();
    assert!(routes.len() >= 10, "{routes:?}");
    assert!(names.contains("from_seq") && names.contains("allow_once"));
    let http = doc("http-api.md");
    let mut missing: Vec<String> = routes.into_iter().filter(|r| !http.contains(r)).collect();
    missing.extend(
        names
            .into_iter()
            .map(|n| format!("`{n}`"))
            .filter(|n| !http.contains(n)),
    );
    assert!(
        missing.is_empty(),
        "docs/http-api.md lacks what openapi.json has:\n{}",
        missing.join("\n")
    );
}

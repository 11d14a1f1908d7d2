//! The README's commands work as written on a fresh clone: each `cargo run -p PACKAGE --
//! …` names a package cargo can pick one binary of (a package with several binaries
//! needs `default-run`, else cargo refuses: "could not determine which binary to run").

use std::collections::BTreeSet;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The packages the README runs with `cargo run -p PACKAGE` without `--bin`.
fn packages_run_without_bin(readme: &str) -> BTreeSet<String> {
    readme
        .lines()
        .filter_map(|line| line.trim().strip_prefix("cargo run "))
        .filter(|args| !args.split(" -- ").next().unwrap_or("").contains("--bin"))
        .filter_map(|args| {
            let mut words = args.split_whitespace();
            words.find(|w| *w == "-p")?;
            words.next().map(str::to_owned)
        })
        .collect()
}

/// The manifest of the workspace member named `package`.
fn manifest(package: &str) -> toml::Table {
    let members: toml::Table = std::fs::read_to_string(format!("{ROOT}/Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let members = members["workspace"]["members"].as_array().unwrap();
    for member in members {
        let path = format!("{ROOT}/{}/Cargo.toml", member.as_str().unwrap());
        let table: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        if table["package"]["name"].as_str() == Some(package) {
            return table;
        }
    }
    panic!("no workspace member is the package {package}");
}

#[test]
fn every_cargo_run_in_the_readme_names_a_package_with_one_binary_to_run() {
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let packages = packages_run_without_bin(&readme);
    assert!(
        packages.contains("foya"),
        "the README runs foya: {packages:?}"
    );
    for package in packages {
        let table = manifest(&package);
        let bins = table
            .get("bin")
            .and_then(|b| b.as_array())
            .map_or(1, Vec::len);
        if bins > 1 {
            let default_run = table["package"].get("default-run").and_then(|d| d.as_str());
            assert!(
                default_run.is_some(),
                "package {package} has {bins} binaries and no default-run: the README's \
                 `cargo run -p {package} -- …` fails"
            );
        }
    }
}

#[test]
fn the_reader_of_readme_commands_finds_packages_and_skips_explicit_bins() {
    let text = "cargo run -p foya -- run x\n  cargo run -p other --bin b -- y\nls\n";
    assert_eq!(
        packages_run_without_bin(text),
        BTreeSet::from(["foya".to_owned()])
    );
}

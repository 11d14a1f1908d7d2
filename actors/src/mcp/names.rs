//! The names MCP tools have for the model: `mcp__<server>__<tool>`, valid for every
//! provider (`^[a-zA-Z0-9_-]{1,64}$`), unique among a session's tools, and naming the
//! same server's same tool for the runtime's whole life, whichever servers are up.
//!
//! Owns: each server's prefix, derived from the configured server names alone
//! (`prefixes`: no prefix starts another, so `mcp__a__b__c` cannot be server `a`'s tool
//! `b__c` one step and server `a__b`'s tool `c` the next), sanitising (every other
//! character becomes `_`), capping at [`MAX_TOOL_NAME`] (a long name keeps its start and
//! ends in a hash of the server and the tool) and making names unique (a repeated name
//! gets a hash suffix too). Pure.

use std::collections::{BTreeMap, BTreeSet};

/// The providers' limit on a tool name's length.
pub(crate) const MAX_TOOL_NAME: usize = 64;

/// `text` with every character but ASCII letters, digits, `_` and `-` replaced by `_`.
fn sanitise(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The name prefix of each of `servers` (the configured names, enabled or not):
/// `mcp__<server>__`, sanitised; a server whose plain prefix is also the start of another
/// server's (`a` beside `a__b`, or `a.b` beside `a_b`, equal once sanitised) gets
/// `mcp__<server>_<8 hex digits of a hash of its name>__` instead. No prefix in the result
/// starts another, so a tool name tells its server from the configuration alone.
#[must_use]
pub(crate) fn prefixes<'a>(servers: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let plain: BTreeMap<String, String> = servers
        .into_iter()
        .map(|s| (s.to_owned(), format!("mcp__{}__", sanitise(s))))
        .collect();
    let mut out: BTreeMap<String, String> = plain
        .iter()
        .map(|(server, prefix)| {
            let ambiguous = plain
                .iter()
                .any(|(other, p)| other != server && p.starts_with(prefix.as_str()));
            let prefix = if ambiguous {
                hashed_prefix(server, 0)
            } else {
                prefix.clone()
            };
            (server.clone(), prefix)
        })
        .collect();
    // A hashed prefix that still starts another (a server named like one) is salted
    // until none does.
    for salt in 1..=u32::from(u16::MAX) {
        let clash = out.iter().find_map(|(server, prefix)| {
            out.iter()
                .any(|(other, p)| other != server && p.starts_with(prefix.as_str()))
                .then(|| server.clone())
        });
        let Some(server) = clash else { break };
        out.insert(server.clone(), hashed_prefix(&server, salt));
    }
    out
}

/// `mcp__<server>_<hash>__`.
fn hashed_prefix(server: &str, salt: u32) -> String {
    format!(
        "mcp__{}_{:08x}__",
        sanitise(server),
        fnv(&format!("{server}#{salt}"))
    )
}

/// The tool `tool` of `server` under `prefix` (from [`prefixes`]): the prefix and the
/// sanitised tool name, capped, not yet unique.
#[must_use]
pub(crate) fn qualified(prefix: &str, server: &str, tool: &str) -> String {
    let clean = format!("{prefix}{}", sanitise(tool));
    if clean.len() <= MAX_TOOL_NAME {
        return clean;
    }
    with_hash(&clean, &format!("{server}\u{0}{tool}"))
}

/// `name`, made unique against `taken` (and added to it): a name already taken gets a
/// hash suffix of `server/tool`.
pub(crate) fn unique(
    name: String,
    server: &str,
    tool: &str,
    taken: &mut BTreeSet<String>,
) -> String {
    let mut name = name;
    let mut salt = 0u32;
    while taken.contains(&name) {
        salt += 1;
        name = with_hash(&name, &format!("{server}/{tool}#{salt}"));
    }
    taken.insert(name.clone());
    name
}

/// FNV-1a: stable across runs and builds (the standard hasher is not).
fn fnv(key: &str) -> u32 {
    key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The first characters of `name` then `_` and 8 hex digits of a hash of `key`, at most
/// [`MAX_TOOL_NAME`] long.
fn with_hash(name: &str, key: &str) -> String {
    let keep = MAX_TOOL_NAME - 9;
    let head: String = name.chars().take(keep).collect();
    format!("{head}_{:08x}", fnv(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_TOOL_NAME).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    fn plain(server: &str, tool: &str) -> String {
        qualified(&format!("mcp__{server}__"), server, tool)
    }

    #[test]
    fn names_are_sanitised_capped_and_unique() {
        assert_eq!(plain("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(plain("fs", "read.file/v2 é"), "mcp__fs__read_file_v2__");
        let long = plain("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert!(valid(&long));
        assert!(long.starts_with("mcp__server__xxx"));
        assert_ne!(
            long,
            plain("server", &"x".repeat(101)),
            "hash of the whole name"
        );

        let mut taken = BTreeSet::new();
        let a = unique(plain("s", "a.b"), "s", "a.b", &mut taken);
        let b = unique(plain("s", "a/b"), "s", "a/b", &mut taken);
        assert_eq!(a, "mcp__s__a_b");
        assert_ne!(a, b);
        assert!(valid(&b));
        assert_eq!(taken.len(), 2);
    }

    #[test]
    fn prefixes_come_from_the_configured_names_and_none_starts_another() {
        let got = prefixes(["fs", "github", "a", "a__b", "x.y", "x_y", "a_"]);
        assert_eq!(got["fs"], "mcp__fs__");
        assert_eq!(got["github"], "mcp__github__");
        // `a` would start `a__b`'s and `a_`'s names; `x.y` and `x_y` are equal sanitised.
        assert_eq!(got["a__b"], "mcp__a__b__");
        assert_eq!(got["a_"], "mcp__a___");
        for hashed in ["a", "x.y", "x_y"] {
            let prefix = &got[hashed];
            assert!(
                prefix.len() == "mcp__".len() + hashed.len() + 11,
                "{prefix}"
            );
            assert!(prefix.ends_with("__") && valid(prefix.trim_end_matches('_')));
        }
        for (server, prefix) in &got {
            for (other, p) in &got {
                assert!(
                    server == other || !p.starts_with(prefix.as_str()),
                    "{prefix} {p}"
                );
            }
        }
        // The same configuration, the same prefixes, whatever the order.
        assert_eq!(
            got,
            prefixes(["a_", "x_y", "x.y", "a__b", "a", "github", "fs"])
        );
        // A server named like a hashed prefix is salted away.
        let hashed = got["a"].trim_start_matches("mcp__").trim_end_matches("__");
        let tricky = format!("{hashed}__z");
        let again = prefixes(["a", "a__b", tricky.as_str()]);
        for (server, prefix) in &again {
            for (other, p) in &again {
                assert!(
                    server == other || !p.starts_with(prefix.as_str()),
                    "{prefix} {p}"
                );
            }
        }
        // A capped name still tells the two servers of the issue apart.
        let left = qualified(&got["a"], "a", &format!("b__{}", "c".repeat(80)));
        let right = qualified(&got["a__b"], "a__b", &"c".repeat(80));
        assert_ne!(left, right);
    }
}

//! The names MCP tools have for the model: `mcp__<server>__<tool>`, valid for every
//! provider (`^[a-zA-Z0-9_-]{1,64}$`) and unique among a session's tools.
//!
//! Owns: sanitising (every other character becomes `_`), capping at [`MAX_TOOL_NAME`]
//! (a long name keeps its start and ends in a hash of the whole name) and making names
//! unique (a repeated name gets a hash suffix too). Pure.

use std::collections::BTreeSet;

/// The providers' limit on a tool name's length.
pub const MAX_TOOL_NAME: usize = 64;

/// `mcp__<server>__<tool>`, sanitised and capped, not yet unique.
#[must_use]
pub fn qualified(server: &str, tool: &str) -> String {
    let raw = format!("mcp__{server}__{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_TOOL_NAME {
        return clean;
    }
    with_hash(&clean, &raw)
}

/// `name`, made unique against `taken` (and added to it): a name already taken gets a
/// hash suffix of `server/tool`.
pub fn unique(name: String, server: &str, tool: &str, taken: &mut BTreeSet<String>) -> String {
    let mut name = name;
    let mut salt = 0u32;
    while taken.contains(&name) {
        salt += 1;
        name = with_hash(&name, &format!("{server}/{tool}#{salt}"));
    }
    taken.insert(name.clone());
    name
}

/// The first characters of `name` then `_` and 8 hex digits of a hash of `key`, at most
/// [`MAX_TOOL_NAME`] long.
fn with_hash(name: &str, key: &str) -> String {
    // FNV-1a: stable across runs and builds (the standard hasher is not).
    let hash = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let keep = MAX_TOOL_NAME - 9;
    let head: String = name.chars().take(keep).collect();
    format!("{head}_{hash:08x}")
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

    #[test]
    fn names_are_sanitised_capped_and_unique() {
        assert_eq!(qualified("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(qualified("fs", "read.file/v2 é"), "mcp__fs__read_file_v2__");
        let long = qualified("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert!(valid(&long));
        assert!(long.starts_with("mcp__server__xxx"));
        assert_ne!(
            long,
            qualified("server", &"x".repeat(101)),
            "hash of the whole name"
        );

        let mut taken = BTreeSet::new();
        let a = unique(qualified("s", "a.b"), "s", "a.b", &mut taken);
        let b = unique(qualified("s", "a/b"), "s", "a/b", &mut taken);
        assert_eq!(a, "mcp__s__a_b");
        assert_ne!(a, b);
        assert!(valid(&b));
        assert_eq!(taken.len(), 2);
    }
}

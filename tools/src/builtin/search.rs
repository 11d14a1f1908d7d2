//! `glob` and `grep`: walking the working directory like ripgrep does (hidden files and
//! paths matched by `.gitignore` / `.ignore` / `.git/info/exclude` are skipped, even
//! outside a git repository), with capped results.

use super::{FileCall, file_tool, looks_binary, read_regular};
use crate::{SideEffect, Tool, ToolContext, ToolOutput, TypedTool, paths};
use globset::{GlobBuilder, GlobMatcher};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

/// `glob` returns at most this many paths.
pub(crate) const GLOB_MAX_RESULTS: usize = 1_000;
/// `grep` stops after this many matching lines.
pub(crate) const GREP_MAX_MATCHES: usize = 500;
/// `grep` cuts matching lines to this many characters.
pub(crate) const GREP_MAX_LINE_CHARS: usize = 300;
/// `grep` skips files larger than this (bytes).
pub(crate) const GREP_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// A compiled glob pattern. Patterns without `/` match a file's name at any depth (like
/// `rg --glob`); patterns with `/` match the path relative to the search root; `*` never
/// crosses `/`, `**` does.
#[derive(Debug)]
struct Pattern {
    matcher: GlobMatcher,
    name_only: bool,
}

impl Pattern {
    fn new(pattern: &str) -> Result<Self, String> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob pattern {pattern:?}: {e}"))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            name_only: !pattern.contains('/'),
        })
    }

    fn matches(&self, relative: &Path) -> bool {
        if self.name_only {
            relative
                .file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        } else {
            self.matcher.is_match(relative)
        }
    }
}

/// Files under `root` (or `root` itself when it is a file), sorted, ignore rules applied.
fn walk(root: &Path, cancel: &CancellationToken) -> impl Iterator<Item = PathBuf> {
    let cancel = cancel.clone();
    ignore::WalkBuilder::new(root)
        .require_git(false)
        .sort_by_file_path(Ord::cmp)
        .build()
        .take_while(move |_| !cancel.is_cancelled())
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
}

/// The directory (or file) `path` names, `.` when it names none.
fn search_root(ctx: &ToolContext, path: Option<&str>) -> Result<(String, PathBuf), String> {
    let raw = path.unwrap_or(".").to_owned();
    let root = paths::resolve(ctx, &raw).map_err(|e| e.to_string())?;
    if !root.exists() {
        return Err(format!("{raw:?} does not exist"));
    }
    Ok((raw, root))
}

// The arguments of `glob` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GlobArgs {
    /// Glob pattern.
    #[schemars(length(min = 1))]
    pattern: String,
    /// Directory to search, relative to the working directory (default '.').
    path: Option<String>,
}

/// `glob`: finds files by glob pattern, `{pattern, path?}`.
#[must_use]
pub fn glob() -> impl Tool {
    typed_glob()
}

/// [`glob`] as the [`TypedTool`] of its arguments.
pub(super) fn typed_glob()
-> TypedTool<GlobArgs, impl Fn(GlobArgs, ToolContext) -> FileCall + Send + Sync + 'static> {
    file_tool(
        "glob",
        "Find files by glob pattern (e.g. '*.rs', 'src/**/*.toml'), skipping hidden and \
         git-ignored files. A pattern without '/' matches file names at any depth. Returns \
         paths relative to the working directory, sorted.",
        SideEffect::None,
        find,
    )
}

fn find(ctx: &ToolContext, args: &GlobArgs) -> ToolOutput {
    let cancel = &ctx.cancel;
    let pattern = match Pattern::new(&args.pattern) {
        Ok(pattern) => pattern,
        Err(message) => return ToolOutput::error(message),
    };
    let (raw, root) = match search_root(ctx, args.path.as_deref()) {
        Ok(found) => found,
        Err(message) => return ToolOutput::error(message),
    };
    let mut found = Vec::new();
    let mut total = 0_usize;
    for path in walk(&root, cancel) {
        let relative = path.strip_prefix(&root).unwrap_or(&path);
        if pattern.matches(relative) {
            total += 1;
            if found.len() < GLOB_MAX_RESULTS {
                found.push(paths::display_relative(&ctx.cwd, &path));
            }
        }
    }
    if cancel.is_cancelled() {
        return ToolOutput::error("glob was cancelled");
    }
    if found.is_empty() {
        return ToolOutput::ok(format!("no files match {:?} in {raw:?}", args.pattern));
    }
    let mut out = found.join("\n");
    out.push('\n');
    if total > found.len() {
        let _ = writeln!(
            out,
            "[{} more files not shown; narrow the pattern or path]",
            total - found.len()
        );
    }
    ToolOutput::ok(out)
}

// The arguments of `grep` (their doc comments are what the model reads).
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GrepArgs {
    /// Regular expression.
    #[schemars(length(min = 1))]
    pattern: String,
    /// File or directory to search, relative to the working directory (default '.').
    path: Option<String>,
    /// Only search files matching this glob (e.g. '*.rs').
    glob: Option<String>,
}

/// `grep`: searches file contents by regex, `{pattern, path?, glob?}` →
/// `path:line:text`.
#[must_use]
pub fn grep() -> impl Tool {
    typed_grep()
}

/// [`grep`] as the [`TypedTool`] of its arguments.
pub(super) fn typed_grep()
-> TypedTool<GrepArgs, impl Fn(GrepArgs, ToolContext) -> FileCall + Send + Sync + 'static> {
    file_tool(
        "grep",
        "Search file contents with a regular expression (Rust regex syntax), skipping \
         hidden, git-ignored and binary files. Returns 'path:line:text' lines, at most 500.",
        SideEffect::None,
        search,
    )
}

fn search(ctx: &ToolContext, args: &GrepArgs) -> ToolOutput {
    let cancel = &ctx.cancel;
    let pattern_text = args.pattern.as_str();
    let regex = match regex::Regex::new(pattern_text) {
        Ok(regex) => regex,
        Err(e) => return ToolOutput::error(format!("invalid regex {pattern_text:?}: {e}")),
    };
    let filter = match args.glob.as_deref().map(Pattern::new).transpose() {
        Ok(filter) => filter,
        Err(message) => return ToolOutput::error(message),
    };
    let (raw, root) = match search_root(ctx, args.path.as_deref()) {
        Ok(found) => found,
        Err(message) => return ToolOutput::error(message),
    };
    let mut out = String::new();
    let mut matches = 0_usize;
    'files: for path in walk(&root, cancel) {
        let relative = path.strip_prefix(&root).unwrap_or(&path);
        let relative = if relative.as_os_str().is_empty() {
            path.as_path()
        } else {
            relative
        };
        if filter.as_ref().is_some_and(|f| !f.matches(relative)) {
            continue;
        }
        // Too large, special (a FIFO swapped in after the walk listed a file) or
        // unreadable: skipped without blocking.
        let Ok(bytes) = read_regular(&path, GREP_MAX_FILE_BYTES) else {
            continue;
        };
        if looks_binary(&bytes) {
            continue;
        }
        let shown = paths::display_relative(&ctx.cwd, &path);
        for (index, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            if matches == GREP_MAX_MATCHES {
                let _ = writeln!(
                    out,
                    "[stopped after {GREP_MAX_MATCHES} matches; narrow the pattern, path or glob]"
                );
                break 'files;
            }
            matches += 1;
            let line = match line.char_indices().nth(GREP_MAX_LINE_CHARS) {
                Some((at, _)) => format!("{}…", &line[..at]),
                None => line.to_owned(),
            };
            let _ = writeln!(out, "{shown}:{}:{line}", index + 1);
        }
    }
    if cancel.is_cancelled() {
        return ToolOutput::error("grep was cancelled");
    }
    if matches == 0 {
        return ToolOutput::ok(format!("no matches for {pattern_text:?} in {raw:?}"));
    }
    ToolOutput::ok(out)
}

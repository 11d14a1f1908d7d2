//! Protected paths: the runtime's own control files, which untrusted text (a model's
//! output, a tool's output, a cloned repository's files) must not change unasked.
//!
//! Owns: which paths are protected (also under another name, through a symlink either
//! way: `Protected::reached_as`) and whether a shell command names one. Protected are
//! `.foya/` (config, hooks, commands, skills, rules), `.git/` (hooks, config), the
//! instruction files the context compiler loads (`AGENTS.md`, `FOYA.md`, in any
//! directory), the project's MCP servers (`.mcp.json`) and every hook script a config
//! names. The Approval Gateway asks before any
//! write to them in every mode but `bypass` (`approval.rs`), whichever tool attempts it;
//! the sandbox keeps the ones inside the working directory read-only for sandboxed
//! commands (`sandbox/rules.rs`), so no spelling of a command gets around the check.
//! Must not: decide verdicts (the gateway does) or write anything.

use super::paths::normalize;
use std::path::{Component, Path, PathBuf};

/// Directory names whose whole subtree is protected.
pub(crate) const PROTECTED_DIRS: &[&str] = &[".foya", ".git"];

/// File names protected in every directory: the instruction files the context compiler
/// loads (`context/project.rs`) and Claude Code's `.mcp.json`, whose servers a trusted
/// project starts (`mcp/config.rs`).
pub(crate) const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "FOYA.md", ".mcp.json"];

/// The protected paths of one working directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protected {
    /// The working directory (absolute, normalised).
    pub cwd: PathBuf,
    /// Hook scripts a config names (absolute, normalised).
    pub hook_scripts: Vec<PathBuf>,
}

impl Protected {
    /// The protected paths for `cwd`, with the files named by `hook_commands` (shell
    /// commands, run in `cwd`, `hook_files`).
    #[must_use]
    pub fn new(cwd: &Path, hook_commands: &[String]) -> Self {
        let cwd = normalize(Path::new("/"), cwd);
        let mut hook_scripts: Vec<PathBuf> = hook_commands
            .iter()
            .flat_map(|command| hook_files(command, &cwd))
            .collect();
        hook_scripts.sort();
        hook_scripts.dedup();
        Self { cwd, hook_scripts }
    }

    /// Whether writing `path` (absolute, or relative to the working directory) changes a
    /// protected path. Lexical: callers that follow symlinks check the resolved path too.
    #[must_use]
    pub(crate) fn is_protected(&self, path: &Path) -> bool {
        let path = normalize(&self.cwd, path);
        let in_protected_dir = path.components().any(|c| match c {
            Component::Normal(name) => PROTECTED_DIRS.iter().any(|d| name == *d),
            _ => false,
        });
        let instruction = path.file_name().is_some_and(|name| {
            INSTRUCTION_FILES
                .iter()
                .any(|f| name.to_string_lossy().eq_ignore_ascii_case(f))
        });
        in_protected_dir || instruction || self.hook_scripts.iter().any(|h| path.starts_with(h))
    }

    /// The protected name `path` (absolute, or relative to the working directory)
    /// reaches under another name, once symlinks are followed, or `None`: `path`
    /// resolves into a protected path (`conf/x` with `conf -> .foya`), or to what a
    /// protected name resolves to (`CLAUDE.md` with `AGENTS.md -> CLAUDE.md`; `conf/x`
    /// with `.foya -> conf`). The names looked at are `.foya`, `.git` and the instruction
    /// files of every directory from the project root down to the working directory (the
    /// ones the runtime loads) and the hook scripts. Reads the file system (symlinks and
    /// existence only); a path written as a protected name is [`Protected::is_protected`]'s.
    #[must_use]
    pub(crate) fn reached_as(&self, path: &Path) -> Option<PathBuf> {
        self.reached_through(path, &self.links())
    }

    /// [`Protected::reached_as`] with the protected names' `links` found already.
    fn reached_through(&self, path: &Path, links: &[(PathBuf, PathBuf)]) -> Option<PathBuf> {
        let path = normalize(&self.cwd, path);
        let real = super::paths::real_path(&path);
        if real != path && self.is_protected(&real) {
            return Some(real);
        }
        links
            .iter()
            .find(|(_, target)| real.starts_with(target))
            .map(|(name, _)| name.clone())
    }

    /// The protected names (see [`Protected::reached_as`]) that resolve to another path,
    /// with that path (symlinks followed; a dangling link's target as it would be
    /// created).
    fn links(&self) -> Vec<(PathBuf, PathBuf)> {
        let root = foya_context::project_root(&self.cwd);
        let dirs = self
            .cwd
            .ancestors()
            .take_while(|d| d.starts_with(&root))
            .flat_map(|dir| {
                PROTECTED_DIRS
                    .iter()
                    .chain(INSTRUCTION_FILES)
                    .map(move |name| dir.join(name))
            });
        dirs.chain(self.hook_scripts.iter().cloned())
            .filter_map(|name| {
                let meta = std::fs::symlink_metadata(&name).ok()?;
                let target = match std::fs::canonicalize(&name) {
                    Ok(real) => real,
                    // A dangling link: where a write through it would create the file.
                    Err(_) if meta.file_type().is_symlink() => {
                        let link = std::fs::read_link(&name).ok()?;
                        let parent = name.parent().unwrap_or(Path::new("/"));
                        super::paths::real_path(&normalize(parent, &link))
                    }
                    Err(_) => return None,
                };
                (target != name).then_some((name, target))
            })
            .collect()
    }

    /// The first protected path a shell command names, as written in it (`.foya`,
    /// `.git/config`, `AGENTS.md`, a hook script), or `None`. Words are split the way
    /// the shell would (quotes removed, `a''b` is `ab`) and also at `=`, `:`, `>`, `<`,
    /// `;`, `|`, `&`, `(`, `)` and backticks, so `>AGENTS.md`, `--file=.git/config` and
    /// `$(cat .foya/x)` count. When a protected name is a symlink, a word naming what
    /// it resolves to counts too ([`Protected::reached_as`]: `CLAUDE.md` with `AGENTS.md
    /// -> CLAUDE.md`). A command that reaches one without naming it (a variable, an
    /// encoded string) is stopped by the sandbox instead.
    #[must_use]
    pub(crate) fn named_in(&self, command: &str) -> Option<String> {
        let words = shlex::split(command).unwrap_or_else(|| {
            command
                .split_whitespace()
                .map(|w| w.replace(['\'', '"', '\\'], ""))
                .collect()
        });
        let separators: &[char] = &[
            '=', ':', '>', '<', ';', '|', '&', '(', ')', '`', ',', '\'', '"', ' ', '\t', '\n',
        ];
        let links = std::cell::OnceCell::new();
        words
            .iter()
            .flat_map(|w| w.split(separators))
            .filter(|w| !w.is_empty())
            .find(|w| {
                self.is_protected(Path::new(w)) || self.names_hook(w) || {
                    let links = links.get_or_init(|| self.links());
                    !links.is_empty() && self.reached_through(Path::new(w), links).is_some()
                }
            })
            .map(str::to_owned)
    }

    /// Whether `word` names a hook script by its file name alone (`check.sh` run as
    /// `bash check.sh` from its directory).
    fn names_hook(&self, word: &str) -> bool {
        self.hook_scripts
            .iter()
            .any(|h| h.file_name().is_some_and(|n| n == word))
    }

    /// The protected paths inside the working directory that exist or may be created:
    /// `.foya`, `.git` and the instruction files directly in it, and the hook scripts
    /// inside it, plus what each of them points to when it is a symlink into the
    /// working directory. The sandbox keeps these read-only (and their parent
    /// directories closed to new entries).
    #[must_use]
    pub fn in_workspace(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = PROTECTED_DIRS
            .iter()
            .chain(INSTRUCTION_FILES)
            .map(|name| self.cwd.join(name))
            .chain(
                self.hook_scripts
                    .iter()
                    .filter(|h| h.starts_with(&self.cwd) && **h != self.cwd)
                    .cloned(),
            )
            .collect();
        let real_cwd = std::fs::canonicalize(&self.cwd).unwrap_or_else(|_| self.cwd.clone());
        let targets: Vec<PathBuf> = out
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter_map(|real| {
                real.strip_prefix(&real_cwd)
                    .ok()
                    .map(|rel| self.cwd.join(rel))
            })
            .filter(|p| *p != self.cwd)
            .collect();
        out.extend(targets);
        out.sort();
        out.dedup();
        out
    }
}

/// The variables a hook command may use for the project root (`command.rs` sets them).
const PROJECT_DIR_VARS: &[&str] = &["CLAUDE_PROJECT_DIR", "FOYA_PROJECT_DIR"];

/// The files a hook command run in `cwd` names, which a model must not change unasked:
/// every word (split as the shell would, and at `=`, `;`, `|`, `&`, `(`, `)` and
/// backticks), with `$CLAUDE_PROJECT_DIR`, `${CLAUDE_PROJECT_DIR}` and the same
/// `FOYA_PROJECT_DIR` expanded to the project root and `~/` to the home directory, taken
/// relative to `cwd` and to the project root. A word with a `/` counts whether or not
/// the file exists (`./check.sh`, `"$CLAUDE_PROJECT_DIR"/hooks/x.sh`); a bare word only
/// when it is an existing file (`check.py` in `python3 check.py`, not `python3`).
/// Directories, and the working directory's and the root's ancestors, are left out.
#[must_use]
pub(crate) fn hook_files(command: &str, cwd: &Path) -> Vec<PathBuf> {
    let root = foya_context::project_root(cwd);
    let expanded = expand_project_dir(command, &root);
    let words = shlex::split(&expanded)
        .unwrap_or_else(|| expanded.split_whitespace().map(str::to_owned).collect());
    let separators: &[char] = &['=', ';', '|', '&', '(', ')', '`'];
    let home = dirs::home_dir();
    words
        .iter()
        .flat_map(|w| w.split(separators).map(str::to_owned).collect::<Vec<_>>())
        .filter(|w| !w.is_empty() && !w.starts_with('-'))
        .flat_map(|word| {
            let word = match (word.strip_prefix("~/"), &home) {
                (Some(rest), Some(home)) => home.join(rest),
                _ => PathBuf::from(word),
            };
            let path_like = word.to_string_lossy().contains('/');
            [normalize(cwd, &word), normalize(&root, &word)]
                .into_iter()
                .filter(move |p| if path_like { !p.is_dir() } else { p.is_file() })
        })
        .filter(|p| !cwd.starts_with(p) && !root.starts_with(p))
        .collect()
}

/// `command` with [`PROJECT_DIR_VARS`] (`$NAME` and `${NAME}`) replaced by `root`.
fn expand_project_dir(command: &str, root: &Path) -> String {
    let root = root.to_string_lossy();
    PROJECT_DIR_VARS
        .iter()
        .fold(command.to_owned(), |text, var| {
            text.replace(&format!("${{{var}}}"), &root)
                .replace(&format!("${var}"), &root)
        })
}

/// git subcommands that only read the repository (`branch`, `tag`, `remote`, `stash`
/// only when they list: no argument that is not an option).
const GIT_READS: &[&str] = &[
    "status",
    "log",
    "diff",
    "show",
    "blame",
    "grep",
    "rev-parse",
    "ls-files",
    "ls-tree",
    "cat-file",
    "describe",
    "shortlog",
    "rev-list",
    "show-ref",
    "name-rev",
    "version",
    "help",
    "whatchanged",
    "cherry",
    "count-objects",
    "range-diff",
    "merge-base",
    "diff-tree",
    "diff-files",
    "diff-index",
    "for-each-ref",
    "check-ignore",
    "var",
];

/// `git` subcommands that list when given no argument besides options.
const GIT_LISTS: &[&str] = &["branch", "tag", "remote", "stash", "worktree", "config"];

/// Where a shell command runs git in a way that writes `.git` (`git commit`, `git
/// config x y`, `git branch new`): `.git (git SUB)`, else `None`. Every simple command of
/// the line is looked at (split at `;`, `&`, `|`, newlines and parentheses); git's global
/// options are skipped to find the subcommand.
#[must_use]
pub(crate) fn git_write_in(command: &str) -> Option<String> {
    command
        .split([';', '&', '|', '\n', '(', ')', '`'])
        .filter_map(|part| shlex::split(part.trim().trim_start_matches('$')))
        .find_map(|words| {
            let at = words.iter().position(|w| {
                !w.contains('=')
                    && !matches!(
                        w.as_str(),
                        "env" | "sudo" | "command" | "exec" | "nohup" | "time" | "nice"
                    )
            })?;
            words[at].rsplit('/').next().filter(|n| *n == "git")?;
            let mut rest = words[at + 1..].iter();
            let mut sub = None;
            while let Some(word) = rest.next() {
                if matches!(
                    word.as_str(),
                    "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace"
                ) {
                    rest.next();
                } else if !word.starts_with('-') {
                    sub = Some(word.clone());
                    break;
                }
            }
            let sub = sub?;
            let args: Vec<&String> = rest.collect();
            let lists = GIT_LISTS.contains(&sub.as_str())
                && (args.iter().all(|a| a.starts_with('-'))
                    || (sub == "config"
                        && args
                            .iter()
                            .any(|a| *a == "--get" || *a == "--list" || *a == "-l")));
            let new_repository = sub == "init" && init_elsewhere(&args);
            (!GIT_READS.contains(&sub.as_str()) && !lists && !new_repository)
                .then(|| format!(".git (git {sub})"))
        })
}

/// Whether `git init ARGS` makes a repository in another directory than the working
/// directory (`git init -q sub`): it writes that directory's new `.git`, not the
/// workspace's (an existing one there stays read-only in the sandbox).
fn init_elsewhere(args: &[&String]) -> bool {
    let mut args = args.iter();
    let mut dir = None;
    while let Some(arg) = args.next() {
        if matches!(
            arg.as_str(),
            "-b" | "--initial-branch" | "--template" | "--separate-git-dir" | "--object-format"
        ) {
            args.next();
        } else if !arg.starts_with('-') {
            dir = Some(arg.trim_end_matches('/'));
        }
    }
    dir.is_some_and(|d| !matches!(d, "" | "." | ".git") && !d.starts_with("./.git"))
}

#[cfg(test)]
mod tests {
    use super::Protected;
    use std::path::Path;

    fn protected() -> Protected {
        Protected::new(
            Path::new("/w"),
            &[
                "./check.sh --all".to_owned(),
                "bash hooks/stop.sh".to_owned(),
            ],
        )
    }

    #[test]
    fn control_files_are_protected_wherever_they_are_written_from() {
        let p = protected();
        for path in [
            ".foya/config.toml",
            "/w/.foya",
            "sub/../.git/hooks/pre-commit",
            ".git/config",
            "AGENTS.md",
            "docs/FOYA.md",
            "agents.md",
            "check.sh",
            "/w/hooks/stop.sh",
            "../w/.foya/commands/x.md",
        ] {
            assert!(p.is_protected(Path::new(path)), "{path}");
        }
        for path in [
            "src/main.rs",
            ".gitignore",
            ".github/workflows/ci.yml",
            "AGENTS.md.bak",
            "foya/config.toml",
            "hooks/other.sh",
        ] {
            assert!(!p.is_protected(Path::new(path)), "{path}");
        }
    }

    #[test]
    fn commands_naming_a_protected_path_are_found_in_any_spelling() {
        let p = protected();
        let cases = [
            ("echo x > .foya/config.toml", Some(".foya/config.toml")),
            ("echo x >>AGENTS.md", Some("AGENTS.md")),
            ("sh -c 'echo x | tee -a .git/config'", Some(".git/config")),
            ("bash -c \"printf x > FOYA.md\"", Some("FOYA.md")),
            (
                "env sh -c 'cat > .f''oya/config.toml'",
                Some(".foya/config.toml"),
            ),
            (
                "python3 -c \"open('.git/hooks/pre-commit','w')\"",
                Some(".git/hooks/pre-commit"),
            ),
            ("cp evil.sh check.sh", Some("check.sh")),
            ("git --git-dir=.git status", Some(".git")),
            ("cat .gitignore && ls src", None),
            ("cargo test", None),
        ];
        for (command, expected) in cases {
            assert_eq!(p.named_in(command).as_deref(), expected, "{command}");
        }
    }

    #[test]
    fn git_commands_that_write_the_repository_are_found() {
        let cases = [
            ("git status", None),
            ("git -C sub log -p", None),
            ("git branch -a", None),
            ("git config --get user.name", None),
            ("git commit -m x", Some(".git (git commit)")),
            ("cargo fmt && git add -A", Some(".git (git add)")),
            (
                "git -c core.pager=x config core.pager evil",
                Some(".git (git config)"),
            ),
            ("git branch new", Some(".git (git branch)")),
            ("/usr/bin/git checkout -b x", Some(".git (git checkout)")),
            ("echo git commit", None),
            ("git init -q sub", None),
            ("git init", Some(".git (git init)")),
            ("git init -b main .", Some(".git (git init)")),
        ];
        for (command, expected) in cases {
            assert_eq!(
                super::git_write_in(command).as_deref(),
                expected,
                "{command}"
            );
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn hook_files_are_found_behind_the_project_dir_variables_and_as_bare_words() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(root.join(".foya")).unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/check.py"), "").unwrap();
        let commands = [
            "python3 check.py".to_owned(),
            "\"$CLAUDE_PROJECT_DIR\"/hooks/ctx.sh".to_owned(),
            "cd \"${FOYA_PROJECT_DIR}\" && bash lint/run.sh --fix".to_owned(),
        ];
        let p = Protected::new(&root.join("sub"), &commands);
        let files: Vec<String> = p
            .hook_scripts
            .iter()
            .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            files,
            [
                "hooks/ctx.sh",
                "lint/run.sh",
                "sub/check.py",
                "sub/lint/run.sh"
            ]
        );
        assert_eq!(
            p.named_in("echo x >> check.py").as_deref(),
            Some("check.py")
        );
        assert_eq!(p.named_in("python3 check.py"), Some("check.py".to_owned()));
        assert!(p.is_protected(&root.join("hooks/ctx.sh")));
        assert!(!p.is_protected(&root.join("sub/main.rs")));
        assert!(!p.is_protected(Path::new("python3")));
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_protected_name_is_protected_under_the_name_it_resolves_to() {
        let tmp = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(w.join("conf/hooks")).unwrap();
        std::fs::create_dir_all(w.join("src")).unwrap();
        std::fs::write(w.join("CLAUDE.md"), "x").unwrap();
        std::os::unix::fs::symlink("CLAUDE.md", w.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink("conf", w.join(".foya")).unwrap();
        std::os::unix::fs::symlink(".git", w.join("gitdir")).unwrap();
        std::os::unix::fs::symlink("missing.md", w.join("FOYA.md")).unwrap();
        let p = Protected::new(&w, &[]);
        for (path, name) in [
            ("CLAUDE.md", "AGENTS.md"),
            ("conf/config.toml", ".foya"),
            ("conf/hooks/new.sh", ".foya"),
            ("./conf", ".foya"),
            ("missing.md", "FOYA.md"),
        ] {
            assert_eq!(p.reached_as(Path::new(path)), Some(w.join(name)), "{path}");
        }
        // Through a link into a protected directory that does not exist yet.
        assert_eq!(
            p.reached_as(Path::new("gitdir/config")),
            Some(w.join(".git/config"))
        );
        for path in ["src/main.rs", "CLAUDE.md.bak", "confx", "README.md"] {
            assert_eq!(p.reached_as(Path::new(path)), None, "{path}");
        }
        assert_eq!(
            p.named_in("echo x >> CLAUDE.md").as_deref(),
            Some("CLAUDE.md")
        );
        assert_eq!(
            p.named_in("cp a conf/config.toml").as_deref(),
            Some("conf/config.toml")
        );
        assert_eq!(p.named_in("cargo test"), None);
    }

    #[test]
    fn the_sandbox_list_names_the_control_files_of_the_working_directory() {
        let p = protected();
        let listed: Vec<String> = p
            .in_workspace()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            listed,
            [
                "/w/.foya",
                "/w/.git",
                "/w/.mcp.json",
                "/w/AGENTS.md",
                "/w/FOYA.md",
                "/w/check.sh",
                "/w/hooks/stop.sh"
            ]
        );
    }
}

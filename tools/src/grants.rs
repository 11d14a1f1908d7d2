//! Exact grants for exec tools: what "allow for this session" covers for a command.
//!
//! Owns: turning a shell command into its normalised argv prefix (`git status`, `cargo
//! test`, or the whole command for programs without subcommands), and refusing any
//! grant for commands that run other code or programs than the one shown (`git -c`,
//! aliases, `rg --pre`, `find -exec`, `xargs`, `env`, `sudo`, interpreters with `-c` or
//! `-e`, …), as Codex CLI's safe-command rules and Claude Code's argv-prefix permission
//! rules do; nor a prefix grant for a subcommand given an option that writes a file the
//! command names (`git log --output=x`, `go test -coverprofile=x`, `docker save -o x`).
//! Must not: do I/O.

/// What "allow for this session" would cover for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommandGrant {
    /// Later commands whose normalised argv starts with these words run without asking.
    Prefix(Vec<String>),
    /// Later commands whose normalised argv is exactly these words run without asking.
    Exact(Vec<String>),
    /// No grant: the command is asked every time (why, for the person).
    None(String),
}

impl CommandGrant {
    /// The grant key suffix (`git status`, `=ls -la`), or `None` when nothing is granted.
    #[must_use]
    pub(crate) fn key(&self) -> Option<String> {
        match self {
            Self::Prefix(words) => Some(join(words)),
            Self::Exact(words) => Some(format!("={}", join(words))),
            Self::None(_) => None,
        }
    }

    /// What the grant covers, in words for the approval prompt.
    #[must_use]
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Prefix(words) => format!(
                "\"allow for this session\" allows `{}` with any further arguments",
                join(words)
            ),
            Self::Exact(words) => format!(
                "\"allow for this session\" allows exactly `{}` again",
                join(words)
            ),
            Self::None(why) => {
                format!("\"allow for this session\" is not offered ({why}); it is asked every time")
            }
        }
    }
}

fn join(words: &[String]) -> String {
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}

/// Characters that make a command compound: its first words say little about it.
const SHELL_META: &[char] = &[
    ';', '&', '|', '`', '$', '>', '<', '\n', '(', ')', '{', '}', '*', '?', '[', '~', '!', '#',
];

/// Programs that run another program or code given to them: never granted.
const RUNS_OTHERS: &[&str] = &[
    "env",
    "sudo",
    "doas",
    "su",
    "xargs",
    "nohup",
    "timeout",
    "nice",
    "ionice",
    "time",
    "command",
    "exec",
    "eval",
    "source",
    ".",
    "builtin",
    "setsid",
    "stdbuf",
    "chroot",
    "unshare",
    "nsenter",
    "flock",
    "watch",
    "strace",
    "ltrace",
    "gdb",
    "script",
    "parallel",
    "busybox",
    "chrt",
    "taskset",
    "systemd-run",
    "runuser",
    "pkexec",
    "ssh",
    "npx",
    "bunx",
    "pnpx",
    "awk",
    "gawk",
    "mawk",
    "nawk",
];

/// Interpreters, with the options that take code inline.
const INTERPRETERS: &[(&str, &[&str])] = &[
    ("sh", &["-c"]),
    ("bash", &["-c"]),
    ("zsh", &["-c"]),
    ("dash", &["-c"]),
    ("ksh", &["-c"]),
    ("fish", &["-c", "--command"]),
    ("python", &["-c", "-m"]),
    ("python3", &["-c", "-m"]),
    ("python2", &["-c", "-m"]),
    (
        "node",
        &[
            "-e",
            "--eval",
            "-p",
            "--print",
            "-r",
            "--require",
            "--import",
        ],
    ),
    ("deno", &["eval"]),
    ("bun", &["-e", "--eval", "x"]),
    ("perl", &["-e", "-E", "-M"]),
    ("ruby", &["-e", "-r"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("Rscript", &["-e"]),
    ("pwsh", &["-c", "-command"]),
];

/// Programs whose first non-option argument is a subcommand: the grant is the program
/// and its subcommand.
const WITH_SUBCOMMANDS: &[&str] = &[
    "git", "cargo", "go", "npm", "pnpm", "yarn", "docker", "podman", "kubectl", "gh", "rustup",
    "pip", "pip3", "uv", "poetry", "dotnet",
];

/// git's built-in subcommands that may be granted (an alias or an external `git-x`
/// runs whatever its definition says, and `bisect run`, `submodule foreach`,
/// `filter-branch`, `difftool`, `mergetool`, `rebase -x` run commands).
const GIT_SUBCOMMANDS: &[&str] = &[
    "status",
    "log",
    "diff",
    "show",
    "branch",
    "add",
    "commit",
    "checkout",
    "switch",
    "restore",
    "reset",
    "stash",
    "fetch",
    "pull",
    "push",
    "merge",
    "rebase",
    "tag",
    "rev-parse",
    "ls-files",
    "blame",
    "grep",
    "describe",
    "shortlog",
    "reflog",
    "remote",
    "cherry-pick",
    "revert",
    "mv",
    "rm",
    "clean",
    "init",
    "clone",
    "worktree",
    "notes",
    "rev-list",
    "cat-file",
    "ls-tree",
    "show-ref",
    "name-rev",
    "whatchanged",
    "format-patch",
    "apply",
    "am",
    "range-diff",
    "count-objects",
    "version",
    "help",
    "cherry",
];

/// Options that make a program run other code or programs, by program (`*`: any
/// program). An option given as `--opt=value` matches `--opt`.
const CODE_OPTIONS: &[(&str, &[&str])] = &[
    (
        "git",
        &[
            "-c",
            "--config-env",
            "--exec-path",
            "--upload-pack",
            "--receive-pack",
            "--exec",
            "-x",
            "--ext-diff",
            "--textconv",
            "-O",
            "--open-files-in-pager",
            "--template",
            "--config",
            "--git-dir",
            "--work-tree",
            "--extcmd",
            "--tool",
            "--strategy",
            "--gpg-sign",
            "--run",
        ],
    ),
    ("rg", &["--pre", "--hostname-bin", "--search-zip", "-z"]),
    (
        "cargo",
        &["--config", "-Z", "--target-dir", "--manifest-path"],
    ),
    (
        "npm",
        &[
            "--script-shell",
            "--node-options",
            "--userconfig",
            "--globalconfig",
        ],
    ),
    (
        "tar",
        &[
            "--to-command",
            "--use-compress-program",
            "-I",
            "--checkpoint-action",
            "--info-script",
            "-F",
            "--new-volume-script",
        ],
    ),
    ("rsync", &["-e", "--rsh", "--rsync-path"]),
    (
        "find",
        &[
            "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
            "-fls",
        ],
    ),
    ("fd", &["-x", "--exec", "-X", "--exec-batch"]),
    ("go", &["-exec", "-toolexec", "-vettool", "-overlay"]),
    ("less", &["-o"]),
    ("vim", &["-c", "--cmd", "-S"]),
    ("zip", &["-T", "--unzip-command", "-TT"]),
];

/// Options that make a granted subcommand write a file or directory the command line
/// names (`git log --output=x`): a prefix grant is for what the subcommand does, not for
/// where it may write. By program, or by `program subcommand`.
const WRITE_OPTIONS: &[(&str, &[&str])] = &[
    (
        "git",
        &["--output", "--output-directory", "--build-fake-ancestor"],
    ),
    ("git format-patch", &["-o"]),
    ("cargo", &["--artifact-dir", "--out-dir", "--lockfile-path"]),
    (
        "go",
        &[
            "-o",
            "-coverprofile",
            "-cpuprofile",
            "-memprofile",
            "-blockprofile",
            "-mutexprofile",
            "-trace",
            "-outputdir",
            "-modfile",
        ],
    ),
    ("npm", &["--pack-destination", "--logs-dir", "--cache"]),
    ("pnpm", &["--pack-destination", "--out"]),
    ("yarn", &["-o", "--out", "--filename"]),
    (
        "docker",
        &["-o", "--output", "--iidfile", "--metadata-file"],
    ),
    ("podman", &["-o", "--output", "--iidfile"]),
    ("kubectl", &["--output-directory"]),
    ("gh", &["-O", "--output", "-D", "--dir"]),
    ("pip", &["--log", "--log-file", "--report"]),
    ("pip3", &["--log", "--log-file", "--report"]),
    ("uv", &["-o", "--output-file"]),
    ("poetry", &["-o", "--output"]),
    (
        "dotnet",
        &["-o", "--output", "--results-directory", "--diag"],
    ),
];

/// Subcommands that run arbitrary commands or scripts, by program.
const CODE_SUBCOMMANDS: &[(&str, &[&str])] = &[
    (
        "npm",
        &[
            "exec",
            "x",
            "explore",
            "run",
            "run-script",
            "start",
            "test",
            "restart",
            "stop",
            // A package's install scripts run.
            "install",
            "i",
            "ci",
            "add",
            "rebuild",
        ],
    ),
    (
        "pnpm",
        &["exec", "dlx", "run", "start", "test", "install", "i", "add"],
    ),
    (
        "yarn",
        &[
            "exec", "dlx", "run", "start", "test", "node", "install", "add",
        ],
    ),
    ("pip", &["install", "download", "wheel"]),
    ("pip3", &["install", "download", "wheel"]),
    ("cargo", &["run", "script", "install"]),
    ("go", &["run", "generate", "tool"]),
    ("docker", &["run", "exec", "compose", "build", "buildx"]),
    ("podman", &["run", "exec", "build"]),
    (
        "kubectl",
        &["exec", "run", "debug", "attach", "apply", "plugin"],
    ),
    ("gh", &["extension", "alias", "api"]),
    ("rustup", &["run"]),
    ("uv", &["run", "tool"]),
    ("poetry", &["run", "shell"]),
    ("dotnet", &["run", "exec"]),
];

/// What "allow for this session" covers for `command` (a `bash -c` string).
#[must_use]
pub(crate) fn grant_for(command: &str) -> CommandGrant {
    if command.contains(SHELL_META) {
        return CommandGrant::None(
            "the command uses shell operators, substitutions or globs, so its words do not \
             say what runs"
                .to_owned(),
        );
    }
    let Some(words) = shlex::split(command).filter(|w| !w.is_empty()) else {
        return CommandGrant::None("the command could not be split into words".to_owned());
    };
    let program = words[0].as_str();
    let name = program.rsplit('/').next().unwrap_or(program);
    if words[0].contains('=') {
        return CommandGrant::None(format!(
            "`{}` sets an environment variable for the command",
            words[0]
        ));
    }
    if RUNS_OTHERS.contains(&name) {
        return CommandGrant::None(format!("`{name}` runs other programs or code"));
    }
    if let Some((_, flags)) = INTERPRETERS
        .iter()
        .find(|(i, _)| matches_interpreter(name, i))
    {
        if let Some(flag) = words[1..].iter().find(|w| flags.contains(&w.as_str())) {
            return CommandGrant::None(format!("`{name} {flag}` runs code given inline"));
        }
        return CommandGrant::Exact(words);
    }
    if let Some(option) = code_option(name, &words[1..]) {
        return CommandGrant::None(format!("`{name} {option}` runs other code or programs"));
    }
    if !WITH_SUBCOMMANDS.contains(&name) {
        return CommandGrant::Exact(words);
    }
    // The first word that is not an option is the subcommand; options before it are
    // the program's global options, which are granted only for git's harmless few.
    let Some(index) = words.iter().skip(1).position(|w| !w.starts_with('-')) else {
        return CommandGrant::Exact(words);
    };
    let sub_at = index + 1;
    if name == "git" && sub_at > 1 {
        return CommandGrant::None(format!(
            "`git {}` sets global options before the subcommand",
            words[1]
        ));
    }
    let sub = words[sub_at].as_str();
    if name == "git" && !GIT_SUBCOMMANDS.contains(&sub) {
        return CommandGrant::None(format!(
            "`git {sub}` is not a built-in git command (an alias or an external command \
             runs whatever its definition says)"
        ));
    }
    if let Some((_, subs)) = CODE_SUBCOMMANDS.iter().find(|(p, _)| *p == name)
        && subs.contains(&sub)
    {
        return CommandGrant::None(format!("`{name} {sub}` runs scripts or other programs"));
    }
    if name == "git" && matches!(sub, "bisect" | "submodule" | "filter-branch") {
        return CommandGrant::None(format!("`git {sub}` runs commands"));
    }
    if let Some(option) = write_option(name, sub, &words[1..]) {
        return CommandGrant::None(format!(
            "`{name} {sub} {option}` writes a file the command names"
        ));
    }
    CommandGrant::Prefix(words[..=sub_at].to_vec())
}

/// `python3.12` is `python3`; `/usr/bin/bash` was reduced to `bash` by the caller.
fn matches_interpreter(name: &str, interpreter: &str) -> bool {
    name == interpreter
        || name
            .strip_prefix(interpreter)
            .is_some_and(|rest| rest.starts_with('.') || rest.chars().all(|c| c.is_ascii_digit()))
}

/// The first option among `args` that makes `program` run other code.
fn code_option<'a>(program: &str, args: &'a [String]) -> Option<&'a str> {
    let options = CODE_OPTIONS
        .iter()
        .find(|(p, _)| *p == program)
        .map_or(&[][..], |(_, o)| *o);
    first_of(program, options, args)
}

/// The first option among `args` that makes `program`'s subcommand `sub` write a file
/// the command names ([`WRITE_OPTIONS`]).
fn write_option<'a>(program: &str, sub: &str, args: &'a [String]) -> Option<&'a str> {
    let with_sub = format!("{program} {sub}");
    let options: Vec<&str> = WRITE_OPTIONS
        .iter()
        .filter(|(p, _)| *p == program || *p == with_sub)
        .flat_map(|(_, o)| o.iter().copied())
        .collect();
    first_of(program, &options, args)
}

/// The first of `args` that is one of `options`: as `--opt` or `--opt=value`, a short
/// `-o` also with its value attached (`-ofile`) or among bundled flags' first, and for
/// `go` (whose flags take one dash or two) `--opt` as `-opt`.
fn first_of<'a>(program: &str, options: &[&str], args: &'a [String]) -> Option<&'a str> {
    args.iter().map(String::as_str).find(|arg| {
        let flag = arg.split('=').next().unwrap_or(arg);
        let flag = match flag.strip_prefix('-') {
            Some(single) if program == "go" && single.starts_with('-') => single,
            _ => flag,
        };
        options.contains(&flag)
            || (flag.starts_with('-')
                && !flag.starts_with("--")
                && flag.len() > 2
                && options
                    .iter()
                    .filter(|o| o.len() == 2 && !o.starts_with("--"))
                    .any(|o| flag.starts_with(*o)))
    })
}

#[cfg(test)]
mod tests;

//! The slash commands `foya chat` accepts, in one table ([`COMMANDS`]): it dispatches a
//! typed `/name`, prints `/help`, and lists the available commands when an unknown one
//! is typed (with the project's commands, `.foya/commands/NAME.md`, which the runtime
//! expands). The runtime's own built-ins (`/compact`, `/title`) are rows of the table,
//! passed on to the session.

use foya_actors::context::{ContextError, ProjectContext};
use std::path::Path;

/// What a chat command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChatCommand {
    /// `/compact`: submitted to the session (a compaction turn).
    Compact,
    /// `/title TEXT`: sets the title by hand.
    Title,
    /// `/cancel`: cancels the running turn.
    Cancel,
    /// `/sessions`: lists the stored sessions.
    Sessions,
    /// `/help`: prints this table.
    Help,
    /// `/exit`, `/quit`: leaves.
    Exit,
}

/// One row of [`COMMANDS`].
#[derive(Debug)]
pub(super) struct Spec {
    /// The name typed after `/`.
    pub(super) name: &'static str,
    /// How its arguments are written in `/help` (empty: none).
    pub(super) arguments: &'static str,
    /// What it does, for `/help`.
    pub(super) help: &'static str,
    /// What it does, for dispatch.
    pub(super) command: ChatCommand,
}

/// Every command chat accepts, in `/help` order.
pub(super) const COMMANDS: &[Spec] = &[
    Spec {
        name: "compact",
        arguments: "",
        help: "compact the conversation",
        command: ChatCommand::Compact,
    },
    Spec {
        name: "title",
        arguments: "T",
        help: "set the session title",
        command: ChatCommand::Title,
    },
    Spec {
        name: "cancel",
        arguments: "",
        help: "cancel the running turn",
        command: ChatCommand::Cancel,
    },
    Spec {
        name: "sessions",
        arguments: "",
        help: "list sessions",
        command: ChatCommand::Sessions,
    },
    Spec {
        name: "help",
        arguments: "",
        help: "list the commands",
        command: ChatCommand::Help,
    },
    Spec {
        name: "exit",
        arguments: "",
        help: "quit (also Ctrl-D)",
        command: ChatCommand::Exit,
    },
    Spec {
        name: "quit",
        arguments: "",
        help: "quit",
        command: ChatCommand::Exit,
    },
];

/// Splits a typed line `/name arguments` into its name and trimmed arguments; `None`
/// for a line that is not a slash command.
pub(super) fn split(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim().strip_prefix('/')?;
    let (name, arguments) = rest.split_once(' ').unwrap_or((rest, ""));
    Some((name, arguments.trim()))
}

/// The chat command named `name` (without `/`).
pub(super) fn find(name: &str) -> Option<ChatCommand> {
    COMMANDS
        .iter()
        .find(|spec| spec.name == name)
        .map(|spec| spec.command)
}

/// The `/help` text: one line per chat command, then one per project (or user) command
/// of the session's working directory `cwd` that can be typed (`/NAME ARGS  description`,
/// under a `project commands:` line), loaded as the runtime loads them.
pub(super) fn help(cwd: &Path, user_dir: Option<&Path>) -> String {
    let project = ProjectContext::load(cwd, user_dir);
    help_text(
        project
            .commands
            .values()
            .filter(|c| typeable(&c.name))
            .map(|c| (c.name.as_str(), c.description.as_str())),
    )
}

/// [`help`] given the project's commands as `(name, description)`.
fn help_text<'a>(project: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut rows: Vec<(String, &str)> = COMMANDS
        .iter()
        .map(|spec| {
            let usage = match spec.arguments {
                "" => format!("/{}", spec.name),
                arguments => format!("/{} {arguments}", spec.name),
            };
            (usage, spec.help)
        })
        .collect();
    let built_in = rows.len();
    rows.extend(project.map(|(name, description)| (format!("/{name} ARGS"), description)));
    let width = rows.iter().map(|(usage, _)| usage.len()).max().unwrap_or(0);
    let line =
        |(usage, help): &(String, &str)| format!("{usage:<width$}  {help}").trim_end().to_owned();
    let mut lines: Vec<String> = rows[..built_in].iter().map(line).collect();
    if rows.len() > built_in {
        lines.push("project commands:".to_owned());
        lines.extend(rows[built_in..].iter().map(line));
    }
    lines.join("\n")
}

/// Whether `name` is a project (or user) command of the session's working directory
/// `cwd`, loaded as the runtime loads it; otherwise the message naming every command
/// chat accepts: [`COMMANDS`] and those project commands, sorted (the runtime's
/// `unknown command` wording).
///
/// Project commands whose file name cannot be typed as `/NAME` (it contains whitespace,
/// or starts with a dot: a hidden file) are skipped, for the lookup and the list alike.
pub(super) fn unknown(name: &str, cwd: &Path, user_dir: Option<&Path>) -> Option<String> {
    let project = ProjectContext::load(cwd, user_dir);
    if typeable(name) && project.commands.contains_key(name) {
        return None;
    }
    Some(unknown_message(
        name,
        project
            .commands
            .keys()
            .map(String::as_str)
            .filter(|n| typeable(n)),
    ))
}

/// Whether a project command's name can be typed as `/NAME` at the chat prompt: not
/// empty, no whitespace (a typed line ends the name at the first space), not starting
/// with a dot (hidden files such as `.draft.md` are not commands).
fn typeable(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.chars().any(char::is_whitespace)
}

/// The unknown-command message for `name`, given the project's commands.
fn unknown_message<'a>(name: &str, project: impl Iterator<Item = &'a str>) -> String {
    let mut available: Vec<String> = COMMANDS
        .iter()
        .map(|spec| spec.name)
        .chain(project)
        .map(str::to_owned)
        .collect();
    available.sort();
    available.dedup();
    ContextError::UnknownCommand {
        name: name.to_owned(),
        available,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_runtime_built_ins_are_chat_commands() {
        for name in foya_actors::context::BUILTIN_COMMANDS {
            assert!(find(name).is_some(), "/{name} is missing from COMMANDS");
        }
    }

    #[test]
    fn help_and_the_unknown_message_list_the_table() {
        assert_eq!(
            help_text(std::iter::empty()),
            "/compact   compact the conversation\n/title T   set the session title\n\
             /cancel    cancel the running turn\n/sessions  list sessions\n\
             /help      list the commands\n/exit      quit (also Ctrl-D)\n/quit      quit"
        );
        assert_eq!(
            help_text([("fix", "fix the failing test"), ("sum", "")].into_iter()),
            "/compact   compact the conversation\n/title T   set the session title\n\
             /cancel    cancel the running turn\n/sessions  list sessions\n\
             /help      list the commands\n/exit      quit (also Ctrl-D)\n/quit      quit\n\
             project commands:\n/fix ARGS  fix the failing test\n/sum ARGS"
        );
        assert_eq!(
            unknown_message("nope", ["fix", "compact"].into_iter()),
            "unknown command /nope; available commands: /cancel, /compact, /exit, /fix, \
             /help, /quit, /sessions, /title"
        );
        assert_eq!(split(" /title  A b "), Some(("title", "A b")));
        assert_eq!(split("/cancel"), Some(("cancel", "")));
        assert_eq!(split("hello"), None);
    }

    #[test]
    fn project_commands_that_cannot_be_typed_are_skipped_for_help_list_and_lookup() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".foya/commands");
        std::fs::create_dir_all(&dir).unwrap();
        for file in ["fix.md", "two words.md", ".hidden.md"] {
            std::fs::write(dir.join(file), "Do it.").unwrap();
        }
        let no_user = tmp.path().join("no-user-dir");
        assert_eq!(unknown("fix", tmp.path(), Some(&no_user)), None);
        let expected = "unknown command /.hidden; available commands: /cancel, /compact, \
                        /exit, /fix, /help, /quit, /sessions, /title";
        assert_eq!(
            unknown(".hidden", tmp.path(), Some(&no_user)).as_deref(),
            Some(expected)
        );
        assert_eq!(
            unknown("two", tmp.path(), Some(&no_user)).as_deref(),
            Some(expected.replace("/.hidden", "/two").as_str())
        );
        assert!(
            help(tmp.path(), Some(&no_user)).ends_with("\nproject commands:\n/fix ARGS"),
            "{}",
            help(tmp.path(), Some(&no_user))
        );
    }
}

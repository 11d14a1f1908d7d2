//! Owns command expansion: `/compact`, `/title` and project commands
//! (`.foya/commands/NAME.md`).

use super::{BUILTIN_COMMANDS, CommandAction, ContextError, ProjectContext};
use foya_protocol::CommandInvocation;

/// What `invocation` asks for. The name may carry a leading `/`.
///
/// - `compact` → [`CommandAction::Compact`];
/// - `title` → [`CommandAction::Title`] with the trimmed arguments;
/// - a project command → [`CommandAction::Prompt`] with every `$ARGUMENTS` in its
///   template replaced by the trimmed arguments; a template without `$ARGUMENTS` gets
///   non-empty arguments appended after a blank line.
///
/// # Errors
/// [`ContextError::UnknownCommand`] listing every available command.
pub fn expand_command(
    project: &ProjectContext,
    invocation: &CommandInvocation,
) -> Result<CommandAction, ContextError> {
    let name = invocation.name.trim().trim_start_matches('/');
    let arguments = invocation.arguments.trim();
    match name {
        "compact" => return Ok(CommandAction::Compact),
        "title" => {
            let title = super::normalize_title(arguments).unwrap_or_default();
            return Ok(CommandAction::Title(title));
        }
        _ => {}
    }
    let Some(command) = project.commands.get(name) else {
        let mut available: Vec<String> = BUILTIN_COMMANDS.iter().map(|s| (*s).to_owned()).collect();
        available.extend(project.commands.keys().cloned());
        available.sort();
        return Err(ContextError::UnknownCommand {
            name: name.to_owned(),
            available,
        });
    };
    let prompt = if command.template.contains("$ARGUMENTS") {
        command.template.replace("$ARGUMENTS", arguments)
    } else if arguments.is_empty() {
        command.template.clone()
    } else {
        format!("{}\n\n{arguments}", command.template)
    };
    Ok(CommandAction::Prompt(prompt))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::CommandTemplate;
    use std::path::PathBuf;

    fn project() -> ProjectContext {
        let mut p = ProjectContext::default();
        for (name, template) in [
            (
                "review",
                "Review $ARGUMENTS carefully.\nFocus on $ARGUMENTS.",
            ),
            ("lint", "Run the linters."),
        ] {
            p.commands.insert(
                name.into(),
                CommandTemplate {
                    name: name.into(),
                    description: String::new(),
                    template: template.into(),
                    path: PathBuf::from(format!("/p/.foya/commands/{name}.md")),
                },
            );
        }
        p
    }

    fn call(name: &str, args: &str) -> Result<CommandAction, ContextError> {
        expand_command(
            &project(),
            &CommandInvocation {
                name: name.into(),
                arguments: args.into(),
            },
        )
    }

    #[test]
    fn builtins_and_arguments() {
        assert_eq!(call("compact", ""), Ok(CommandAction::Compact));
        assert_eq!(
            call("/title", "  Fix the\n  parser "),
            Ok(CommandAction::Title("Fix the parser".into()))
        );
        assert_eq!(
            call("/title", " \n "),
            Ok(CommandAction::Title(String::new()))
        );
        assert_eq!(
            call("review", " src/main.rs "),
            Ok(CommandAction::Prompt(
                "Review src/main.rs carefully.\nFocus on src/main.rs.".into()
            ))
        );
        assert_eq!(
            call("lint", ""),
            Ok(CommandAction::Prompt("Run the linters.".into()))
        );
        assert_eq!(
            call("lint", "fast"),
            Ok(CommandAction::Prompt("Run the linters.\n\nfast".into()))
        );
    }

    #[test]
    fn unknown_command_lists_the_available_ones() {
        let err = call("deploy", "now").unwrap_err();
        assert_eq!(
            err,
            ContextError::UnknownCommand {
                name: "deploy".into(),
                available: vec![
                    "compact".into(),
                    "lint".into(),
                    "review".into(),
                    "title".into()
                ],
            }
        );
        assert_eq!(
            err.to_string(),
            "unknown command /deploy; available commands: /compact, /lint, /review, /title"
        );
    }
}

//! What a started input does, decided when its turn starts: commands are expanded here
//! (`context::expand_command`, with the project loaded once for the turn); the session
//! machine turns the [`Plan`] into events.
//!
//! - plain input and project commands → a model turn; a project command's expanded
//!   prompt (then any typed text, after a blank line) becomes the recorded
//!   `user_message` text (the command stays recorded too);
//! - `/compact` → a compaction turn;
//! - `/title TEXT` → `title_set{user}`; `/title` → title generation; either way the turn
//!   completes at once;
//! - an unknown command → the turn fails at once: `turn_complete{failed,
//!   "unknown_command", invalid_request}` with the list of available commands (chosen
//!   over dropping the input so the error appears where the user looks: the turn).

use crate::context::{CommandAction, ProjectContext, expand_command};
use foya_protocol::Input;

pub(crate) use foya_core::session::Plan;

/// Expands `input`'s command, if any: the input to record and the plan.
pub(crate) fn plan(project: &ProjectContext, mut input: Input) -> (Input, Plan) {
    let Some(invocation) = input.command.clone() else {
        return (input, Plan::Model);
    };
    let plan = match expand_command(project, &invocation) {
        Ok(CommandAction::Compact) => Plan::Compact,
        Ok(CommandAction::Title(title)) if title.is_empty() => Plan::GenerateTitle,
        Ok(CommandAction::Title(title)) => Plan::SetTitle(title),
        Ok(CommandAction::Prompt(prompt)) => {
            input.text = if input.text.trim().is_empty() {
                prompt
            } else {
                format!("{prompt}\n\n{}", input.text)
            };
            Plan::Model
        }
        Err(e) => Plan::Unknown(e.to_string()),
    };
    (input, plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::CommandTemplate;
    use std::path::PathBuf;

    #[test]
    fn plans_follow_the_command() {
        let mut project = ProjectContext::default();
        project.commands.insert(
            "fix".into(),
            CommandTemplate {
                name: "fix".into(),
                description: String::new(),
                template: "Fix $ARGUMENTS.".into(),
                path: PathBuf::from("/p/.foya/commands/fix.md"),
            },
        );
        let plain = Input::text("hi");
        assert_eq!(plan(&project, plain.clone()), (plain, Plan::Model));
        let compact = Input::command("compact", "");
        assert_eq!(plan(&project, compact.clone()), (compact, Plan::Compact));
        let title = Input::command("title", " ");
        assert_eq!(plan(&project, title.clone()), (title, Plan::GenerateTitle));
        let title = Input::command("title", " Parser ");
        assert_eq!(
            plan(&project, title.clone()),
            (title, Plan::SetTitle("Parser".into()))
        );
        let mut fix = Input::command("fix", "the bug");
        fix.text = "quickly".into();
        let (recorded, p) = plan(&project, fix.clone());
        assert_eq!(p, Plan::Model);
        assert_eq!(
            recorded,
            Input {
                text: "Fix the bug.\n\nquickly".into(),
                ..fix
            }
        );
        let (_, p) = plan(&project, Input::command("nope", ""));
        assert_eq!(
            p,
            Plan::Unknown(
                "unknown command /nope; available commands: /compact, /fix, /title".into()
            )
        );
    }
}

//! What a started input does, decided when its turn starts: commands are expanded here
//! (`context::expand_command`, with the project loaded once for the turn), and title
//! generation is started for a session's first input.
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

use super::SessionMsg;
use super::actor::Session;
use super::title::{TitleActor, TitleArgs};
use crate::context::{CommandAction, ProjectContext, expand_command};
use foya_protocol::{Input, TitleSource};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;

/// What a started input turns into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// Run the step loop.
    Model,
    /// Compact now.
    Compact,
    /// Set this title by hand.
    SetTitle(String),
    /// Generate a title.
    GenerateTitle,
    /// Fail the turn with this message (`invalid_request`).
    Unknown(String),
}

/// Expands `input`'s command, if any: the input to record and the plan.
pub(super) fn plan(project: &ProjectContext, mut input: Input) -> (Input, Plan) {
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

impl Session {
    /// Loads the project context for a turn: the files the runtime options allow
    /// (project files, user dir), else only the project root.
    pub(super) fn load_project(&self) -> Arc<ProjectContext> {
        let options = &self.deps.context;
        let cwd = &self.fold.config.cwd;
        Arc::new(if options.project_files {
            ProjectContext::load(cwd, options.user_dir.as_deref())
        } else {
            ProjectContext::load_user_only(cwd, options.user_dir.as_deref())
        })
    }

    /// Spawns a TitleActor for `text` (skipped when `text` is empty).
    pub(super) async fn spawn_title(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        text: &str,
    ) -> Result<(), ActorProcessingErr> {
        if text.trim().is_empty() {
            return Ok(());
        }
        self.title_requested = true;
        let config = &self.fold.config;
        let args = TitleArgs {
            session: myself.clone(),
            client: self.deps.aux_client_for(&config.provider),
            model: self
                .deps
                .context
                .title_model
                .clone()
                .unwrap_or_else(|| config.model.clone()),
            text: text.to_owned(),
            expected: self.fold.title.clone(),
        };
        Actor::spawn_linked(None, TitleActor, args, myself.get_cell()).await?;
        Ok(())
    }

    /// Starts title generation for a session's first input when enabled and no title
    /// exists (once per session actor).
    pub(super) async fn maybe_generate_title(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        input: &Input,
    ) -> Result<(), ActorProcessingErr> {
        if self.deps.context.generate_titles && self.fold.title.is_none() && !self.title_requested {
            self.spawn_title(myself, &input.text).await?;
        }
        Ok(())
    }

    /// A generated title arrived: persisted as `title_set{generated}` only if the title
    /// did not change since generation started (a user title set meanwhile wins).
    /// Returns whether it was applied.
    pub(super) async fn title_generated(
        &mut self,
        title: String,
        expected: Option<(String, TitleSource)>,
    ) -> Result<bool, ActorProcessingErr> {
        if self.fold.title != expected {
            tracing::debug!("generated title discarded: the title changed meanwhile");
            return Ok(false);
        }
        let kind = foya_protocol::EventKind::TitleSet {
            title,
            source: TitleSource::Generated,
        };
        self.persist(None, vec![kind]).await?;
        Ok(true)
    }
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

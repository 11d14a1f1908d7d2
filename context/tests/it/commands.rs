//! Command expansion with a project that has no command files.

use foya_context::{CommandAction, ProjectContext, expand_command};
use foya_protocol::CommandInvocation;

fn invoke(name: &str, arguments: &str) -> CommandInvocation {
    CommandInvocation {
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[test]
fn built_in_commands_expand_and_an_unknown_one_lists_what_exists() {
    let project = ProjectContext::default();
    assert_eq!(
        expand_command(&project, &invoke("/compact", "")).unwrap(),
        CommandAction::Compact
    );
    assert_eq!(
        expand_command(&project, &invoke("title", "  Parser  ")).unwrap(),
        CommandAction::Title("Parser".into())
    );
    let error = expand_command(&project, &invoke("nope", "")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unknown command /nope; available commands: /compact, /title"
    );
}

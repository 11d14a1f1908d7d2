//! Title generation: the TitleActor (`actor.rs`), spawned linked by the SessionActor
//! from [`spawn`] only, when the session machine asks for it
//! ([`Effect::StartTitle`](super::machine::Effect::StartTitle)): on a session's first
//! input when titles are generated, or by `/title` without text.

mod actor;

use super::SessionMsg;
use crate::kernel::RuntimeDeps;
use actor::{TitleActor, TitleArgs};
use foya_protocol::{Event, EventKind, SessionConfig, TitleSource};
use ractor::{Actor, ActorProcessingErr, ActorRef};

/// Spawns a TitleActor under `session` for `text` (nothing when `text` is blank).
///
/// # Errors
/// The actor could not be spawned.
pub(super) async fn spawn(
    session: &ActorRef<SessionMsg>,
    deps: &RuntimeDeps,
    config: &SessionConfig,
    text: String,
    expected: Option<(String, TitleSource)>,
) -> Result<(), ActorProcessingErr> {
    if text.trim().is_empty() {
        return Ok(());
    }
    let args = TitleArgs {
        session: session.clone(),
        client: deps.aux_client_for(&config.provider),
        model: deps
            .context
            .title_model
            .clone()
            .unwrap_or_else(|| config.model.clone()),
        text,
        expected,
    };
    Actor::spawn_linked(None, TitleActor, args, session.get_cell()).await?;
    Ok(())
}

/// The text of the session's first user message with text (what `/title` names).
pub(super) fn first_user_text(log: &[Event]) -> String {
    log.iter()
        .find_map(|e| match &e.kind {
            EventKind::UserMessage { input, .. } if !input.text.trim().is_empty() => {
                Some(input.text.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

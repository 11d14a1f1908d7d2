//! The session machine through its public API: time is an input of every call.

use foya_core::session::machine::{Effect, SessionInput, SessionMachine, Settings};
use foya_core::session::state::SessionState;
use foya_core::session::{Plan, QueuedOnRestart, WithoutApprover};
use foya_protocol::{EventKind, Input, InputId, SessionConfig, SessionId};

fn machine() -> SessionMachine {
    let fold = SessionState::new(SessionId::new(), SessionConfig::new("/w"));
    let settings = Settings {
        queued_on_restart: QueuedOnRestart::Run,
        without_approver: WithoutApprover::Wait,
        generate_titles: false,
    };
    SessionMachine::new(fold, settings)
}

#[test]
fn events_are_stamped_with_the_time_the_driver_passes_in() {
    let mut machine = machine();
    let input_id = InputId::new();
    let effects = machine.on(
        SessionInput::SubmitInput {
            input_id,
            input: Input::text("hello"),
            model_takes_images: false,
        },
        41_000,
    );
    let Some(Effect::PrepareInput { input_id, input }) = effects.into_iter().next() else {
        panic!("an idle session prepares the input first");
    };
    let effects = machine.on(
        SessionInput::InputPrepared {
            input_id,
            input,
            plan: Plan::Model,
        },
        42_000,
    );
    let appended: Vec<_> = effects
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Append(events) => Some(events),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(
        appended
            .iter()
            .any(|e| matches!(e.kind, EventKind::UserMessage { .. })),
        "{appended:?}"
    );
    assert!(appended.iter().all(|e| e.at_ms == 42_000), "{appended:?}");
}

//! Title generation and commands through the embedding API: a user title set while
//! generation is in flight wins, a generated title lands when none exists, `/title`,
//! project commands, unknown commands, and images on a model without vision (refused
//! at submit).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use foya_actors::provider::{ModelClient, ModelRequest};
use foya_actors::testkit::kinds_of;
use foya_protocol::{
    AttachmentRef, CommandInvocation, ErrorClass, ErrorInfo, EventKind, FinishReason, Input,
    Message, StreamEvent, TitleSource, TurnStatus,
};
use futures::stream::BoxStream;
use serde_json::json;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// Sends on a channel when dropped (the title request's stream was released).
struct OnDrop(mpsc::UnboundedSender<()>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A title client: each request waits for one `release` permit, answers
/// "Generated title", and signals `released` when its stream is dropped.
#[derive(Debug)]
struct GatedTitles {
    release: Arc<Notify>,
    released: mpsc::UnboundedSender<()>,
}

impl ModelClient for GatedTitles {
    fn stream(
        &self,
        _request: ModelRequest,
        _cancel: CancellationToken,
    ) -> BoxStream<'static, StreamEvent> {
        let release = Arc::clone(&self.release);
        let guard = OnDrop(self.released.clone());
        Box::pin(futures::stream::unfold(
            (0u8, release, guard),
            |(n, release, guard)| async move {
                let event = match n {
                    0 => {
                        release.notified().await;
                        StreamEvent::TextDelta {
                            text: "\"Generated title\"".into(),
                        }
                    }
                    1 => StreamEvent::Done {
                        finish_reason: Some(FinishReason::Stop),
                    },
                    _ => return None,
                };
                Some((event, (n + 1, release, guard)))
            },
        ))
    }
}

#[tokio::test]
async fn a_user_title_survives_a_late_generated_one() {
    let dir = tempfile::tempdir().unwrap();
    let release = Arc::new(Notify::new());
    let (released_tx, mut released) = mpsc::unbounded_channel();
    let mut opts = options(dir.path());
    opts.generate_titles = true;
    opts.aux_model = Some(Arc::new(GatedTitles {
        release: Arc::clone(&release),
        released: released_tx,
    }));
    let model = script(json!({"responses":[{"text":"hello"}]}));
    let rt = runtime(Arc::new(model), opts).await;

    // The turn completes while the title request is still waiting: it never blocks.
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    session.submit(Input::text("fix the parser")).await.unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    assert!(!types(&events).contains(&"title_set"));
    session.set_title("Mine".into()).await.unwrap();
    release.notify_one();
    within(released.recv()).await.unwrap();
    let events = events_until(&mut sub, |e| e.kind.type_name() == "title_set").await;
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TitleSet {
            title: "Mine".into(),
            source: TitleSource::User
        }
    );
    // The late generated title was discarded: the session's title is still the user's.
    let summary = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id == session.id())
        .unwrap();
    assert_eq!(summary.title.as_deref(), Some("Mine"));

    // Without a user title, the generated one lands.
    let other = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&other).await;
    other.submit(Input::text("add retries")).await.unwrap();
    release.notify_one();
    let events = events_until(&mut sub, |e| e.kind.type_name() == "title_set").await;
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TitleSet {
            title: "Generated title".into(),
            source: TitleSource::Generated
        }
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn the_scripted_client_answers_title_requests_without_using_its_script() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.generate_titles = true;
    let model = script(json!({"responses":[{"text":"one"},{"text":"two"}]}));
    let rt = runtime(Arc::new(model), opts).await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    session
        .submit(Input::text("please fix the flaky parser test now"))
        .await
        .unwrap();
    let mut seen = events_until(&mut sub, is_turn_complete).await;
    session.submit(Input::text("more")).await.unwrap();
    seen.extend(events_until(&mut sub, is_turn_complete).await);
    if !types(&seen).contains(&"title_set") {
        seen.extend(events_until(&mut sub, |e| e.kind.type_name() == "title_set").await);
    }
    let titles: Vec<&EventKind> = seen
        .iter()
        .map(|e| &e.kind)
        .filter(|k| matches!(k, EventKind::TitleSet { .. }))
        .collect();
    assert_eq!(
        titles,
        vec![&EventKind::TitleSet {
            title: "please fix the flaky parser test".into(),
            source: TitleSource::Generated
        }]
    );
    let answers: Vec<String> = seen
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage(m) => Some(m.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(answers, vec!["one".to_owned(), "two".to_owned()]);
    rt.shutdown().await;
}

#[tokio::test]
async fn title_and_unknown_commands_complete_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        Arc::new(script(json!({"responses":[]}))),
        options(dir.path()),
    )
    .await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    session
        .submit(Input::command("title", "  Parser work "))
        .await
        .unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(
        types(&events)[1..],
        ["user_message", "turn_started", "title_set", "turn_complete"]
    );
    assert_eq!(
        kinds_of(&events, "title_set"),
        [&EventKind::TitleSet {
            title: "Parser work".into(),
            source: TitleSource::User
        }]
    );
    session
        .submit(Input::command("deploy", "now"))
        .await
        .unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(
        types(&events),
        ["user_message", "turn_started", "turn_complete"]
    );
    assert_eq!(
        kinds_of(&events, "turn_complete"),
        [&EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("unknown_command".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::InvalidRequest,
                message: "unknown command /deploy; available commands: /compact, /title".into()
            })
        }]
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_project_command_runs_its_expanded_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let commands = dir.path().join(".foya/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join("review.md"), "Review $ARGUMENTS carefully.\n").unwrap();
    let client = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 128_000,
        answer: |n| format!("answer {n}"),
    });
    let rt = runtime(client.clone(), options(dir.path())).await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    session
        .submit(Input::command("review", "src/main.rs"))
        .await
        .unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    let expected = Input {
        text: "Review src/main.rs carefully.".into(),
        command: Some(CommandInvocation {
            name: "review".into(),
            arguments: "src/main.rs".into(),
        }),
        ..Input::default()
    };
    let [EventKind::UserMessage { input, .. }] = kinds_of(&events, "user_message")[..] else {
        panic!("one input: {events:?}")
    };
    assert_eq!(input, &expected);
    let mut sent = expected;
    sent.command = None;
    let first = client.requests.lock().unwrap()[0].messages.clone();
    assert_eq!(first, vec![Message::User(sent)]);
    rt.shutdown().await;
}

#[tokio::test]
async fn images_on_a_model_without_vision_are_refused_at_submit() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        Arc::new(script(json!({"responses":[]}))),
        options(dir.path()),
    )
    .await;
    let config = session_config(dir.path());
    let model = config.model.clone();
    let session = rt.create_session(config).await.unwrap();
    let input = Input {
        text: "what is this?".into(),
        images: vec![AttachmentRef {
            id: "img-1".into(),
            media_type: Some("image/png".into()),
        }],
        ..Input::default()
    };
    assert_eq!(
        session.submit(input).await,
        Err(foya_actors::RuntimeError::ImagesNotSupported { model })
    );
    // Nothing was written: the log still holds only `session_created`.
    let summary = rt.list_sessions().await.unwrap();
    assert_eq!(
        summary
            .iter()
            .map(|s| (s.id, s.last_seq))
            .collect::<Vec<_>>(),
        vec![(session.id(), foya_protocol::Seq(1))]
    );
    rt.shutdown().await;
}

//! TitleActor: one-shot title generation (when: see the module docs). It asks the
//! auxiliary client for a title (no tools, [`TITLE_SYSTEM_PROMPT`], the first user text)
//! in a task it owns and reports [`SessionMsg::TitleGenerated`] (and waits for the session's decision before
//! releasing the request's stream); it never blocks or delays the turn. A failed request
//! is logged (class only, never the prompt) and ignored. The session applies the title
//! only if the session's title is still what it was when generation started, so a user
//! title set meanwhile wins.

use crate::context::{TITLE_SYSTEM_PROMPT, clean_title, title_request};
use crate::provider::{ModelClient, ModelRequest};
use crate::session::SessionMsg;
use crate::task::AbortOnDropHandle;
use foya_protocol::{StreamEvent, TitleSource};
use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The TitleActor.
#[derive(Debug)]
pub(crate) struct TitleActor;

/// What a TitleActor is started with.
#[derive(Debug)]
pub(crate) struct TitleArgs {
    pub session: ActorRef<SessionMsg>,
    pub client: Arc<dyn ModelClient>,
    pub model: String,
    /// The first user text.
    pub text: String,
    /// The session's title when generation started.
    pub expected: Option<(String, TitleSource)>,
}

/// Messages of the TitleActor.
#[derive(Debug)]
pub(crate) enum TitleMsg {
    /// The request ended; stop.
    Finished,
}

#[cfg(feature = "cluster")] // without it, ractor's blanket impl covers every type
impl ractor::Message for TitleMsg {}

/// Streams the title request and hands a usable answer to the session; the stream is
/// released only after the session decided (applied or discarded).
#[tracing::instrument(name = "title_request", skip_all)]
async fn generate(args: TitleArgs) {
    let TitleArgs {
        session,
        client,
        model,
        text,
        expected,
    } = args;
    let request = ModelRequest {
        model,
        system: TITLE_SYSTEM_PROMPT.into(),
        messages: title_request(&text).into(),
        max_output_tokens: Some(32),
        ..ModelRequest::default()
    };
    let mut stream = client.stream(request, CancellationToken::new());
    let mut answer = String::new();
    let title = loop {
        match stream.next().await {
            Some(StreamEvent::TextDelta { text }) => answer.push_str(&text),
            Some(StreamEvent::Done { .. }) => break clean_title(&answer),
            Some(StreamEvent::Error { error }) => {
                tracing::warn!(class = error.class.as_str(), "title generation failed");
                break None;
            }
            Some(_) => {}
            None => {
                tracing::warn!("title generation stream ended early");
                break None;
            }
        }
    };
    if let Some(title) = title {
        let _ = session
            .call(
                |reply| SessionMsg::TitleGenerated {
                    title,
                    expected,
                    reply: Some(reply),
                },
                None,
            )
            .await;
    }
    drop(stream);
}

impl Actor for TitleActor {
    type Msg = TitleMsg;
    type State = AbortOnDropHandle<()>;
    type Arguments = TitleArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TitleMsg>,
        args: TitleArgs,
    ) -> Result<AbortOnDropHandle<()>, ActorProcessingErr> {
        Ok(AbortOnDropHandle::new(tokio::spawn(async move {
            generate(args).await;
            let _ = myself.cast(TitleMsg::Finished);
        })))
    }

    async fn handle(
        &self,
        myself: ActorRef<TitleMsg>,
        msg: TitleMsg,
        _state: &mut AbortOnDropHandle<()>,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TitleMsg::Finished => myself.stop(None),
        }
        Ok(())
    }
}

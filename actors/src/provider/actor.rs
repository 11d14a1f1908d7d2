//! ProviderActor: one per model request, spawned linked by the TurnActor.
//!
//! Runs `ModelClient::stream` in a tokio task it owns (aborted on drop, since `post_stop`
//! does not run on panic or kill) and forwards the [`StreamEvent`]s to the TurnActor as
//! `TurnMsg::Stream` batches tagged with the request number: each message carries the
//! event that woke the task plus every event already ready behind it (at most
//! [`MAX_BATCH`]), so a backlog under load costs one actor message instead of one per
//! chunk, while an idle stream still forwards each chunk the moment it arrives. A stream that ends with neither
//! `Done` nor `Error` is reported as a `stream_interrupted` error. The request's
//! cancellation token (a child of the turn's) stops the task; the actor then stops.

use super::{ModelClient, ModelRequest};
use crate::task::AbortOnDrop;
use crate::turn::TurnMsg;
use foya_protocol::{ErrorClass, ProviderError, StreamEvent};
use futures::{FutureExt, StreamExt};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The ProviderActor.
#[derive(Debug)]
pub(crate) struct ProviderActor;

/// What a ProviderActor is started with.
#[derive(Debug)]
pub(crate) struct ProviderArgs {
    pub client: Arc<dyn ModelClient>,
    pub request: ModelRequest,
    pub cancel: CancellationToken,
    pub turn: ActorRef<TurnMsg>,
    pub request_number: u64,
}

/// Messages of the ProviderActor.
#[derive(Debug)]
pub(crate) enum ProviderMsg {
    /// The stream task ended; stop.
    Finished,
}

impl ractor::Message for ProviderMsg {}

/// Most stream events forwarded in one `TurnMsg::Stream` message.
pub(crate) const MAX_BATCH: usize = 64;

fn interrupted() -> StreamEvent {
    StreamEvent::Error {
        error: ProviderError::new(
            ErrorClass::StreamInterrupted,
            "the stream ended before the response finished",
        ),
    }
}

fn is_terminal(event: &StreamEvent) -> bool {
    matches!(event, StreamEvent::Done { .. } | StreamEvent::Error { .. })
}

/// Forwards the stream to the turn until a terminal event, the end, or cancellation.
#[tracing::instrument(name = "provider_call", skip_all, fields(request = args.request_number))]
async fn pump(args: ProviderArgs) {
    let ProviderArgs {
        client,
        request,
        cancel,
        turn,
        request_number,
    } = args;
    let mut stream = client.stream(request, cancel.clone());
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => return,
            next = stream.next() => next,
        };
        let first = next.unwrap_or_else(interrupted);
        let mut terminal = is_terminal(&first);
        let mut events = vec![first];
        // Drain what is already buffered, without waiting.
        while !terminal && events.len() < MAX_BATCH {
            let Some(next) = stream.next().now_or_never() else {
                break;
            };
            let event = next.unwrap_or_else(interrupted);
            terminal = is_terminal(&event);
            events.push(event);
        }
        if turn
            .cast(TurnMsg::Stream {
                request: request_number,
                events,
            })
            .is_err()
            || terminal
        {
            return;
        }
    }
}

impl Actor for ProviderActor {
    type Msg = ProviderMsg;
    type State = AbortOnDrop;
    type Arguments = ProviderArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ProviderMsg>,
        args: ProviderArgs,
    ) -> Result<AbortOnDrop, ActorProcessingErr> {
        Ok(AbortOnDrop(tokio::spawn(async move {
            pump(args).await;
            let _ = myself.cast(ProviderMsg::Finished);
        })))
    }

    async fn handle(
        &self,
        myself: ActorRef<ProviderMsg>,
        msg: ProviderMsg,
        _state: &mut AbortOnDrop,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ProviderMsg::Finished => myself.stop(None),
        }
        Ok(())
    }
}

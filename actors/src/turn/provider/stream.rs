//! A model request's stream task: one per request, spawned by the TurnActor and owned
//! by it (aborted when the turn drops it: the step's stream was stopped, the turn ended).
//! No actor of its own: a task reporting to the turn by message costs a spawn, where an
//! actor per request cost its mailboxes, its registration and a supervision round trip.
//!
//! It runs `ModelClient::stream`. Each wake-up of the task takes the event that woke it
//! plus every event already ready behind it (at most [`MAX_BATCH`]), so a backlog under
//! load costs one actor message instead of one per chunk, while an idle stream still
//! forwards each chunk the moment it arrives. What it does with a batch depends on the
//! request:
//!
//! - a step's request ([`Relay`]): folds the batch into the step's aggregate and
//!   publishes its deltas straight to the session (`relay.rs`); the TurnActor hears only
//!   the terminal event, as [`TurnMsg::StreamEnded`];
//! - any other request (summarisation): forwards the batch to the TurnActor as
//!   [`TurnMsg::Stream`].
//!
//! Both are tagged with the request number. A stream that ends with neither `Done` nor
//! `Error` is reported as a `stream_interrupted` error. The request's cancellation token
//! (a child of the turn's) stops the task. A panic in the task (a decoder bug) is caught
//! and reported as [`TurnMsg::StreamPanicked`], which the TurnActor turns into a
//! `stream_interrupted` failure of the request — the turn never waits on a dead task.

use super::relay::Relay;
use crate::provider::{ModelClient, ModelRequest};
use crate::task::AbortOnDropHandle;
use crate::turn::TurnMsg;
use foya_protocol::{ErrorClass, ProviderError, StreamEvent};
use futures::{FutureExt, StreamExt};
use ractor::ActorRef;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a request's stream task is started with.
#[derive(Debug)]
pub(crate) struct ProviderArgs {
    pub client: Arc<dyn ModelClient>,
    pub request: ModelRequest,
    pub cancel: CancellationToken,
    pub turn: ActorRef<TurnMsg>,
    pub request_number: u64,
    /// A step's request: fold and publish here, report only the end to the turn.
    pub relay: Option<Relay>,
    /// A step's request: its session and turn, for the client
    /// ([`crate::provider::current_step`]).
    pub step: Option<crate::provider::StepOf>,
}

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

/// Forwards the stream to the turn (or relays it) until a terminal event, the end, or
/// cancellation.
#[tracing::instrument(name = "provider_call", skip_all, fields(request = args.request_number))]
async fn pump(args: ProviderArgs) {
    let ProviderArgs {
        client,
        request,
        cancel,
        turn,
        request_number,
        relay,
        step,
    } = args;
    let mut stream = crate::provider::in_step(step, || client.stream(request, cancel.clone()));
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
        let sent = match &relay {
            Some(relay) => {
                if !relay.apply(&events) {
                    // The turn closed the relay (cancelled): it wants nothing more.
                    return;
                }
                match events.pop() {
                    Some(event) if terminal => turn
                        .cast(TurnMsg::StreamEnded {
                            request: request_number,
                            event,
                        })
                        .is_ok(),
                    _ => true,
                }
            }
            None => turn
                .cast(TurnMsg::Stream {
                    request: request_number,
                    events,
                })
                .is_ok(),
        };
        if !sent || terminal {
            return;
        }
    }
}

/// The text of a panic payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// Starts the stream task of request `args.request_number`: it forwards (or relays) the
/// stream to the turn, and a panic in it (a decoder bug) becomes
/// [`TurnMsg::StreamPanicked`], which the turn treats as a `stream_interrupted` failure
/// of the request. Dropping the handle aborts the task.
pub(crate) fn spawn_stream(args: ProviderArgs) -> AbortOnDropHandle<()> {
    let turn = args.turn.clone();
    let request = args.request_number;
    AbortOnDropHandle::new(tokio::spawn(async move {
        if let Err(payload) = std::panic::AssertUnwindSafe(pump(args))
            .catch_unwind()
            .await
        {
            let why = panic_text(payload.as_ref());
            let _ = turn.cast(TurnMsg::StreamPanicked { request, why });
        }
    }))
}

//! Waiting under one global timeout, and reading a log by what happened in it (its
//! sequence of event types, its tool results, how its turn ended) rather than by index.

use crate::subscription::Subscription;
use foya_protocol::event::Notice;
use foya_protocol::{Event, EventKind, SessionUpdate, ToolMessage, TurnStatus};
use std::time::Duration;

/// The global timeout of one wait of a test, in real time.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// A wait that did not end within [`TIMEOUT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut;

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "timed out after {TIMEOUT:?}")
    }
}

impl std::error::Error for TimedOut {}

/// Runs `fut` under the global [`TIMEOUT`], measured by a real-time watchdog thread (not
/// a tokio timer: with paused time, a tokio timeout would fire as soon as the runtime
/// idles while the store's writer thread commits).
///
/// # Errors
/// [`TimedOut`] when `fut` did not finish in time.
pub async fn within<T>(fut: impl Future<Output = T>) -> Result<T, TimedOut> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(TIMEOUT);
        let _ = tx.send(());
    });
    tokio::select! {
        out = fut => Ok(out),
        _ = rx => Err(TimedOut),
    }
}

/// Receives until `done` holds for a persisted event, under the global [`TIMEOUT`];
/// returns every persisted event seen (deltas and notices are skipped).
///
/// # Panics
/// When the subscription ends first or the wait times out.
pub async fn events_until(
    sub: &mut Subscription,
    mut done: impl FnMut(&Event) -> bool,
) -> Vec<Event> {
    let receive = async {
        let mut seen = Vec::new();
        loop {
            match sub.recv().await {
                Some(SessionUpdate::Event(event)) => {
                    let stop = done(&event);
                    seen.push(event);
                    if stop {
                        return seen;
                    }
                }
                Some(_) => {}
                None => panic!("subscription ended; saw {seen:?}"),
            }
        }
    };
    within(receive).await.expect("the awaited event")
}

/// Receives until the subscription is closed with a notice, under the global
/// [`TIMEOUT`]; returns the persisted events seen and the notice.
///
/// # Panics
/// When the subscription ends without a notice or the wait times out.
pub async fn until_closed(sub: &mut Subscription) -> (Vec<Event>, Notice) {
    let receive = async {
        let mut seen = Vec::new();
        loop {
            match sub.recv().await {
                Some(SessionUpdate::Event(event)) => seen.push(event),
                Some(SessionUpdate::Notice(notice)) => return (seen, notice),
                Some(SessionUpdate::Delta(_)) => {}
                None => panic!("ended without a notice; saw {seen:?}"),
            }
        }
    };
    within(receive).await.expect("the closing notice")
}

/// Polls `predicate` every 10 ms until it holds, for state no event reports (a thread
/// count, a file); panics after [`TIMEOUT`] naming `what`.
pub async fn wait_until(what: &str, mut predicate: impl FnMut() -> bool) {
    let poll = async {
        while !predicate() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert!(within(poll).await.is_ok(), "timed out waiting for {what}");
}

/// The `type` names of `events`, in order: what a test compares a log with.
pub fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.type_name()).collect()
}

/// Whether `event` is a `turn_complete`.
pub fn is_turn_complete(event: &Event) -> bool {
    matches!(event.kind, EventKind::TurnComplete { .. })
}

/// The events of `events` whose type is `type_name`, in order: how a test picks the
/// events it looks into, instead of indexing into the log.
pub fn of_type<'a>(events: &'a [Event], type_name: &str) -> Vec<&'a Event> {
    events
        .iter()
        .filter(|e| e.kind.type_name() == type_name)
        .collect()
}

/// The kinds of the events of `events` whose type is `type_name`, in order.
pub fn kinds_of<'a>(events: &'a [Event], type_name: &str) -> Vec<&'a EventKind> {
    of_type(events, type_name)
        .into_iter()
        .map(|e| &e.kind)
        .collect()
}

/// The status of the last `turn_complete` of `events`.
pub fn turn_status(events: &[Event]) -> Option<TurnStatus> {
    events.iter().rev().find_map(|e| match &e.kind {
        EventKind::TurnComplete { status, .. } => Some(*status),
        _ => None,
    })
}

/// The `tool_message`s of `events`, in order.
pub fn tool_messages(events: &[Event]) -> Vec<ToolMessage> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolMessage(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

/// A tool result: what a `tool_message` of call `id` holds.
pub fn tool_message(id: &str, content: &str, is_error: bool) -> ToolMessage {
    ToolMessage {
        tool_call_id: foya_protocol::ToolCallId::new(id),
        content: content.into(),
        is_error,
        images: Vec::new(),
    }
}

/// Asserts that every tool call of `events` has exactly one result, in call order.
pub fn assert_well_formed(events: &[Event]) {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for event in events {
        match &event.kind {
            EventKind::AssistantMessage(m) => {
                calls.extend(m.tool_calls.iter().map(|c| c.id.clone()));
            }
            EventKind::ToolMessage(r) => results.push(r.tool_call_id.clone()),
            _ => {}
        }
    }
    assert_eq!(
        calls, results,
        "every call has exactly one result, in order"
    );
}

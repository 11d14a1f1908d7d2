//! The turn's pool of ToolActors through the real turn loop: a turn's later calls run on
//! the ToolActors its earlier calls started (one per call running at once), a crashed
//! one is never reused, and a reused one carries nothing of its previous call (not its
//! token, not its output). Which actor ran a call is seen through the tokio task it ran
//! in: a ToolActor runs its calls in its own task.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::turn_support;

use async_trait::async_trait;
use foya_actors::tools::{
    ProgressSink, SideEffect, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSpec,
};
use foya_protocol::event::{Delta, LiveDelta};
use foya_protocol::{ApprovalMode, EventKind, Input, SessionUpdate, TurnStatus};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use turn_support::{
    TIMEOUT, events_until, is_turn_complete, memory_store, session_config, start, subscribe,
    tool_message, tool_messages, within, workdir,
};

/// What the witness saw of one call.
#[derive(Debug, Clone)]
struct Seen {
    /// The tokio task the call ran in (its ToolActor's).
    task: String,
    /// Its token was already cancelled when it started.
    cancelled_at_start: bool,
}

/// A parallel-safe test tool recording, per call id, the task it ran in. `{"mode": …}`:
/// `ok` prints a line and answers `ok`; `panic` panics; `hang` prints a line and waits
/// for its token (its 1 s default timeout ends it).
#[derive(Debug)]
struct Witness {
    spec: ToolSpec,
    seen: Mutex<BTreeMap<String, Seen>>,
}

impl Witness {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            spec: ToolSpec {
                name: "witness".into(),
                description: "records the task each call runs in".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"mode": {"type": "string"}, "id": {"type": "string"}},
                    "required": ["mode"]
                }),
                parallel_safe: true,
                side_effect: SideEffect::None,
                cancellable: true,
                default_timeout_ms: 1_000,
            },
            seen: Mutex::default(),
        })
    }

    fn seen(&self, id: &str) -> Seen {
        self.seen.lock().unwrap()[id].clone()
    }
}

#[async_trait]
impl Tool for Witness {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
        cancel: CancellationToken,
        progress: &dyn ProgressSink,
    ) -> ToolOutput {
        let id = ctx.tool_call_id.to_string();
        let task = tokio::task::try_id().map(|t| t.to_string()).unwrap();
        self.seen.lock().unwrap().insert(
            id.clone(),
            Seen {
                task,
                cancelled_at_start: cancel.is_cancelled(),
            },
        );
        match args["mode"].as_str().unwrap() {
            "panic" => panic!("witness: test tool panicked"),
            "hang" => {
                progress.output(format!("out of {id}\n"));
                cancel.cancelled().await;
                ToolOutput::ok("stopped")
            }
            _ => {
                progress.output(format!("out of {id}\n"));
                ToolOutput::ok("ok")
            }
        }
    }
}

/// Call `id` in `mode` (the id in the arguments too: identical calls would trip run
/// protection).
fn call(id: &str, mode: &str) -> serde_json::Value {
    json!({"id": id, "name": "witness", "arguments": {"mode": mode, "id": id}})
}

/// A runtime calling only `witness`, one `Auto` session; runs `steps` (each a list of
/// calls) and a last answer, and returns the turn's events and the witness. Waits
/// under the global timeout unless `paused` (tokio's paused clock would fire it while
/// the store's writer thread works).
async fn run_steps(
    steps: Vec<Vec<serde_json::Value>>,
    paused: bool,
) -> (Vec<foya_protocol::Event>, Arc<Witness>) {
    let witness = Witness::new();
    let mut tools = ToolRegistry::new();
    tools.register(witness.clone()).unwrap();
    let mut responses: Vec<_> = steps
        .into_iter()
        .map(|calls| json!({"tool_calls": calls}))
        .collect();
    responses.push(json!({"text": "done"}));
    let (rt, _) = start(memory_store(), json!({ "responses": responses }), tools).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = if paused {
        events_until(&mut sub, is_turn_complete).await
    } else {
        within(TIMEOUT, events_until(&mut sub, is_turn_complete)).await
    };
    rt.shutdown().await;
    (events, witness)
}

fn completed(events: &[foya_protocol::Event]) -> bool {
    matches!(
        events.last().map(|e| &e.kind),
        Some(EventKind::TurnComplete {
            status: TurnStatus::Completed,
            ..
        })
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_later_calls_run_on_the_tool_actors_of_its_earlier_ones() {
    let (events, witness) = run_steps(
        vec![
            vec![call("c1", "ok")],
            vec![call("c2", "ok"), call("c3", "ok")],
            vec![call("c4", "ok")],
        ],
        false,
    )
    .await;
    assert!(completed(&events), "{events:?}");
    let task = |id| witness.seen(id).task;
    // c2 and c3 run at once, so on two actors; c1's actor is one of them.
    assert_ne!(task("c2"), task("c3"));
    assert!([task("c2"), task("c3")].contains(&task("c1")));
    assert!([task("c2"), task("c3")].contains(&task("c4")));
    let actors: BTreeSet<_> = ["c1", "c2", "c3", "c4"].into_iter().map(task).collect();
    assert_eq!(actors.len(), 2, "one actor per call running at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_tool_actor_is_never_reused() {
    let (events, witness) = run_steps(
        vec![
            vec![call("c1", "panic")],
            vec![call("c2", "ok")],
            vec![call("c3", "ok")],
        ],
        false,
    )
    .await;
    assert!(completed(&events), "{events:?}");
    assert_eq!(
        tool_messages(&events),
        vec![
            tool_message("c1", "tool crashed", true),
            tool_message("c2", "ok", false),
            tool_message("c3", "ok", false),
        ]
    );
    let task = |id| witness.seen(id).task;
    assert_ne!(task("c2"), task("c1"), "the crashed actor is gone");
    assert_eq!(task("c3"), task("c2"), "its replacement is pooled");
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_does_not_cancel_the_next_call_on_its_actor() {
    let (events, witness) =
        run_steps(vec![vec![call("c1", "hang")], vec![call("c2", "ok")]], true).await;
    assert!(completed(&events), "{events:?}");
    assert_eq!(
        tool_messages(&events),
        vec![
            tool_message("c1", "timed out after 3000 ms", true),
            tool_message("c2", "ok", false),
        ]
    );
    assert_eq!(witness.seen("c2").task, witness.seen("c1").task, "reused");
    assert!(!witness.seen("c2").cancelled_at_start);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_on_a_reused_actor_keeps_only_its_own_output() {
    let witness = Witness::new();
    let mut tools = ToolRegistry::new();
    tools.register(witness.clone()).unwrap();
    let script = json!({"responses": [
        {"tool_calls": [call("c1", "ok")]},
        {"tool_calls": [call("c2", "hang")]},
        {"text": "never"}
    ]});
    let (rt, _) = start(memory_store(), script, tools).await;
    let (_dir, cwd) = workdir();
    let session = rt
        .create_session(session_config(&cwd, ApprovalMode::Auto))
        .await
        .unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("go")).await.unwrap();
    let events = within(TIMEOUT, async {
        let mut events = Vec::new();
        loop {
            match sub.recv().await.unwrap() {
                SessionUpdate::Event(e) => events.push(e),
                SessionUpdate::Delta(LiveDelta {
                    delta: Delta::ToolOutput { tool_call_id, .. },
                    ..
                }) if tool_call_id.as_str() == "c2" => break,
                SessionUpdate::Delta(_) | SessionUpdate::Notice(_) => {}
            }
        }
        session.cancel().await.unwrap();
        events.extend(events_until(&mut sub, is_turn_complete).await);
        events
    })
    .await;
    rt.shutdown().await;
    assert_eq!(witness.seen("c2").task, witness.seen("c1").task, "reused");
    assert_eq!(
        tool_messages(&events),
        vec![
            tool_message("c1", "ok", false),
            tool_message(
                "c2",
                "out of c2\n[cancelled; the output above is what the call printed before it was stopped]",
                true
            ),
        ]
    );
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Cancelled,
            ..
        }
    ));
}

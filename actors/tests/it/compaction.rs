//! Compaction and overflow recovery through the embedding API: overflow once / always,
//! rate limits and quota never compact, early threshold compaction in a long session,
//! `/compact` and automatic compaction off.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use foya_actors::context::CHECKPOINT_PREFIX;
use foya_actors::provider::scripted::ScriptedClient;
use foya_protocol::{ErrorClass, ErrorInfo, Event, EventKind, Input, Message, Seq, TurnStatus};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn overflow_script(fail_times: Option<u32>) -> ScriptedClient {
    let mut response = json!({"text":"recovered","error":{"class":"context_overflow","message":"prompt is too long"}});
    if let Some(n) = fail_times {
        response["fail_times"] = json!(n);
    }
    script(json!({ "responses": [response] }))
}

fn diagnostics(event: &Event) -> (u32, u64, &str) {
    let EventKind::ContextDiagnostics {
        step,
        estimated_input_tokens,
        decision,
        ..
    } = &event.kind
    else {
        panic!("not diagnostics: {event:?}")
    };
    (*step, *estimated_input_tokens, decision.as_str())
}

#[tokio::test]
async fn an_overflow_compacts_once_and_the_step_reruns() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(Arc::new(overflow_script(Some(1))), options(dir.path())).await;
    let text = filler("lorem", 2_000);
    let events = one_turn(&rt, dir.path(), Input::text(text.clone())).await;
    assert_eq!(
        types(&events),
        vec![
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
            "compaction_started",
            "compaction_checkpoint",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let (_, before, _) = diagnostics(&events[4]);
    let (_, after, _) = diagnostics(&events[7]);
    assert_eq!(
        events[5].kind,
        EventKind::CompactionStarted {
            trigger: "overflow".into(),
            tokens_before: before
        }
    );
    let latest: String = text.chars().take(80).collect();
    // The turn's input, too large for the keep budget, is kept with its middle cut.
    let EventKind::CompactionCheckpoint { kept, .. } = &events[6].kind else {
        panic!("{:?}", events[6].kind)
    };
    let [Message::User(input)] = kept.as_slice() else {
        panic!("{kept:?}")
    };
    assert!(
        input.text.starts_with("lorem lorem")
            && input.text.contains(foya_actors::context::KEPT_CUT_NOTE)
            && input.text.len() < text.len(),
        "{}",
        input.text
    );
    assert_eq!(
        events[6].kind,
        EventKind::CompactionCheckpoint {
            summary: format!("Summary of 1 messages. Latest request: {latest}"),
            covers_up_to: Seq(5),
            tokens_before: before,
            tokens_after: after,
            kept: kept.clone(),
        }
    );
    assert!(after * 4 < before, "{after} vs {before}");
    assert_eq!(
        events[9].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn a_second_overflow_fails_the_turn_after_exactly_one_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(Arc::new(overflow_script(None)), options(dir.path())).await;
    let events = one_turn(&rt, dir.path(), Input::text(filler("lorem", 2_000))).await;
    assert_eq!(
        types(&events)[3..],
        [
            "step_started",
            "context_diagnostics",
            "compaction_started",
            "compaction_checkpoint",
            "context_diagnostics",
            "turn_complete"
        ]
    );
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("context_overflow".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::ContextOverflow,
                message: "prompt is too long".into()
            })
        }
    );
    rt.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn rate_limits_and_quota_never_compact() {
    let dir = tempfile::tempdir().unwrap();
    for (class, retries) in [("rate_limited", 3), ("quota_exhausted", 0)] {
        let client = script(json!({"responses":[
            {"error":{"class":class,"message":"no","retry_after_ms":10}}
        ]}));
        let rt = runtime(Arc::new(client), options(dir.path())).await;
        let events = one_turn(&rt, dir.path(), Input::text(filler("lorem", 2_000))).await;
        let mut expected = vec![
            "session_created",
            "user_message",
            "turn_started",
            "step_started",
            "context_diagnostics",
        ];
        expected.extend(std::iter::repeat_n("provider_retry", retries));
        expected.push("turn_complete");
        assert_eq!(types(&events), expected, "{class}");
        let EventKind::TurnComplete { status, error, .. } = &events.last().unwrap().kind else {
            panic!()
        };
        assert_eq!(*status, TurnStatus::Failed);
        assert_eq!(error.as_ref().unwrap().class.as_str(), class);
        rt.shutdown().await;
    }
}

#[tokio::test]
async fn with_automatic_compaction_off_an_overflow_fails_with_a_clear_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.auto_compact = false;
    let rt = runtime(Arc::new(overflow_script(Some(1))), opts).await;
    let events = one_turn(&rt, dir.path(), Input::text("hi")).await;
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Failed,
            reason: Some("context_overflow".into()),
            error: Some(ErrorInfo {
                class: ErrorClass::ContextOverflow,
                message: "prompt is too long (automatic compaction is off; send /compact or \
                          start a new session)"
                    .into()
            })
        }
    );
    assert!(!types(&events).contains(&"compaction_started"));
    rt.shutdown().await;
}

fn answer(n: usize) -> String {
    format!("answer {n} {}", filler("ipsum", 50))
}

#[tokio::test]
async fn a_long_session_compacts_early_and_continues_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let client = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 4_000,
        answer,
    });
    let mut opts = options(dir.path());
    opts.aux_model = Some(Arc::new(script(json!({"responses":[]}))));
    let rt = runtime(client.clone(), opts).await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    let mut all = Vec::new();
    for i in 1..=10 {
        session
            .submit(Input::text(format!("turn {i} {}", filler("lorem", 150))))
            .await
            .unwrap();
        all.extend(events_until(&mut sub, is_turn_complete).await);
    }
    let completed = all
        .iter()
        .filter(|e| {
            e.kind
                == EventKind::TurnComplete {
                    status: TurnStatus::Completed,
                    reason: None,
                    error: None,
                }
        })
        .count();
    assert_eq!(completed, 10);
    let starts: Vec<&Event> = all
        .iter()
        .filter(|e| matches!(e.kind, EventKind::CompactionStarted { .. }))
        .collect();
    assert_eq!(starts.len(), 1, "{:?}", types(&all));
    let EventKind::CompactionStarted { trigger, .. } = &starts[0].kind else {
        panic!()
    };
    assert_eq!(trigger, "threshold");
    let start = all.iter().position(|e| e.seq == starts[0].seq).unwrap();
    assert_eq!(diagnostics(&all[start - 1]).2, "compact");
    let EventKind::CompactionCheckpoint { summary, kept, .. } = &all[start + 1].kind else {
        panic!("{:?}", all[start + 1])
    };
    // The checkpoint keeps the input of the turn being compacted.
    let EventKind::UserMessage { input, .. } = &all[start - 4].kind else {
        panic!("{:?}", all[start - 4])
    };
    assert_eq!(kept, &vec![Message::User(input.clone())]);
    // The request right after the compaction starts with the checkpoint summary.
    let requests = client.requests.lock().unwrap().clone();
    let turn = input
        .text
        .split(' ')
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap();
    let after = &requests[turn - 1];
    assert_eq!(
        after.messages,
        vec![
            Message::User(Input::text(format!("{CHECKPOINT_PREFIX}\n\n{summary}"))),
            Message::User(input.clone()),
        ]
    );
    assert_eq!(requests[turn - 2].messages.len(), 2 * (turn - 2) + 1);
    // The next turn continues from the checkpoint too.
    let next = &requests[turn];
    assert_eq!(next.messages[0], after.messages[0]);
    assert_eq!(next.messages.len(), 4);
    rt.shutdown().await;
}

#[tokio::test]
async fn compact_command_compacts_now_and_ends_its_turn() {
    let dir = tempfile::tempdir().unwrap();
    let client = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 128_000,
        answer,
    });
    let mut opts = options(dir.path());
    opts.aux_model = Some(Arc::new(script(json!({"responses":[]}))));
    let rt = runtime(client, opts).await;
    let session = rt.create_session(session_config(dir.path())).await.unwrap();
    let mut sub = subscribe(&session).await;
    session.submit(Input::command("compact", "")).await.unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: Some("nothing to compact".into()),
            error: None
        }
    );
    for i in 0..3 {
        let text = format!("{i} {}", filler("lorem", 1_000));
        session.submit(Input::text(text)).await.unwrap();
        events_until(&mut sub, is_turn_complete).await;
    }
    session
        .submit(Input::command("/compact", ""))
        .await
        .unwrap();
    let events = events_until(&mut sub, is_turn_complete).await;
    assert_eq!(
        types(&events),
        vec![
            "user_message",
            "turn_started",
            "compaction_started",
            "compaction_checkpoint",
            "turn_complete"
        ]
    );
    let EventKind::CompactionStarted { trigger, .. } = &events[2].kind else {
        panic!()
    };
    assert_eq!(trigger, "manual");
    assert_eq!(
        events[4].kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    rt.shutdown().await;
}

#[tokio::test]
async fn over_the_threshold_with_nothing_to_shrink_the_request_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    // A small window (a local model): the system prompt alone is over its threshold.
    let client = Arc::new(RecordingClient {
        requests: Mutex::default(),
        window: 4_000,
        answer,
    });
    let mut opts = options(dir.path());
    // Every request is over the threshold; the short history cannot shrink it.
    opts.compact_threshold_pct = 1;
    opts.aux_model = Some(Arc::new(script(json!({"responses":[]}))));
    let rt = runtime(client.clone(), opts).await;
    let events = one_turn(&rt, dir.path(), Input::text("hi")).await;
    assert_eq!(
        types(&events)[3..],
        [
            "step_started",
            "context_diagnostics",
            "assistant_message",
            "turn_complete"
        ]
    );
    let (_, estimate, decision) = diagnostics(&events[4]);
    assert!(estimate > 40, "over the 1 % threshold: {estimate}");
    assert_eq!(decision, "send");
    assert_eq!(
        events.last().unwrap().kind,
        EventKind::TurnComplete {
            status: TurnStatus::Completed,
            reason: None,
            error: None
        }
    );
    assert_eq!(client.requests.lock().unwrap().len(), 1);
    rt.shutdown().await;
}

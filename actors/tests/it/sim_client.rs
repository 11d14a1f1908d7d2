//! The in-process simulated provider: determinism, step progression, injected errors
//! and pacing on paused tokio time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_actors::provider::sim::{ErrorRates, SimClient, SimConfig};
use foya_actors::provider::{ModelClient, ModelRequest, ToolSchema};
use foya_protocol::{
    ErrorClass, FinishReason, Input, Message, ProviderError, StreamAggregate, StreamEvent,
    ToolMessage,
};
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A request offering `read_file`, as the runtime's are.
fn request(messages: Vec<Message>) -> ModelRequest {
    let read_file = ToolSchema {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: serde_json::json!({"type": "object"}),
    };
    ModelRequest {
        model: "sim-1".into(),
        system: "be brief".into(),
        messages: messages.into(),
        tools: vec![read_file].into(),
        ..ModelRequest::default()
    }
}

fn user(text: &str) -> Message {
    Message::User(Input::text(text))
}

async fn collect(client: &SimClient, req: ModelRequest) -> Vec<StreamEvent> {
    client.stream(req, CancellationToken::new()).collect().await
}

fn aggregate(events: &[StreamEvent]) -> StreamAggregate {
    let mut agg = StreamAggregate::new();
    events.iter().for_each(|e| agg.apply(e));
    agg
}

fn completed(events: &[StreamEvent]) -> bool {
    matches!(events.last(), Some(StreamEvent::Done { .. }))
}

#[tokio::test]
async fn same_config_and_request_give_the_same_events_and_another_seed_does_not() {
    let config = SimConfig {
        reasoning_tokens: 9,
        steps_per_turn: 1,
        ..SimConfig::default()
    };
    let req = request(vec![user("hello")]);
    let a = collect(&SimClient::new(config.clone()), req.clone()).await;
    let b = collect(&SimClient::new(config.clone()), req.clone()).await;
    let c = collect(&SimClient::new(SimConfig { seed: 1, ..config }), req).await;
    assert_eq!(a, b);
    assert_ne!(a, c);
    let (agg_a, agg_c) = (aggregate(&a), aggregate(&c));
    assert_eq!((agg_a.text.len(), agg_a.reasoning.len()), (64 * 4, 9 * 4));
    assert_eq!((agg_c.text.len(), agg_c.reasoning.len()), (64 * 4, 9 * 4));
    assert_ne!(agg_a.text, agg_c.text);
    assert!(
        a.len() > 64 / 4 + 2,
        "a few tokens per chunk, got {} events",
        a.len()
    );
}

#[tokio::test]
async fn a_turn_runs_tool_steps_then_ends_with_a_text_step() {
    let config = SimConfig {
        tool_calls_per_step: 2,
        steps_per_turn: 3,
        response_tokens: 5,
        ..SimConfig::default()
    };
    let client = SimClient::new(config);
    let mut history = vec![user("do the thing")];
    let mut all_ids = BTreeSet::new();
    for step in 1..=3 {
        let events = collect(&client, request(history.clone())).await;
        let agg = aggregate(&events);
        let message = agg.to_message();
        if step < 3 {
            assert_eq!(
                message.finish_reason,
                Some(FinishReason::ToolCalls),
                "step {step}"
            );
            let shapes: Vec<_> = message
                .tool_calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect();
            let expected = (
                "read_file".to_owned(),
                serde_json::json!({"path": "README.md"}),
            );
            assert_eq!(shapes, vec![expected.clone(), expected]);
            assert_eq!(message.text, "");
        } else {
            assert_eq!(message.finish_reason, Some(FinishReason::Stop));
            assert_eq!(message.tool_calls, vec![]);
            assert_eq!(message.text.len(), 5 * 4);
            assert!(message.text.ends_with('.'));
        }
        // `{"path":"README.md"}` is 20 characters: 5 tokens per call.
        let usage = agg.usage.unwrap();
        assert_eq!(
            usage.output_tokens,
            if step < 3 { 2 * 5 } else { 5 },
            "step {step}"
        );
        for call in &message.tool_calls {
            assert!(all_ids.insert(call.id.clone()), "duplicate id {}", call.id);
        }
        let results: Vec<Message> = message
            .tool_calls
            .iter()
            .map(|c| {
                Message::Tool(ToolMessage {
                    tool_call_id: c.id.clone(),
                    content: "# readme".into(),
                    is_error: false,
                    images: Vec::new(),
                })
            })
            .collect();
        history.push(Message::Assistant(message));
        history.extend(results);
    }
    assert_eq!(all_ids.len(), 4);
    // A new user input starts a new turn at step 1 again.
    history.push(user("again"));
    let agg = aggregate(&collect(&client, request(history.clone())).await);
    assert_eq!(agg.finish_reason(), Some(FinishReason::ToolCalls));
    // A request that offers no tools (a title request, say) gets text, whatever the step.
    let without_tools = ModelRequest {
        tools: Vec::new().into(),
        ..request(history)
    };
    let message = aggregate(&collect(&client, without_tools).await).to_message();
    assert_eq!(
        (
            message.finish_reason,
            message.tool_calls.len(),
            message.text.len()
        ),
        (Some(FinishReason::Stop), 0, 5 * 4)
    );
}

fn rates_config() -> SimConfig {
    let rates = ErrorRates {
        rate_limited: 0.1,
        overloaded: 0.05,
        context_overflow: 0.02,
        stream_cut: 0.1,
    };
    SimConfig {
        error_rates: rates,
        seed: 7,
        steps_per_turn: 1,
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn injected_errors_follow_their_rates_and_a_retry_draws_again() {
    let client = SimClient::new(rates_config());
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    let mut failed = Vec::new();
    for i in 0..4000 {
        let req = request(vec![user(&format!("session {i}"))]);
        let events = collect(&client, req.clone()).await;
        let outcome = match events.last() {
            Some(StreamEvent::Done { .. }) => "ok",
            Some(StreamEvent::Error { error }) => {
                assert_eq!(events.len(), 1);
                match error.class {
                    ErrorClass::RateLimited => {
                        assert_eq!(error.retry_after_ms, Some(250));
                        "rate_limited"
                    }
                    ErrorClass::Overloaded => "overloaded",
                    ErrorClass::ContextOverflow => "context_overflow",
                    other => panic!("unexpected class {other}"),
                }
            }
            _ => {
                assert!(aggregate(&events).text.len() < 64 * 4);
                "stream_cut"
            }
        };
        *counts.entry(outcome).or_default() += 1;
        if outcome != "ok" {
            failed.push(req);
        }
    }
    let within = |name: &str, expected: f64| {
        let n = f64::from(counts[name]);
        assert!(
            (n - expected).abs() < expected * 0.2 + 10.0,
            "{name}: {n} vs {expected} ({counts:?})"
        );
    };
    within("rate_limited", 400.0);
    within("overloaded", 200.0);
    within("context_overflow", 80.0);
    within("stream_cut", 400.0);
    within("ok", 0.73 * 4000.0);
    // Retrying failed requests eventually succeeds: each attempt draws afresh.
    for req in failed {
        let mut attempts = 1;
        while !completed(&collect(&client, req.clone()).await) {
            attempts += 1;
            assert!(attempts < 20);
        }
    }
    // And the whole run repeats: a fresh client with the same config counts the same.
    let again = SimClient::new(rates_config());
    let mut ok = 0;
    for i in 0..4000 {
        ok += u32::from(completed(
            &collect(&again, request(vec![user(&format!("session {i}"))])).await,
        ));
    }
    assert_eq!(ok, counts["ok"]);
}

#[tokio::test]
async fn certain_rejection_is_one_error_event() {
    let rates = ErrorRates {
        overloaded: 1.0,
        ..ErrorRates::default()
    };
    let client = SimClient::new(SimConfig {
        error_rates: rates,
        ..SimConfig::default()
    });
    let events = collect(&client, request(vec![user("x")])).await;
    let error = ProviderError {
        status: Some(529),
        ..ProviderError::new(ErrorClass::Overloaded, "overloaded (simulated)")
    };
    assert_eq!(events, vec![StreamEvent::Error { error }]);
    assert_eq!(client.context_window(), 128_000);
}

#[tokio::test(start_paused = true)]
async fn pacing_follows_ttft_and_tokens_per_second_on_virtual_time() {
    let config = SimConfig {
        ttft_ms: 200,
        tokens_per_s: 50.0,
        response_tokens: 100,
        steps_per_turn: 1,
        ..SimConfig::default()
    };
    let client = SimClient::new(config);
    let start = tokio::time::Instant::now();
    let mut stream = client.stream(request(vec![user("pace")]), CancellationToken::new());
    let first = stream.next().await.unwrap();
    assert!(matches!(first, StreamEvent::TextDelta { .. }));
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    let rest: Vec<_> = stream.collect().await;
    // Token n is produced at ttft + n / rate: the 100th (n = 99) at 200 + 99 * 20 ms.
    assert_eq!(start.elapsed(), Duration::from_millis(2_180));
    assert_eq!(
        rest.last(),
        Some(&StreamEvent::Done {
            finish_reason: Some(FinishReason::Stop)
        })
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_ends_the_stream_at_once() {
    let config = SimConfig {
        ttft_ms: 1_000,
        tokens_per_s: 10.0,
        steps_per_turn: 1,
        ..SimConfig::default()
    };
    let client = SimClient::new(config);
    let cancel = CancellationToken::new();
    let mut stream = client.stream(request(vec![user("stop me")]), cancel.clone());
    assert!(matches!(
        stream.next().await,
        Some(StreamEvent::TextDelta { .. })
    ));
    let start = tokio::time::Instant::now();
    cancel.cancel();
    assert_eq!(stream.next().await, None);
    assert_eq!(start.elapsed(), Duration::ZERO);
}
